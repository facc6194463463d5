"""What a dataset row is made from: one multiple-choice question about one stretch of video
(:class:`Sample`), and that stretch's key frames with the motions between them
(:class:`KeyFrames`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.odometry import PoseTrack
from embodied_r_ros.core.perception import MotionSource
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.reasoning import parse_options
from embodied_r_ros.core.request import QueryError, Question, validate_query


@dataclass(frozen=True)
class Sample:
    """One multiple-choice question about one stretch of video."""

    id: str
    scene: str
    category: str
    question: str  # without the options
    options: list[str]  # "A. text", in letter order
    solution: str  # the correct letter
    source: str  # what the frames come from: a video path, or "bag#start_ns-end_ns"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class KeyFrames:
    """What perception needs: key frames, their stamps and the motions between them."""

    images: list[np.ndarray]
    stamps: list[float]
    motions: list[Motion | None]
    indices: list[int] = field(default_factory=list)
    motion_source: MotionSource = "visual"
    #: as the robot's frame buffer gives them (:func:`bag_keyframes`): ``motions`` from
    #: odometry, None where a key frame has no pose, completed visually at perception
    robot: bool = False
    camera: CameraConfig | None = None


FramesFn = Callable[[Sample], KeyFrames]


class SkipSample(Exception):
    """This sample cannot be used (no frames in its window, unreadable video): count, go on."""


def check_sample(sample: Sample) -> Question:
    """The question and options as ``ask`` checks them (the :class:`Question` perception is
    given), and the solution one of the options' letters (ValueError, one line)."""
    try:
        question = validate_query(sample.question, sample.options)
    except QueryError as exc:
        raise ValueError(f"{exc.code}: {exc}") from None
    letters = [letter for letter, _ in parse_options(question.options)]
    if sample.solution not in letters:
        raise ValueError(f"answer {sample.solution!r} is not one of {''.join(letters)}")
    return question


def keyframes_of(
    frames: Iterable[tuple[np.ndarray, float]], pipeline: EmbodiedR, camera: Any
) -> KeyFrames:
    """Key frames of a video with the visual ego-motion between them (benchmark clips: no
    robot, no odometry; the extractor's own matches are reused)."""
    selection = pipeline.select(frames)
    if not selection.images:
        raise SkipSample("no frames")
    return KeyFrames(
        images=list(selection.images),
        stamps=list(selection.stamps),
        motions=pipeline.keyframe_motions(selection, camera),
        indices=list(selection.indices),
        motion_source="visual",
    )


def bag_keyframes(
    frames: Iterable[tuple[np.ndarray, float]],
    pipeline: EmbodiedR,
    track: PoseTrack | Sequence[tuple[float, Pose]],
    camera: CameraConfig | None = None,
) -> KeyFrames:
    """Key frames of a bag window as the robot's frame buffer has them: frames shrunk to the
    processing resolution before key-framing, key frames as stored (JPEG), odometry motions by
    the core's tolerance rule (``core.odometry``; None where a key frame has no pose, which
    perception fills with visual ego-motion, as the robot does). ``track``: the camera's poses
    (odometry or the tf tree; empty: visual motions only)."""
    selection, images, motions = pipeline.robot_keyframes(frames, track)
    if not selection.images:
        raise SkipSample("no frames")
    return KeyFrames(
        images=images,
        stamps=list(selection.stamps),
        motions=motions,
        indices=list(selection.indices),
        motion_source="odometry" if len(track) else "visual",
        robot=True,
        camera=camera,
    )

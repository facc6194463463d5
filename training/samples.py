"""What a dataset row is made from: one multiple-choice question about one stretch of video
(:class:`Sample`), and that stretch's key frames with the motions between them
(:class:`KeyFrames`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.bags import odometry_motions
from embodied_r_ros.core.perception import MotionSource
from embodied_r_ros.core.pipeline import EmbodiedR, QueryError, validate_query
from embodied_r_ros.core.reasoning import parse_options


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


FramesFn = Callable[[Sample], KeyFrames]


class SkipSample(Exception):
    """This sample cannot be used (no frames in its window, unreadable video): count, go on."""


def check_sample(sample: Sample) -> None:
    """The question and options must pass what ``ask`` checks, and the solution must be one
    of the options' letters (ValueError, one line)."""
    try:
        question, options = validate_query(sample.question, sample.options)
    except QueryError as exc:
        raise ValueError(f"{exc.code}: {exc}") from None
    letters = [letter for letter, _ in parse_options(options)]
    if sample.solution not in letters:
        raise ValueError(f"answer {sample.solution!r} is not one of {''.join(letters)}")


def keyframes_of(
    frames: Iterable[tuple[np.ndarray, float]],
    pipeline: EmbodiedR,
    camera: Any,
    poses: Sequence[tuple[float, Any]] | None = None,
) -> KeyFrames:
    """Key frames of a frame stream and the motions between them (odometry when given)."""
    selection = pipeline.select(frames)
    if not selection.images:
        raise SkipSample("no frames")
    if poses:
        motions: list[Motion | None] = list(odometry_motions(poses, selection.stamps))
        source = "odometry"
    else:
        motions, source = pipeline.keyframe_motions(selection, camera), "visual"
    return KeyFrames(
        images=list(selection.images),
        stamps=list(selection.stamps),
        motions=motions,
        indices=list(selection.indices),
        motion_source=source,
    )

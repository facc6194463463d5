"""The whole Embodied-R pipeline: key frames -> perception -> reasoning, with timings.

The CLI, the ROS nodes and the training-data builder all call :class:`EmbodiedR`, so a question
asked of a video file, of a live camera or of a recorded bag goes through the same code. A whole
question's answer is a :class:`~embodied_r_ros.core.query_result.QueryResult`; a question that
cannot be answered raises :class:`QueryError`. Requests are checked where they enter
(:mod:`embodied_r_ros.core.request`); the calls here take them as checked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend, Conversation
from embodied_r_ros.core.config import CameraConfig, Config
from embodied_r_ros.core.error_codes import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BAD_REQUEST,
    NO_FRAMES,
)
from embodied_r_ros.core.images import as_stored, resize_max_side
from embodied_r_ros.core.keyframes import KeyframeSelection, select_keyframes
from embodied_r_ros.core.odometry import PoseTrack, odometry_motions, poses_at
from embodied_r_ros.core.perception import Perceiver, PerceptionResult, ProgressFn, ReplyStore
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.prompts import prompts_from
from embodied_r_ros.core.query_result import QueryResult
from embodied_r_ros.core.reasoning import (
    Reasoning,
    build_messages,
    format_question,
    parse_reasoning,
)
from embodied_r_ros.core.records import MotionSource
from embodied_r_ros.core.request import (
    MAX_PERCEPTION_CHARS,
    SCOPE_MEMORY,
    SCOPE_WINDOW,
    QueryError,
    Question,
)

log = logging.getLogger(__name__)


class EmbodiedR:
    """The method over the models and reply ``cache`` it is given (``load_pipeline`` in the
    backends loads them); thread-safe for concurrent questions when its backends are."""

    def __init__(
        self,
        config: Config,
        *,
        vlm: ChatBackend | None = None,
        lm: ChatBackend | None = None,
        memory_lm: ChatBackend | None = None,
        cache: ReplyStore | None = None,
    ) -> None:
        self.config = config
        self.vlm = vlm
        self.lm = lm
        #: reads the texts that carry a memory's places block; None: ``lm`` reads them
        self.memory_lm = memory_lm
        self.prompts = prompts_from(config.prompts)
        self.perceiver = Perceiver(config.perception, vlm, cache, self.prompts) if (
            vlm is not None or config.perception.backend == "geometric"
        ) else None

    # -- stages -------------------------------------------------------------------------------

    def select(self, frames: Iterable[tuple[np.ndarray, float]]) -> KeyframeSelection:
        return select_keyframes(frames, self.config.keyframes)

    def robot_keyframes(
        self, frames: Iterable[tuple[np.ndarray, float]],
        track: PoseTrack | Sequence[tuple[float, Pose]],
    ) -> tuple[KeyframeSelection, list[np.ndarray], list[Motion | None]]:
        """Key frames of a window as the robot's frame buffer has them: frames shrunk to the
        processing resolution before key-framing, key frames as stored (JPEG, decoded again),
        and the odometry motions between them by the core's tolerance rule (None where a key
        frame has no pose, which :meth:`perceive_window` fills visually, as the robot does).
        ``track``: the camera's poses (odometry or the tf tree; empty: none). A bag's dataset
        and the synthetic world's question check both see these."""
        max_side = self.config.keyframes.max_side
        selection = self.select((resize_max_side(image, max_side), stamp)
                                for image, stamp in frames)
        poses = poses_at(track, selection.stamps, self.config.perception.odom_tolerance_sec)
        stored = [as_stored(image, max_side)[0] for image in selection.images]
        return selection, stored, odometry_motions(poses)

    def keyframe_motions(
        self, selection: KeyframeSelection, camera: CameraConfig | None = None
    ) -> list[Motion | None]:
        """Visual ego-motion between consecutive key frames of ``selection``, reusing the
        extractor's matches (``camera``: intrinsics, else the configured ones)."""
        from embodied_r_ros.core.egomotion import keyframe_motions

        return keyframe_motions(selection, self.config.keyframes,
                                camera or self.config.perception.camera)

    def visual_motions(self, images: Sequence[np.ndarray]) -> list[Motion | None]:
        """Visual ego-motion between consecutive ``images`` (no selection to reuse)."""
        from embodied_r_ros.core.egomotion import motion_between

        cam, kf = self.config.perception.camera, self.config.keyframes
        return [motion_between(a, b, kf, cam) for a, b in zip(images, images[1:], strict=False)]

    def perceive(
        self,
        images: Sequence[np.ndarray],
        stamps: Sequence[float],
        question: Question | None,
        *,
        motions: Sequence[Motion | None] | None = None,
        motion_source: MotionSource | Sequence[MotionSource] = "odometry",
        on_progress: ProgressFn | None = None,
        cancel: CancelToken | None = None,
        question_block: str | None = None,
        camera: CameraConfig | None = None,
    ) -> PerceptionResult:
        """Describe key frames for ``question`` (as an entry checked it; None: for no question,
        as the memory's background describer does); ``motions`` measured by ``motion_source``
        (visual ego-motion is computed here when none are given). ``question_block``: the
        question as a benchmark words it, options included (default: ``format_question``);
        ``camera``: the intrinsics grounded objects are placed with (a bag's CameraInfo)."""
        if not images:
            raise QueryError(NO_FRAMES, "no frames to perceive")
        if self.perceiver is None:
            raise QueryError(BACKEND_DOWN, "no perception model is loaded")
        if motions is None:
            motions, motion_source = self.visual_motions(images), "visual"
        text, options = (question.text, question.options) if question else ("", ())
        try:
            result = self.perceiver.describe(
                images,
                stamps,
                question_block or format_question(text, options),
                motions,
                motion_source=motion_source,
                on_progress=on_progress,
                cancel=cancel,
                question=text,
                options=options,
                camera=camera,
            )
        except BackendError as exc:
            raise QueryError(exc.code, f"perception model: {exc}") from None
        if len(result.text) > MAX_PERCEPTION_CHARS:  # the model's fault, not the asker's
            raise QueryError(BACKEND_FAILED, f"perception model: its replies make a text of "
                             f"{len(result.text)} characters; at most {MAX_PERCEPTION_CHARS}")
        return result

    def complete_motions(
        self,
        images: Sequence[np.ndarray],
        motions: Sequence[Motion | None],
        camera: CameraConfig | None = None,
    ) -> tuple[list[Motion | None], list[MotionSource]]:
        """``motions`` (odometry; None where a key frame had no pose) with each missing one
        measured visually from its two images (None where that fails too), and each one's
        source: the one fallback, for the robot and for datasets alike."""
        if len(motions) != max(len(images) - 1, 0):
            raise QueryError(BAD_REQUEST,
                             f"{len(images)} key frames need {len(images) - 1} motions")
        from embodied_r_ros.core.egomotion import motion_between

        cam = camera or self.config.perception.camera
        sources: list[MotionSource] = ["odometry" if m is not None else "visual"
                                       for m in motions]
        out = [m if m is not None else motion_between(images[i], images[i + 1],
                                                       self.config.keyframes, cam)
               for i, m in enumerate(motions)]
        log.debug("motions: %d from odometry, %d visual", sources.count("odometry"),
                  sources.count("visual"))
        return out, sources

    def perceive_window(
        self,
        images: Sequence[np.ndarray],
        stamps: Sequence[float],
        question: Question | None,
        motions: Sequence[Motion | None],
        *,
        camera: CameraConfig | None = None,
        on_progress: ProgressFn | None = None,
        cancel: CancelToken | None = None,
    ) -> PerceptionResult:
        """The perception text of a window's key frames (as the frame buffer stores them) and
        the odometry motions between them (``core.odometry``: None where a pose was missing),
        completed visually. The nodes and ``embodied-r-train build`` both call this, so the
        LM trains on exactly the text the robot writes. ``camera``: the intrinsics of the
        motions and of grounded objects (a bag's CameraInfo; else the configured ones, and the
        live camera's for grounding)."""
        completed, sources = self.complete_motions(images, motions, camera)
        return self.perceive(images, stamps, question, motions=completed,
                             motion_source=sources, on_progress=on_progress, cancel=cancel,
                             camera=camera)

    def reasoning_messages(self, perception_text: str) -> Conversation:
        """The chat the reasoning LM is given for a perception text (a dataset row's
        ``prompt`` is this, so training and serving prompt the LM alike)."""
        return build_messages(perception_text, self.prompts)

    def reader_for(self, scope: str = SCOPE_WINDOW) -> ChatBackend | None:
        """The LM that reads a text of ``scope``: the memory reader for a memory's text where
        one is loaded, else the reasoning LM. The request's scope decides (a separate
        reasoning node is told it), never the text's words."""
        if scope == SCOPE_MEMORY and self.memory_lm is not None:
            return self.memory_lm
        return self.lm

    def reason(
        self, perception_text: str, options: Sequence[str], cancel: CancelToken | None = None,
        scope: str = SCOPE_WINDOW, *, reader: ChatBackend | None = None,
    ) -> Reasoning:
        """The LM's reply to a perception text, from the LM the request's ``scope`` names
        (:meth:`reader_for`); ``reader`` names the LM instead (a benchmark reading one text with
        both). ``options``: as the request's entry checked them (a :class:`Question`'s)."""
        lm = reader or self.reader_for(scope)
        if lm is None:
            raise QueryError(BACKEND_DOWN, "no reasoning model is loaded")
        try:
            raw = lm.complete(
                [self.reasoning_messages(perception_text)], cancel=cancel
            )[0].text
        except BackendError as exc:
            raise QueryError(exc.code, f"reasoning model: {exc}") from None
        return parse_reasoning(raw, options, self.config.reasoning.answer_mode)

    # -- whole questions ----------------------------------------------------------------------

    def ask_keyframes(
        self,
        images: Sequence[np.ndarray],
        stamps: Sequence[float],
        question: Question,
        *,
        motions: Sequence[Motion | None] | None = None,
        motion_source: MotionSource | Sequence[MotionSource] = "odometry",
        indices: Sequence[int] = (),
        keyframes_sec: float = 0.0,
        on_progress: ProgressFn | None = None,
        cancel: CancelToken | None = None,
    ) -> QueryResult:
        """Answer ``question`` over already selected key frames (the ROS buffer selects them
        itself)."""
        start = t0 = time.perf_counter()
        perception = self.perceive(
            images,
            stamps,
            question,
            motions=motions,
            motion_source=motion_source,
            on_progress=on_progress,
            cancel=cancel,
        )
        t1 = time.perf_counter()
        if on_progress:
            on_progress("reasoning", 0, 1, "")
        reasoning = self.reason(perception.text, question.options, cancel)
        t2 = time.perf_counter()
        if on_progress:
            on_progress("reasoning", 1, 1, reasoning.answer)
        return QueryResult.answered(
            reasoning,
            perception.text,
            frames=perception.frames,
            key_frame_stamps=[float(s) for s in stamps],
            key_frame_indices=list(indices),
            keyframes_sec=keyframes_sec,
            perception_sec=t1 - t0,
            reasoning_sec=t2 - t1,
            total_sec=keyframes_sec + (t2 - start),
            perception_from_cache=perception.from_cache,
        )

    def ask(
        self,
        frames: Iterable[tuple[np.ndarray, float]],
        question: Question,
        *,
        on_progress: ProgressFn | None = None,
        cancel: CancelToken | None = None,
    ) -> QueryResult:
        """Answer ``question`` about a whole video: ``frames`` are ``(rgb_image,
        stamp_seconds)`` pairs.

        The motion between key frames is visual ego-motion, reusing the extractor's matches.
        """
        t0 = time.perf_counter()
        selection = self.select(frames)
        if not selection.images:
            raise QueryError(NO_FRAMES, "the video has no frames")
        motions = self.keyframe_motions(selection)
        keyframes_sec = time.perf_counter() - t0
        return self.ask_keyframes(
            selection.images,
            selection.stamps,
            question,
            motions=motions,
            motion_source="visual",
            indices=selection.indices,
            keyframes_sec=keyframes_sec,
            on_progress=on_progress,
            cancel=cancel,
        )

    def close(self) -> None:
        loaded = (self.vlm, self.lm, self.memory_lm)
        for backend in {id(b): b for b in loaded if b is not None}.values():
            backend.close()

"""Odometry-aware perception: measured motion first, visual ego-motion where odometry is missing.

The frame buffer pairs each key frame with the nearest odometry pose; the motion between two key
frames is then metric (distance and angle). Pairs without poses (no ``odom`` topic, or a gap)
fall back to the core's visual ego-motion from the images, so perception always gets a motion
wherever one can be measured. The core turns either into one of the ten actions in the
perception text, beside the VLM's own action when there is one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.perception import MotionSource, PerceptionResult, ProgressFn
from embodied_r_ros.core.pipeline import BAD_REQUEST, EmbodiedR, QueryError

log = logging.getLogger(__name__)


def complete_motions(
    pipeline: EmbodiedR, images: Sequence[np.ndarray], motions: Sequence[Motion | None]
) -> tuple[list[Motion | None], list[MotionSource]]:
    """``motions`` with every missing entry replaced by visual ego-motion (None if that fails),
    and the source of each entry."""
    if len(motions) != max(len(images) - 1, 0):
        raise QueryError(BAD_REQUEST, f"{len(images)} key frames need {len(images) - 1} motions")
    sources: list[MotionSource] = ["odometry" if m is not None else "visual" for m in motions]
    missing = [i for i, m in enumerate(motions) if m is None]
    if not missing:
        return list(motions), sources
    from embodied_r_ros.core.egomotion import motion_between

    kf, cam = pipeline.config.keyframes, pipeline.config.perception.camera
    out = list(motions)
    for i in missing:
        out[i] = motion_between(images[i], images[i + 1], kf, cam)
    log.debug("motions: %d from odometry, %d visual", len(motions) - len(missing), len(missing))
    return out, sources


def perceive_window(
    pipeline: EmbodiedR,
    images: Sequence[np.ndarray],
    stamps: Sequence[float],
    question: str,
    options: Sequence[str],
    motions: Sequence[Motion | None],
    *,
    on_progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> PerceptionResult:
    """Perception of a buffer window, with odometry motions completed by visual ones."""
    completed, sources = complete_motions(pipeline, images, motions)
    return pipeline.perceive(
        images,
        stamps,
        question,
        options,
        motions=completed,
        motion_source=sources,
        on_progress=on_progress,
        cancel=cancel,
    )

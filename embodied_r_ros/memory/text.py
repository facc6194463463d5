"""Selected memory rows as the perception text the reasoner reads.

The rows a question selects are seldom adjacent: two may be minutes apart. The motion written
before each frame is therefore computed from the two rows' poses
(:func:`~embodied_r_ros.core.poses.relative_motion`), the whole motion from the previous
*selected* frame, in the words and rounding of the robot route
(:func:`~embodied_r_ros.core.perception_text.describe_motion`); :func:`assemble` then states
each frame's age before the last one. The action the streaming perception wrote when the frame
arrived is kept only where the previous selected row is also the previous stored one (it
describes that pair, no other), and a frame without a pose on either side reads "an unknown
motion": dead reckoning the text recomputes every pose it states.
"""

from __future__ import annotations

from collections.abc import Sequence

from embodied_r_ros.core.perception import FrameDescription, MotionSource, lm_action
from embodied_r_ros.core.perception_text import FrameLayout, assemble, describe_motion
from embodied_r_ros.core.poses import relative_motion
from embodied_r_ros.core.prompts import PromptSet
from embodied_r_ros.memory.places import places_text
from embodied_r_ros.memory.store import MemoryRow

UNKNOWN_MOTION = "an unknown motion"


def _source(a: MemoryRow, b: MemoryRow) -> MotionSource:
    """Odometry only when both poses came from it; anything visual makes the motion visual."""
    return "odometry" if a.pose_source == b.pose_source == "odometry" else "visual"


def frames_from_rows(rows: Sequence[MemoryRow], layout: FrameLayout = "timed",
                     adjacent: Sequence[bool] | None = None) -> list[FrameDescription]:
    """One :class:`FrameDescription` a row, oldest first (rows are sorted by stamp here).

    ``adjacent[i]``: whether row ``i`` directly follows row ``i - 1`` in the memory (nothing
    stored between them), so its stored action still applies; by default none does.
    """
    order = sorted(range(len(rows)), key=lambda i: rows[i].stamp)
    ordered = [rows[i] for i in order]
    follows = [bool(adjacent[i]) for i in order] if adjacent is not None else [False] * len(rows)
    frames: list[FrameDescription] = []
    for i, row in enumerate(ordered):
        if i == 0:
            frames.append(FrameDescription(stamp=row.stamp, action=None,
                                           observation=row.description))
            continue
        before = ordered[i - 1]
        measured = source = None
        if before.pose is not None and row.pose is not None:
            measured = describe_motion(relative_motion(before.pose, row.pose), layout)
            source = _source(before, row)
        vlm = row.action if follows[i] else None
        frames.append(FrameDescription(
            stamp=row.stamp, action=lm_action(vlm, measured, source) or UNKNOWN_MOTION,
            observation=row.description, vlm_action=vlm, measured_motion=measured,
            motion_source=source))
    return frames


def memory_perception_text(rows: Sequence[MemoryRow], question_block: str,
                           layout: FrameLayout = "timed", prompts: PromptSet | None = None,
                           adjacent: Sequence[bool] | None = None,
                           report_motion: bool = True) -> str:
    """The reasoner's user message for ``rows`` (see :func:`frames_from_rows`), written by the
    one writer of perception text, :func:`~embodied_r_ros.core.perception_text.assemble`,
    with where the named objects are now after the frames
    (:func:`~embodied_r_ros.memory.places.places_text`)."""
    frames = frames_from_rows(rows, layout, adjacent)
    text = assemble(frames, question_block, report_motion, prompts, layout)
    notes = places_text(text)
    return assemble(frames, question_block, report_motion, prompts, layout, notes) if notes \
        else text

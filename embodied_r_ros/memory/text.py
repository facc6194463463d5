"""Selected memory rows as the perception record the reasoner's text is rendered from.

The rows a question selects are seldom adjacent: two may be minutes apart. The motion written
before each frame is therefore computed from the two rows' poses
(:func:`~embodied_r_ros.core.poses.relative_motion`), the whole motion from the previous
*selected* frame, in the words and rounding of the robot route
(:func:`~embodied_r_ros.core.perception_text.describe_motion`), and the renderer states each
frame's age before the last one. The action the streaming perception wrote when the frame
arrived is kept only where the previous selected row is also the previous stored one (it
describes that pair, no other), and a frame without a pose on either side reads "an unknown
motion": dead reckoning the text recomputes every pose it states. Where the named objects are
now is written after the frames from the memory's placements (:mod:`.places`), relative to the
robot's pose at the ask where the caller knows it (the frame buffer's), else to the newest
selected frame, at the newest pose among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from embodied_r_ros.core.perception_text import UNKNOWN_MOTION, FrameLayout
from embodied_r_ros.core.poses import StampedPose, relative_motion
from embodied_r_ros.core.records import FrameRecord, MotionSource, PerceptionRecord, TextStyle
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.placements import Placement, place_frames
from embodied_r_ros.memory.places import Now, place_notes
from embodied_r_ros.memory.store import MemoryRow


def _source(a: MemoryRow, b: MemoryRow) -> MotionSource:
    """Odometry only when both poses came from it; anything visual makes the motion visual."""
    return "odometry" if a.pose_source == b.pose_source == "odometry" else "visual"


def records_from_rows(rows: Sequence[MemoryRow], adjacent: Sequence[bool] | None = None
                      ) -> tuple[FrameRecord, ...]:
    """One record a row, oldest first (rows are sorted by stamp here), with the motion from the
    previous selected row's pose where both have one.

    ``adjacent[i]``: whether row ``i`` directly follows row ``i - 1`` in the memory (nothing
    stored between them), so its stored action still applies; by default none does.
    """
    order = sorted(range(len(rows)), key=lambda i: rows[i].stamp)
    ordered = [rows[i] for i in order]
    follows = [bool(adjacent[i]) for i in order] if adjacent is not None else [False] * len(rows)
    out: list[FrameRecord] = []
    for i, row in enumerate(ordered):
        record = row.frame_record()
        if i == 0:
            out.append(replace(record, vlm_action=None))
            continue
        before = ordered[i - 1]
        motion = source = None
        if before.pose is not None and row.pose is not None:
            motion, source = relative_motion(before.pose, row.pose), _source(before, row)
        out.append(replace(record, motion=motion, motion_source=source,
                           vlm_action=record.vlm_action if follows[i] else None))
    return tuple(out)


def now_of(rows: Sequence[MemoryRow], live: StampedPose | None = None) -> Now | None:
    """The robot now: ``live`` (its pose at the ask) where it follows the rows' timeline
    (:meth:`~embodied_r_ros.memory.places.Now.counted_from`), else as ``rows`` know it, the
    newest row's stamp and the newest pose among them (None: no row has a pose)."""
    if not rows:
        return None
    newest = max(rows, key=lambda r: r.stamp)
    posed = [r for r in rows if r.pose is not None]
    if not posed:
        return None
    pose = max(posed, key=lambda r: r.stamp).pose
    assert pose is not None
    return Now.counted_from(StampedPose(newest.stamp, pose), live)


def memory_record(rows: Sequence[MemoryRow], question: str, options: Sequence[str],
                  question_block: str, layout: FrameLayout = "timed",
                  adjacent: Sequence[bool] | None = None,
                  placements: Sequence[Placement] | None = None,
                  matcher: LabelMatcher | None = None,
                  live: StampedPose | None = None) -> PerceptionRecord:
    """The record of the reasoner's user message for ``rows`` (see :func:`records_from_rows`),
    with where the named objects are now for the renderer to write after the frames
    (:func:`~embodied_r_ros.memory.places.place_notes`): from ``placements`` (the store's),
    else placed from ``rows`` themselves, counted from the robot's pose now (``live``, see
    :func:`now_of`); none where no row has a pose."""
    record = PerceptionRecord(records_from_rows(rows, adjacent), question, tuple(options),
                              question_block, TextStyle(layout, True, UNKNOWN_MOTION))
    now = now_of(rows, live)
    if now is None:
        return replace(record, places=())
    if placements is None:
        placements = place_frames((r.frame_record(), r.pose) for r in rows)
    return replace(record, places=place_notes(placements, question, options, now, matcher))

"""Memory rows for tests of the memory text: odometry poses on a floor, and one small route."""

from __future__ import annotations

from collections.abc import Sequence

from embodied_r_ros.core.perception_text import FrameLayout, render
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import PerceptionRecord
from embodied_r_ros.memory import MemoryRow, memory_record


def odometry_row(stamp: float, x: float, y: float, yaw: float, view: str) -> MemoryRow:
    """A stored key frame at floor pose (x, y, yaw) from odometry, described as ``view``."""
    return MemoryRow(stamp=stamp, description=view, pose=Pose(x, y, 0.0, yaw),
                     pose_source="odometry")


#: a red object at (4, 2) and a blue one at (4, 3.5), each seen from (0, 0), (1, -1) and
#: (0, -2); 1000 s later the robot sees another red object (at about (5.0, -1.75)) from three
#: places, and stands at (8, 0) facing back (-x) with it 30 degrees to its left
TWO_VISITS = [
    odometry_row(0.0, 0.0, 0.0, 0.0, "I see a small red object to the left (27 degrees left); "
                 "a small blue object to the left (41 degrees left)."),
    odometry_row(5.0, 1.0, -1.0, 0.0, "I see a small red object to the left (45 degrees "
                 "left); a small blue object to the left (56 degrees left)."),
    odometry_row(10.0, 0.0, -2.0, 0.0, "I see a small red object to the left (45 degrees "
                 "left); a small blue object to the left (54 degrees left)."),
    odometry_row(994.0, 8.0, 1.0, 180.0, "I see a small red object to the left (42 degrees "
                 "left)."),
    odometry_row(997.0, 7.0, -1.0, 180.0, "I see a small red object to the left (20 degrees "
                 "left)."),
    odometry_row(1000.0, 8.0, 0.0, 180.0, "I see a small red object to the left (30 degrees "
                 "left)."),
]


def memory_rec(rows: Sequence[MemoryRow], question: str, options: Sequence[str] = (),
               layout: FrameLayout = "timed", adjacent: Sequence[bool] | None = None
               ) -> PerceptionRecord:
    """The memory's record of ``rows`` for a question (its block formatted as the robot's)."""
    return memory_record(rows, question, options, format_question(question, options), layout,
                         adjacent)


def memory_text(rows: Sequence[MemoryRow], question: str, options: Sequence[str] = (),
                layout: FrameLayout = "timed", adjacent: Sequence[bool] | None = None) -> str:
    """The reasoner's user message of :func:`memory_rec`."""
    return render(memory_rec(rows, question, options, layout, adjacent))

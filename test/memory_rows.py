"""Memory rows for tests of the memory text: odometry poses on a floor, and one small route."""

from __future__ import annotations

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.memory import MemoryRow


def odometry_row(stamp: float, x: float, y: float, yaw: float, view: str) -> MemoryRow:
    """A stored key frame at floor pose (x, y, yaw) from odometry, described as ``view``."""
    return MemoryRow(stamp=stamp, description=view, pose=Pose(x, y, 0.0, yaw),
                     pose_source="odometry")


#: a red object at (4, 2) and a blue one at (4, 3.5), each seen from (0, 0) and (0, -2); 1000 s
#: later the robot stands at (8, 0) facing back (-x) and sees another red object 30 degrees to
#: its left
TWO_VISITS = [
    odometry_row(0.0, 0.0, 0.0, 0.0, "I see a small red object to the left (27 degrees left); "
                 "a small blue object to the left (41 degrees left)."),
    odometry_row(10.0, 0.0, -2.0, 0.0, "I see a small red object to the left (45 degrees "
                 "left); a small blue object to the left (54 degrees left)."),
    odometry_row(1000.0, 8.0, 0.0, 180.0, "I see a small red object to the left (30 degrees "
                 "left)."),
]

"""Which odometry pose belongs to a key frame, and the motion between two key frames from it.

One rule for the robot's frame buffer and for datasets built from bags, so that the LM trains on
the text the robot writes: a key frame gets the pose nearest to it in time when that pose is
at most ``perception.odom_tolerance_sec`` away, else none; a pair of key frames gets the
odometry motion when both have a pose, else ``None``, which perception fills with visual
ego-motion (:meth:`embodied_r_ros.core.pipeline.EmbodiedR.perceive_window`). A bag with an
odometry gap therefore reads like the robot did during that gap, not like metres from a pose
seconds away.
"""

from __future__ import annotations

from collections.abc import Sequence

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.poses import Pose, nearest_index, relative_motion


def pose_near(
    stamps: Sequence[float], poses: Sequence[Pose], stamp: float, tolerance_sec: float
) -> Pose | None:
    """The pose nearest to ``stamp`` (``stamps`` sorted) if within ``tolerance_sec``."""
    best = nearest_index(stamps, stamp)
    if best is None or abs(stamps[best] - stamp) > tolerance_sec:
        return None
    return poses[best]


def poses_at(
    track: Sequence[tuple[float, Pose]], stamps: Sequence[float], tolerance_sec: float
) -> list[Pose | None]:
    """For each of ``stamps``, its pose from ``track`` (``(stamp, pose)`` sorted by stamp)."""
    times = [s for s, _ in track]
    poses = [p for _, p in track]
    return [pose_near(times, poses, s, tolerance_sec) for s in stamps]


def odometry_motions(poses: Sequence[Pose | None]) -> list[Motion | None]:
    """Motion between consecutive key frames where both have a pose, else None."""
    return [
        relative_motion(a, b) if a is not None and b is not None else None
        for a, b in zip(poses, poses[1:], strict=False)
    ]

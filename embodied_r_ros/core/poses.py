"""Camera poses and the true relative motion between two of them.

The simulator's ground truth and the ROS odometry node both turn a pair of poses into a
:class:`~embodied_r_ros.core.actions.Motion`, so the conversion lives here once.

World frame (REP-103): x forward/east, y left/north, z up. A pose is a position plus a heading
(``yaw_deg``, positive to the left, from +x toward +y) and a camera tilt (``pitch_deg``,
positive upward). Roll is not modelled: none of the ten actions rolls the camera.

Translations in a :class:`Motion` are expressed in the *heading frame* of the earlier pose
(forward = horizontal heading, left, up = world up), not in the tilted camera frame: "move
forward" and "move upward" mean travel along the ground and altitude, whatever the camera
tilt, as for a walker or a drone with a gimbal.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.actions import Motion

# Optical axes in the body frame (columns: forward, left, up): x = -left, y = -up, z = forward.
BODY_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def wrap_deg(angle: float) -> float:
    """``angle`` wrapped to (-180, 180]."""
    wrapped = math.fmod(angle + 180.0, 360.0)
    if wrapped <= 0.0:
        wrapped += 360.0
    return wrapped - 180.0


def heading_deg(a: Sequence[float], b: Sequence[float]) -> float:
    """Direction from point ``a`` to point ``b`` in the horizontal plane (degrees, x axis = 0,
    positive towards +y, i.e. to the left of an x-facing body)."""
    return math.degrees(math.atan2(b[1] - a[1], b[0] - a[0]))


def crossing_deg(directions_rad: Sequence[float]) -> float:
    """The widest angle between any two of ``directions_rad`` (bearing rays to one object):
    how well the rays place it where they cross."""
    return max((abs(wrap_deg(math.degrees(a - b))) for a in directions_rad
                for b in directions_rad), default=0.0)


def quadrant(bearing: float) -> str:
    """Egocentric quadrant of a bearing (left > 0): front-left, front-right, back-left or
    back-right. A bearing of exactly +-180 is wrapped first, so it is back-left either way."""
    bearing = wrap_deg(bearing)
    front = abs(bearing) < 90.0
    return f"{'front' if front else 'back'}-{'left' if bearing > 0 else 'right'}"


@dataclass(frozen=True)
class Pose:
    """A camera pose in the world frame; angles in degrees."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    yaw_deg: float = 0.0
    pitch_deg: float = 0.0

    @property
    def position(self) -> np.ndarray:
        return np.array([self.x, self.y, self.z], dtype=np.float64)

    def heading_rotation(self) -> np.ndarray:
        """3x3 matrix whose columns are the heading frame's forward, left, up in the world."""
        c, s = math.cos(math.radians(self.yaw_deg)), math.sin(math.radians(self.yaw_deg))
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    def rotation(self) -> np.ndarray:
        """3x3 body-to-world rotation; columns: view direction, left, camera up (REP-103)."""
        yaw, pitch = math.radians(self.yaw_deg), math.radians(self.pitch_deg)
        cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
        forward = [cp * cy, cp * sy, sp]
        left = [-sy, cy, 0.0]
        up = [-sp * cy, -sp * sy, cp]
        return np.array([forward, left, up]).T

    def quaternion(self) -> tuple[float, float, float, float]:
        """Orientation as a ROS quaternion ``(x, y, z, w)``: yaw about z, then pitch about y.

        ROS pitch is positive nose-down, so it is the negative of ``pitch_deg``.
        """
        half_yaw = math.radians(self.yaw_deg) / 2.0
        half_pitch = -math.radians(self.pitch_deg) / 2.0
        cy, sy = math.cos(half_yaw), math.sin(half_yaw)
        cp, sp = math.cos(half_pitch), math.sin(half_pitch)
        # q = q_z(yaw) * q_y(pitch)
        return (-sy * sp, cy * sp, sy * cp, cy * cp)

    @classmethod
    def from_quaternion(
        cls, position: Sequence[float], quaternion: Sequence[float]
    ) -> Pose:
        """Pose from a ROS position and quaternion ``(x, y, z, w)``; roll is dropped."""
        if len(position) != 3 or len(quaternion) != 4:
            raise ValueError("position needs 3 values and quaternion 4 (x, y, z, w)")
        qx, qy, qz, qw = (float(v) for v in quaternion)
        norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
        if norm < 1e-12:
            raise ValueError("quaternion has zero length")
        qx, qy, qz, qw = qx / norm, qy / norm, qz / norm, qw / norm
        yaw = math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))
        sin_pitch = max(-1.0, min(1.0, 2.0 * (qw * qy - qz * qx)))
        ros_pitch = math.asin(sin_pitch)
        px, py, pz = (float(v) for v in position)
        return cls(px, py, pz, math.degrees(yaw), -math.degrees(ros_pitch))


@dataclass(frozen=True)
class StampedPose:
    """Where the camera was at ``stamp`` (seconds): the robot's pose now, as the frame buffer
    last knew it."""

    stamp: float
    pose: Pose


def relative_motion(a: Pose, b: Pose) -> Motion:
    """Metric motion from ``a`` to ``b``, in ``a``'s heading frame (see the module notes)."""
    delta = a.heading_rotation().T @ (b.position - a.position)
    return Motion(
        yaw_deg=wrap_deg(float(b.yaw_deg - a.yaw_deg)),
        pitch_deg=float(b.pitch_deg - a.pitch_deg),
        forward=float(delta[0]),
        left=float(delta[1]),
        up=float(delta[2]),
        metric=True,
    )


def nearest_index(stamps: Sequence[float], stamp: float) -> int | None:
    """Index of the stamp closest to ``stamp`` in the sorted ``stamps`` (None when empty):
    the one nearest-pose lookup, for bags and live odometry alike."""
    if not stamps:
        return None
    i = bisect.bisect_left(stamps, stamp)
    return min((j for j in (i - 1, i) if 0 <= j < len(stamps)),
               key=lambda j: abs(stamps[j] - stamp))

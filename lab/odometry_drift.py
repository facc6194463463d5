"""Odometry that drifts, as a wheeled robot's does, for replaying a world's exact poses.

A wheel odometry's position error grows with the distance travelled (about 1 to 2 % of it)
and its heading creeps slowly. :func:`drift_track` turns a track of exact poses into the
track such an odometry would publish: each step's true motion, expressed in the robot's frame,
is applied from the previous drifted pose with the heading error of that moment, plus a
Gaussian of ``share`` times the step's length on each axis (a random walk); the heading error
grows by ``yaw_deg_min`` degrees a minute (one sign per track, drawn from the seed). The truth
stays apart: :class:`DriftedTrack` keeps both, and maps a world point into the odometry frame
of any moment and back.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from embodied_r_ros.core.poses import Pose


@dataclass(frozen=True)
class DriftedTrack:
    """A track's stamps, its exact poses and the drifted poses the robot receives."""

    stamps: tuple[float, ...]
    truth: tuple[Pose, ...]
    odometry: tuple[Pose, ...]

    def index(self, stamp: float) -> int:
        """The sample nearest ``stamp``."""
        i = bisect.bisect_left(self.stamps, stamp)
        if i == len(self.stamps) or (i > 0 and stamp - self.stamps[i - 1]
                                     < self.stamps[i] - stamp):
            i -= 1
        return max(i, 0)

    def yaw_error_deg(self, i: int) -> float:
        return self.odometry[i].yaw_deg - self.truth[i].yaw_deg

    def relative(self, point: tuple[float, float], i: int, odometry: bool
                 ) -> tuple[float, float]:
        """``point`` (in the odometry frame where ``odometry``, else the world's) in the
        robot's frame at sample ``i`` (forward, left)."""
        pose = self.odometry[i] if odometry else self.truth[i]
        dx, dy = point[0] - pose.x, point[1] - pose.y
        c, s = math.cos(math.radians(pose.yaw_deg)), math.sin(math.radians(pose.yaw_deg))
        return (c * dx + s * dy, -s * dx + c * dy)

    def to_odometry(self, point: tuple[float, float], i: int) -> tuple[float, float]:
        """A world ``point`` where the odometry of sample ``i`` puts it, seen exactly from
        there (what a perfect perception at that moment would place)."""
        f, l_ = self.relative(point, i, odometry=False)
        pose = self.odometry[i]
        c, s = math.cos(math.radians(pose.yaw_deg)), math.sin(math.radians(pose.yaw_deg))
        return (pose.x + c * f - s * l_, pose.y + s * f + c * l_)


def drift_track(stamps: Sequence[float], poses: Sequence[Pose], share: float,
                yaw_deg_min: float, seed: int) -> DriftedTrack:
    """The drifted odometry of exact ``poses`` (module notes); no drift at zero."""
    rng = np.random.default_rng(seed)
    sign = 1.0 if rng.random() < 0.5 else -1.0
    out: list[Pose] = []
    for i, (t, p) in enumerate(zip(stamps, poses, strict=True)):
        if i == 0:
            out.append(p)
            continue
        prev, was = out[-1], poses[i - 1]
        # the step in the previous true pose's frame, then from the previous drifted pose
        dx, dy = p.x - was.x, p.y - was.y
        c0, s0 = math.cos(math.radians(was.yaw_deg)), math.sin(math.radians(was.yaw_deg))
        f, l_ = c0 * dx + s0 * dy, -s0 * dx + c0 * dy
        step = math.hypot(dx, dy)
        f += float(rng.normal(0.0, share * step))
        l_ += float(rng.normal(0.0, share * step))
        c1, s1 = math.cos(math.radians(prev.yaw_deg)), math.sin(math.radians(prev.yaw_deg))
        yaw_error = sign * yaw_deg_min * (t - stamps[0]) / 60.0
        out.append(replace(p, x=prev.x + c1 * f - s1 * l_, y=prev.y + s1 * f + c1 * l_,
                           yaw_deg=p.yaw_deg + yaw_error))
    return DriftedTrack(tuple(stamps), tuple(poses), tuple(out))

"""A camera path made of the paper's ten actions, each a constant-speed segment.

Segments are pure (one action at a time, no blending), so the ground-truth action of any window
inside a segment is exactly that segment's action, and the true motion between two frames is
``relative_motion`` of their poses. Moves happen in the heading frame (see core.poses): "move
forward" travels along the floor even when the camera is tilted.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.poses import Pose, wrap_deg
from embodied_r_ros.sim.scene import Scene

# (unit vector in the heading frame or None, rotation axis name or None, sign)
_EFFECTS: dict[str, tuple[tuple[float, float, float] | None, str | None, float]] = {
    "move forward": ((1.0, 0.0, 0.0), None, 1.0),
    "move backward": ((-1.0, 0.0, 0.0), None, 1.0),
    "move left": ((0.0, 1.0, 0.0), None, 1.0),
    "move right": ((0.0, -1.0, 0.0), None, 1.0),
    "move upward": ((0.0, 0.0, 1.0), None, 1.0),
    "move downward": ((0.0, 0.0, -1.0), None, 1.0),
    "rotate left": (None, "yaw", 1.0),
    "rotate right": (None, "yaw", -1.0),
    "tilt upward": (None, "pitch", 1.0),
    "tilt downward": (None, "pitch", -1.0),
}
OPPOSITE: dict[str, str] = {
    "move forward": "move backward",
    "move backward": "move forward",
    "move left": "move right",
    "move right": "move left",
    "move upward": "move downward",
    "move downward": "move upward",
    "rotate left": "rotate right",
    "rotate right": "rotate left",
    "tilt upward": "tilt downward",
    "tilt downward": "tilt upward",
}


@dataclass(frozen=True)
class MotionLimits:
    """Speeds of the actions, their magnitude ranges and where the camera may go."""

    move_speed: float = 0.5  # m/s, horizontal
    climb_speed: float = 0.25  # m/s, vertical
    rotate_speed: float = 30.0  # deg/s
    tilt_speed: float = 15.0  # deg/s
    forward_m: tuple[float, float] = (1.0, 2.5)
    other_move_m: tuple[float, float] = (0.6, 1.5)
    vertical_m: tuple[float, float] = (0.3, 0.7)
    rotate_deg: tuple[float, float] = (30.0, 90.0)
    tilt_deg: tuple[float, float] = (10.0, 25.0)
    height_m: tuple[float, float] = (0.8, 2.2)
    pitch_deg: tuple[float, float] = (-35.0, 20.0)
    clearance_m: float = 0.9  # from walls and object outlines


def is_metric(action: str) -> bool:
    return _EFFECTS[action][0] is not None


def apply_action(pose: Pose, action: str, amount: float) -> Pose:
    """The pose after doing ``action`` by ``amount`` (metres or degrees) from ``pose``."""
    if action not in _EFFECTS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    direction, axis, sign = _EFFECTS[action]
    if direction is not None:
        step = pose.heading_rotation() @ np.array(direction) * amount
        return Pose(float(pose.x + step[0]), float(pose.y + step[1]), float(pose.z + step[2]),
                    pose.yaw_deg, pose.pitch_deg)
    if axis == "yaw":
        return Pose(pose.x, pose.y, pose.z, wrap_deg(pose.yaw_deg + sign * amount),
                    pose.pitch_deg)
    return Pose(pose.x, pose.y, pose.z, pose.yaw_deg, pose.pitch_deg + sign * amount)


@dataclass(frozen=True)
class Segment:
    """``action`` by ``amount`` (m or deg) from ``start``, during [t0, t0 + duration)."""

    action: str
    amount: float
    start: Pose
    t0: float
    duration: float

    @property
    def t1(self) -> float:
        return self.t0 + self.duration

    @property
    def end(self) -> Pose:
        return apply_action(self.start, self.action, self.amount)

    def pose_at(self, t: float) -> Pose:
        frac = min(1.0, max(0.0, (t - self.t0) / self.duration))
        return apply_action(self.start, self.action, self.amount * frac)

    def describe(self) -> str:
        """Instruction-style phrase, e.g. ``"rotate left about 45 degrees"``."""
        if is_metric(self.action):
            return f"{self.action} about {self.amount:.1f} m"
        return f"{self.action} about {self.amount:.0f} degrees"

    @property
    def stated_amount(self) -> float:
        """The amount as :meth:`describe` states it (rounded as written)."""
        return float(f"{self.amount:.1f}" if is_metric(self.action) else f"{self.amount:.0f}")


@dataclass(frozen=True)
class Trajectory:
    segments: tuple[Segment, ...]

    @property
    def duration(self) -> float:
        return self.segments[-1].t1 if self.segments else 0.0

    def segment_index(self, t: float) -> int:
        """Index of the segment active at ``t`` (clamped to the first and last)."""
        starts = [s.t0 for s in self.segments]
        return max(0, min(len(self.segments) - 1, bisect.bisect_right(starts, t) - 1))

    def pose_at(self, t: float) -> Pose:
        return self.segments[self.segment_index(t)].pose_at(t)

    def poses(self, times: Sequence[float]) -> list[Pose]:
        return [self.pose_at(t) for t in times]


def _duration(action: str, amount: float, lim: MotionLimits) -> float:
    if action in ("move upward", "move downward"):
        return amount / lim.climb_speed
    if is_metric(action):
        return amount / lim.move_speed
    if action.startswith("rotate"):
        return amount / lim.rotate_speed
    return amount / lim.tilt_speed


def _amount(rng: np.random.Generator, action: str, lim: MotionLimits) -> float:
    if action == "move forward":
        lo, hi, step = *lim.forward_m, 0.1
    elif action in ("move upward", "move downward"):
        lo, hi, step = *lim.vertical_m, 0.1
    elif is_metric(action):
        lo, hi, step = *lim.other_move_m, 0.1
    elif action.startswith("rotate"):
        lo, hi, step = *lim.rotate_deg, 5.0
    else:
        lo, hi, step = *lim.tilt_deg, 5.0
    return round(float(rng.uniform(lo, hi)) / step) * step


def _feasible(scene: Scene, pose: Pose, action: str, amount: float, lim: MotionLimits) -> bool:
    end = apply_action(pose, action, amount)
    if not lim.pitch_deg[0] <= end.pitch_deg <= lim.pitch_deg[1]:
        return False
    if not lim.height_m[0] <= end.z <= lim.height_m[1]:
        return False
    if not is_metric(action):
        return True
    steps = max(2, math.ceil(amount / 0.1) + 1)
    for frac in np.linspace(0.0, 1.0, steps):
        p = apply_action(pose, action, amount * float(frac))
        if scene.clearance(p.x, p.y) < lim.clearance_m:
            return False
    return True


def _objects_in_view(scene: Scene, x: float, y: float, yaw_deg: float, hfov_deg: float) -> int:
    half = hfov_deg / 2.0 + 10.0
    return sum(
        abs(wrap_deg(math.degrees(math.atan2(o.y - y, o.x - x)) - yaw_deg)) < half
        for o in scene.objects
    )


def start_pose(scene: Scene, rng: np.random.Generator, lim: MotionLimits,
               hfov_deg: float = 70.0) -> Pose:
    """A clear spot, slightly tilted down at the floor, facing the direction that shows the
    fewest objects: the video then reveals objects one after another as the camera turns,
    which is what appearance-order questions need."""
    for _ in range(5000):
        x = float(rng.uniform(1.5, scene.length - 1.5))
        y = float(rng.uniform(1.5, scene.width - 1.5))
        if scene.clearance(x, y) >= max(1.2, lim.clearance_m):
            yaws = [float(a) for a in rng.permutation(np.arange(-180, 180, 15))]
            yaw = min(yaws, key=lambda a: _objects_in_view(scene, x, y, a, hfov_deg))
            return Pose(x, y, 1.5, wrap_deg(yaw), -10.0)
    raise RuntimeError("no clear start position in the scene")


_WEIGHTS = {a: (4.0 if a == "move forward" else 3.0 if a.startswith("rotate") else 1.0)
            for a in ACTIONS}


def _bearing(pose: Pose, x: float, y: float) -> float:
    return wrap_deg(math.degrees(math.atan2(y - pose.y, x - pose.x)) - pose.yaw_deg)


def _look_at_unviewed(scene: Scene, pose: Pose, viewed: set[int], previous: str | None,
                      lim: MotionLimits) -> tuple[str, float] | None:
    """A turn that brings the nearest-in-angle object not yet looked at into view."""
    best: tuple[float, str, float] | None = None
    lo, hi = lim.rotate_deg
    for k, obj in enumerate(scene.objects):
        if k in viewed:
            continue
        angle = _bearing(pose, obj.x, obj.y)
        action = "rotate left" if angle > 0 else "rotate right"
        if action == previous or (previous and action == OPPOSITE[previous]):
            continue
        amount = min(hi, max(lo, round(abs(angle) / 5.0) * 5.0))
        if best is None or abs(angle) < best[0]:
            best = (abs(angle), action, amount)
    return None if best is None else (best[1], best[2])


def _update_viewed(scene: Scene, seg: Segment, viewed: set[int], hfov_deg: float) -> None:
    for t in np.arange(seg.t0, seg.t1 + 1e-9, 0.5):
        pose = seg.pose_at(float(t))
        for k, obj in enumerate(scene.objects):
            if abs(_bearing(pose, obj.x, obj.y)) < hfov_deg / 2.0 - 5.0:
                viewed.add(k)


def plan_trajectory(scene: Scene, duration_s: float, seed: int,
                    limits: MotionLimits | None = None, hfov_deg: float = 70.0) -> Trajectory:
    """Random feasible action segments lasting at least ``duration_s``.

    All ten actions are used early (when feasible) so that every action appears in a short
    video, and most turns head for an object the camera has not looked at yet, so the video
    explores the room and reveals its objects one after another.
    """
    lim = limits or MotionLimits()
    rng = np.random.default_rng([seed, 0x7A1])
    pose = start_pose(scene, rng, lim, hfov_deg)
    unused = list(ACTIONS)
    weights = np.array([_WEIGHTS[a] for a in ACTIONS])
    segments: list[Segment] = []
    viewed: set[int] = set()
    t = 0.0
    while t < duration_s:
        previous = segments[-1].action if segments else None
        chosen: tuple[str, float] | None = None
        for attempt in range(60):
            if unused and attempt < 30:
                action = unused[int(rng.integers(0, len(unused)))]
            else:
                action = ACTIONS[int(rng.choice(len(ACTIONS), p=weights / weights.sum()))]
            if action == previous or (previous and action == OPPOSITE[previous]):
                continue
            amount = _amount(rng, action, lim)
            if action.startswith("rotate") and rng.random() < 0.9:
                chosen = _look_at_unviewed(scene, pose, viewed, previous, lim)
                if chosen is not None:
                    break
            if _feasible(scene, pose, action, amount, lim):
                chosen = (action, amount)
                break
        if chosen is None:  # turning in place is always possible
            action = "rotate left" if previous != "rotate left" else "rotate right"
            chosen = (action, 90.0)
        action, amount = chosen
        seg = Segment(action, amount, pose, t, _duration(action, amount, lim))
        segments.append(seg)
        _update_viewed(scene, seg, viewed, hfov_deg)
        if action in unused:
            unused.remove(action)
        pose = seg.end
        t = seg.t1
    return Trajectory(tuple(segments))

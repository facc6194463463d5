"""Dead reckoning of the camera from the motions a perception text writes, and the places of
its path by age: what the text states about where the robot was, recomputed."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from embodied_r_ros.core.perception_text import FrameText


@dataclass(frozen=True)
class Pose2D:
    x: float
    y: float
    yaw: float  # degrees, left > 0


_MOVES = {"move forward": 0.0, "move backward": 180.0, "move left": 90.0, "move right": -90.0}


def step(pose: Pose2D, action: str | None, amount: float | None) -> Pose2D:
    """The pose after one reported motion; vertical moves and tilts leave the floor pose."""
    if action is None or amount is None:
        return pose
    if action in _MOVES:
        heading = math.radians(pose.yaw + _MOVES[action])
        return Pose2D(pose.x + amount * math.cos(heading), pose.y + amount * math.sin(heading),
                      pose.yaw)
    if action == "rotate left":
        return Pose2D(pose.x, pose.y, pose.yaw + amount)
    if action == "rotate right":
        return Pose2D(pose.x, pose.y, pose.yaw - amount)
    return pose


def advance(pose: Pose2D, f: FrameText) -> Pose2D:
    """The pose at frame ``f`` from the previous one: every written component in order (moves
    along the previous pose's axes, then turns), or the one action a frame line names."""
    if not f.parts:
        return step(pose, f.action, f.amount)
    start = pose
    for action, amount in f.parts:
        if action in _MOVES and amount is not None:
            heading = math.radians(start.yaw + _MOVES[action])
            pose = Pose2D(pose.x + amount * math.cos(heading),
                          pose.y + amount * math.sin(heading), pose.yaw)
        else:
            pose = step(pose, action, amount)
    return pose


def poses(frames: Sequence[FrameText]) -> list[Pose2D]:
    """Camera pose of every key frame in frame 0's floor frame (x ahead, y left)."""
    out = [Pose2D(0.0, 0.0, 0.0)]
    for f in frames[1:]:
        out.append(advance(out[-1], f))
    return out


def pose_at_age(frames: Sequence[FrameText], path: Sequence[Pose2D], age_s: float
                ) -> Pose2D | None:
    """Where the camera was ``age_s`` seconds before the last key frame: between the two key
    frames whose stated ages bracket it, in proportion (None outside the timed frames)."""
    timed = [(f.age_s, pose) for f, pose in zip(frames, path, strict=True) if f.age_s is not None]
    for (a0, p0), (a1, p1) in itertools.pairwise(timed):
        if a0 >= age_s >= a1:
            w = (a0 - age_s) / (a0 - a1) if a0 > a1 else 0.0
            return Pose2D(p0.x + w * (p1.x - p0.x), p0.y + w * (p1.y - p0.y),
                          p0.yaw + w * (p1.yaw - p0.yaw))
    if len(timed) == 1 and timed[0][0] == age_s:
        return timed[0][1]
    return None

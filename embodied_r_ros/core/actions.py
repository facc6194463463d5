"""The paper's fixed ego-action vocabulary and the mapping from a measured motion to it.

One place turns a camera motion (from visual ego-motion, odometry or the simulator's ground
truth) into the phrase the VLM would have written, so that every source of motion speaks the
same ten words.

Frame conventions: the *body* frame of the camera is forward / left / up (metres) and yaw is
positive to the left, pitch positive upward (degrees), both measured from the earlier pose to
the later one and expressed in the earlier pose's frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ACTIONS: tuple[str, ...] = (
    "move forward",
    "move backward",
    "move left",
    "move right",
    "move upward",
    "move downward",
    "rotate left",
    "rotate right",
    "tilt downward",
    "tilt upward",
)


@dataclass(frozen=True)
class Motion:
    """Relative camera motion between two poses.

    ``forward``/``left``/``up`` are metres when ``metric`` is true, else a unit direction
    (monocular vision knows the direction of travel, not its length).
    """

    yaw_deg: float = 0.0
    pitch_deg: float = 0.0
    forward: float = 0.0
    left: float = 0.0
    up: float = 0.0
    metric: bool = True

    @property
    def translation(self) -> float:
        return math.sqrt(self.forward**2 + self.left**2 + self.up**2)


@dataclass(frozen=True)
class ActionThresholds:
    """Below these a component does not count as having happened."""

    rotation_deg: float = 5.0
    translation_m: float = 0.15
    # A rotation of this many degrees outweighs one metre of travel when both happened.
    deg_per_metre: float = 15.0


def primary_action(motion: Motion, thresholds: ActionThresholds | None = None) -> str | None:
    """The single action among ``ACTIONS`` that best names ``motion``; None if nothing moved."""
    th = thresholds or ActionThresholds()
    rot = max(abs(motion.yaw_deg), abs(motion.pitch_deg))
    rotated = rot >= th.rotation_deg
    trans = motion.translation
    if motion.metric:
        moved = trans >= th.translation_m
        trans_weight = trans * th.deg_per_metre
    else:
        moved = trans > 0.0
        # Direction only: treat as a move only when no clear rotation explains the change.
        trans_weight = th.rotation_deg if moved else 0.0
    if not rotated and not moved:
        return None
    if rotated and (not moved or rot >= trans_weight):
        if abs(motion.yaw_deg) >= abs(motion.pitch_deg):
            return "rotate left" if motion.yaw_deg > 0 else "rotate right"
        return "tilt upward" if motion.pitch_deg > 0 else "tilt downward"
    axes = {
        "forward": motion.forward,
        "left": motion.left,
        "up": motion.up,
    }
    axis, value = max(axes.items(), key=lambda kv: abs(kv[1]))
    return {
        ("forward", True): "move forward",
        ("forward", False): "move backward",
        ("left", True): "move left",
        ("left", False): "move right",
        ("up", True): "move upward",
        ("up", False): "move downward",
    }[(axis, value > 0)]


def action_of(phrase: str) -> str | None:
    """The vocabulary action that ``phrase`` starts with (case-insensitive), else None."""
    low = phrase.strip().lower()
    for action in ACTIONS:
        if low.startswith(action):
            return action
    return None

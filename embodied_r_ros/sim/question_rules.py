"""The decision rules of pose-decided multiple-choice questions, with their margins.

The synthetic world's questions (``sim/questions.py``) and the questions from a recording's
odometry (``sim/pose_questions.py``) both decide their answers here: the bearing of a place, its
quadrant, the side and the turn it lies on, each left undecided (None) near a boundary, and the
wording of the options that name actions and route steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.poses import Pose, heading_deg, quadrant, wrap_deg
from embodied_r_ros.sim.trajectory import OPPOSITE

# Margins that keep answers away from decision boundaries.
DIRECTION_MARGIN_DEG = 15.0
DISTANCE_MARGIN_M = 0.3
MIN_CLIP_S = 1.0
QUADRANTS = ("front-left", "front-right", "back-left", "back-right")
TURNS = ("Turn Left", "Turn Right", "Turn Back")
#: the options of "how far are you from where you started": (from, to, the option's words)
DISTANCE_BANDS = ((0.0, 1.0, "less than 1 m"), (1.0, 2.0, "between 1 and 2 m"),
                  (2.0, 4.0, "between 2 and 4 m"), (4.0, math.inf, "more than 4 m"))


def bearing_deg(pose: Pose, point: Sequence[float]) -> float:
    """Horizontal angle of ``point`` from the camera's heading; positive to the left."""
    return wrap_deg(heading_deg((pose.x, pose.y), point) - pose.yaw_deg)


def boundary_distance(angle: float, boundaries: Sequence[float]) -> float:
    return min(abs(wrap_deg(angle - b)) for b in boundaries)


def clear_quadrant(angle: float) -> str | None:
    """The quadrant of a bearing at least the margin from every quadrant edge, else None."""
    if boundary_distance(angle, (0.0, 90.0, -90.0, 180.0)) < DIRECTION_MARGIN_DEG:
        return None
    return quadrant(angle)


def side_of(angle: float) -> str | None:
    """VSI 'left/right/back' (back: a turn of at least 135 degrees); None when ambiguous."""
    a = abs(angle)
    if a >= 135.0 + DIRECTION_MARGIN_DEG:
        return "back"
    if 20.0 <= a <= 135.0 - DIRECTION_MARGIN_DEG:
        return "left" if angle > 0 else "right"
    return None


def turn_of(angle: float) -> str | None:
    """Route-planning turn at a waypoint: Turn Left / Turn Right / Turn Back; None if unclear."""
    a = abs(angle)
    if a >= 150.0:
        return "Turn Back"
    if 40.0 <= a <= 120.0:
        return "Turn Left" if angle > 0 else "Turn Right"
    return None


def sentence(action: str) -> str:
    return f"I {action}."


def action_picks(action: str, rng: np.random.Generator) -> tuple[str, ...]:
    """"What did you do" options' actions: the action, its opposite and two others at
    random."""
    others = [a for a in ACTIONS if a not in (action, OPPOSITE[action])]
    return (action, OPPOSITE[action], *rng.choice(others, 2, replace=False).tolist())


def action_choices(picks: Sequence[str]) -> tuple[str, ...]:
    return tuple(sentence(a) for a in picks)


def sequence_picks(first: str, second: str, rng: np.random.Generator
                   ) -> tuple[tuple[str, str], ...]:
    """"Which sequence" options' action pairs: the right order and three wrong variants."""
    right = (first, second)
    wrong = {(second, first), (OPPOSITE[first], second), (first, OPPOSITE[second]),
             (OPPOSITE[first], OPPOSITE[second])}
    wrong.discard(right)
    wrong_list = sorted(wrong)
    return (right, *[wrong_list[i] for i in rng.permutation(len(wrong_list))[:3]])


def sequence_choices(picks: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    return tuple(f"I {x}, then I {y}." for x, y in picks)


def progress_picks(k: int, n_steps: int, rng: np.random.Generator) -> tuple[int, ...] | None:
    """"Which step are you on" options (step ``k`` of ``n_steps``, from 0): neighbours
    first."""
    near = [j for j in (k - 1, k + 1) if 0 <= j < n_steps]
    far = [j for j in rng.permutation(n_steps).tolist() if j not in (k, *near)]
    picks = (near + far)[:3]
    if len(picks) < 2:
        return None
    return (k, *picks)


def progress_choices(picks: Sequence[int], described: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"I am on step {j + 1}: {described[j]}." for j in picks)


def progress_question(described: Sequence[str]) -> str:
    plan = "; ".join(f"{j + 1}. {s}" for j, s in enumerate(described))
    return (f"Navigation instruction given at initial position: [{plan}]. You move according "
            "to this series of instructions. What are you doing now (at the last frame of the "
            "video)?")


ACTION_QUESTION = "What did you do between the first frame and the last frame of the video?"
SEQUENCE_QUESTION = ("Which sequence of actions did you perform from the first frame to the last "
                     "frame of the video?")

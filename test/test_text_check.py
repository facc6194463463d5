"""Questions only where the text supports them: a draft from the odometry is kept when the
perception text of its clip decides the same answer clear of the decision boundaries, and left
out with its reason otherwise."""

from __future__ import annotations

import pytest
from embodied_r_training.data import text_check
from embodied_r_training.data.text_check import TextCheck

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.perception import FrameDescription
from embodied_r_ros.core.perception_text import NOTHING_IN_VIEW, describe_motion
from embodied_r_ros.sim.question_rows import Draft

STARTED = "the point where you started (at the first frame of the video)"
QUADRANTS = ("front-left", "front-right", "back-left", "back-right")
BANDS = ("less than 1 m", "between 1 and 2 m", "between 2 and 4 m", "more than 4 m")


class Written(TextCheck):
    """The check on a clip whose key frames and odometry motions are given (1 s apart)."""

    def __init__(self, motions: list[Motion | None]) -> None:
        self.layout = "timed"
        frames = [FrameDescription(0.0, None, NOTHING_IN_VIEW)]
        for i, m in enumerate(motions, 1):
            text = describe_motion(m) if m else None
            frames.append(FrameDescription(float(i), text, NOTHING_IN_VIEW,
                                           measured_motion=text, motion_source="odometry"))
        self.clip = None if any(m is None for m in motions) else frames

    def _frames(self, draft: Draft) -> list[FrameDescription] | None:
        return self.clip


def _where(answer: str) -> Draft:
    return Draft("relative_direction", f"Where is {STARTED} relative to you now (at the last "
                 "frame of the video): to your front-left, front-right, back-left, or "
                 "back-right?", (answer, *[q for q in QUADRANTS if q != answer]), 0.0, 2.0)


def _forward_then_turn(degrees: float) -> list[Motion]:
    return [Motion(forward=2.0), Motion(yaw_deg=degrees)]


@pytest.mark.parametrize(("turn", "answer", "reason"), [
    (135.0, "front-left", None),  # the start lies 45 degrees to the left, ahead
    (135.0, "front-right", text_check.DISAGREES),
    (100.0, "front-left", text_check.NEAR),  # 80 degrees: 10 from the left/back edge
    (105.0, "front-left", None),  # 75 degrees: exactly the margin away, still clear
    (-170.0, "front-right", text_check.NEAR),  # 10 degrees right of straight ahead
])
def test_a_direction_is_kept_only_clear_of_the_quadrant_edges(turn: float, answer: str,
                                                              reason: str | None) -> None:
    assert Written(_forward_then_turn(turn)).reason_to_skip(_where(answer)) == reason


@pytest.mark.parametrize(("metres", "answer", "reason"), [
    (1.5, "between 1 and 2 m", None),
    (1.8, "between 1 and 2 m", text_check.NEAR),  # 0.2 m from the 2 m edge
    (1.5, "less than 1 m", text_check.DISAGREES),
])
def test_a_distance_band_is_kept_only_clear_of_its_edges(metres: float, answer: str,
                                                         reason: str | None) -> None:
    draft = Draft("relative_distance", f"How far are you now (at the last frame of the video) "
                  f"from {STARTED}, in a straight line?",
                  (answer, *[b for b in BANDS if b != answer]), 0.0, 2.0)
    assert Written([Motion(forward=metres), Motion(yaw_deg=30.0)]).reason_to_skip(draft) == reason


def test_a_place_given_by_its_age_is_found_in_the_text_or_the_draft_left_out() -> None:
    question = ("Which is closer to you now (at the last frame of the video): {a}, or the place "
                "where you were {ago} seconds before the last frame?")
    path = [Motion(forward=3.0), Motion(forward=1.0)]  # ages 2, 1, 0: the start is farthest
    near = Draft("relative_distance", question.format(a=STARTED, ago=1),
                 ("where I was 1 seconds ago", "the point where I started"), 0.0, 2.0)
    assert Written(path).reason_to_skip(near) is None
    beyond = Draft("relative_distance", question.format(a=STARTED, ago=9),
                   ("where I was 9 seconds ago", "the point where I started"), 0.0, 2.0)
    assert Written(path).reason_to_skip(beyond) == text_check.UNPLACED


def test_a_clip_with_a_key_frame_without_odometry_is_left_out() -> None:
    assert Written([Motion(forward=2.0), None]).reason_to_skip(_where("back-left")) == (
        text_check.GAP)

"""Questions only where the text supports them: a draft from the odometry is kept when the
perception text of its clip decides the same answer clear of the decision boundaries, and left
out with its reason otherwise."""

from __future__ import annotations

import math

import pytest

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.perception_text import NOTHING_IN_VIEW
from embodied_r_ros.core.records import FrameRecord
from embodied_r_ros.sim.question_basis import START, QuestionBasis
from embodied_r_ros.sim.question_rows import Draft
from embodied_r_training.data import text_check
from embodied_r_training.data.text_check import TextCheck

STARTED = "the point where you started (at the first frame of the video)"
QUADRANTS = ("front-left", "front-right", "back-left", "back-right")
BANDS = ("less than 1 m", "between 1 and 2 m", "between 2 and 4 m", "more than 4 m")


def _asks(kind: str, choices: tuple[str, ...], places: tuple[str, ...] = (),
          options: tuple[tuple[str, ...], ...] | None = None) -> dict:
    """The basis the odometry generator gives a draft (its options in the draft's order)."""
    said = options if options is not None else tuple((c,) for c in choices)
    return QuestionBasis(kind, places=places, options=said).to_dict()


class Written(TextCheck):
    """The check on a clip whose key frames and odometry motions are given (1 s apart)."""

    def __init__(self, motions: list[Motion | None]) -> None:
        self.layout = "timed"
        frames = (FrameRecord(0.0), *(FrameRecord(float(i), motion=m, motion_source="odometry")
                                      for i, m in enumerate(motions, 1)))
        self.clip = None if any(m is None for m in motions) else frames

    def _frames(self, draft: Draft) -> tuple[FrameRecord, ...] | None:
        return self.clip


def _where(answer: str) -> Draft:
    choices = (answer, *[q for q in QUADRANTS if q != answer])
    return Draft("relative_direction", f"Where is {STARTED} relative to you now (at the last "
                 "frame of the video): to your front-left, front-right, back-left, or "
                 "back-right?", choices, 0.0, 2.0,
                 _asks("place_direction", choices, (START,)))


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
    bands = (answer, *[b for b in BANDS if b != answer])
    draft = Draft("relative_distance", f"How far are you now (at the last frame of the video) "
                  f"from {STARTED}, in a straight line?", bands, 0.0, 2.0,
                  _asks("how_far", bands, (START,)))
    assert Written([Motion(forward=metres), Motion(yaw_deg=30.0)]).reason_to_skip(draft) == reason


def test_a_place_given_by_its_age_is_found_in_the_text_or_the_draft_left_out() -> None:
    question = ("Which is closer to you now (at the last frame of the video): {a}, or the place "
                "where you were {ago} seconds before the last frame?")
    path = [Motion(forward=3.0), Motion(forward=1.0)]  # ages 2, 1, 0: the start is farthest
    choices = ("where I was 1 seconds ago", "the point where I started")
    near = Draft("relative_distance", question.format(a=STARTED, ago=1), choices, 0.0, 2.0,
                 _asks("nearer_place", choices, options=(("1",), (START,))))
    assert Written(path).reason_to_skip(near) is None
    choices = ("where I was 9 seconds ago", "the point where I started")
    beyond = Draft("relative_distance", question.format(a=STARTED, ago=9), choices, 0.0, 2.0,
                   _asks("nearer_place", choices, options=(("9",), (START,))))
    assert Written(path).reason_to_skip(beyond) == text_check.UNPLACED


def test_a_clip_with_a_key_frame_without_odometry_is_left_out() -> None:
    assert Written([Motion(forward=2.0), None]).reason_to_skip(_where("back-left")) == (
        text_check.GAP)


# ------------------------------------------- built rows: the synthetic world's questions

WHERE_BLUE = ("Where is the blue cone relative to you now (at the last frame of the video): to "
              "your front-left, front-right, back-left, or back-right?")


def _row(observations: list[str], question: str, options: list[str], solution: str,
         category: str) -> dict:
    """A built row whose key frames are 1 s apart, the robot standing still, with ``options``
    lettered A, B, ... after ``question``."""
    n = len(observations)
    lines = [f"Frame {i} ({n - 1 - i} s before the last key frame): "
             + ("" if i == 0 else "After move forward about 0.0 m, ")
             + f"Observe: {obs}" for i, obs in enumerate(observations)]
    choices = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))
    user = ("Assume you are an agent and the video content below is your egocentric observation "
            "from the past to the present. Answer the question based on it.\nVideo content:\n<\n"
            "The video is described in text, one key frame at a time. Frame 0 is your initial "
            "position. You keep moving and receive new frames; the last frame is your current "
            "position.\n" + "\n".join(lines) + f"\n>\nQuestion: {question}\nChoices:\n{choices}")
    return {"category": category, "solution": solution,
            "prompt": [{"role": "system", "content": "-"}, {"role": "user", "content": user}]}


def _blue_at(degrees: float) -> str:
    side = "right" if degrees < 0 else "left"
    return f"I see a small blue object to the {side} ({abs(degrees):.0f} degrees {side})."


@pytest.mark.parametrize(("bearing", "solution", "reason"), [
    (-30.0, "B", None),  # front-right, clear of the edges
    (-30.0, "A", text_check.DISAGREES),
    (-10.0, "B", text_check.NEAR),  # 10 degrees from straight ahead: inside the margin
    (-15.0, "B", None),  # exactly the margin away
])
def test_a_built_direction_row_is_kept_only_where_its_text_decides_it(
        bearing: float, solution: str, reason: str | None) -> None:
    row = _row([NOTHING_IN_VIEW, _blue_at(bearing)], WHERE_BLUE,
               ["front-left", "front-right", "back-left", "back-right"], solution,
               "relative_direction")
    assert text_check.row_reason_to_skip(row) == reason


def test_a_built_row_about_an_object_the_text_never_shows_is_left_out() -> None:
    row = _row([NOTHING_IN_VIEW, NOTHING_IN_VIEW], WHERE_BLUE,
               ["front-left", "front-right", "back-left", "back-right"], "B",
               "relative_direction")
    assert text_check.row_reason_to_skip(row) == text_check.UNDECIDED


@pytest.mark.parametrize(("red", "green", "solution", "reason"), [
    (-20.0, 40.0, "A", None),  # red 10 degrees from the blue target, green 70: red is closer
    # 10 and 8 degrees off the target, all at the assumed 3.5 m: green closer by about 0.1 m
    (-20.0, -38.0, "B", text_check.NEAR),
])
def test_a_built_closest_object_row_is_left_out_when_the_distances_nearly_tie(
        red: float, green: float, solution: str, reason: str | None) -> None:
    def seen(colour: str, degrees: float) -> str:
        side = "right" if degrees < 0 else "left"
        return f"a small {colour} object to the {side} ({abs(degrees):.0f} degrees {side})"

    view = f"I see {seen('blue', -30.0)}; {seen('red', red)}; {seen('green', green)}."
    question = ("Measuring from the closest point of each object, which of these objects (red "
                "box, green ball) is the closest to the blue cone?")
    row = _row([NOTHING_IN_VIEW, view], question, ["red box", "green ball"], solution,
               "relative_distance")
    assert text_check.row_reason_to_skip(row) == reason


ROUTE = ("You are a robot beginning at the cyan cylinder and facing the magenta cylinder. You "
         "want to navigate to the green box. You will perform the following actions (Note: for "
         "each [please fill in], choose either 'turn back,' 'turn left,' or 'turn right.'): 1. "
         "Go forward until the magenta cylinder 2. [please fill in] 3. Go forward until the "
         "purple cylinder 4. [please fill in] 5. Go forward until the green box. You have "
         "reached the final destination.")


def _placed_row(points: dict[str, tuple[float, float]], question: str, options: list[str],
                category: str, solution: str = "A") -> dict:
    """A built row whose one frame shows each colour at ``points`` (metres, from the camera at
    the origin facing +x), with bearing and range, so the text places them exactly."""
    from embodied_r_ros.core.reasoning import format_question
    from embodied_r_ros.core.records import PerceptionRecord, SeenObject

    objects = tuple(SeenObject(f"{c} object", c, "small", "ahead",
                               math.degrees(math.atan2(y, x)), math.hypot(x, y))
                    for c, (x, y) in points.items())
    record = PerceptionRecord((FrameRecord(0.0, objects=objects),), question, tuple(options),
                              format_question(question, options))
    return {"id": "r", "category": category, "question": question, "options": options,
            "solution": solution, "question_block": record.question_block,
            "records": record.to_dict()}


@pytest.mark.parametrize(("green", "answer", "reason"), [
    ((2.0, 2.0), "Turn Left, Turn Left", None),  # two clear left turns
    # the second turn is 140 degrees: between a side turn (at most 120) and back (150)
    ((4.0 + 2 * math.cos(math.radians(230)), 2.0 + 2 * math.sin(math.radians(230))),
     "Turn Left, Turn Back", text_check.NEAR),
])
def test_an_object_route_is_kept_only_where_its_turns_are_clear_in_the_text(
        green: tuple[float, float], answer: str, reason: str | None) -> None:
    points = {"cyan": (2.0, 0.0), "magenta": (4.0, 0.0), "purple": (4.0, 2.0), "green": green}
    others = [o for o in ("Turn Left, Turn Left", "Turn Left, Turn Back", "Turn Right, Turn Back",
                          "Turn Back, Turn Right") if o != answer][:3]
    options = [f"{chr(65 + i)}. {o}" for i, o in enumerate([answer, *others])]
    row = _placed_row(points, ROUTE, options, "route_planning")
    assert text_check.row_reason_to_skip(row) == reason

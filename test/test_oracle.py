"""The rule-based oracle: it reads the perception text only and answers what the text decides."""

from __future__ import annotations

import pytest
from old_texts import old_row
from worlddata import built_world_rows

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.perception_text import PerceptionText, render
from embodied_r_ros.core.reasoning import build_messages, format_question
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord
from embodied_r_ros.reading.legacy_text import parse_perception
from embodied_r_ros.reading.rule_reader import progress_step
from embodied_r_ros.sim.question_basis import QuestionBasis, of_row
from embodied_r_training.data.oracle import solve
from embodied_r_training.data.row_records import perception_of, record_of


def _row(frames: list[tuple[str | None, str]], question: str, options: list[str],
         category: str, solution: str = "A") -> dict:
    """A dataset row written before records: its prompt states (action, observation) lines."""
    return old_row(frames, question, options, category, solution)


NOTHING = "no distinctly coloured object in view."


def _stated(row: dict) -> tuple[PerceptionText, QuestionBasis]:
    """A row's text as it states it, and its question's basis (here: from its wording)."""
    stated = perception_of(row)
    return stated, of_row(row, stated)


def test_parse_reads_actions_amounts_and_sightings() -> None:
    row = _row(
        [(None, "I see a small red object to the left (25 degrees left); a large blue object "
                "straight ahead (1 degree right, about 2.5 m away)."),
         ("rotate right, about 40 degrees", NOTHING),
         ("stay still", "I see a medium green object to the right.")],
        "Where is the red box relative to you now (at the last frame of the video): to your "
        "front-left, front-right, back-left, or back-right?",
        ["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
        "relative_direction",
    )
    p = perception_of(row)
    assert [f.action for f in p.frames] == [None, "rotate right", "stay still"]
    assert p.frames[1].amount == 40.0
    red, blue = p.frames[0].sightings["red"], p.frames[0].sightings["blue"]
    assert (red.bearing_deg, red.distance_m, red.exact_bearing) == (25.0, None, True)
    assert (blue.bearing_deg, blue.distance_m, blue.size) == (-1.0, 2.5, "large")
    green = p.frames[2].sightings["green"]
    assert green.bearing_deg < -10 and not green.exact_bearing  # coarse words only
    assert [t for _, t in p.options][0] == "front-left"
    assert p.question.startswith("Where is the red box")


def test_direction_after_turning_uses_dead_reckoning() -> None:
    # red seen 20 degrees right, then a 50-degree right turn: it is now 30 degrees left
    row = _row(
        [(None, "I see a small red object to the right (20 degrees right)."),
         ("rotate right, about 50 degrees", NOTHING)],
        "Where is the red box relative to you now (at the last frame of the video): to your "
        "front-left, front-right, back-left, or back-right?",
        ["A. front-right", "B. front-left", "C. back-left", "D. back-right"],
        "relative_direction",
    )
    assert solve(row).letter == "B"
    # a further 120-degree right turn puts it behind, on the left (150 degrees left)
    row = _row(
        [(None, "I see a small red object to the right (20 degrees right)."),
         ("rotate right, about 50 degrees", NOTHING), ("rotate right, about 120 degrees", NOTHING)],
        "Where is the red box relative to you now (at the last frame of the video): to your "
        "front-left, front-right, back-left, or back-right?",
        ["A. front-right", "B. front-left", "C. back-left", "D. back-right"],
        "relative_direction",
    )
    assert solve(row).letter == "C"


def test_action_questions() -> None:
    single = _row([(None, NOTHING), ("move left, about 0.5 m", NOTHING),
                   ("move left, about 0.4 m", NOTHING), ("stay still", NOTHING)],
                  "What did you do between the first frame and the last frame of the video?",
                  ["A. I move right.", "B. I rotate left.", "C. I move left.", "D. I tilt upward."],
                  "action_generation")
    assert solve(single).letter == "C"
    double = _row([(None, NOTHING), ("tilt upward, about 10 degrees", NOTHING),
                   ("move forward, about 1.0 m", NOTHING), ("move forward, about 0.8 m", NOTHING)],
                  "Which sequence of actions did you perform from the first frame to the last "
                  "frame of the video?",
                  ["A. I move forward, then I tilt upward.",
                   "B. I tilt upward, then I move forward.",
                   "C. I tilt downward, then I move forward.",
                   "D. I tilt upward, then I move backward."],
                  "action_generation")
    assert solve(double).letter == "B"
    nxt = _row([(None, "I see a small red object straight ahead (3 degrees left)."),
                ("rotate left, about 60 degrees", NOTHING)],
               "You are asked to navigate to the red box. At your current position (the last "
               "frame of the video), what is your next move?",
               ["A. I move forward.", "B. I rotate left.", "C. I rotate right.",
                "D. I tilt upward."],
               "action_generation")
    assert solve(nxt).letter == "C"  # it is now about 57 degrees to the right


def test_appearance_order_breaks_ties_by_the_turn() -> None:
    # both appear in frame 1 while turning right: the one further left entered the view first
    row = _row([(None, "I see a small red object straight ahead (0 degrees left)."),
                ("rotate right, about 40 degrees",
                 "I see a small blue object to the right (25 degrees right); a small green "
                 "object straight ahead (5 degrees right).")],
               "What will be the first-time appearance order of the following objects in the "
               "video: blue cone, green box, red box?",
               ["A. red box, blue cone, green box", "B. red box, green box, blue cone",
                "C. blue cone, green box, red box", "D. green box, red box, blue cone"],
               "appearance_order")
    assert solve(row).letter == "B"


def test_progress_consumes_the_plan_in_order() -> None:
    question = ("Navigation instruction given at initial position: [1. tilt upward about 20 "
                "degrees; 2. rotate left about 30 degrees; 3. move left about 0.9 m; 4. rotate "
                "right about 90 degrees; 5. move forward about 1.5 m]. You move according to this "
                "series of instructions. What are you doing now (at the last frame of the video)?")
    options = ["A. I am on step 4: rotate right about 90 degrees.",
               "B. I am on step 5: move forward about 1.5 m.",
               "C. I am on step 3: move left about 0.9 m.",
               "D. I am on step 1: tilt upward about 20 degrees."]
    midway = _row([(None, NOTHING), ("tilt upward, about 20 degrees", NOTHING),
                   ("rotate right, about 40 degrees", NOTHING)], question, options,
                  "progress_evaluation")
    assert progress_step(*_stated(midway)) == 4 and solve(midway).letter == "A"
    # the whole 90-degree turn is done: the next step is under way
    done = _row([(None, NOTHING), ("tilt upward, about 20 degrees", NOTHING),
                 ("rotate right, about 50 degrees", NOTHING),
                 ("rotate right, about 40 degrees", NOTHING)], question, options,
                "progress_evaluation")
    assert progress_step(*_stated(done)) == 5


def test_map_questions_from_ranged_sightings() -> None:
    # frame 0 floor frame: red at (3, 0), blue at (3, 1.2), green at (0, 3) (90 deg left, 3 m)
    obs = ("I see a small red object straight ahead (0 degrees left, about 3.0 m away); a small "
           "blue object to the left (22 degrees left, about 3.2 m away).")
    frames = [(None, obs), ("rotate left, about 90 degrees",
                            "I see a small green object straight ahead (0 degrees left, about "
                            "3.0 m away).")]
    dist = _row(frames, "Measuring from the closest point of each object, which of these objects "
                "(blue cone, green box) is the closest to the red box?",
                ["A. green box", "B. blue cone"], "relative_distance")
    assert solve(dist).letter == "B"
    allo = _row(frames, "If I am standing by the red box and facing the blue cone, is the green "
                "box to my left, right, or back? An object is to my back if I would have to turn "
                "at least 135 degrees in order to face it.",
                ["A. right", "B. left", "C. back"], "relative_direction")
    assert solve(allo).letter == "B"  # red -> blue points +y; green lies up and to the left


def test_question_block_without_frames_decides_nothing() -> None:
    p = parse_perception("Question: What did you do?\nChoices:\nA. I move left.\nB. I move right.")
    assert p.frames == () and len(p.options) == 2


# ---------------------------------------------------------------- a built world


@pytest.fixture(scope="module")
def built_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, ...]:
    return built_world_rows(tmp_path_factory.mktemp("oracle-world"), 11,
                            "action_generation=6,appearance_order=4,relative_direction=6")


def test_oracle_answers_a_built_world_from_the_text_alone(built_rows: tuple[dict, ...]) -> None:
    assert len(built_rows) >= 12
    right = 0
    for row in built_rows:
        text_only = {"prompt": row["prompt"], "category": row["category"]}
        answer = solve(text_only)
        assert answer == solve(row)  # nothing but the text is read
        right += answer.letter == row["solution"]
    # action, appearance-order and own-direction questions are decided by the text (chance ~0.27)
    assert right / len(built_rows) >= 0.7


# ---------------------------------------------------------------- places of the robot's path

PATH_MOTIONS = [  # (age, odometry motion): forward 2 m, turn left, forward 1 m
    (10.0, None), (6.0, Motion(forward=2.0)), (3.0, Motion(yaw_deg=90.0)),
    (0.0, Motion(forward=1.0))]
STARTED = "the point where you started (at the first frame of the video)"


def _path_row(question: str, options: list[str], category: str) -> dict:
    """A row of the robot route: odometry motions and frame ages, nothing in view."""
    frames = [FrameRecord(10.0 - age, motion=motion,
                          motion_source="odometry" if motion is not None else None)
              for age, motion in PATH_MOTIONS]
    row = {"question": question, "options": options, "category": category,
           "question_block": format_question(question, options),
           "records": PerceptionRecord(tuple(frames), question, tuple(options),
                                       format_question(question, options)).to_dict()}
    text = render(record_of(row))
    assert "Frame 1 (6 s before the last key frame): After move forward about 2.0 m," in text
    return {**row, "prompt": build_messages(text)}


@pytest.mark.parametrize(("question", "options", "category", "want"), [
    (f"Where is {STARTED} relative to you now (at the last frame of the video): to your "
     "front-left, front-right, back-left, or back-right?",
     ["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
     "relative_direction", "C"),  # (0, 0) from (2, 1) facing +y: 117 degrees left
    ("Where is the place where you were 8 seconds before the last frame relative to you now (at "
     "the last frame of the video): to your front-left, front-right, back-left, or back-right?",
     ["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
     "relative_direction", "C"),  # between the frames aged 10 and 6 s: (1, 0)
    (f"How far are you now (at the last frame of the video) from {STARTED}, in a straight line?",
     ["A. less than 1 m", "B. between 1 and 2 m", "C. between 2 and 4 m", "D. more than 4 m"],
     "relative_distance", "C"),  # 2.2 m
    (f"Which is closer to you now (at the last frame of the video): {STARTED}, or the place "
     "where you were 3 seconds before the last frame?",
     ["A. the point where I started", "B. where I was 3 seconds ago"],
     "relative_distance", "B"),  # 1.0 m against 2.2 m
    (f"You want to go back to {STARTED}. What should you do first, from where you are now (the "
     "last frame of the video)?", ["A. Turn Back", "B. Turn Left", "C. Turn Right",
                                   "D. Go forward"], "route_planning", "B"),
])
def test_places_of_the_path_are_found_by_the_ages_the_text_states(
        question: str, options: list[str], category: str, want: str) -> None:
    answer = solve(_path_row(question, options, category))  # the row holds the text only
    assert answer.letter == want, answer.evidence

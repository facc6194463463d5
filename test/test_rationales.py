"""Cold-start rationales: well formed, short, grounded in the text, and always the true answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from old_texts import old_row

from embodied_r_ros.core.chat import ChatBackend, Completion
from embodied_r_ros.core.reasoning import (
    extract_think,
    is_well_formed,
    parse_reasoning,
)
from embodied_r_training.data.rationales import completion, rationale
from embodied_r_training.rewards import correct

pytestmark = pytest.mark.costly(85)  # seconds of one worker: started early

FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL)
NOTHING = "no distinctly coloured object in view."


def _row(frames: list[tuple[str | None, str]], question: str, options: list[str],
         category: str, solution: str) -> dict:
    return {**old_row(frames, question, options, category, solution), "id": "q"}


APPEARANCE = _row(
    [(None, "I see a small red object straight ahead (2 degrees left)."),
     ("rotate right, about 40 degrees", "I see a small green object to the right (25 degrees "
                                        "right)."),
     ("rotate right, about 40 degrees", "I see a small blue object to the right (20 degrees "
                                        "right).")],
    "What will be the first-time appearance order of the following objects in the video: "
    "blue cone, green box, red box?",
    ["A. blue cone, green box, red box", "B. green box, red box, blue cone",
     "C. red box, green box, blue cone", "D. red box, blue cone, green box"],
    "appearance_order", "C",
)


def test_appearance_rationale_walks_the_frames() -> None:
    r = rationale(APPEARANCE)
    assert r.supported and r.answer == "C. red box, green box, blue cone"
    # the options as text = letter first, so that the conclusion's letter is a copy
    assert r.think.startswith(
        "Options: blue cone, green box, red box = A; green box, red box, blue cone = B; "
        "red box, green box, blue cone = C; red box, blue cone, green box = D. "
        "Frame 0: red. Frame 1: green. Frame 2: blue.")
    assert "First: red, green, blue." in r.think
    assert r.think.endswith("So: red box, green box, blue cone = C.")
    assert FORMAT.match(r.completion) and r.completion.endswith("</answer>")


DISTANCE = _row(
    [(None, "I see a small red object straight ahead (2 degrees left); a small green object "
            "to the left (30 degrees left)."),
     ("rotate right, about 40 degrees", "I see a small red object to the left (38 degrees "
                                        "left); a small blue object to the right (25 degrees "
                                        "right)."),
     ("rotate right, about 20 degrees", "I see a small yellow object straight ahead (1 degree "
                                        "right).")],
    "Which of these objects (green box, blue cone, yellow box) is the closest to the red box?",
    ["A. green box", "B. yellow box", "C. blue cone"],
    "relative_distance", "A",
)


def test_a_distance_rationale_notes_the_bearing_gap_of_the_answer_in_the_last_shared_frame(
) -> None:
    """Relative distance: the walk notes where the question's objects are, then the bearing
    gap between the target and the answer in the last frame that shows both; supported only
    where the oracle's reading of the text picks that answer."""
    r = rationale(DISTANCE)
    assert r.supported and r.answer == "A. green box"
    assert r.think == (
        "Options: green box = A; yellow box = B; blue cone = C. "
        "Frame 0: green 30 left, red 2 left. Frame 1: blue 25 right, red 38 left. "
        "Frame 2: yellow 1 right. In frame 0 red and green are 28 apart. So: green box = A.")
    farther = rationale({**DISTANCE, "solution": "C"})
    assert not farther.supported
    assert farther.think.endswith("In frame 1 red and blue are 63 apart. So: blue cone = C.")
    assert correct(farther.completion, "C", DISTANCE["options"], "official")


def test_direction_rationale_tracks_the_object_through_the_turns() -> None:
    row = _row([(None, "I see a small blue object straight ahead (2 degrees left)."),
                ("rotate left, about 30 degrees", "I see a small red object to the right (20 "
                                                  "degrees right)."),
                ("rotate right, about 50 degrees", NOTHING)],
               "Where is the red box relative to you now (at the last frame of the video): to "
               "your front-left, front-right, back-left, or back-right?",
               ["A. front-right", "B. front-left", "C. back-left", "D. back-right"],
               "relative_direction", "B")
    r = rationale(row)
    assert r.supported
    # the walk starts where red is first seen and keeps the turns after it
    assert r.think.partition(". Frame")[2].startswith(
        " 1: rotate left 30, red 20 right. Frame 2: rotate right 50.")
    assert "red was 20 right in frame 1, then I turned 50 right: now about 30 left." in r.think


ODOMETRY_QUESTIONS = [  # the wording of embodied-r-train questions: places of the robot's path
    ("relative_direction", "Where is the point where you started (at the first frame) relative "
     "to you now (at the last frame of the video): to your front-left, front-right, back-left, "
     "or back-right?", ["A. back-left", "B. front-left", "C. front-right", "D. back-right"]),
    ("relative_distance", "Which is closer to you now (at the last frame of the video): the point "
     "where you started (at the first frame), or the place where you were 2 seconds before the "
     "last frame?", ["A. the place where you were 2 seconds before the last frame",
                     "B. the point where you started"]),
    ("relative_distance", "How far are you now (at the last frame of the video) from the point "
     "where you started (at the first frame), in a straight line?",
     ["A. between 1 and 2 m", "B. less than 1 m", "C. between 2 and 4 m", "D. more than 4 m"]),
    ("route_planning", "You want to go back to the point where you started (at the first "
     "frame). What should you do first, from where you are now (the last frame of the video)?",
     ["A. Turn Back", "B. Turn Left", "C. Turn Right", "D. Go forward"]),
]


@pytest.mark.parametrize(("category", "question", "options"), ODOMETRY_QUESTIONS)
def test_questions_about_places_of_the_path_get_a_rationale_of_the_motions(
        category: str, question: str, options: list[str]) -> None:
    """Questions made from odometry name no object: the rationale walks the motions that
    locate the robot's own places and concludes the solution."""
    row = _row([(None, NOTHING), ("move forward, about 1.2 m", NOTHING),
                ("rotate left, about 90 degrees", NOTHING)],
               question, options, category, "A")
    r = rationale(row)
    assert r.think.startswith(f"Options: {options[0][3:]} = A;")
    assert ". Frame 1: move forward 1.2. Frame 2: rotate left 90." in r.think
    assert r.think.endswith(f"So: {options[0][3:]} = A.")
    assert correct(r.completion, "A", options, "official")


def test_the_answer_is_the_solution_even_when_the_text_disagrees() -> None:
    wrong = {**APPEARANCE, "solution": "A"}  # the text says C
    r = rationale(wrong)
    assert not r.supported
    assert r.answer.startswith("A. ") and correct(r.completion, "A", wrong["options"])
    assert r.think.endswith("So: blue cone, green box, red box = A.")


def test_answer_without_letter_still_parses_to_the_solution() -> None:
    r = rationale(APPEARANCE, letter=False)
    assert r.answer == "red box, green box, blue cone"
    assert r.think.endswith("So: red box, green box, blue cone")
    assert parse_reasoning(r.completion, APPEARANCE["options"]).answer == "C"


def test_bad_solution_is_refused() -> None:
    with pytest.raises(ValueError, match="not an option"):
        rationale({**APPEARANCE, "solution": "F"})


# ---------------------------------------------------------------- a built world, all categories


@pytest.fixture(scope="module")
def built_rows(world_12: Path) -> tuple[dict, ...]:
    return tuple(json.loads(line) for line in (world_12 / "d" / "data.jsonl").open())


def test_every_rationale_of_a_built_world_reaches_the_true_answer(
    built_rows: tuple[dict, ...],
) -> None:
    assert len({r["category"] for r in built_rows}) >= 5
    for row in built_rows:
        for letter in (True, False):
            text = completion(row, letter=letter)
            assert FORMAT.match(text), text
            assert is_well_formed(text)
            assert correct(text, row["solution"], row["options"]), text
            # the recipe's reading (the official training normalisation) needs the letter
            assert correct(text, row["solution"], row["options"], "official") is letter, text
            parsed = parse_reasoning(text, row["options"])
            assert parsed.answer == row["solution"] and parsed.well_formed
            think = extract_think(text) or ""
            assert 3 <= len(think.split()) <= 150, think  # short: a 135M model learns it on CPU
            assert "Frame " in think or "never seen" in think or "No frame" in think


def shown_think(reference_user: str) -> str:
    """The think text a reference prompt shows (between "Thinking process:" and "Your
    answer")."""
    return reference_user.split("Thinking process:")[1].split("Your answer")[0].strip()


def test_sft_teaches_the_reference_task_on_a_share_of_the_gold_rationales(
    built_rows: tuple[dict, ...],
) -> None:
    """``sft.reference_share``: extra rows that show the reference prompt (the question and a
    gold think text, nothing of the video) and answer with the solution's letter alone."""
    from embodied_r_ros.core.prompts import default_prompts
    from embodied_r_training.recipe import SFTSettings
    from embodied_r_training.rl.sft import sft_rows

    rows = list(built_rows)
    plain = sft_rows(rows, SFTSettings(targets="rationale"))
    mixed = sft_rows(rows, SFTSettings(targets="rationale", reference_share=0.5))
    assert mixed[: len(plain)] == plain and len(mixed) == len(plain) + round(0.5 * len(rows))
    by_think = {extract_think(completion(r)): r for r in rows}
    p = default_prompts()
    for extra in mixed[len(plain):]:
        system, user = extra["prompt"]
        assert system == {"role": "system", "content": p.reference_system}
        think = shown_think(user["content"])
        row = by_think[think]  # a gold think text, verbatim
        assert "Video content" not in user["content"] and "Choices:" in user["content"]
        assert extra["completion"] == [{"role": "assistant", "content": row["solution"]}]


def test_reference_targets_are_the_reference_task_alone_one_row_per_gold_rationale(
    built_rows: tuple[dict, ...],
) -> None:
    """``sft.targets: reference`` trains a reference of its own: a row per supported gold
    rationale, each the reference prompt with that think text (concluded as the policy's are)
    answered with the letter, and no policy rows."""
    from embodied_r_training.recipe import SFTSettings
    from embodied_r_training.rl.sft import sft_rows

    rows = list(built_rows)
    cfg = SFTSettings(targets="reference", supported_only=True)
    only = sft_rows(rows, cfg)
    supported = [r for r in rows if rationale(r).supported]
    assert supported and len(only) == len(supported)
    thinks = {rationale(r).think: r["solution"] for r in supported}
    for row in only:
        _, user = row["prompt"]
        think = shown_think(user["content"])
        assert row["completion"] == [{"role": "assistant", "content": thinks[think]}]
        assert "Video content" not in user["content"]


class _OptionMatcher(ChatBackend):
    """A reader that does by rule what the consistency reference must do: find the option
    the think text concludes with (``So: <text> = <letter>.`` or ``So: <text>``) and reply with
    its letter; or,
    with ``always``, reply that letter whatever it is shown."""

    model_id = "option-matcher"

    def __init__(self, always: str | None = None) -> None:
        self.always = always
        self.shown: list[str] = []

    def complete(self, conversations, **_: object) -> list[Completion]:  # noqa: ANN001
        replies = []
        for conv in conversations:
            user = conv[-1]["content"]
            self.shown.append(user)
            think = shown_think(user)
            conclusion = re.sub(r" = [A-H]\.$", "", think.rpartition("So:")[2].strip())
            letters = [letter for letter, text in re.findall(r"^([A-H])\. (.*)$", user, re.M)
                       if conclusion in (text.strip(), f"{letter}. {text.strip()}")]
            replies.append(Completion(self.always or (letters[0] if letters else "none")))
        return replies


def test_the_gold_rationale_check_asks_as_the_reward_and_counts(
    built_rows: tuple[dict, ...],
) -> None:
    """The check of a consistency reference on gold rationales, through the
    reward itself (the recipe's official reading): a reader that maps each conclusion to its
    option re-derives every gold answer; one that always says A scores the share of A."""
    from embodied_r_training.recipe import load_train_config
    from embodied_r_training.rl.reference import gold_rationale_check

    cfg = load_train_config("smollm2-embodied-r")
    rows = list(built_rows)
    reader = _OptionMatcher()
    check = gold_rationale_check(cfg, reader, rows)
    assert (check.rows, check.consistent, check.failed) == (len(rows), len(rows), 0)
    assert all("Video content" not in shown for shown in reader.shown)  # the think text only
    always_a = gold_rationale_check(cfg, _OptionMatcher(always="A"), rows)
    assert always_a.consistent == sum(r["solution"] == "A" for r in rows) < len(rows)
    assert always_a.rate == pytest.approx(always_a.consistent / len(rows))


def _reference(name: str) -> ChatBackend:
    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.core.config import ModelConfig

    return create_backend(ModelConfig(backend="transformers", model=name, dtype="float32",
                                      device="cpu", batch_size=6), text_only=True)


def by_length(rows: tuple[dict, ...]) -> list[dict]:
    """The rows shortest reference prompt first (its think text, question and options), so
    that each batch of 6 pads little: 40 % less compute than one batch padded to the longest
    of 180 to 580 tokens, for the same answers."""
    return sorted(rows, key=lambda r: len(completion(r, letter=True)) + len(r["question"])
                  + sum(map(len, r["options"])))


@pytest.mark.timeout(600)
def test_the_shipped_reference_reads_the_gold_rationales_and_the_untrained_model_does_not(
    built_rows: tuple[dict, ...], smollm2_dir: Path,
) -> None:
    """The recipe's consistency reference (its SFT checkpoint, shipped as
    ``smollm2-135m-embodied-r-reference``) re-derives at least 90 % of the gold answers of a
    world it never saw, asked exactly as the reward asks; the untrained SmolLM2-135M, the old
    reference, stays far below (it answers "A." to nearly everything)."""
    from embodied_r_training.recipe import load_train_config
    from embodied_r_training.rl.reference import gold_rationale_check

    del smollm2_dir  # the base, converted once into the test run's model cache
    cfg = load_train_config("smollm2-embodied-r")
    rows = by_length(built_rows)
    checks = {}
    for name in ("smollm2-135m-embodied-r-reference", "smollm2-135m"):
        reference = _reference(name)
        try:
            checks[name] = gold_rationale_check(cfg, reference, rows)
        finally:
            reference.close()
    shipped, untrained = checks["smollm2-135m-embodied-r-reference"], checks["smollm2-135m"]
    assert shipped.failed == 0 and shipped.rate >= 0.9, shipped
    assert untrained.rate <= 0.5, untrained

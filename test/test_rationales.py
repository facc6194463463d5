"""Cold-start rationales: well formed, short, grounded in the text, and always the true answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from embodied_r_training.data.rationales import completion, rationale
from worlddata import built_world_rows

from embodied_r_ros.core.backends.base import ChatBackend, Completion
from embodied_r_ros.core.perception import FrameDescription
from embodied_r_ros.core.perception_text import assemble
from embodied_r_ros.core.reasoning import (
    build_messages,
    extract_think,
    format_question,
    is_well_formed,
    parse_reasoning,
)
from embodied_r_ros.core.rewards import correct

FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL)
NOTHING = "no distinctly coloured object in view."


def _row(frames: list[tuple[str | None, str]], question: str, options: list[str],
         category: str, solution: str) -> dict:
    descs = [FrameDescription(stamp=float(i), action=a, observation=o)
             for i, (a, o) in enumerate(frames)]
    text = assemble(descs, format_question(question, options))
    return {"id": "q", "prompt": build_messages(text), "options": options,
            "category": category, "solution": solution}


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
    assert r.think.startswith("Frame 0: red. Frame 1: green. Frame 2: blue.")
    assert "First: red, green, blue." in r.think
    assert r.think.endswith("So: C. red box, green box, blue cone")
    assert FORMAT.match(r.completion) and r.completion.endswith("</answer>")


def test_an_appearance_check_numbers_each_object_and_takes_the_first_option_that_never_falls(
) -> None:
    """``sft.conclusion: option_check``: the first frames in the question's order, then each
    option with those numbers up to the first whose numbers never fall."""
    r = rationale(APPEARANCE, conclusion="option_check")
    assert r.supported and r.answer == "C. red box, green box, blue cone"
    assert r.think == (
        "Frame 0: red. Frame 1: green. Frame 2: blue. "
        "First: blue cone 2, green box 1, red box 0. "
        "So: A. blue cone 2, green box 1, red box 0: no. B. green box 1, red box 0, blue cone "
        "2: no. C. red box 0, green box 1, blue cone 2: yes.")
    assert correct(r.completion, "C", APPEARANCE["options"], "official")
    # a solution the numbers do not reach is still the answer, by the option walk, unsupported
    wrong = rationale({**APPEARANCE, "solution": "D"}, conclusion="option_check")
    assert not wrong.supported and wrong.answer.startswith("D. ")
    assert wrong.think.endswith("D. red box, blue cone, green box: yes.")


def test_an_every_frame_walk_notes_each_frame_on_its_own_motion() -> None:
    """``sft.walk: every_frame``: a note per frame, opening with the frame's motion, then the
    asked colours or ``nothing``; the conclusion is the same as the sparse walk's."""
    gap = {**APPEARANCE, "prompt": _row(
        [(None, "I see a small red object straight ahead (2 degrees left)."),
         ("move forward, about 1.5 m", NOTHING),
         ("rotate right, about 40 degrees", "I see a small green object to the right (25 "
                                            "degrees right); a small blue object to the right "
                                            "(20 degrees right).")],
        "What will be the first-time appearance order of the following objects in the video: "
        "blue cone, green box, red box?", APPEARANCE["options"], "appearance_order", "C",
    )["prompt"]}
    every = rationale(gap, walk="every_frame")
    assert every.think == ("Frame 0: start: red. Frame 1: move forward 1.5: nothing. "
                           "Frame 2: rotate right 40: blue, green. First: red, blue, green. "
                           "So: C. red box, green box, blue cone")
    sparse = rationale(gap)
    assert sparse.think.startswith("Frame 0: red. Frame 2: blue, green. First")
    assert every.answer == sparse.answer and every.supported == sparse.supported
    with pytest.raises(ValueError, match="walk must be"):
        rationale(gap, walk="dense")
    from embodied_r_training.recipe import SFTSettings
    from embodied_r_training.rl.sft import sft_rows

    (row,) = sft_rows([gap], SFTSettings(targets="rationale", walk="every_frame"))
    assert row["completion"][0]["content"] == every.completion


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


def test_a_distance_check_copies_both_bearings_and_keeps_the_smallest_gap_so_far() -> None:
    """Relative distance under ``option_check``: per option, the last frame that shows it with
    the target, both bearings copied, their gap, the smallest so far marked; the last so
    marked is the answer."""
    r = rationale(DISTANCE, conclusion="option_check")
    assert r.supported and r.answer == "A. green box"
    assert r.think == (
        "A. green box: frame 0, red 2 left, green 30 left: 28 apart, closest so far. "
        "B. yellow box: never seen with red. "
        "C. blue cone: frame 1, red 38 left, blue 25 right: 63 apart. So: A. green box.")
    closer_blue = {**DISTANCE, "solution": "C"}
    walked = rationale(closer_blue, conclusion="option_check")
    assert not walked.supported and walked.think.endswith("C. blue cone: yes.")
    assert correct(walked.completion, "C", DISTANCE["options"], "official")


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
    assert r.think.startswith("Frame 1: rotate left 30, red 20 right. Frame 2: rotate right 50.")
    assert "red was 20 right in frame 1, then I turned 50 right: now about 30 left." in r.think


def test_the_answer_is_the_solution_even_when_the_text_disagrees() -> None:
    wrong = {**APPEARANCE, "solution": "A"}  # the text says C
    r = rationale(wrong)
    assert not r.supported
    assert r.answer.startswith("A. ") and correct(r.completion, "A", wrong["options"])
    assert r.think.endswith("So: A. blue cone, green box, red box")


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
def built_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, ...]:
    return built_world_rows(tmp_path_factory.mktemp("rationale-world"), 12, 18)


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


def test_a_text_first_conclusion_names_the_text_then_its_letter(
    built_rows: tuple[dict, ...],
) -> None:
    """``sft.conclusion: text_first``: the walk ends in the option text it leads to and then
    that option's letter; the answer tag, the official reading and the reference's regex
    fallback see the same letter as with the letter-first conclusion."""
    from embodied_r_training.recipe import SFTSettings
    from embodied_r_training.rl.sft import sft_rows

    from embodied_r_ros.core.answers import think_letter
    from embodied_r_ros.core.reasoning import parse_options

    rows = list(built_rows)
    for row in rows:
        first, text_first = rationale(row), rationale(row, conclusion="text_first")
        letter = row["solution"]
        text = dict(parse_options(row["options"]))[letter]
        assert first.think.endswith(f"So: {letter}. {text}")
        assert text_first.think.endswith(f"So: {text} ({letter})")
        assert text_first.answer == first.answer == f"{letter}. {text}"
        assert think_letter(text_first.think) == letter
        assert correct(text_first.completion, letter, row["options"], "official")
    targets = sft_rows(rows, SFTSettings(targets="rationale", conclusion="text_first"))
    assert [t["completion"][0]["content"] for t in targets] == [
        completion(r, conclusion="text_first") for r in rows]


def test_an_option_walk_compares_each_option_with_the_text_up_to_the_answer(
    built_rows: tuple[dict, ...],
) -> None:
    """``sft.conclusion: option_walk``: the text the walk leads to, then the options in the
    prompt's order, each marked against it, stopping at the answer; every reading (the answer
    tag, the official extractor, the reference's regex fallback) sees the solution's letter."""
    from embodied_r_ros.core.answers import think_letter
    from embodied_r_ros.core.reasoning import parse_options

    for row in built_rows:
        walked = rationale(row, conclusion="option_walk")
        options = parse_options(row["options"])
        letter = row["solution"]
        text = dict(options)[letter].rstrip(".")
        upto = [key for key, _ in options][: "ABCDEFGH".index(letter) + 1]
        marks = " ".join(f"{key}. {dict(options)[key].rstrip('.')}: "
                         f"{'yes' if key == letter else 'no'}." for key in upto)
        assert walked.think.endswith(f"So: {text}. {marks}")
        assert walked.answer == rationale(row).answer
        assert think_letter(walked.think) == letter
        assert correct(walked.completion, letter, row["options"], "official")


def test_an_option_check_reaches_its_own_conclusion_in_every_checked_row(
    built_rows: tuple[dict, ...],
) -> None:
    """On a built world: a supported checked rationale's numbers lead to the solution by its
    own rule (the yes line's first frames never fall and every no line's do; the last gap
    marked smallest is the smallest), and the other categories walk the options."""
    from embodied_r_ros.core.answers import think_letter

    checked = 0
    for row in built_rows:
        r = rationale(row, conclusion="option_check")
        letter = row["solution"]
        assert r.answer == rationale(row).answer
        assert think_letter(r.think) == letter
        assert correct(r.completion, letter, row["options"], "official")
        if row["category"] not in ("appearance_order", "relative_distance"):
            assert r == rationale(row, conclusion="option_walk")
            continue
        if not r.supported:
            assert r.think.endswith(": yes.")  # the option walk to the solution
            continue
        checked += 1
        if row["category"] == "appearance_order":
            lines = re.findall(r"([A-H])\. ([^:]+): (yes|no)\.", r.think.split("So: ")[1])
            for _, items, verdict in lines:
                ranks = [10**6 if n.endswith("never") else int(n.rsplit(" ", 1)[1])
                         for n in items.split(", ")]
                assert (ranks == sorted(ranks)) is (verdict == "yes")
            assert lines[-1][0] == letter and lines[-1][2] == "yes"
        else:
            gap_re = r"([A-H])\. [^:]+: frame \d+, [^:]+: (\d+) apart"
            gaps = {k: int(g) for k, g in re.findall(gap_re, r.think)}
            marked = re.findall(r"([A-H])\. [^:]+: [^.]*closest so far\.", r.think)
            assert marked[-1] == letter and gaps[letter] == min(gaps.values())
    assert checked >= 2


def shown_think(reference_user: str) -> str:
    """The think text a reference prompt shows (between "Thinking process:" and "Your
    answer")."""
    return reference_user.split("Thinking process:")[1].split("Your answer")[0].strip()


def test_sft_teaches_the_reference_task_on_a_share_of_the_gold_rationales(
    built_rows: tuple[dict, ...],
) -> None:
    """``sft.reference_share``: extra rows that show the reference prompt (the question and a
    gold think text, nothing of the video) and answer with the solution's letter alone."""
    from embodied_r_training.recipe import SFTSettings
    from embodied_r_training.rl.sft import sft_rows

    from embodied_r_ros.core.prompts import default_prompts

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
    cfg = SFTSettings(targets="reference", supported_only=True, conclusion="option_walk")
    only = sft_rows(rows, cfg)
    supported = [r for r in rows if rationale(r, conclusion="option_walk").supported]
    assert supported and len(only) == len(supported)
    thinks = {rationale(r, conclusion="option_walk").think: r["solution"] for r in supported}
    for row in only:
        _, user = row["prompt"]
        think = shown_think(user["content"])
        assert row["completion"] == [{"role": "assistant", "content": thinks[think]}]
        assert "Video content" not in user["content"]


class _OptionMatcher(ChatBackend):
    """A reader that does by rule what the consistency reference must do: find the option
    the think text concludes with (``So: <letter>. <text>`` or ``So: <text>``) and reply with
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
            conclusion = think.rpartition("So:")[2].strip()
            letters = [letter for letter, text in re.findall(r"^([A-H])\. (.*)$", user, re.M)
                       if conclusion in (text.strip(), f"{letter}. {text.strip()}")]
            replies.append(Completion(self.always or (letters[0] if letters else "none")))
        return replies


def test_the_gold_rationale_check_asks_as_the_reward_and_counts(
    built_rows: tuple[dict, ...],
) -> None:
    """Issue 17, item 1: the check of a consistency reference on gold rationales, through the
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
    from embodied_r_ros.core.backends.factory import create_backend
    from embodied_r_ros.core.config import ModelConfig

    return create_backend(ModelConfig(backend="transformers", model=name, dtype="float32",
                                      device="cpu", batch_size=32), text_only=True)


@pytest.mark.timeout(600)
def test_the_shipped_reference_reads_the_gold_rationales_and_the_untrained_model_does_not(
    built_rows: tuple[dict, ...], smollm2_dir: Path,
) -> None:
    """Issue 17, items 1 and 5: the recipe's consistency reference (its SFT checkpoint, shipped
    as ``smollm2-135m-embodied-r-reference``) re-derives at least 90 % of the gold answers of a
    world it never saw, asked exactly as the reward asks; the untrained SmolLM2-135M, the old
    reference, stays far below (it answers "A." to nearly everything)."""
    from embodied_r_training.recipe import load_train_config
    from embodied_r_training.rl.reference import gold_rationale_check

    del smollm2_dir  # the base, converted once into the session's cache
    cfg = load_train_config("smollm2-embodied-r")
    rows = list(built_rows)
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

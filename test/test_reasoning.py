from __future__ import annotations

import pytest

from embodied_r_ros.core.prompts import default_prompts
from embodied_r_ros.core.reasoning import (
    OptionsError,
    build_messages,
    extract_answer,
    format_question,
    is_well_formed,
    parse_options,
    parse_reasoning,
    question_from_prompt,
)

OPTS = ["A. counter", "B. towel", "C. chair", "D. pillow"]


def test_system_prompt_is_r1_plus_the_consistency_sentence() -> None:
    system = default_prompts().system
    assert "<think> </think> and <answer> </answer>" in system
    assert "consistent with and directly derived from the thinking" in system
    msgs = build_messages("hello")
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "hello"
    assert msgs[0]["content"] == system


@pytest.mark.parametrize(
    ("completion", "ok"),
    [
        ("<think>a</think><answer>B</answer>", True),
        ("<think>a\nb</think>\n<answer>B. towel</answer>", True),
        ("<think>a</think> <answer>B</answer>", True),
        ("  <think>a</think><answer>B</answer>", False),  # the raw completion, not stripped
        ("<think>a</think><answer>B</answer>\n", False),
        ("<think>a</think><answer>B</answer> trailing", False),
        ("prefix <think>a</think><answer>B</answer>", False),
        ("<think>a</think>", False),
        ("<answer>B</answer>", False),
        ("<think>a<answer>B</answer>", False),
    ],
)
def test_format_is_the_whole_completion(completion: str, ok: bool) -> None:
    assert is_well_formed(completion) is ok


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>x</think><answer>B</answer>", "B"),
        ("<think>x</think><answer> (c) </answer>", "C"),
        ("<think>x</think><answer>D. pillow</answer>", "D"),
        ("<think>x</think><answer>towel</answer>", "B"),
        ("<think>option A looks wrong</think><answer>the answer is C</answer>", "C"),
        ("<think>A is closest</think> so A.", "A"),  # no tag: a letter after the think block
        ("<think>B or C? C is nearer</think> I cannot tell", ""),  # letters in think only
        ("<think>not A</think> it is D", "D"),
        ("the answer is B", "B"),  # no think block: the whole reply
        ("<think>x</think><answer>Z</answer>", ""),  # not an option
        ("no idea", ""),
    ],
)
def test_tag_mode_extraction(completion: str, expected: str) -> None:
    assert extract_answer(completion, OPTS) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        # the official evaluation extractor: the first <answer> letter, else the last dotted one
        ("<think>I answer based on the view</think><answer>C</answer>", "C"),
        ("<think>e.g. the chair</think><answer> c</answer>", "C"),
        ("<think>e.g. the chair</think> so C", "E"),
        ("<think>x</think><answer>$\\boxed{D}$</answer>",
         "<THINK>X</THINK><ANSWER>$\\BOXED{D}$</ANSWER>"),
        ("nothing here", "NOTHING HERE"),
    ],
)
def test_official_mode_is_the_official_evaluation(completion: str, expected: str) -> None:
    assert extract_answer(completion, OPTS, mode="official") == expected


def test_open_questions_return_text() -> None:
    assert extract_answer("<think>x</think><answer> 3.5 meters </answer>") == "3.5 meters"
    r = parse_reasoning("<think>because</think><answer>left</answer>")
    assert (r.think, r.answer, r.answer_text, r.well_formed) == ("because", "left", "left", True)


def test_parse_reasoning_fills_the_option_text() -> None:
    r = parse_reasoning("<think>near the mirror</think>\n<answer>B</answer>", OPTS)
    assert (r.answer, r.answer_text) == ("B", "towel")
    bad = parse_reasoning("garbage", OPTS)
    assert (bad.answer, bad.think, bad.well_formed) == ("", "", False)


@pytest.mark.parametrize(
    "options",
    [["A left"], ["B. left"], ["A. left", "C. right"], [""], [f"{c}. x" for c in "ABCDEFGHI"]],
)
def test_malformed_options_are_rejected(options: list[str]) -> None:
    with pytest.raises(OptionsError):
        parse_options(options)


def test_question_block_and_its_recovery() -> None:
    block = format_question("Which is closest?", OPTS[:2])
    assert block == "Question: Which is closest?\nChoices:\nA. counter\nB. towel"
    prompt = "Video content: Question: fake inside frames\n" + block
    # the text after the LAST "Question:", stripped, as the official consistency reward takes it
    assert question_from_prompt(prompt) == "Which is closest?\nChoices:\nA. counter\nB. towel"
    assert question_from_prompt("no marker here ") == "no marker here"

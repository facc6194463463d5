"""The reply-step analysis tells a wrong walk from a wrong conclusion."""

from __future__ import annotations

import pytest
from test_rationales import APPEARANCE

from embodied_r_training.data.rationales import rationale
from lab.analysis.steps import Steps, reply_steps, summarise

GOLD = rationale(APPEARANCE)
WALK = "Frame 0: red. Frame 1: green. Frame 2: blue."


def reply(think: str, answer: str) -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def test_the_gold_completion_follows_every_step() -> None:
    assert reply_steps(APPEARANCE, GOLD.completion) == Steps(
        "appearance_order", True, True, True, notes_found=1.0, notes_wrong=0.0)


def test_a_wrong_conclusion_over_the_right_walk() -> None:
    think = GOLD.think.replace("So: red box, green box, blue cone = C.",
                               "So: red box, blue cone, green box = D.")
    steps = reply_steps(APPEARANCE, reply(think, "D. red box, blue cone, green box"))
    assert steps.options and steps.evidence and not steps.right


def test_a_wrong_walk_with_a_lucky_answer() -> None:
    assert WALK in GOLD.think
    think = GOLD.think.replace(WALK, "Frame 0: red. Frame 1: blue. Frame 2: green.")
    steps = reply_steps(APPEARANCE, reply(think, GOLD.answer))
    assert steps.options and not steps.evidence and steps.right
    # one of the three gold notes is there; two of the reply's three are not gold ones
    assert steps.notes_found == pytest.approx(1 / 3) and steps.notes_wrong == pytest.approx(2 / 3)


def test_an_extra_frame_note_is_counted_as_not_gold() -> None:
    think = GOLD.think.replace(WALK, WALK + " Frame 3: blue.")
    steps = reply_steps(APPEARANCE, reply(think, GOLD.answer))
    assert not steps.evidence and steps.notes_found == 1.0
    assert steps.notes_wrong == pytest.approx(1 / 4)


def test_options_copied_wrong_and_no_think() -> None:
    think = GOLD.think.replace("= A;", "= B;", 1)
    assert reply_steps(APPEARANCE, reply(think, GOLD.answer)) == Steps(
        "appearance_order", False, False, True, notes_found=1.0)
    assert reply_steps(APPEARANCE, "C") == Steps("appearance_order", False, False, True)


def test_the_summary_separates_the_conclusion_step() -> None:
    steps = [Steps("a", True, True, True), Steps("a", True, True, False),
             Steps("b", False, False, True), Steps("b", True, False, False)]
    table = summarise(steps)
    assert table["a"]["right_given_evidence"] == 0.5 and table["a"]["evidence_copied"] == 1.0
    assert table["b"]["right_given_evidence"] is None
    assert table["b"]["right_without_evidence"] == 0.5
    assert table["overall"]["n"] == 4 and table["overall"]["accuracy"] == 0.5
    assert list(table) == ["a", "b", "overall"]

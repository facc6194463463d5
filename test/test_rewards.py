"""The three Embodied-R rewards on tables of tricky completions, and the batched reference LM."""

from __future__ import annotations

import re

import pytest

from embodied_r_ros.core.chat import BackendError, ChatBackend, Completion, Conversation
from embodied_r_training.rewards import (
    ConsistencyReward,
    accuracy_reward,
    completion_text,
    format_reward,
    reference_conversation,
    reference_letter,
    solution_letter,
)

OPTIONS = ["A. left", "B. right", "C. up", "D. down"]
PROMPT = [
    {"role": "system", "content": "system prompt"},
    {
        "role": "user",
        "content": "Video content:\n<\nFrame 0: Observe: a red box.\n>\n"
        "Question: Which way did you turn?\nChoices:\nA. left\nB. right\nC. up\nD. down",
    },
]

FORMAT_TABLE = [
    ("<think>a</think><answer>B</answer>", 1.0),
    ("<think>a</think>\n<answer>B</answer>", 1.0),
    ("<think>\nmulti\nline\n</think>\n\n<answer>\nA\n</answer>", 1.0),
    ("<think>a</think> <answer>B</answer>", 1.0),  # whitespace between the blocks
    ("  <think>a</think><answer>B</answer>", 0.0),  # the raw completion: no leading space
    ("<think>a</think><answer>B</answer>\n", 0.0),  # ... and nothing after </answer>
    ("<think></think><answer></answer>", 1.0),  # empty blocks still have the shape
    ("<think>a</think><answer>B</answer> and more", 0.0),  # text after the answer
    ("Sure! <think>a</think><answer>B</answer>", 0.0),  # text before the think
    ("<answer>B</answer><think>a</think>", 0.0),  # wrong order
    ("<think>a</think>", 0.0),  # no answer
    ("<answer>B</answer>", 0.0),  # no think
    ("<think>a<answer>B</answer>", 0.0),  # unclosed think
    ("<think>a</think> x <answer>B</answer>", 0.0),  # text between the blocks
    ("<THINK>a</THINK><ANSWER>B</ANSWER>", 0.0),  # tags are case-sensitive
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), FORMAT_TABLE)
def test_format_reward_table(completion: str, expected: float) -> None:
    assert format_reward([completion]) == [expected]


def test_format_reward_takes_conversational_completions() -> None:
    good = [{"role": "assistant", "content": "<think>x</think><answer>A</answer>"}]
    bad = [{"role": "assistant", "content": "A"}]
    assert format_reward([good, bad]) == [1.0, 0.0]
    assert completion_text([]) == ""


ACCURACY_TABLE = [
    # (completion, tag-mode reward, official-mode reward); solution "B"
    ("<think>x</think><answer>B</answer>", 1.0, 1.0),
    ("<answer>B. right</answer>", 1.0, 1.0),  # accuracy does not need the format
    ("<answer>right</answer>", 1.0, 0.0),  # the option's text names B
    ("<answer>(B)</answer>", 1.0, 1.0),
    ("<answer>b</answer>", 1.0, 1.0),
    ("<think>A is wrong, so</think><answer>B</answer>", 1.0, 1.0),
    ("<think>I guess B</think><answer>A</answer>", 0.0, 0.0),  # the tag wins over the think
    ("<answer>E</answer>", 0.0, 0.0),  # not an option
    ("<answer>A or B</answer>", 0.0, 1.0),  # tag: the leading letter; official: the last
    ("B", 1.0, 1.0),  # no tags: a letter anywhere
    ("no letter at all", 0.0, 0.0),
    # the official whole-completion extraction misfires on "answer depends" -> D
    ("<think>The answer depends on the turn</think><answer>B</answer>", 1.0, 0.0),
    # ... and on "e.g." -> E (a standalone letter followed by a dot)
    ("<think>turns, e.g. this one</think><answer>B</answer>", 1.0, 0.0),
]


@pytest.mark.parametrize(("completion", "tag", "official"), ACCURACY_TABLE)
def test_accuracy_reward_table(completion: str, tag: float, official: float) -> None:
    assert accuracy_reward([completion], ["B"], [OPTIONS]) == [tag]
    assert accuracy_reward([completion], ["B"], [OPTIONS], answer_mode="official") == [official]


@pytest.mark.parametrize("solution", ["B", " b ", "B. right", "right"])
def test_solution_forms_normalise_to_the_letter(solution: str) -> None:
    assert solution_letter(solution, OPTIONS) == "B"


def test_accuracy_reward_checks_column_lengths() -> None:
    with pytest.raises(ValueError, match="2 values for 1"):
        accuracy_reward(["<answer>B</answer>"], ["B", "C"], [OPTIONS])


class RuleReference(ChatBackend):
    """A deterministic reference LM: it answers the last option letter named in the thinking.

    It records every ``generate`` call, so the tests can see that a batch goes out at once and
    what the reference was shown.
    """

    model_id = "rule-reference"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[Conversation]] = []
        self.kwargs: list[dict] = []
        self.fail = fail

    def complete(self, conversations, *, max_new_tokens=None, temperature=None,  # noqa: ANN001
                 **_: object) -> list[Completion]:
        self.calls.append(list(conversations))
        self.kwargs.append({"max_new_tokens": max_new_tokens, "temperature": temperature})
        if self.fail:
            raise BackendError("BACKEND_DOWN", "reference is down")
        replies = []
        for conv in conversations:
            thinking = conv[-1]["content"].split("Thinking process:")[1]
            letters = re.findall(r"\b([A-D])\b", thinking)
            replies.append(Completion(letters[-1] if letters else "I cannot tell"))
        return replies


CONSISTENCY_TABLE = [
    # correct and the think text leads to B -> 1
    ("<think>It turned right, so B</think><answer>B</answer>", 1.0),
    # correct answer, but the reasoning points to A -> 0 (the hacking the reward targets)
    ("<think>Clearly it is A</think><answer>B</answer>", 0.0),
    # wrong answer: gated, the reference is never asked -> 0
    ("<think>B</think><answer>A</answer>", 0.0),
    # correct but no think block -> 0, not asked
    ("<answer>B</answer>", 0.0),
    # the reference cannot name a letter -> 0
    ("<think>it moved</think><answer>B</answer>", 0.0),
]


def test_consistency_reward_gates_and_batches() -> None:
    ref = RuleReference()
    reward = ConsistencyReward(ref)
    completions = [c for c, _ in CONSISTENCY_TABLE]
    n = len(completions)
    got = reward(
        prompts=[PROMPT] * n, completions=completions, solution=["B"] * n, options=[OPTIONS] * n
    )
    assert got == [e for _, e in CONSISTENCY_TABLE]
    # one call for the whole batch, only the three correct completions with a think block
    assert len(ref.calls) == 1 and len(ref.calls[0]) == 3
    assert ref.kwargs == [{"max_new_tokens": 10, "temperature": 0.1}]
    shown = ref.calls[0][0][-1]["content"]
    assert "Question: Which way did you turn?" in shown and "D. down" in shown
    assert "It turned right, so B" in shown
    assert "Frame 0" not in shown and "red box" not in shown  # no perception text
    assert reward.last_batch == {"correct": 3, "consistent": 1, "failed": 0}


def test_consistency_reward_uses_the_question_block_column_when_given() -> None:
    ref = RuleReference()
    ConsistencyReward(ref)(
        prompts=["unused"], completions=["<think>B</think><answer>B</answer>"],
        solution=["B"], options=[OPTIONS], question_block=["Question: custom block"],
    )
    assert "Question: custom block" in ref.calls[0][0][-1]["content"]


def test_consistency_reward_disabled_or_failing_scores_zero() -> None:
    ref = RuleReference()
    reward = ConsistencyReward(ref)
    reward.enabled = False
    good = "<think>so B</think><answer>B</answer>"
    assert reward(prompts=[PROMPT], completions=[good], solution=["B"], options=[OPTIONS]) == [0.0]
    assert ref.calls == []
    down = ConsistencyReward(RuleReference(fail=True))
    assert down(prompts=[PROMPT], completions=[good], solution=["B"], options=[OPTIONS]) == [0.0]
    assert down.last_batch["failed"] == 1


class FlakyReference(RuleReference):
    """Raises a plain exception (not a BackendError) whenever a batch holds a poisoned think."""

    def complete(self, conversations, **settings):  # noqa: ANN001, ANN003, ANN201
        if any("POISON" in c[-1]["content"] for c in conversations):
            self.calls.append(list(conversations))
            raise RuntimeError("CUDA error: device-side assert triggered")
        return super().complete(conversations, **settings)


def test_a_failing_reference_call_costs_only_its_own_sample(caplog) -> None:  # noqa: ANN001
    ref = FlakyReference()
    reward = ConsistencyReward(ref)
    completions = ["<think>so B</think><answer>B</answer>",
                   "<think>POISON, B</think><answer>B</answer>",
                   "<think>B again</think><answer>B</answer>"]
    with caplog.at_level("WARNING"):
        got = reward(prompts=[PROMPT] * 3, completions=completions, solution=["B"] * 3,
                     options=[OPTIONS] * 3)
    assert got == [1.0, 0.0, 1.0]
    assert reward.last_batch == {"correct": 3, "consistent": 2, "failed": 1}
    assert reward.failed_total == 1
    assert "1 of 3 calls failed" in caplog.text
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("failed for sample 2 of 3" in m and "device-side assert" in m for m in warned)
    # the batch, then each sample alone
    assert [len(c) for c in ref.calls] == [3, 1, 1, 1]


def test_think_regex_fallback_reads_the_think_text_when_the_reference_fails() -> None:
    good = "<think>the answer B fits</think><answer>B</answer>"
    off = ConsistencyReward(RuleReference(fail=True))
    assert off(prompts=[PROMPT], completions=[good], solution=["B"], options=[OPTIONS]) == [0.0]
    local = ConsistencyReward(RuleReference(fail=True), fallback="think_regex")
    assert local(prompts=[PROMPT], completions=[good], solution=["B"], options=[OPTIONS]) == [1.0]
    wrong = "<think>the answer A fits</think><answer>B</answer>"
    assert local(prompts=[PROMPT], completions=[wrong], solution=["B"], options=[OPTIONS]) == [0.0]


class FixedReference(RuleReference):
    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply

    def complete(self, conversations, **settings):  # noqa: ANN001, ANN003, ANN201
        self.calls.append(list(conversations))
        return [Completion(self.reply) for _ in conversations]


@pytest.mark.parametrize(
    ("reply", "official", "tag"),
    [
        ("B", 1.0, 1.0),
        ("<answer>B</answer>", 1.0, 1.0),
        ("The answer is B.", 1.0, 1.0),
        ("b", 1.0, 1.0),
        ("I", 0.0, 0.0),  # not one of A-H
        ("", 0.0, 0.0),
        ("A", 0.0, 0.0),
    ],
)
def test_reference_reply_letters(reply: str, official: float, tag: float) -> None:
    good = "<think>it turned right</think><answer>B</answer>"
    for mode, expected in (("official", official), ("tag", tag)):
        reward = ConsistencyReward(FixedReference(reply), answer_mode=mode)
        got = reward(prompts=[PROMPT], completions=[good], solution=["B"], options=[OPTIONS])
        assert got == [expected], (mode, reply)


@pytest.mark.parametrize("think", ["", "   ", "\n"])
def test_an_empty_think_text_scores_zero_without_asking(think: str) -> None:
    ref = FixedReference("B")
    reward = ConsistencyReward(ref)
    got = reward(prompts=[PROMPT], completions=[f"<think>{think}</think><answer>B</answer>"],
                 solution=["B"], options=[OPTIONS])
    assert got == [0.0] and ref.calls == []


def test_the_reference_sees_the_text_after_the_last_question_marker() -> None:
    ref = FixedReference("B")
    prompt = [{"role": "user", "content": "Frame 1: Question: a sign reads 'Question:'\n"
               "Question:   Which way?\nChoices:\nA. left\nB. right"}]
    ConsistencyReward(ref)(prompts=[prompt], completions=["<think>B</think><answer>B</answer>"],
                           solution=["B"], options=[OPTIONS[:2]])
    shown = ref.calls[0][0][-1]["content"]
    assert "Question: Which way?\nChoices:\nA. left\nB. right" in shown
    assert "sign reads" not in shown


class Recording(ChatBackend):
    """A real backend, its calls and replies recorded."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.replies: list[str] = []
        self.settings: list[dict] = []

    def complete(self, conversations, **settings):  # noqa: ANN001, ANN003, ANN201
        out = self.inner.complete(conversations, **settings)
        self.replies += [c.text for c in out]
        self.settings.append(settings)
        return out


def test_consistency_reward_with_a_real_tiny_reference(tiny_lm: ChatBackend) -> None:
    """The in-process transformers backend as reference: one batched call for the three correct
    answers, each scored by what the reference really replied."""
    ref = Recording(tiny_lm)
    reward = ConsistencyReward(ref)
    completions = ["<think>so B</think><answer>B</answer>", "<think>B it is</think>"
                   "<answer>B</answer>", "<think>clearly B</think><answer>B</answer>",
                   "<answer>A</answer>"]
    got = reward(prompts=[PROMPT] * 4, completions=completions, solution=["B"] * 4,
                 options=[OPTIONS] * 4)
    assert reward.last_batch["correct"] == 3 and len(ref.replies) == 3
    assert ref.settings[0]["temperature"] == 0.1 and ref.settings[0]["max_new_tokens"] == 10
    expected = [1.0 if reference_letter(r, OPTIONS) == "B" else 0.0 for r in ref.replies]
    assert got == [*expected, 0.0]


def test_reference_conversation_shape() -> None:
    conv = reference_conversation("Question: q?\nChoices:\nA. x\nB. y", "because y")
    assert [m["role"] for m in conv] == ["system", "user"]
    assert "one letter" in conv[1]["content"] and "because y" in conv[1]["content"]

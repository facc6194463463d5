"""Embodied-R's three binary rewards as plain functions with TRL's reward signature.

``r = w_format * format + w_accuracy * accuracy + w_consistency * consistency`` (digest §2). Each
function takes ``completions`` (strings, or TRL's conversational ``[{"role", "content"}]`` lists)
plus the dataset's extra columns as keyword lists, and returns one float per completion. All the
parsing is :mod:`embodied_r_ros.core.reasoning`'s, so training, evaluation and the ROS nodes
agree on what "well formed" and "the answer" mean.

The consistency reward asks a frozen reference LM which option follows from the policy's
``<think>`` text alone (question and options, no perception text). It is gated on correctness, so
the reference is only asked about correct answers, and every call of one batch goes out in one
:meth:`ChatBackend.generate` (batched generation in-process, concurrent HTTP requests for the
OpenAI-compatible backend).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from embodied_r_ros.core.backends.base import BackendError, ChatBackend, Conversation
from embodied_r_ros.core.prompts import PromptSet, default_prompts
from embodied_r_ros.core.reasoning import (
    AnswerMode,
    OptionsError,
    extract_answer,
    extract_think,
    is_well_formed,
    official_normalize,
    question_from_prompt,
)

log = logging.getLogger(__name__)

REWARD_NAMES = ("format", "accuracy", "consistency")

REFERENCE_TEMPERATURE = 0.1
REFERENCE_MAX_NEW_TOKENS = 10


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """The text of a completion, plain or conversational (the last message's content)."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    content = completion[-1].get("content", "")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def prompt_text(prompt: str | Sequence[dict[str, Any]]) -> str:
    """The user text of a prompt, plain or conversational (the last user message)."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"] or list(prompt)
    return completion_text(users[-1:]) if users else ""


def _column(values: Sequence[Any] | None, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    if len(values) != n:
        raise ValueError(f"a reward column has {len(values)} values for {n} completions")
    return list(values)


def answer_letter(text: str, options: Sequence[str] | None, mode: AnswerMode = "tag") -> str:
    """The answer :func:`extract_answer` reads; ``""`` where options cannot be parsed."""
    try:
        return extract_answer(text, list(options or ()), mode)
    except OptionsError:
        return official_normalize(text) if mode == "official" else ""


def solution_letter(solution: str, options: Sequence[str] | None, mode: AnswerMode = "tag") -> str:
    """A ground truth given as ``"B"``, ``"B. towel"`` or the option text, as a letter."""
    if mode == "official":
        return official_normalize(solution)
    return answer_letter(f"<answer>{solution}</answer>", options, "tag") or solution.strip()


def correct(
    completion: str, solution: str, options: Sequence[str] | None, mode: AnswerMode = "tag"
) -> bool:
    answer = answer_letter(completion, options, mode)
    return bool(answer) and answer == solution_letter(solution, options, mode)


def format_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    """1.0 iff the whole completion is ``<think>..</think>`` then ``<answer>..</answer>``."""
    return [1.0 if is_well_formed(completion_text(c)) else 0.0 for c in completions]


def accuracy_reward(
    completions: Sequence[Any],
    solution: Sequence[str],
    options: Sequence[Sequence[str]] | None = None,
    *,
    answer_mode: AnswerMode = "tag",
    **_: Any,
) -> list[float]:
    """1.0 iff the extracted letter equals the solution (``answer_mode`` picks the extraction)."""
    opts = _column(options, len(completions))
    sols = _column(solution, len(completions))
    return [
        1.0 if correct(completion_text(c), str(s), o, answer_mode) else 0.0
        for c, s, o in zip(completions, sols, opts, strict=True)
    ]


def reference_conversation(
    question_block: str, think: str, prompts: PromptSet | None = None
) -> Conversation:
    """What the reference LM sees: the question with its options and the think text only."""
    p = prompts or default_prompts()
    return [
        {"role": "system", "content": p.reference_system},
        {"role": "user", "content": p.reference_prompt(question_block, think)},
    ]


class ConsistencyReward:
    """Logical consistency: 1.0 iff the answer is correct AND the reference LM, given only the
    question and the ``<think>`` text, names the same letter.

    ``enabled`` lets a schedule skip the reference calls while the reward's weight is 0 (it then
    returns 0.0, as the paper's curves show before stage 3). ``last_batch`` keeps the counts of
    the latest call for logging.
    """

    __name__ = "consistency"  # TRL names the logged metric after this

    def __init__(
        self,
        reference: ChatBackend,
        *,
        answer_mode: AnswerMode = "tag",
        temperature: float = REFERENCE_TEMPERATURE,
        max_new_tokens: int = REFERENCE_MAX_NEW_TOKENS,
    ) -> None:
        self.reference = reference
        self.answer_mode: AnswerMode = answer_mode
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.enabled = True
        self.last_batch: dict[str, int] = {"correct": 0, "consistent": 0, "failed": 0}

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        solution: Sequence[str],
        options: Sequence[Sequence[str]] | None = None,
        question_block: Sequence[str] | None = None,
        **_: Any,
    ) -> list[float]:
        n = len(completions)
        rewards = [0.0] * n
        if not self.enabled:
            self.last_batch = {"correct": 0, "consistent": 0, "failed": 0}
            return rewards
        opts = _column(options, n)
        sols = _column(solution, n)
        blocks = _column(question_block, n)
        asked: list[int] = []
        conversations: list[Conversation] = []
        answers: list[str] = []
        for i, (prompt, comp) in enumerate(zip(prompts, completions, strict=True)):
            text = completion_text(comp)
            think = extract_think(text)
            if think is None or not correct(text, str(sols[i]), opts[i], self.answer_mode):
                continue
            block = blocks[i] or question_from_prompt(prompt_text(prompt))
            asked.append(i)
            answers.append(answer_letter(text, opts[i], self.answer_mode))
            conversations.append(reference_conversation(block, think))
        failed = 0
        if conversations:
            try:
                replies = self.reference.generate(
                    conversations,
                    max_new_tokens=self.max_new_tokens,
                    temperature=self.temperature,
                )
            except BackendError as exc:  # as the official API version: a failure scores 0
                log.warning("consistency reference failed for %d completions: %s", len(asked), exc)
                replies, failed = [""] * len(asked), len(asked)
            for i, answer, reply in zip(asked, answers, replies, strict=True):
                if answer_letter(reply, opts[i], self.answer_mode) == answer:
                    rewards[i] = 1.0
        self.last_batch = {
            "correct": len(asked),
            "consistent": int(sum(rewards)),
            "failed": failed,
        }
        return rewards


"""Embodied-R's three binary rewards as plain functions with TRL's reward signature.

``r = w_format * format + w_accuracy * accuracy + w_consistency * consistency`` (Zhao et al.,
arXiv 2504.12680, Fig. 3; ``--reward_funcs choice_accuracy format consistency`` in the training
scripts of Embodied-R.code). Each function takes ``completions`` (strings, or TRL's
conversational ``[{"role", "content"}]`` lists) plus the dataset's extra columns as keyword
lists, and returns one float per completion. All the parsing is
:mod:`embodied_r_ros.core.reasoning`'s, so training, evaluation and the ROS nodes agree on what
"well formed" and "the answer" mean.

``answer_mode: official`` reads answers as the official training code does
(:func:`~embodied_r_ros.core.answers.official_normalize` on the whole completion and on the
solution, :func:`~embodied_r_ros.core.answers.reference_normalize` on the reference's reply);
``tag`` (the project's default) reads the ``<answer>`` tag against the options.

The consistency reward asks a frozen reference LM which option follows from the policy's
``<think>`` text alone (the question after the prompt's last ``Question:``, no perception text).
It is gated on a non-empty think text and a correct answer, so the reference is only asked about
correct answers, and every call of one batch goes out in one :meth:`ChatBackend.complete`
(batched generation in-process, concurrent HTTP requests for the OpenAI-compatible backend).
A failed call scores 0 for its own sample only, as the official code's per-sample ``try``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from embodied_r_ros.core.answers import (
    VALID_LETTERS,
    official_normalize,
    reference_normalize,
    think_letter,
)
from embodied_r_ros.core.chat import ChatBackend, Completion, Conversation
from embodied_r_ros.core.prompts import PromptSet, default_prompts
from embodied_r_ros.core.reasoning import (
    AnswerMode,
    OptionsError,
    extract_answer,
    extract_think,
    is_well_formed,
    question_from_prompt,
)

log = logging.getLogger(__name__)

REWARD_NAMES = ("format", "accuracy", "consistency")

REFERENCE_TEMPERATURE = 0.1
REFERENCE_MAX_NEW_TOKENS = 10

#: what the consistency reward does when the reference gives no reply: score 0 (the official
#: API variant), or read a letter from the think text (the official local variant)
Fallback = Literal["none", "think_regex"]


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
    """The answer a reward reads: ``official``: :func:`official_normalize` of the whole text;
    ``tag``: :func:`extract_answer` against the options (``""`` where they cannot be parsed)."""
    if mode == "official":
        return official_normalize(text)
    try:
        return extract_answer(text, list(options or ()), "tag")
    except OptionsError:
        return ""


def reference_letter(reply: str, options: Sequence[str] | None, mode: AnswerMode = "tag") -> str:
    """The letter of the reference's reply; ``""`` unless it is one of A-H."""
    letter = reference_normalize(reply) if mode == "official" else answer_letter(reply, options)
    return letter if letter in VALID_LETTERS else ""


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
    """1.0 iff the raw completion is ``<think>..</think>``, optional whitespace, then
    ``<answer>..</answer>`` and nothing else (not even whitespace around it)."""
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
    question: str, think: str, prompts: PromptSet | None = None
) -> Conversation:
    """What the reference LM sees: the question with its options and the think text only."""
    p = prompts or default_prompts()
    return [
        {"role": "system", "content": p.reference_system},
        {"role": "user", "content": p.reference_prompt(question, think)},
    ]


class ConsistencyReward:
    """Logical consistency: 1.0 iff the think text is non-empty, the answer is correct AND the
    reference LM, given only the question and the think text, names the same letter (A-H).

    ``enabled`` lets a schedule skip the reference calls while the reward's weight is 0 (it then
    returns 0.0, as the paper's curves show before stage 3). ``last_batch`` keeps the counts of
    the latest call for logging; ``failed_total`` counts failed reference calls over the run.
    """

    __name__ = "consistency"  # TRL names the logged metric after this

    def __init__(
        self,
        reference: ChatBackend,
        *,
        answer_mode: AnswerMode = "tag",
        prompts: PromptSet | None = None,
        fallback: Fallback = "none",
        temperature: float = REFERENCE_TEMPERATURE,
        max_new_tokens: int = REFERENCE_MAX_NEW_TOKENS,
    ) -> None:
        self.reference = reference
        self.answer_mode: AnswerMode = answer_mode
        self.prompts = prompts or default_prompts()
        self.fallback: Fallback = fallback
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.enabled = True
        self.failed_total = 0
        self.last_batch: dict[str, int] = {"correct": 0, "consistent": 0, "failed": 0}

    def _ask(self, conversations: list[Conversation]) -> list[str | None]:
        """The reference's replies; ``None`` where its call failed (any exception: a failure
        must cost its own sample's reward, never the training step)."""
        replies: list[str | None] = [None] * len(conversations)

        def keep(i: int, completion: Completion) -> None:
            replies[i] = completion.text

        settings = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature}
        try:
            done = self.reference.complete(conversations, on_reply=keep, **settings)
            replies = [c.text for c in done]
        except Exception as exc:  # any failure: the samples are retried alone
            log.warning("consistency reference failed for a batch of %d: %s",
                        len(conversations), " ".join(str(exc).split())[:200])
            for i, conversation in enumerate(conversations):
                if replies[i] is not None:
                    continue
                try:
                    replies[i] = self.reference.complete([conversation], **settings)[0].text
                except Exception as one:  # as above, for one sample
                    log.warning("consistency reference failed for sample %d of %d: %s", i + 1,
                                len(conversations), " ".join(str(one).split())[:200])
        return replies

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
        thinks: list[str] = []
        conversations: list[Conversation] = []
        answers: list[str] = []
        for i, (prompt, comp) in enumerate(zip(prompts, completions, strict=True)):
            text = completion_text(comp)
            think = extract_think(text)
            if not think or not correct(text, str(sols[i]), opts[i], self.answer_mode):
                continue
            question = question_from_prompt(blocks[i] or prompt_text(prompt))
            asked.append(i)
            thinks.append(think)
            answers.append(answer_letter(text, opts[i], self.answer_mode))
            conversations.append(reference_conversation(question, think, self.prompts))
        replies = self._ask(conversations) if conversations else []
        failed = sum(reply is None for reply in replies)
        for i, think, answer, reply in zip(asked, thinks, answers, replies, strict=True):
            if not reply and self.fallback == "think_regex":
                letter = think_letter(think)
            else:
                letter = reference_letter(reply or "", opts[i], self.answer_mode)
            if letter and letter == answer:
                rewards[i] = 1.0
        if failed:
            self.failed_total += failed
            log.warning("consistency reference: %d of %d calls failed (scored %s; %d this run)",
                        failed, len(asked),
                        "from the think text" if self.fallback == "think_regex" else "0",
                        self.failed_total)
        self.last_batch = {
            "correct": len(asked),
            "consistent": int(sum(rewards)),
            "failed": failed,
        }
        return rewards

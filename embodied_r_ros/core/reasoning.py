"""The reasoning LM's prompt and the parsing of its ``<think>..</think><answer>..</answer>`` reply.

The system prompt (``config/prompts.yaml``) is the DeepSeek-R1 one used by the official code, plus
the sentence Embodied-R adds so that the answer must follow from the thinking (the consistency
reward checks exactly that).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from embodied_r_ros.core.answers import official_eval_letter
from embodied_r_ros.core.chat import Conversation
from embodied_r_ros.core.prompts import PromptSet, default_prompts

LETTERS = "ABCDEFGH"
AnswerMode = Literal["tag", "official"]

# Whole completion: think block, optional whitespace, answer block, nothing after (official ORM).
FORMAT_RE = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>(?![\s\S])", re.DOTALL)
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPTION_RE = re.compile(r"^\s*\(?([A-Ha-h])\s*[.):]\s*(\S.*)$")
_LEAD_LETTER_RE = re.compile(r"^\s*\(?([A-Ha-h])\s*(?:[.):]|$|\s)")
_STANDALONE_LETTER_RE = re.compile(r"\b([A-H])\b")


class OptionsError(ValueError):
    """Options that are not ``"A. text"`` lines in A, B, C... order."""


def parse_options(options: Sequence[str]) -> list[tuple[str, str]]:
    """``["A. left", "B. right"]`` -> ``[("A", "left"), ("B", "right")]``; raises OptionsError."""
    parsed: list[tuple[str, str]] = []
    if len(options) > len(LETTERS):
        raise OptionsError(f"at most {len(LETTERS)} options are supported, got {len(options)}")
    for i, raw in enumerate(options):
        match = _OPTION_RE.match(raw or "")
        if not match:
            raise OptionsError(f"option {i + 1} {raw!r} is not of the form 'A. text'")
        letter, text = match.group(1).upper(), match.group(2).strip()
        if letter != LETTERS[i]:
            raise OptionsError(f"option {i + 1} {raw!r} should start with '{LETTERS[i]}.'")
        parsed.append((letter, text))
    return parsed


def format_question(question: str, options: Sequence[str]) -> str:
    """The ``Question: ...`` block as the official pre-processing writes it (options included)."""
    text = f"Question: {question.strip()}"
    if options:
        text += "\nChoices:\n" + "\n".join(o.strip() for o in options)
    return text


def question_from_prompt(prompt: str) -> str:
    """The text after the LAST ``Question:``, stripped (the question and its choices without the
    video text, as the official consistency reward takes it); the whole text without one."""
    _, found, tail = prompt.rpartition("Question:")
    return tail.strip() if found else prompt.strip()


def build_messages(user_text: str, prompts: PromptSet | None = None) -> Conversation:
    """System prompt (``prompts.system``, the R1 one by default) + the user text."""
    return [
        {"role": "system", "content": (prompts or default_prompts()).system},
        {"role": "user", "content": user_text},
    ]


@dataclass(frozen=True)
class Reasoning:
    """A parsed reasoning reply."""

    raw: str
    think: str
    answer: str  # a letter for multiple choice, the answer text for an open question
    answer_text: str  # the chosen option's text (or the open answer)
    well_formed: bool


def is_well_formed(completion: str) -> bool:
    """The official format rule on the RAW completion: it starts with ``<think>`` and ends right
    after ``</answer>`` (leading or trailing whitespace fails it, as in ms-swift's ``format``)."""
    return FORMAT_RE.match(completion) is not None


def extract_think(completion: str) -> str | None:
    """The first think block's text, stripped (``""`` when empty); ``None`` without one."""
    match = _THINK_RE.search(completion)
    return match.group(1).strip() if match else None


def _letter_in(text: str, options: Sequence[tuple[str, str]]) -> str | None:
    valid = {letter for letter, _ in options} or set(LETTERS)
    lead = _LEAD_LETTER_RE.match(text)
    if lead and lead.group(1).upper() in valid:
        return lead.group(1).upper()
    low = text.strip().lower().rstrip(".")
    for letter, option_text in options:
        if low and low == option_text.lower().rstrip("."):
            return letter
    letters = [m for m in _STANDALONE_LETTER_RE.findall(text) if m in valid]
    return letters[-1] if letters else None


def extract_answer(
    completion: str, options: Sequence[str] = (), mode: AnswerMode = "tag"
) -> str:
    """The answer of a completion: a letter for multiple choice, text for an open question.

    ``tag`` (default): the ``<answer>`` contents first (a leading letter, an option's text, or a
    standalone letter), else a letter in the text after the last ``</think>`` (the whole reply
    when there is none: letters inside the think block are reasoning about options, not the
    answer); ``""`` when none is found.
    ``official``: the official evaluation extractor (:func:`official_eval_letter`), for numbers
    comparable with the paper's. (Training rewards read answers with the official *training*
    normalisation instead; see :mod:`embodied_r_training.rewards`.)
    """
    if mode == "official":
        return official_eval_letter(completion)
    parsed = parse_options(options) if options else []
    tag = _ANSWER_RE.search(completion)
    if not parsed:
        return (tag.group(1) if tag else completion).strip()
    if tag:
        letter = _letter_in(tag.group(1), parsed)
        if letter:
            return letter
    tail = completion.split("</think>")[-1]
    return _letter_in(tail, parsed) or ""


def parse_reasoning(
    completion: str, options: Sequence[str] = (), mode: AnswerMode = "tag"
) -> Reasoning:
    answer = extract_answer(completion, options, mode)
    texts = dict(parse_options(options)) if options else {}
    think = extract_think(completion)
    return Reasoning(
        raw=completion,
        think=think if think is not None else "",
        answer=answer,
        answer_text=texts.get(answer, answer if not options else ""),
        well_formed=is_well_formed(completion),
    )

"""The official code's letter extraction, exactly: what the paper's accuracy numbers count.

Three extractors exist in the official code (EmbodiedCity/Embodied-R.code at 174ae99), each with
its quirks, and a number is only comparable with the paper's when it was read the same way:

* :func:`official_normalize` - the training accuracy reward (``choice_accuracy``), applied to
  the whole completion (think block included) and to the solution;
* :func:`reference_normalize` - the consistency reference's reply: the same, with a last resort
  of the ``<answer>`` tag's content;
* :func:`official_eval_letter` - batch evaluation: the first ``<answer>`` letter, else the last
  dotted letter.

The rules are case-insensitive and run on the stripped text. "Standalone" means at the start of
the text or after one character that is not an ASCII letter; that character, and the one after
the letter a rule looks at, belong to the match, and matches are found left to right without
overlapping (so ``A.B.`` finds only ``A.``, and ``A B`` only ``A``). Python's case-insensitive
matching also counts the Kelvin sign, the long s and the dotted/dotless i as letters, exactly as
the official code (which uses the same :mod:`re` semantics) does.

:func:`think_letter` is the local reward variant's fallback that reads a letter from the think
text when the reference LM gives nothing (``rewards.fallback: think_regex``).
"""

from __future__ import annotations

import re

_FLAGS = re.IGNORECASE
#: (a) ``$\boxed{X}$`` with exactly one letter A-H
BOXED_RE = re.compile(r"\$\\boxed\{([A-H])\}\$", _FLAGS)
#: (b) "answer", whitespace, a letter: the first match wins
ANSWER_WORD_RE = re.compile(r"answer\s+([A-H])", _FLAGS)
#: (c) a standalone letter, optional whitespace, a dot
DOTTED_RE = re.compile(r"(?:^|[^A-Za-z])([A-H])\s*\.", _FLAGS)
#: (d) a standalone letter not followed by a letter
STANDALONE_RE = re.compile(r"(?:^|[^A-Za-z])([A-H])(?:$|[^A-Za-z])", _FLAGS)
#: the evaluation extractor's first rule
ANSWER_TAG_LETTER_RE = re.compile(r"<answer>\s*([A-H])", _FLAGS)
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
#: the local variant's conclusion phrases, tried after rules (a)-(d) on the think text
_CONCLUSION_RES = tuple(
    re.compile(p, _FLAGS)
    for p in (
        r"(?:so|thus|in conclusion|the answer is|choose|select|option|answer)[^A-H]*([A-H])\b",
        r"(?:the answer is|choose|select|option|answer)[^A-H]*([A-H])\b",
        r"\b([A-H])\s+(?:is correct)\b",
    )
)

VALID_LETTERS = frozenset("ABCDEFGH")


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    found = pattern.findall(text)
    return found[-1].upper() if found else None


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return match.group(1).upper() if match else None


def _rules(text: str) -> str | None:
    """Rules (a)-(d) on already stripped text; ``None`` when none matches."""
    return (
        _last(BOXED_RE, text)
        or _first(ANSWER_WORD_RE, text)
        or _last(DOTTED_RE, text)
        or _last(STANDALONE_RE, text)
    )


def official_normalize(text: str) -> str:
    """The training accuracy normalisation: rules (a)-(d), else the whole stripped text,
    upper-cased (``"answer based"`` gives B, ``"e.g. <answer>B</answer>"`` gives E)."""
    stripped = text.strip()
    return _rules(stripped) or stripped.upper()


def reference_normalize(reply: str) -> str:
    """The consistency reference's reply: rules (a)-(d); when they find nothing and the reply
    has an ``<answer>..</answer>`` tag, the tag's content is normalised the same way."""
    stripped = reply.strip()
    while True:
        letter = _rules(stripped)
        if letter:
            return letter
        tag = _ANSWER_TAG_RE.search(stripped)
        if tag is None:
            return stripped.upper()
        stripped = tag.group(1).strip()


def official_eval_letter(completion: str) -> str:
    """The official batch evaluation: the first ``<answer>`` + optional whitespace + letter,
    else the last dotted standalone letter (rule c), else the whole stripped text; upper-cased."""
    stripped = completion.strip()
    return (
        _first(ANSWER_TAG_LETTER_RE, stripped)
        or _last(DOTTED_RE, stripped)
        or stripped.upper()
    )


def think_letter(think: str) -> str:
    """The local variant's fallback: the LAST match of the first of rules (a)-(d) that matches
    the think text (the answer rule included), else of its conclusion phrases; ``""`` if none."""
    for pattern in (BOXED_RE, ANSWER_WORD_RE, DOTTED_RE, STANDALONE_RE, *_CONCLUSION_RES):
        letter = _last(pattern, think)
        if letter:
            return letter
    return ""

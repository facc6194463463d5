"""From question drafts to lettered rows: drafting, picking and balanced answer letters.

A :class:`Draft` is a question with its correct choice first; :func:`draft_rows` picks drafts
round-robin over a category's variants (duplicates skipped), sorts them by clip and letters them
so each answer position comes up equally often. The synthetic world's questions and those of a
recording's odometry make their rows here.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_r_ros.sim.question_basis import QuestionBasis


@dataclass(frozen=True)
class Draft:
    """A question before its options are lettered; ``choices[0]`` is the correct one.

    ``start``/``end`` delimit its clip in the caller's units (frame indices for the synthetic
    world, seconds for a recording); ``basis`` says what the question asks
    (:class:`~embodied_r_ros.sim.question_basis.QuestionBasis` as a dict, its options in the
    order of ``choices``; the lettered row carries them in letter order) and, for a recording,
    the times its answer was computed from.
    """

    category: str
    question: str
    choices: tuple[str, ...]
    start: float
    end: float
    basis: dict[str, Any] = field(default_factory=dict, compare=False)


def parse_counts(spec: str | int | Mapping[str, int],
                 categories: Sequence[str]) -> dict[str, int]:
    """Per-category counts from a total (split evenly) or ``"cat=N,cat=N"`` / a mapping.

    Raises ``ValueError`` naming an unknown category or a bad number.
    """
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        total = int(spec)
        if total < 0:
            raise ValueError(f"question count must be >= 0, got {total}")
        base, extra = divmod(total, len(categories))
        return {c: base + (1 if i < extra else 0) for i, c in enumerate(categories)}
    else:
        items = []
        for part in str(spec).split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(
                    f"bad question count {part.strip()!r}: use a total (30) or category=N pairs"
                )
            items.append((name.strip(), value.strip()))
    counts = {c: 0 for c in categories}
    for name, value in items:
        if name not in counts:
            raise ValueError(
                f"unknown question category {name!r}; known: {', '.join(categories)}"
            )
        try:
            n = int(value)
        except (TypeError, ValueError):
            msg = f"question count for {name} must be an integer, got {value!r}"
            raise ValueError(msg) from None
        if n < 0:
            raise ValueError(f"question count for {name} must be >= 0, got {n}")
        counts[name] = n
    return counts


#: whether a draft may be asked (a generator's check of its text: None keeps every draft)
Keep = Callable[[Draft], bool]


def pick(pools: list[list[Draft]], n: int, rng: np.random.Generator,
         keep: Keep | None = None) -> list[Draft]:
    """Round-robin over shuffled pools (question variants), skipping duplicates and the drafts
    ``keep`` refuses (asked only of drafts drawn, so a costly check runs on few)."""
    queues = [[pool[j] for j in rng.permutation(len(pool))] for pool in pools]
    out: list[Draft] = []
    keys: set[tuple[str, float, float]] = set()
    while len(out) < n and any(queues):
        for q in queues:
            while q:
                d = q.pop(0)
                key = (d.question, d.start, d.end)
                if key not in keys:
                    keys.add(key)
                    if keep is not None and not keep(d):
                        continue
                    out.append(d)
                    break
            if len(out) >= n:
                break
    return out


class Letters:
    """Balanced answer positions: consecutive random permutations per option count."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.queues: dict[int, list[int]] = {}

    def next(self, n: int) -> int:
        q = self.queues.setdefault(n, [])
        if not q:
            q.extend(self.rng.permutation(n).tolist())
        return q.pop(0)


def lettered(d: Draft, position: int, rng: np.random.Generator) -> dict[str, Any]:
    """The row fields of a draft with its answer at ``position``: category, question,
    options (``"A. text"``), answer and answer_text, and the draft's question basis (when it
    has one: its options in letter order)."""
    wrong_order = [int(j) for j in 1 + rng.permutation(len(d.choices) - 1)]
    order = wrong_order[:position] + [0] + wrong_order[position:]
    letters = string.ascii_uppercase
    fields: dict[str, Any] = {
        "category": d.category,
        "question": d.question,
        "options": [f"{letters[j]}. {d.choices[k]}" for j, k in enumerate(order)],
        "answer": letters[position],
        "answer_text": d.choices[0],
    }
    if "kind" in d.basis:  # what it asks, in letter order; what else the basis says, as it is
        asks = QuestionBasis.from_dict(d.basis).reordered(order)
        fields["basis"] = {**d.basis, **asks.to_dict()}
    return fields


def draft_rows(pools_of: Callable[[str, np.random.Generator], list[list[Draft]]],
               categories: Sequence[str], counts: Mapping[str, int], seed: int,
               row: Callable[[Draft, dict[str, Any], int], dict[str, Any]],
               keep: Keep | None = None) -> list[dict]:
    """Rows for every category: its own random stream (changing one count leaves the other
    categories' questions unchanged), drafts picked (those ``keep`` allows), sorted by clip and
    lettered evenly; ``row(draft, lettered_fields, number)`` completes each row."""
    rows: list[dict] = []
    for ci, category in enumerate(categories):
        n = int(counts.get(category, 0))
        if n <= 0:
            continue
        rng = np.random.default_rng([seed, 0x9E5, ci])
        drafts = pick(pools_of(category, rng), n, rng, keep)
        drafts.sort(key=lambda d: (d.end, d.start, d.question))
        letters = Letters(rng)
        for d in drafts:
            fields = lettered(d, letters.next(len(d.choices)), rng)
            rows.append(row(d, fields, len(rows)))
    return rows

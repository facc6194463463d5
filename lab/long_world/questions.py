"""Long-horizon memory questions about the long world, labelled by how far back they reach.

Kinds follow NaVQA and Embodied-R (:mod:`lab.long_world.question_kinds`, which decides each
candidate or skips it, counted by reason). Each question is asked at a frame ``T`` of the
tour, about what the camera saw up to ``T``; answers come from the floor plan, the object
positions, the true poses and the renderer's visibility (:mod:`lab.long_world.sightings`),
never from perception.

Horizon: the age, at ``T``, of the oldest memory a question needs: for a question about
objects, the time since the last frame that showed each of them clearly (the oldest of
those); for "did you see a ... in the last N minutes", the window. Labels: ``short`` (under 2
minutes), ``medium`` (2 to 15), ``long`` (over 15); questions within 10 s of an edge are
skipped, like answers near a decision boundary, and every skip is counted by reason.

:func:`long_questions` also counts, by category and horizon, every candidate the records
decide (``decidable``): how many questions a perception makes answerable, before the counts
asked for pick among them. ``most_per_object`` caps how many questions of a category and
horizon may name one object, so that an object in view at many asks does not crowd the others
out (the questions stay drawn from the world's truth; a horizon with few objects then gets
fewer questions).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_r_ros.sim import question_rows
from embodied_r_ros.sim.question_rows import Draft, draft_rows
from lab.long_world.question_kinds import CATEGORIES, Drafter
from lab.long_world.question_rules import HORIZONS
from lab.long_world.references import Perception
from lab.long_world.sightings import Sightings
from lab.long_world.world import LongWorld

__all__ = ["CATEGORIES", "LongQuestions", "generate_long_questions", "long_questions",
           "parse_counts"]
HORIZON_LABELS = tuple(h[0] for h in HORIZONS)


def parse_counts(spec: str | int | Mapping[str, int]) -> dict[str, int]:
    """Per-category counts of the long world's questions (a total or ``cat=N,...``)."""
    return question_rows.parse_counts(spec, CATEGORIES)


@dataclass(frozen=True)
class LongQuestions:
    """A long world's questions for one perception's records: the rows asked, the candidates
    skipped (per category and reason) and those decided (per category and horizon)."""

    rows: list[dict[str, Any]]
    skipped: dict[str, dict[str, int]]
    decidable: dict[str, dict[str, int]]


def long_questions(world: LongWorld, sightings: Sightings, counts: Mapping[str, int],
                   perception: Perception = "colour", most_per_object: int | None = None
                   ) -> LongQuestions:
    """Question rows for ``world`` (schema in the module notes of ``long_generate``) decided
    by ``perception``'s records, fewer where geometry allows fewer, each object named by at
    most ``most_per_object`` of a category's questions of a horizon (None: no cap); every
    category's candidates are counted, also those of a category not asked."""
    gen = Drafter(world, sightings, perception)
    seed = world.spec.seed
    rate = world.spec.rate_hz
    decidable: dict[str, Counter[str]] = {}
    prefix = f"long-seed{seed}" + ("" if perception == "colour" else f"-{perception}")

    def pools(category: str, rng: np.random.Generator) -> list[list[Draft]]:
        drafts = getattr(gen, category)(rng)
        unique = {(d.question, d.start, d.end): d.basis["horizon"] for p in drafts for d in p}
        decidable[category] = Counter(unique.values())
        return drafts

    def row(d: Draft, fields: dict[str, Any], number: int) -> dict[str, Any]:
        t = int(d.end)
        basis = d.basis
        targets = [{**tg, "stamps_ns": [world.stamp_ns(i) for i in tg["frames"]]}
                   for tg in basis["targets"]]
        return {
            "id": f"{prefix}-q{number:03d}",
            "scene_seed": seed,
            "world": "long",
            **fields,
            "source": basis["source"],
            "variant": basis["variant"],
            "horizon": basis["horizon"],
            "horizon_s": basis["horizon_s"],
            "frame": t,
            "t_ask": round(t / rate, 3),
            "stamp_ns": world.stamp_ns(t),
            "t_start": 0.0,
            "t_end": round(t / rate, 3),
            "stamp_start_ns": world.stamp_ns(0),
            "stamp_end_ns": world.stamp_ns(t),
            "targets": targets,
            "why": basis["why"],
        }

    named: Counter[tuple[str, str, int]] = Counter()

    def capped(d: Draft) -> bool:
        keys = [(d.category, d.basis["horizon"], tg["object"]) for tg in d.basis["targets"]]
        if most_per_object is not None and any(named[k] >= most_per_object for k in keys):
            return False
        named.update(keys)
        return True

    rows = draft_rows(pools, CATEGORIES, counts, seed, row, keep=capped)
    for ci, category in enumerate(CATEGORIES):
        if category not in decidable:  # not asked: counted on the stream it would have had
            pools(category, np.random.default_rng([seed, 0x9E5, ci]))
    skipped: dict[str, dict[str, int]] = defaultdict(dict)
    for (category, reason), n in sorted(gen.skipped.items()):
        skipped[category][reason] = n
    return LongQuestions(rows, dict(skipped), {
        c: {h: decidable[c][h] for h in HORIZON_LABELS} for c in CATEGORIES})


def generate_long_questions(world: LongWorld, sightings: Sightings,
                            counts: Mapping[str, int], perception: Perception = "colour"
                            ) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """:func:`long_questions`'s rows and the candidates skipped, per category and reason."""
    q = long_questions(world, sightings, counts, perception)
    return q.rows, q.skipped

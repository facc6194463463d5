"""The object map's questions: how many objects each horizon names, and the cap on one object."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Any

import pytest

from lab.long_world.generate import long_sightings
from lab.long_world.object_spread import (
    MAP_CATEGORIES,
    MOST_NAMED_SHARE,
    SETS,
    missed,
    most_per_object,
    object_map_questions,
    spread,
)
from lab.long_world.world import SMALL_LEAVING_SPEC, LongWorldSpec, build_long_world

PER_CATEGORY = 40  # a cap of 2 questions per object, category and horizon


def _row(seed: int, horizon: str, *objects: int) -> dict[str, Any]:
    return {"scene_seed": seed, "horizon": horizon, "targets": [{"object": k} for k in objects]}


def test_spread_counts_objects_and_the_most_named_share_per_world_and_horizon() -> None:
    rows = ([_row(1, "short", k % 4) for k in range(8)] + [_row(1, "short", 0)]
            + [_row(1, "long", 7), _row(1, "long", 7, 8)] + [_row(2, "short", 3)])
    figures = spread(rows)
    assert figures["1"]["short"] == {"questions": 9, "objects": 4, "most_named_share": 0.333}
    assert figures["1"]["long"] == {"questions": 2, "objects": 2, "most_named_share": 0.667}
    assert figures["1"]["medium"] == {"questions": 0, "objects": 0, "most_named_share": None}
    assert figures["2"]["short"]["objects"] == 1
    assert "seed 1 short: 4 objects named" in missed(figures)
    assert "seed 1 long: most named share 0.667" in missed(figures)
    assert missed({"3": {"long": {"objects": 10, "most_named_share": 0.15}}}) == []


def test_the_cap_is_a_share_of_what_a_horizon_gets() -> None:
    assert most_per_object(60) == 3 and most_per_object(40) == 2 and most_per_object(6) == 1


@lru_cache(maxsize=1)
def _small_world() -> tuple[Any, Any]:
    """The small leaving world at a quarter of the pixels: the truth in a few seconds."""
    spec = LongWorldSpec(**{**SMALL_LEAVING_SPEC.to_dict(), "width": 160, "height": 120})
    world = build_long_world(spec)
    return world, long_sightings(world)


def _per_object(rows: list[dict[str, Any]]) -> Counter[tuple[str, str, int]]:
    return Counter((r["category"], r["horizon"], t["object"]) for r in rows
                   for t in r["targets"])


@pytest.mark.parametrize("records", SETS)
def test_no_object_is_named_by_more_than_the_cap(records: str) -> None:
    world, sightings = _small_world()
    capped, _ = object_map_questions(world, sightings, PER_CATEGORY)
    free, _ = object_map_questions(world, sightings, PER_CATEGORY, share=None)
    rows = capped[records]
    assert {r["category"] for r in rows} == set(MAP_CATEGORIES)
    assert max(_per_object(rows).values()) <= most_per_object(PER_CATEGORY)
    # uncapped, the objects in view at many asks take more: the cap is what holds them back
    assert max(_per_object(free[records]).values()) > most_per_object(PER_CATEGORY)
    # and the capped questions are among those the truth decides
    keys = {(r["question"], r["frame"]) for r in rows}
    every, _ = object_map_questions(world, sightings, 5000, share=None)
    assert keys <= {(r["question"], r["frame"]) for r in every[records]}


def test_both_sets_together_name_no_object_in_more_than_the_share() -> None:
    """The colour records tell few objects apart: their questions pile onto those few, and
    the balance drops them where the two sets together would exceed the share."""
    world, sightings = _small_world()
    sets, _ = object_map_questions(world, sightings, PER_CATEGORY)
    figures = spread([r for s in SETS for r in sets[s]])[str(world.spec.seed)]
    asked = {h: f for h, f in figures.items() if f["questions"]}
    assert asked and all(f["most_named_share"] <= MOST_NAMED_SHARE for f in asked.values())
    unbalanced, _ = object_map_questions(world, sightings, PER_CATEGORY, share=None)
    before = spread([r for s in SETS for r in unbalanced[s]])[str(world.spec.seed)]
    assert max(f["most_named_share"] or 0.0 for f in before.values()) > MOST_NAMED_SHARE

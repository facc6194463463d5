"""How many objects the object map's questions name, per horizon, from the question rows alone.

The object-map benchmark (``bench/vlm_object_map.py``) asks where objects are, by horizon; a
horizon whose questions name a handful of objects measures a handful of objects' luck. Its
questions are made here (:func:`object_map_questions`: two sets drawn from the world's truth,
those colour records and those labelled records decide, each object named by at most a share
of a category's questions of a horizon, and of both sets' mentions at a horizon), and
:func:`spread` counts, per world and horizon, the distinct objects the rows name and the most
named one's share of the horizon's mentions.

Run without the benchmark's tours (the truth alone: the world rendered once, no files; about
80 s a 30-minute world on a shared core): ``python -m lab.long_world.object_spread --seeds
23,511,2027 --out results/bench/vlm_object_map_questions.json``. Exits 1 when a world misses.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.long_world.generate import long_sightings
from lab.long_world.question_rules import HORIZONS
from lab.long_world.questions import CATEGORIES, long_questions
from lab.long_world.sightings import Sightings
from lab.long_world.world import NAMED_SPECS, LongWorld, LongWorldSpec, build_long_world

log = logging.getLogger(__name__)

HORIZON_LABELS = tuple(h[0] for h in HORIZONS)
#: the object map's question sets: the records that decide them
SETS = ("label", "colour")
#: the object map's kinds of question: where is it now, how far
MAP_CATEGORIES = ("object_direction", "object_distance")
#: at most this share of a category's questions of a horizon name one object
MOST_NAMED_SHARE = 0.15


def most_per_object(per_category: int, share: float = MOST_NAMED_SHARE) -> int:
    """The cap on one object's questions of a category and horizon: ``share`` of the
    category's questions a horizon gets when the horizons share them evenly (at least 1)."""
    return max(1, math.floor(share * per_category / len(HORIZON_LABELS) + 1e-9))


def object_map_questions(world: LongWorld, sightings: Sightings, per_category: int,
                         share: float | None = MOST_NAMED_SHARE
                         ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """The colour and label sets of the object map's questions (``per_category`` of each of
    :data:`MAP_CATEGORIES`, one object in at most ``share`` of them a horizon, in each set and
    in both together; None: no cap), and every candidate each set's records decide."""
    counts = {c: per_category if c in MAP_CATEGORIES else 0 for c in CATEGORIES}
    cap = None if share is None else most_per_object(per_category, share)
    sets, decidable = {}, {}
    for records in SETS:
        q = long_questions(world, sightings, counts, records, most_per_object=cap)
        sets[records] = [{**r, "question_set": records} for r in q.rows]
        decidable[records] = q.decidable
    return (sets if share is None else balanced(sets, share)), decidable


def balanced(sets: Mapping[str, Sequence[Mapping[str, Any]]], share: float
             ) -> dict[str, list[dict[str, Any]]]:
    """One world's question sets without the questions that let an object take more than
    ``share`` of a horizon's mentions (both sets together): while one does, its last question
    of the set where it weighs most goes. The cap per category (:func:`most_per_object`)
    leaves little to drop; a set that decides few objects at a horizon (the colour records:
    objects sharing a colour) gives up most of them there."""
    kept = {s: [dict(r) for r in rows] for s, rows in sets.items()}
    for h in HORIZON_LABELS:
        while True:
            per_set = {s: Counter(t["object"] for r in rows if r["horizon"] == h
                                  for t in r["targets"]) for s, rows in kept.items()}
            counts = sum(per_set.values(), Counter())
            if not counts:
                break
            k, n = counts.most_common(1)[0]
            if n <= share * sum(counts.values()) + 1e-9:
                break
            s = max(kept, key=lambda s: per_set[s][k] / max(sum(per_set[s].values()), 1))
            rows = kept[s]
            rows.pop(max(i for i, r in enumerate(rows) if r["horizon"] == h
                         and any(t["object"] == k for t in r["targets"])))
    return kept


def spread(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per world (``scene_seed``) and horizon: the questions, the distinct objects their
    targets name, and the most named object's share of the horizon's mentions."""
    named: dict[str, dict[str, Counter[int]]] = defaultdict(lambda: defaultdict(Counter))
    questions: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        world = str(row["scene_seed"])
        questions[world][row["horizon"]] += 1
        named[world][row["horizon"]].update(t["object"] for t in row["targets"])
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for world in sorted(questions, key=lambda w: (len(w), w)):
        out[world] = {}
        for h in HORIZON_LABELS:
            counts = named[world][h]
            mentions = sum(counts.values())
            out[world][h] = {"questions": questions[world][h], "objects": len(counts),
                             "most_named_share": round(max(counts.values()) / mentions, 3)
                             if mentions else None}
    return out


def missed(figures: Mapping[str, Mapping[str, Mapping[str, Any]]], least_objects: int = 10,
           share: float = MOST_NAMED_SHARE) -> list[str]:
    """The worlds and horizons of :func:`spread`'s ``figures`` that name fewer than
    ``least_objects`` objects or one object in more than ``share`` of the mentions."""
    out = []
    for world, horizons in figures.items():
        for h, f in horizons.items():
            if f["objects"] < least_objects:
                out.append(f"seed {world} {h}: {f['objects']} objects named")
            if f["most_named_share"] is None or f["most_named_share"] > share:
                out.append(f"seed {world} {h}: most named share {f['most_named_share']}")
    return out


def measure(spec: LongWorldSpec, per_category: int) -> dict[str, Any]:
    """One world's spread and what it cost: the tour's length, the render time."""
    world = build_long_world(spec)
    t0 = time.perf_counter()
    sightings = long_sightings(world)
    render_s = time.perf_counter() - t0
    sets, _ = object_map_questions(world, sightings, per_category)
    none = {h: {"questions": 0, "objects": 0, "most_named_share": None} for h in HORIZON_LABELS}

    def of(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return spread(rows).get(str(spec.seed), none)

    return {"seed": spec.seed, "tour_s": round(world.trajectory.duration, 1),
            "frames": world.n_frames, "render_s": round(render_s, 1),
            "spread": of([r for s in SETS for r in sets[s]]),
            "by_set": {s: of(sets[s]) for s in SETS}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.long_world.object_spread",
                                description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="23,511,2027", help="comma-separated world seeds")
    p.add_argument("--long-world", choices=sorted(NAMED_SPECS), default="leave",
                   help="which long world (the object map's: leave)")
    p.add_argument("--questions", type=int, default=60,
                   help="questions per category in each set, as the benchmark asks")
    p.add_argument("--out", type=Path, default=None, help="write the figures to this JSON file")
    args = p.parse_args(argv)
    try:
        seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
    except ValueError:
        p.error(f"--seeds: not whole numbers: {args.seeds!r}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    base = NAMED_SPECS[args.long_world].to_dict()
    worlds = []
    for seed in seeds:
        worlds.append(measure(LongWorldSpec(**{**base, "seed": seed}), args.questions))
        log.info("seed %d: %s", seed, json.dumps(worlds[-1]["spread"]))
        if args.out is not None:  # what is done so far
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(
                {"command": " ".join(["python -m lab.long_world.object_spread",
                                      *(sys.argv[1:] if argv is None else argv)]),
                 "load_average_1min": round(os.getloadavg()[0], 2),
                 "long_world": args.long_world,
                 "spec": base, "questions_per_category": args.questions,
                 "most_per_object": most_per_object(args.questions), "worlds": worlds,
                 "missed": missed({str(w["seed"]): w["spread"] for w in worlds})},
                indent=1) + "\n", encoding="utf-8")
    misses = missed({str(w["seed"]): w["spread"] for w in worlds})
    for line in misses:
        print(line)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())

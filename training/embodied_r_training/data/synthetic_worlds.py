"""Train / validation / test datasets from the synthetic world, by seed.

The simulator has unlimited worlds with exact answers, so a dataset is just a list of seeds:
each seed becomes a world (bag + questions, :func:`embodied_r_ros.sim.generate.generate_world`),
the world is built into a dataset as a robot's bag is
(:func:`~embodied_r_training.data.builders.build_from_bag`, the ``offline`` perception profile,
odometry as on a robot) and its bag is deleted again (about 100 MB each).
The per-world datasets are merged into two datasets the trainer and ``eval`` read unchanged:

* ``ROOT/id``: ``train`` / ``val`` / ``test`` rows from worlds made with the default
  :class:`~embodied_r_ros.sim.world.WorldSpec` (the demo's kind of world);
* ``ROOT/ood``: every row in ``test``, from worlds made with different settings (by default
  8 instead of 6 objects and a 45 s instead of a 30 s trajectory, hence longer prompts, more
  key frames and more objects to tell apart).

A question whose perception text does not decide its answer (the rule reader of
:mod:`~embodied_r_training.data.oracle` does not reach it, or reaches it near a decision
boundary: :func:`~embodied_r_training.data.text_check.row_reason_to_skip`) is left out, and
the summary and the manifests count what was left out by split, category and reason.

Seed ranges never overlap, and seed 7 (the demo's sample world) is never used. Everything is
deterministic by seed: the same plan gives the same rows (their ``source`` names the temporary
bag path under ``ROOT``). A rerun reuses finished worlds; a change of the observation text
(:data:`~embodied_r_ros.core.colors.OBSERVATION_VERSION`) or of the world generator
(:data:`~embodied_r_ros.sim.generate.GENERATOR_VERSION`) rebuilds them.

On one CPU core a 30 s ID world (300 frames, 640x480) renders in about 9 s and builds 36
questions in about 7 s; a 45 s OOD world takes about 22 s in all; the default plan (60 train,
4 val, 11 test and 4 OOD worlds) about 21 minutes.

``python -m embodied_r_training.data.synthetic_worlds --out DIR`` builds the default plan.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.reply_cache import write_atomic
from embodied_r_ros.core.colors import OBSERVATION_VERSION
from embodied_r_ros.sim.generate import GENERATOR_VERSION, SAMPLE_SPEC
from embodied_r_ros.sim.questions import CATEGORIES
from embodied_r_ros.sim.world import WorldSpec
from embodied_r_training.data.builders import build_from_bag
from embodied_r_training.data.dataset_files import (
    MANIFEST,
    SPLITS_FILE,
    TABLE,
    first_per_category,
    jsonl,
    read_jsonl,
)
from embodied_r_training.data.splits import SplitOptions, Splits
from embodied_r_training.data.text_check import row_reason_to_skip

log = logging.getLogger(__name__)

FORBIDDEN_SEEDS = frozenset({SAMPLE_SPEC.seed})  # the demo's world must stay unseen
DONE = "synthetic.json"  # written last into a finished world's dataset directory


@dataclass(frozen=True)
class SplitPlan:
    """One split: which seeds, which world settings and how many questions per world."""

    name: str  # train, val, test (in ROOT/id) or ood (ROOT/ood)
    seeds: tuple[int, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)  # WorldSpec fields other than seed
    questions: str | int = 36  # per world: a total (split evenly) or "cat=N,..."
    #: with a quota, worlds are built in seed order only until every category has this many
    #: rows, and each category keeps its first ``per_category`` rows (a fixed-size test set
    #: although some worlds allow fewer questions of a category than asked for)
    per_category: int | None = None

    def world_spec(self, seed: int) -> WorldSpec:
        return WorldSpec(seed=seed, **dict(self.spec)).validate()


#: OOD worlds: more objects (every colour), a 50 % longer trajectory.
OOD_SPEC: dict[str, Any] = {"n_objects": 8, "frames": 450}


def default_plan(n_train: int = 60, n_val: int = 4, n_test_per_category: int = 30,
                 n_ood_per_category: int = 30) -> tuple[SplitPlan, ...]:
    """The synthetic datasets' plan: disjoint seed ranges per split.

    ``train``: ``n_train`` worlds x 36 questions (6 per category). ``val``: ``n_val`` x 30.
    ``test`` and ``ood``: 30 questions per world (5 per category) from as many worlds as it
    takes to fill a quota per category with questions their text decides (about 14 ID worlds
    for 30; a category keeps about half of what a world asks); the seed ranges leave ample
    room (40 candidates each).
    """
    return (
        SplitPlan("train", tuple(range(1000, 1000 + n_train)), questions=36),
        SplitPlan("val", tuple(range(2000, 2000 + n_val)), questions=30),
        SplitPlan("test", tuple(range(3000, 3040)), questions=30,
                  per_category=n_test_per_category),
        SplitPlan("ood", tuple(range(4000, 4040)), spec=OOD_SPEC, questions=30,
                  per_category=n_ood_per_category),
    )


def check_plan(plan: Sequence[SplitPlan]) -> None:
    """Raise ``ValueError`` when splits share a seed or a plan uses the demo's seed."""
    owner: dict[int, str] = {}
    for split in plan:
        if split.name not in ("train", "val", "test", "ood"):
            raise ValueError(f"unknown split {split.name!r} (train, val, test, ood)")
        for seed in split.seeds:
            if seed in FORBIDDEN_SEEDS:
                raise ValueError(f"seed {seed} is the demo's sample world and may not be used")
            if seed in owner:
                raise ValueError(f"seed {seed} is in both {owner[seed]} and {split.name}")
            owner[seed] = split.name
            split.world_spec(seed)  # a bad spec fails before any rendering


def _world_key(split: SplitPlan, seed: int) -> dict[str, Any]:
    return {"spec": asdict(split.world_spec(seed)), "questions": split.questions,
            "observation_version": OBSERVATION_VERSION, "generator_version": GENERATOR_VERSION}


def build_seed(split: SplitPlan, seed: int, root: Path, *, keep_bag: bool = False) -> Path:
    """One seed -> ``root/worlds/<split>/seed-N`` (a built dataset); reused when finished."""
    from embodied_r_ros.core.profiles import load_config
    from embodied_r_ros.reading.text_decides import TextDecides
    from embodied_r_ros.sim.generate import generate_world

    out = root / "worlds" / split.name / f"seed-{seed}"
    key = _world_key(split, seed)
    done = out / DONE
    if done.is_file() and json.loads(done.read_text()).get("key") == key:
        return out
    if out.exists():
        shutil.rmtree(out)
    work = root / "worlds" / ".tmp" / f"{split.name}-{seed}"
    if work.exists():
        shutil.rmtree(work)
    t0 = time.perf_counter()
    paths = generate_world(split.world_spec(seed), work, split.questions, video=False, force=True,
                           decides=TextDecides)
    t1 = time.perf_counter()
    assert paths.bag is not None
    build_from_bag(paths.bag, paths.questions, out, image_topic="/camera/image_raw",
                   odom_topic="/odom", config=load_config(profile="offline"),
                   splits=SplitOptions(by="question", folds=0), progress=False)
    t2 = time.perf_counter()
    shutil.copy(paths.manifest, out / "world.json")
    if keep_bag:
        shutil.move(str(paths.bag), out / "bag")
    shutil.rmtree(work)
    timing = {"render_s": round(t1 - t0, 2), "build_s": round(t2 - t1, 2)}
    write_atomic(done, json.dumps({"key": key, **timing}, indent=1))
    log.info("seed %d (%s): rendered in %.1f s, built in %.1f s", seed, split.name,
             timing["render_s"], timing["build_s"])
    return out


def _merge(rows_by_split: Mapping[str, list[dict[str, Any]]], out: Path,
           manifest: dict[str, Any]) -> None:
    """A dataset directory in the shape ``build`` writes, with the given split membership."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for split in ("train", "val", "test") for r in rows_by_split.get(split, [])]
    ids = {s: [r["id"] for r in rows_by_split.get(s, [])] for s in ("train", "val", "test")}
    if len({r["id"] for r in rows}) != len(rows):
        raise ValueError("row ids repeat across worlds")
    splits = Splits(ids["train"], ids["val"], ids["test"], [], "scene", 0)
    for split in ("train", "val", "test"):
        write_atomic(out / f"{split}.jsonl", jsonl(rows_by_split.get(split, [])))
    write_atomic(out / SPLITS_FILE, json.dumps(splits.to_dict(), indent=1))
    counts: dict[str, dict[str, int]] = {}
    for split, part in rows_by_split.items():
        for r in part:
            counts.setdefault(split, {}).setdefault(r["category"], 0)
            counts[split][r["category"]] += 1
    info = {**manifest, "rows": len(rows), "splits": {s: len(v) for s, v in ids.items()},
            "categories_by_split": counts}
    write_atomic(out / MANIFEST, json.dumps(info, indent=1, default=str))
    write_atomic(out / TABLE, jsonl(rows))  # last, as build does: its presence means finished


def build_synthetic(
    root: str | Path, plan: Sequence[SplitPlan] | None = None, *, keep_bags: bool = False,
    workers: int = 1,
) -> dict[str, Any]:
    """Build every world of ``plan`` (default :func:`default_plan`) and merge them into
    ``root/id`` and ``root/ood``. Returns a summary with per-split counts and timings.

    ``workers`` > 1 builds that many worlds at once in processes (a world renders and is
    perceived on one core); the result is the same: seeds are taken in plan order, and a split
    with a quota stops at the same seed (up to ``workers - 1`` later worlds are built and kept
    in the cache unused)."""
    plan = tuple(plan or default_plan())
    check_plan(plan)
    root = Path(root)
    start = time.perf_counter()
    rows_by_split: dict[str, list[dict[str, Any]]] = {}
    timings: dict[str, list[float]] = {}
    used: dict[str, list[int]] = {}
    skipped: Counter[str] = Counter()
    pool = (ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                                initializer=_worker_logging) if workers > 1 else None)
    try:
        for split in plan:
            rows = _build_split(split, root, keep_bags, pool, max(workers, 1), timings, used,
                                skipped)
            if rows is not None:
                rows_by_split[split.name] = rows
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    first_world = next(iter(used), None)
    base_manifest: dict[str, Any] = {}
    if first_world is not None:
        base = root / "worlds" / first_world / f"seed-{used[first_world][0]}"
        base_manifest = {k: v for k, v in json.loads((base / MANIFEST).read_text()).items()
                         if k not in ("bag", "report", "rows", "categories", "splits", "folds")}
    plans = {s.name: {"seeds": used.get(s.name, []), "spec": dict(s.spec),
                      "questions": s.questions, "per_category": s.per_category}
             for s in plan}
    manifest = {**base_manifest, "kind": "synthetic", "plan": plans,
                "observation_version": OBSERVATION_VERSION,
                "skipped_by_text": dict(sorted(skipped.items()))}
    id_rows = {s: rows_by_split.get(s, []) for s in ("train", "val", "test")}
    if any(id_rows.values()):
        _merge(id_rows, root / "id", manifest)
    if rows_by_split.get("ood"):
        _merge({"test": rows_by_split["ood"]}, root / "ood", manifest)
    summary = {
        "root": str(root),
        "rows": {s: len(r) for s, r in rows_by_split.items()},
        "worlds": {s: len(v) for s, v in used.items()},
        "skipped": dict(sorted(skipped.items())),
        "seconds_per_world": {s: round(sum(t) / len(t), 1) for s, t in timings.items()},
        "minutes": round((time.perf_counter() - start) / 60.0, 2),
    }
    write_atomic(root / "summary.json", json.dumps(summary, indent=1))
    return summary


def _worker_logging() -> None:
    """A spawned builder logs its worlds as the parent's build does."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def _build_split(split: SplitPlan, root: Path, keep_bags: bool, pool: Executor | None,
                 chunk: int, timings: dict[str, list[float]], used: dict[str, list[int]],
                 skipped: Counter[str]) -> list[dict[str, Any]] | None:
    """The rows of one split's worlds, ``chunk`` seeds at a time (in ``pool`` when given),
    stopping at the first seed that fills the split's quota. A row whose perception text does
    not decide its answer (:func:`~embodied_r_training.data.text_check.row_reason_to_skip`)
    is left out and counted in ``skipped`` by split, category and reason."""
    if not split.seeds:
        return None
    rows: list[dict[str, Any]] = []
    seeds = list(split.seeds)
    for i in range(0, len(seeds), chunk):
        part = seeds[i : i + chunk]
        build = partial(build_seed, split, root=root, keep_bag=keep_bags)
        worlds = list(pool.map(build, part)) if pool is not None else [build(s) for s in part]
        for seed, world in zip(part, worlds, strict=True):
            if split.per_category is not None and _filled(rows, split.per_category):
                break
            done = json.loads((world / DONE).read_text())
            timings.setdefault(split.name, []).append(done["render_s"] + done["build_s"])
            used.setdefault(split.name, []).append(seed)
            for row in read_jsonl(world / TABLE):
                reason = row_reason_to_skip(row)
                if reason is None:
                    rows.append(row)
                else:
                    skipped[f"{split.name}: {row['category']}: {reason}"] += 1
        if split.per_category is not None and _filled(rows, split.per_category):
            break
    if split.per_category is not None:
        if not _filled(rows, split.per_category):
            log.warning("%s: %d worlds give fewer than %d rows of some category",
                        split.name, len(split.seeds), split.per_category)
        rows = first_per_category(rows, split.per_category)
    return rows


def _filled(rows: Iterable[dict[str, Any]], quota: int) -> bool:
    counts = Counter(r["category"] for r in rows)
    return all(counts.get(c, 0) >= quota for c in CATEGORIES)


def scaled_plan(plan: Sequence[SplitPlan], **n_worlds: int) -> tuple[SplitPlan, ...]:
    """``plan`` with the first ``n_worlds[name]`` seeds of the named splits (quick runs)."""
    return tuple(replace(s, seeds=s.seeds[: n_worlds[s.name]]) if s.name in n_worlds else s
                 for s in plan)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="root directory (ROOT/id, ROOT/ood)")
    parser.add_argument("--train", type=int, default=60, help="training worlds")
    parser.add_argument("--val", type=int, default=4, help="validation worlds")
    parser.add_argument("--test-per-category", type=int, default=30)
    parser.add_argument("--ood-per-category", type=int, default=30)
    parser.add_argument("--keep-bags", action="store_true")
    parser.add_argument("--workers", type=int, default=1,
                        help="worlds built at once, each in its own process (one core each)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    plan = default_plan(args.train, args.val, args.test_per_category, args.ood_per_category)
    print(json.dumps(build_synthetic(args.out, plan, keep_bags=args.keep_bags,
                                                workers=args.workers), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

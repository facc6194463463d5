"""How much of the synthetic world's own questions its perception text decides.

Each seed becomes a world (``embodied-r world``'s generator), built into a dataset as
``embodied-r-train build`` builds a robot's bag (the ``offline`` perception, odometry); the rule
reader (:mod:`embodied_r_ros.reading.rule_reader`) then answers every row from its text alone. Its
accuracy per category is how many of the world's questions the text decides: the generator
asks only those, so it should be all of them on worlds no training used.

``python -m lab.world_questions --seeds 9901 9902 9903 --out DIR --json FILE``
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.reading.text_decides import TextDecides
from embodied_r_ros.sim.generate import generate_world
from embodied_r_ros.sim.world import WorldSpec
from embodied_r_training.data.builders import build_from_bag
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.oracle import solve
from embodied_r_training.data.splits import SplitOptions


def world_rows(seed: int, work: Path, questions: int) -> tuple[list[dict[str, Any]], dict]:
    """The built rows of one seed's world, and its manifest."""
    world = work / f"world-{seed}"
    paths = generate_world(WorldSpec(seed=seed), world, questions, video=False, force=True,
                           decides=TextDecides)
    assert paths.bag is not None
    data = work / f"data-{seed}"
    build_from_bag(paths.bag, paths.questions, data, image_topic="/camera/image_raw",
                   odom_topic="/odom", config=load_config("offline"),
                   splits=SplitOptions(by="question", folds=0), progress=False)
    manifest = json.loads(paths.manifest.read_text())
    rows = load_rows(data)
    shutil.rmtree(world)
    return rows, manifest


def measure(seeds: Sequence[int], work: Path, questions: int = 30) -> dict[str, Any]:
    asked: Counter[str] = Counter()
    right: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for seed in seeds:
        rows, manifest = world_rows(seed, work, questions)
        for row in rows:
            asked[row["category"]] += 1
            right[row["category"]] += solve(row).letter == row["solution"]
        for category, reasons in manifest.get("questions_skipped", {}).items():
            skipped[category] += sum(reasons.values())
    by_category = {c: {"questions": asked[c], "rule_reader_right": right[c],
                       "accuracy": round(100 * right[c] / asked[c], 1),
                       "candidates_skipped": skipped[c]} for c in sorted(asked)}
    total = sum(asked.values())
    return {"seeds": list(seeds), "questions_per_world": questions,
            "by_category": by_category, "questions": total,
            "accuracy": round(100 * sum(right.values()) / total, 1) if total else None}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.world_questions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--questions", type=int, default=30, help="asked of each world")
    parser.add_argument("--out", type=Path, required=True, help="a working folder")
    parser.add_argument("--json", type=Path, help="also write the figures there")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    figures = measure(args.seeds, args.out, args.questions)
    for category, f in figures["by_category"].items():
        print(f"{category:22s} {f['rule_reader_right']:3d} of {f['questions']:3d} "
              f"({f['accuracy']:5.1f} %), {f['candidates_skipped']} candidates skipped")
    print(f"{'all':22s} {figures['accuracy']} % of {figures['questions']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training rows from long worlds: memory questions as the robot would be asked them.

Each seed becomes a long world (``python -m lab.long_world``: rooms off a corridor, a 30-minute
tour, questions labelled by horizon), played through the frame buffer, the ``offline``
perception and a memory in a temporary directory, with the embedder where it is installed, as
on the robot (:mod:`lab.replay`). Each question, when the tour reaches its
ask time, gives a row from the frames the memory's
:class:`~embodied_r_ros.memory.Retriever` selects (``text_source: memory``) and, with
``window``, a row from the key-frame budget of the frame buffer alone (``text_source:
window``): the same question from the two texts, written to two datasets (``OUT/memory``,
``OUT/window``), so a reasoner evaluated on both measures what the memory adds. The world's bag
is deleted again; the rows keep the prompt.

Rows carry ``world: long`` and their ``rule_reading`` (:mod:`lab.long_world.rationales`: the
places lines the answer rests on and the rule reader's letter), which
:mod:`embodied_r_training.data.rationales` walks for their cold-start think text and ``eval``'s
``oracle`` answers with. Splits are by world: the
``test`` seeds' rows are ``test`` (``--test-horizons``: only those horizons), every other row
``train``.

``python -m lab.long_world.rows --train 41 42 43 --test 23 --test-horizons long
--out DIR``
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.pipeline import EmbodiedR, QueryError
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import PerceptionRecord
from embodied_r_ros.core.request import validate_query
from embodied_r_ros.memory import SqliteMemoryStore
from embodied_r_ros.memory.factory import retriever_for
from embodied_r_training.data.builders import perception_manifest
from embodied_r_training.data.dataset_files import write_table
from embodied_r_training.data.splits import Splits
from lab.long_world.generate import generate_long_world
from lab.long_world.rationales import rule_reading
from lab.long_world.world import LONG_SPEC, SMALL_LONG_SPEC, LongWorldSpec
from lab.replay import TourRobot, world_questions

log = logging.getLogger(__name__)

TEXT_SOURCES = ("memory", "window")


def make_world(seed: int, out: Path, small: bool = False) -> Path:
    """A long world with a compressed bag and no video (``small``: the tests' three minutes
    with two rooms)."""
    spec = LongWorldSpec(**{**(SMALL_LONG_SPEC if small else LONG_SPEC).to_dict(), "seed": seed})
    generate_long_world(spec, out, raw=False, compressed=True, video=False, force=True)
    return out


def world_rows(world: Path, scene: str, work: Path, window: bool = True
               ) -> list[dict[str, Any]]:
    """The rows of one long world (see the module notes), in ask order."""
    config = load_config("offline", overrides={"memory": {
        "enabled": True, "path": str(work / "memory.sqlite3")}})
    pipeline = EmbodiedR(config)
    store = SqliteMemoryStore(config.memory.path, writable=True, max_mb=config.memory.max_mb)
    try:
        robot = TourRobot(world, config, pipeline, store)
        retriever = retriever_for(config, store, robot.recorder.embedder)

        def ask(q: dict[str, Any], r: TourRobot) -> list[dict[str, Any]]:
            block = format_question(q["question"], q["options"])
            sel = retriever.select(config.memory.robot, q["question"], q["options"],
                                   now=q["stamp_ns"] / 1e9)
            records = {"memory": sel.record(q["question"], q["options"], block,
                                            layout=config.perception.frame_layout)}
            if window:
                asked = validate_query(q["question"], q["options"])
                try:
                    records["window"] = r.window(asked)[0].record
                except QueryError as exc:
                    log.warning("%s: no window text (%s)", q["id"], exc)
            return [_row(q, scene, source, record, pipeline)
                    for source, record in records.items()]

        return [row for rows in robot.play(world_questions(world), ask) for row in rows]
    finally:
        store.close()
        pipeline.close()


def _row(q: dict[str, Any], scene: str, source: str, record: PerceptionRecord,
         pipeline: EmbodiedR) -> dict[str, Any]:
    return {
        "id": f"{q['id']}-{source}",
        "scene": scene,
        "category": q["category"],
        "question": q["question"],
        "options": list(q["options"]),
        "solution": q["answer"],
        "answer_text": q["answer_text"],
        "source": f"{scene}#{q['id']}",
        "prompt": pipeline.reasoning_messages(render(record, pipeline.prompts)),
        "question_block": record.question_block,
        "records": record.to_dict(),
        "world": "long",
        "text_source": source,
        "horizon": q["horizon"],
        "horizon_s": q["horizon_s"],
        "perception_model": pipeline.perceiver.model_id if pipeline.perceiver else "",
        "prompt_version": pipeline.prompts.version,
        "rule_reading": rule_reading(q["category"], record),
    }


def build(train: Sequence[int], test: Sequence[int], out: Path, *, small: bool = False,
          window: bool = True, test_horizons: Sequence[str] = ()) -> dict[str, Any]:
    """The datasets ``out/memory`` and ``out/window`` (``data.jsonl``, splits, manifest) from
    the long worlds of the ``train`` and ``test`` seeds (see :func:`write_sets`); returns the
    manifest's counts."""
    if set(train) & set(test):
        raise ValueError("a seed cannot be in both train and test")
    rows: list[dict[str, Any]] = []
    for seed in [*train, *test]:
        work = Path(tempfile.mkdtemp(prefix=f"long-rows-{seed}-"))
        try:
            world = make_world(seed, work / "world", small)
            rows += world_rows(world, f"long-seed{seed}", work, window)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("seed %d: %d rows so far", seed, len(rows))
    return write_sets(rows, [f"long-seed{s}" for s in test], out, test_horizons,
                      {**long_manifest(), "train_seeds": list(train),
                       "test_seeds": list(test), "small": small})


def long_manifest() -> dict[str, Any]:
    """The manifest fields of the ``offline`` perception the rows are written with."""
    config = load_config("offline")
    pipeline = EmbodiedR(config)
    try:
        return perception_manifest(config, pipeline, "long worlds")
    finally:
        pipeline.close()


def write_sets(rows: Sequence[dict[str, Any]], test_scenes: Sequence[str], out: Path,
               test_horizons: Sequence[str] = (), manifest: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """One dataset per text source, ``out/memory`` and ``out/window``: the rows of
    ``test_scenes`` are its ``test`` split (only those of ``test_horizons``, where given),
    every other row ``train``."""
    info = {**(manifest or {}), "test_horizons": list(test_horizons),
            "horizons": dict(Counter(r["horizon"] for r in rows))}
    for source in TEXT_SOURCES:
        mine = [r for r in rows if r["text_source"] == source]
        if not mine:
            continue
        test = [r["id"] for r in mine if r["scene"] in test_scenes
                and (not test_horizons or r["horizon"] in test_horizons)]
        train = [r["id"] for r in mine if r["scene"] not in test_scenes]
        (out / source).mkdir(parents=True, exist_ok=True)
        write_table(out / source, mine, Splits(train=train, val=[], test=test),
                    {**info, "text_source": source})
        info[source] = {"train": len(train), "test": len(test)}
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, nargs="*", default=[41, 42, 43])
    parser.add_argument("--test", type=int, nargs="*", default=[23])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--small", action="store_true",
                        help="the three-minute, two-room worlds of the tests")
    parser.add_argument("--no-window", action="store_true",
                        help="memory rows only, no window rows")
    parser.add_argument("--test-horizons", nargs="*", default=[],
                        choices=("short", "medium", "long"),
                        help="test on these horizons only (default: every horizon)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        manifest = build(args.train, args.test, args.out, small=args.small,
                         window=not args.no_window, test_horizons=args.test_horizons)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())

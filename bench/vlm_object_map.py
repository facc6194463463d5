"""Where things are, with a grounding VLM: objects placed from stored poses, against the truth.

A long world (seed 23, 30 minutes: the memory benchmark's) is played through what the robot
runs (:class:`lab.replay.TourRobot`: the frame buffer's key frames, streaming perception, the
memory writer placing objects from the stored poses), once per perception:

- **vlm**: a VLM over the ``openai`` backend, streaming (each key frame described and grounded
  as it arrives, as the robot's background describer does), ``perception.grounding.mode:
  request`` (one grounding call per key frame, the frame alone, so the perception replies and
  their cache stay as they are), the world's intrinsics as a ``camera_info`` would give them.
  The endpoint is the scripted VLM (:mod:`lab.scripted_vlm`) on loopback, answering from the
  renderer's truth: each box edge moves by a Gaussian of ``--box-noise`` of the box's size,
  ``--miss-rate`` of the objects are left out, ``--wrong-label-rate`` get another object's
  name;
- **geometric**: the ``offline`` profile's colour regions, on the same world.

Questions: "where is X now" (``object_direction``) and "how far" (``object_distance``), in two
sets drawn from the world's truth (:func:`lab.long_world.questions.long_questions`): those the
geometric perception's colour records decide (``colour``: the world's own rule) and those a
VLM's labelled records decide (``label``: objects sharing a colour told apart by label). Each is
answered at its ask time from the memory as it then is, as the memory benchmark does
(``bench/memory_horizons.py``): the frames the retriever selects and the places block written
from the stored placements, read by the rule reader (:mod:`lab.long_world.oracle`; undecided
counts as wrong) and, on ``--reasoner`` questions of each perception's own set, by the
``offline`` profile's 135M memory reader and its shipped reasoner (llama.cpp; no target).

**Placement error**: each placement the memory holds at the ask time is matched to a true
object: among the world's objects named by its label (a VLM's placement) or of its colour (a
colour region), the one nearest its place. For each object a question names, the error is the
distance from its placement seen last (the one a question naming no time reads) to its true
centre; an object with no placement matched to it is *unplaced*, counted apart. Errors are
grouped by the question's horizon. At the end of the tour every placement is matched the same
way and its error grouped by how long ago it was last seen (``all_placements``).

**Decidable**: per perception's records, the candidates the question generator keeps, per
category and horizon (``closer`` samples 30 pairs per ask).

**Retrieval**: the retriever's selection and the places block (``select`` and ``record``) timed
at every question during the tour (30 minutes of memory), then over one hour: the memory's rows
stored again 30 minutes on (the tour repeated), placed and embedded by a recorder starting on
it, and every question asked again at its end.

Targets (the VLM's figures): median placement error <= 1.0 m at every horizon; the rule reader
>= 90 % on the labelled set at every horizon; retrieval p50 <= 100 ms over one hour. Exits 1
when one is missed.

Run: ``.venv/bin/python bench/vlm_object_map.py [--world DIR | --seed 23] [--box-noise 0.05]
[--miss-rate 0.1] [--wrong-label-rate 0.05] [--reasoner 5] --out results/bench/vlm_object_map``
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from _figures import add_json_option, write_figures
from _object_map_figures import (
    CATEGORIES,
    OWN_SET,
    PERCEPTIONS,
    SETS,
    Asked,
    Played,
    headline,
    markdown,
    plot,
    row_record,
    sensitivity,
    summarise,
    targets,
)
from memory_horizons import add_world_options, reasoner_counts, reasoner_subset, world_of

from embodied_r_ros.backends.factory import create_backend, load_pipeline
from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.request import SCOPE_MEMORY, QueryError
from embodied_r_ros.memory import MemoryRecorder, Retriever, SqliteMemoryStore
from embodied_r_ros.memory.factory import retriever_for
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.serving import serve
from embodied_r_ros.sim.scene import SceneObject
from embodied_r_ros.sim.visibility import Visibility
from lab.long_world.oracle import solve_record
from lab.long_world.questions import CATEGORIES as ALL_CATEGORIES
from lab.long_world.questions import long_questions
from lab.long_world.sightings import Sightings
from lab.long_world.world import LongWorld, LongWorldSpec, build_long_world
from lab.replay import TourRobot
from lab.scripted_replies import ScriptSettings
from lab.scripted_vlm import CACHE_NAME, ScriptedVLM
from lab.truth_boxes import TruthTable, TruthWorld, load_world, truth_table

log = logging.getLogger("vlm_object_map")

HOUR_S = 3600.0


# -- truth ----------------------------------------------------------------------------------

def true_object(p: Placement, objects: Sequence[SceneObject]) -> int | None:
    """The world object placement ``p`` is of (module notes): among the objects named by
    its label (a VLM's) or of its colour (a colour region), the nearest to its place."""
    same = [k for k, o in enumerate(objects)
            if (o.colour == p.colour if p.colour is not None else o.name == p.label)]
    return min(same, key=lambda k: math.dist(p.position, (objects[k].x, objects[k].y)),
               default=None)


def placement_errors(placements: Sequence[Placement], objects: Sequence[SceneObject],
                     wanted: Sequence[int]) -> list[float | None]:
    """Per object of ``wanted``: the error of the placement matched to it seen last."""
    owner = {p.id: true_object(p, objects) for p in placements}
    out: list[float | None] = []
    for k in wanted:
        mine = [p for p in placements if owner[p.id] == k]
        newest = max(mine, key=lambda p: p.last, default=None)
        out.append(None if newest is None
                   else math.dist(newest.position, (objects[k].x, objects[k].y)))
    return out


def question_sets(world: LongWorld, table: TruthTable, per_category: int
                  ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """The colour and label sets of questions, and every candidate each decides."""
    spec = world.spec
    sightings = Sightings(Visibility.from_pixels(table.pixels, spec.width * spec.height,
                                                 spec.rate_hz))
    counts = {c: per_category if c in CATEGORIES else 0 for c in ALL_CATEGORIES}
    sets, decidable = {}, {}
    for records in SETS:
        q = long_questions(world, sightings, counts, records)
        sets[records] = [{**r, "question_set": records} for r in q.rows]
        decidable[records] = q.decidable
    return sets, decidable


# -- the tours --------------------------------------------------------------------------------

def config_for(perception: str, args: argparse.Namespace, memory: Path,
               manifest: Mapping[str, Any], url: str | None) -> Any:
    """The ``offline`` profile with the memory on, and for ``vlm`` streaming perception by
    the scripted endpoint at ``url`` with grounding (the world's intrinsics)."""
    overrides: dict[str, Any] = {
        "cache": {"enabled": False},
        "memory": {"enabled": True, "path": str(memory),
                   "embedder": "off" if args.no_embedder else "auto"}}
    if args.reader_threads:
        overrides["reasoning"] = {"model": {"threads_per_reply": args.reader_threads}}
    if perception == "vlm":
        cam = manifest["camera"]
        overrides["perception"] = {
            "backend": "vlm", "mode": "streaming",
            "vlm": {"backend": "openai", "model": "scripted-vlm", "base_url": url},
            "grounding": {"mode": args.grounding},
            "camera": {k: cam[k] for k in ("fx", "fy", "cx", "cy", "width", "height")}}
    return load_config("offline", overrides=overrides)


def play(perception: str, args: argparse.Namespace, world_dir: Path, truth: TruthWorld,
         table: TruthTable, rows: Sequence[dict[str, Any]], reasoned: set[str],
         memory: Path, wrong_label_rate: float | None = None) -> Played:
    """``perception``'s tour with every question of ``rows`` answered at its ask time, its
    memory written to ``memory`` (``wrong_label_rate``: the VLM's instead of the option's)."""
    manifest = json.loads((world_dir / "world.json").read_text())
    objects = truth.objects
    with ExitStack() as stack:
        url = None
        if perception == "vlm":
            settings = ScriptSettings(seed=args.vlm_seed, box_noise=args.box_noise,
                                      miss_rate=args.miss_rate,
                                      wrong_label_rate=args.wrong_label_rate
                                      if wrong_label_rate is None else wrong_label_rate
                                      ).validate()
            url = stack.enter_context(serve(ScriptedVLM.for_world(truth, settings,
                                                                  table=table))).url
        config = config_for(perception, args, memory, manifest, url)
        vlm = create_backend(config.perception.vlm) if perception == "vlm" else None
        pipeline = load_pipeline(config, vlm=vlm, reasoning=bool(reasoned))
        stack.callback(pipeline.close)
        store = stack.enter_context(SqliteMemoryStore(config.memory.path, writable=True,
                                                      max_mb=config.memory.max_mb))
        robot = TourRobot(world_dir, config, pipeline, store)
        retriever = retriever_for(config, store, robot.recorder.embedder)

        def ask(row: dict[str, Any], r: TourRobot) -> Asked:
            return answer(row, r, retriever, objects, row["id"] in reasoned)

        t0 = time.perf_counter()
        asked = robot.play(rows, ask)
        name = config.memory.robot
        end = store.bounds(name)
        placements = store.placements([name])
        owners = [(p, true_object(p, objects)) for p in placements]
        found = [(math.dist(p.position, (objects[k].x, objects[k].y)),
                  (end[1] if end else p.last) - p.last, p.triangulated)
                 for p, k in owners if k is not None]
        ingest = {"keyframes": robot.keyframes, "placements": len(placements),
                  "tour_s": round(time.perf_counter() - t0, 1),
                  "ingest_s_per_keyframe": round(robot.ingest_sec / max(robot.keyframes, 1),
                                                 4)}
        hour = over_an_hour(store, config, robot.recorder.embedder, rows)
    return Played(perception, asked, ingest, found,
                  sum(k is None for _, k in owners), hour)


def answer(row: dict[str, Any], robot: TourRobot, retriever: Retriever,
           objects: Sequence[SceneObject], reason: bool) -> Asked:
    """``row`` answered from the memory now: the rule reader, the placements' errors and,
    where ``reason``, the 135M readers."""
    question, options = row["question"], row["options"]
    t0 = time.perf_counter()
    sel = retriever.select(robot.config.memory.robot, question, options,
                           now=row["stamp_ns"] / 1e9)
    record = sel.record(question, options, format_question(question, options),
                        layout=robot.config.perception.frame_layout)
    out = Asked(row, retrieval_ms=(time.perf_counter() - t0) * 1e3)
    found = solve_record(row["category"], record)
    out.letter, out.evidence = found.letter, found.evidence
    out.errors = placement_errors(sel.placements or [], objects,
                                  [t["object"] for t in row["targets"]])
    if reason:
        pipeline = robot.pipeline
        text = render(record, pipeline.prompts)
        for reader, kwargs in (("memory_reader", {"scope": SCOPE_MEMORY}),
                               ("shipped", {"reader": pipeline.lm})):
            try:
                out.readers[reader] = pipeline.reason(text, options, **kwargs).answer
            except QueryError as exc:
                log.warning("%s on %s: %s", reader, row["id"], exc)
                out.readers[reader] = None
    return out


def over_an_hour(store: SqliteMemoryStore, config: Any, embedder: Any,
                 rows: Sequence[dict[str, Any]]) -> list[float]:
    """Retrieval times (ms) of every question at the end of an hour of memory: the rows
    stored again as long after as the tour lasted, until an hour is reached, placed and
    embedded by a recorder starting on the memory, as after a restart."""
    name = config.memory.robot
    bounds = store.bounds(name)
    if bounds is None:
        return []
    ids = [i for i, _ in store.stamps(name, -math.inf, math.inf)]
    span = bounds[1] - bounds[0] + 1.0
    for shift in np.arange(span, HOUR_S - 1.0, span):
        for k in range(0, len(ids), 256):
            for r in store.get(ids[k:k + 256], thumbnails=True):
                store.add(replace(r, id=None, stamp=r.stamp + float(shift)))
    MemoryRecorder(store, name, embedder=embedder).close()
    retriever = retriever_for(config, store, embedder)
    times = []
    for row in rows:
        t0 = time.perf_counter()
        sel = retriever.select(name, row["question"], row["options"])
        sel.record(row["question"], row["options"],
                   format_question(row["question"], row["options"]))
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def write_all(args: argparse.Namespace, argv: Sequence[str] | None, figs: Mapping[str, Any],
              missed: Sequence[str], meta: Mapping[str, Any], rows: Sequence[dict[str, Any]]
              ) -> None:
    record = {**meta, **figs, "missed": list(missed), "rows": list(rows)}
    head = headline(figs)
    for path in {p for p in (args.json, args.out and args.out.with_suffix(".json")) if p}:
        write_figures(path, "vlm_object_map", argv, args, record, head)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(markdown(figs, missed, meta), encoding="utf-8")
        plot(figs, args.out.with_suffix(".png"))


def rates(spec: str) -> list[float]:
    """``--also-wrong-label-rates``: shares between 0 and 1."""
    try:
        values = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not numbers: {spec!r}") from None
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"rates must be between 0 and 1: {spec!r}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_world_options(parser)
    parser.add_argument("--questions", type=int, default=60,
                        help="questions per category in each set (spread over the horizons)")
    parser.add_argument("--box-noise", type=float, default=0.05,
                        help="SD of each box edge, a fraction of the box's side")
    parser.add_argument("--miss-rate", type=float, default=0.1,
                        help="share of the objects a grounding reply leaves out")
    parser.add_argument("--wrong-label-rate", type=float, default=0.05,
                        help="share of the objects given another object's name")
    parser.add_argument("--also-wrong-label-rates", type=rates, default=[],
                        help="comma-separated: the VLM's tour again at each of these "
                        "wrong-label rates, its figures beside (no target)")
    parser.add_argument("--vlm-seed", type=int, default=0, help="the scripted VLM's noise seed")
    parser.add_argument("--grounding", choices=("request", "reply"), default="request")
    parser.add_argument("--perceptions", default=",".join(PERCEPTIONS),
                        help="which tours to play (vlm, geometric)")
    parser.add_argument("--reasoner", type=reasoner_counts, default="0",
                        help="questions per horizon of each perception's own set the 135M "
                        "readers read (-1: all), or short=5,medium=5,long=-1")
    parser.add_argument("--reader-threads", type=int, default=0,
                        help="llama.cpp threads of a 135M reader's reply (0: the profile's 2; "
                        "1 where the cores are shared: its spinning threads wait on each other)")
    parser.add_argument("--no-embedder", action="store_true",
                        help="full-text search alone, even where the embedder is installed")
    parser.add_argument("--out", type=Path, default=None,
                        help="write OUT.json, OUT.md and OUT.png (after each tour)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    perceptions = [p for p in args.perceptions.split(",") if p]
    if unknown := [p for p in perceptions if p not in PERCEPTIONS]:
        parser.error(f"unknown perception {', '.join(unknown)}; known: {', '.join(PERCEPTIONS)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="vlm-object-map-"))
    figs: dict[str, Any] = {}
    rows_out: list[dict[str, Any]] = []
    missed: list[str] = []
    try:
        world_dir = world_of(args, work)
        truth = load_world(world_dir)
        spec = json.loads((world_dir / "world.json").read_text())["spec"]
        world = build_long_world(LongWorldSpec(**spec))
        table = truth_table(truth, world_dir / CACHE_NAME)
        sets, decidable = question_sets(world, table, args.questions)
        rows = sorted(sets["label"] + sets["colour"], key=lambda r: (r["stamp_ns"], r["id"]))
        meta = {"world": f"seed {spec['seed']}, {spec['duration_s'] / 60:g} minutes",
                "questions": {s: len(v) for s, v in sets.items()}, "decidable": decidable,
                "noise": {"box_noise": args.box_noise, "miss_rate": args.miss_rate,
                          "wrong_label_rate": args.wrong_label_rate, "seed": args.vlm_seed},
                "grounding": args.grounding, "matching": "label (vlm) or colour "
                "(geometric), then the nearest true object; the placement seen last per object",
                "seconds": 0.0}
        for perception in perceptions:
            reasoned = reasoner_subset(sets[OWN_SET[perception]], args.reasoner)
            log.info("%s: %d questions, %d read by the 135M readers", perception, len(rows),
                     len(reasoned))
            played = play(perception, args, world_dir, truth, table, rows, reasoned,
                          work / f"{perception}.sqlite3")
            figs[perception] = summarise(played)
            rows_out += [row_record(perception, a) for a in played.asked]
            missed = targets(figs)
            meta["seconds"] = round(time.perf_counter() - started, 1)
            write_all(args, argv, figs, missed, meta, rows_out)  # what is done so far
        for rate in args.also_wrong_label_rates:
            log.info("vlm at a wrong-label rate of %g", rate)
            played = play("vlm", args, world_dir, truth, table, rows, set(),
                          work / f"vlm-wrong-{rate:g}.sqlite3", wrong_label_rate=rate)
            figs.setdefault("vlm_wrong_label_rates", {})[f"{rate:g}"] = sensitivity(
                summarise(played))
            meta["seconds"] = round(time.perf_counter() - started, 1)
            write_all(args, argv, figs, missed, meta, rows_out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(figs, missed, meta))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

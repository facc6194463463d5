"""Where things are, with a grounding VLM: objects placed from stored poses, against the truth.

Long worlds (``--seeds``, pooled; default seed 23, 30 minutes) are played through what the
robot runs (:class:`lab.replay.TourRobot`: the frame buffer's key frames, streaming perception,
the memory writer placing objects from the stored poses), once per perception. The world is
the leaving one by default (``--long-world leave``, :data:`lab.long_world.world.LEAVING_SPEC`:
eight rooms, 36 objects, the west wing toured for the first quarter of the tour and then left
for good), so that past 15 minutes many objects are asked about, not the handful the memory
benchmark's revisiting world (``--long-world revisit``) leaves unseen that long:

- **vlm**: a VLM over the ``openai`` backend, streaming (each key frame described and grounded
  as it arrives, as the robot's background describer does), ``perception.grounding.mode:
  request`` (one grounding call per key frame, the frame alone, so the perception replies and
  their cache stay as they are), the world's intrinsics as a ``camera_info`` would give them.
  The endpoint is the scripted VLM (:mod:`lab.scripted_vlm`) on loopback, answering from the
  renderer's truth: each box edge moves by a Gaussian of ``--box-noise`` of the box's size,
  ``--miss-rate`` of the objects are left out, ``--wrong-label-rate`` get another object's
  name, ``--synonym-rate`` of the rest a synonym or a broader word ("red crate" for a red box;
  the lab's table, never read by the product);
- **geometric**: the ``offline`` profile's colour regions, on the same world.

Questions: "where is X now" (``object_direction``) and "how far" (``object_distance``), in two
sets drawn from the world's truth (:func:`lab.long_world.object_spread.object_map_questions`):
those the geometric perception's colour records decide (``colour``: the world's own rule) and
those a VLM's labelled records decide (``label``: objects sharing a colour told apart by label);
no object takes more than 15 % of a category's questions of a horizon, nor of both sets' at a
horizon (the colour set, which tells few objects apart, gives up what would exceed it).
``python -m lab.long_world.object_spread`` counts the objects named from the questions alone,
without the tours. Each is
answered at its ask time from the memory as it then is, as the memory benchmark does
(``bench/memory_horizons.py``): the frames the retriever selects and the places block written
from the stored placements, read by the rule reader (:mod:`lab.long_world.oracle`; undecided
counts as wrong) and, on ``--reasoner`` questions of each perception's own set, by the
``offline`` profile's 135M memory reader and its shipped reasoner (llama.cpp; no target).

**Placement error** (:mod:`lab.object_map_truth`): a placement is of the true object most of its
sightings came from (each ray attributed to the object of its frame it points at), not of the
object its name says. For each object a question names, the error is how far its placement
seen last (the one a question naming no time reads) puts it from the robot at the ask, against
where it truly is from there; an object with no placement is *unplaced*. The error is grouped
by the question's horizon, as a median over questions and over objects (each object's median
once); *coverage* is the share whose error lies within the uncertainty the places block
states. At the end of the tour every placement's error is grouped by how long ago it was last
seen (``all_placements``), and the placements per true object placed are counted.

**Drift** (``--odometry-drift``, ``--yaw-drift-deg-min``): the VLM's tour again, on the first
world, with ``/odom`` drifting at replay (:mod:`lab.odometry_drift`: a seeded random walk of
that share of the distance travelled, the heading creeping that many degrees a minute); the
truth stays apart. Beside each question's placement error stands its *odometry error*: the
error a perfect perception would make, the object seen exactly from the drifted pose of its
last sighting.

**Decidable**: per perception's records, the candidates the question generator keeps, per
category and horizon (``closer`` samples 30 pairs per ask).

**Retrieval**: the retriever's selection and the places block (``select`` and ``record``) timed
at every question during the tour (30 minutes of memory), then over one and ten hours of the
first world: the memory's rows stored again a tour's length later until that length, placed
and embedded by a recorder starting on it (it embeds at most 4096 rows), and every question
asked again at its end. The load average at the start is in the results file.

Targets (the VLM's figures): median placement error <= 1.0 m and p90 <= 3.0 m at every horizon,
over questions and over objects; at most 10 % unplaced; coverage >= 90 %; the rule reader
>= 90 % on the labelled set; at least 10 objects named in each world at every horizon, none in
more than 15 % of a world's mentions at a horizon; at most 1.2 placements per object; with
drift, the median error at most 1.0 m above the median odometry error; retrieval p50 <= 100 ms
over one hour and <= 300 ms over ten. Exits 1 when one is missed.

Run: ``.venv/bin/python bench/vlm_object_map.py --seeds 23,511,2027 --perceptions vlm
--odometry-drift 0.01 --yaw-drift-deg-min 0.5 --out results/bench/vlm_object_map``
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from _figures import add_json_option, write_figures
from _object_map_figures import (
    OWN_SET,
    PERCEPTIONS,
    SETS,
    Asked,
    Played,
    drift_figures,
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
from embodied_r_ros.serving import serve
from embodied_r_ros.sim.visibility import Visibility
from lab.long_world.object_spread import object_map_questions
from lab.long_world.oracle import solve_record
from lab.long_world.sightings import Sightings
from lab.long_world.world import LEAVE, LongWorld, LongWorldSpec, build_long_world
from lab.object_map_truth import Truth
from lab.odometry_drift import drift_track
from lab.replay import TourRobot
from lab.scripted_replies import ScriptSettings
from lab.scripted_vlm import CACHE_NAME, ScriptedVLM
from lab.truth_boxes import TruthTable, TruthWorld, load_world, truth_table

log = logging.getLogger("vlm_object_map")

HOUR_S = 3600.0


# -- truth ----------------------------------------------------------------------------------

def sightings_of(table: TruthTable, world: LongWorld) -> Sightings:
    """What each frame truly showed, from the rendered truth."""
    spec = world.spec
    return Sightings(Visibility.from_pixels(table.pixels, spec.width * spec.height,
                                            spec.rate_hz))


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


def play(perception: str, args: argparse.Namespace, world_dir: Path, truth_world: TruthWorld,
         table: TruthTable, rows: Sequence[dict[str, Any]], reasoned: set[str],
         memory: Path, wrong_label_rate: float | None = None, drifting: bool = False,
         hours: Sequence[float] = ()) -> Played:
    """``perception``'s tour with every question of ``rows`` answered at its ask time, its
    memory written to ``memory`` (``wrong_label_rate``: the VLM's instead of the option's;
    ``drifting``: the odometry drifts as the options say; ``hours``: retrieval timed over
    memories of these lengths after the tour)."""
    manifest = json.loads((world_dir / "world.json").read_text())
    objects = truth_world.objects
    with ExitStack() as stack:
        url = None
        if perception == "vlm":
            settings = ScriptSettings(seed=args.vlm_seed, box_noise=args.box_noise,
                                      miss_rate=args.miss_rate,
                                      wrong_label_rate=args.wrong_label_rate
                                      if wrong_label_rate is None else wrong_label_rate,
                                      synonym_rate=args.synonym_rate).validate()
            url = stack.enter_context(serve(ScriptedVLM.for_world(truth_world, settings,
                                                                  table=table))).url
        config = config_for(perception, args, memory, manifest, url)
        vlm = create_backend(config.perception.vlm) if perception == "vlm" else None
        pipeline = load_pipeline(config, vlm=vlm, reasoning=bool(reasoned))
        stack.callback(pipeline.close)
        store = stack.enter_context(SqliteMemoryStore(config.memory.path, writable=True,
                                                      max_mb=config.memory.max_mb))
        robot = TourRobot(world_dir, config, pipeline, store)
        track = drift_track(robot.track_t, robot.track_p,
                            args.odometry_drift if drifting else 0.0,
                            args.yaw_drift_deg_min if drifting else 0.0,
                            seed=args.vlm_seed + manifest["spec"]["seed"])
        robot.track_p = list(track.odometry)  # what /odom says; the truth stays apart
        spec = manifest["spec"]
        truth = Truth(objects, table, track)
        if len(track.stamps) != table.n_frames:
            log.warning("odometry samples (%d) and frames (%d) differ: rays are matched to "
                        "the nearest", len(track.stamps), table.n_frames)
        retriever = retriever_for(config, store, robot.recorder.embedder)

        def ask(row: dict[str, Any], r: TourRobot) -> Asked:
            return answer(row, r, retriever, truth, row["id"] in reasoned)

        t0 = time.perf_counter()
        asked = robot.play(rows, ask)
        name = config.memory.robot
        end = store.bounds(name)
        placements = store.placements([name], rays=True)
        owners = [(p, truth.owner(p)) for p in placements]
        last = end[1] if end else 0.0
        found = [(truth.error(p.position, k, last), last - p.last, p.triangulated)
                 for p, k in owners if k is not None]
        owned = [k for _, k in owners if k is not None]
        ingest = {"world": f"seed {spec['seed']}", "keyframes": robot.keyframes,
                  "placements": len(placements), "objects_placed": len(set(owned)),
                  "tour_s": round(time.perf_counter() - t0, 1),
                  "ingest_s_per_keyframe": round(robot.ingest_sec / max(robot.keyframes, 1),
                                                 4)}
        times = retrieval_over(store, config, robot.recorder.embedder, rows, hours)
    return Played(perception, asked, ingest, found, sum(k is None for _, k in owners),
                  times.get(1.0, []), times.get(10.0, []), len(owned), len(set(owned)))


def answer(row: dict[str, Any], robot: TourRobot, retriever: Retriever, truth: Truth,
           reason: bool) -> Asked:
    """``row`` answered from the memory now: the rule reader, the placements' errors, the
    stated uncertainty's coverage, the odometry's error and, where ``reason``, the 135M
    readers."""
    question, options = row["question"], row["options"]
    now = row["stamp_ns"] / 1e9
    t0 = time.perf_counter()
    sel = retriever.select(robot.config.memory.robot, question, options, now=now)
    record = sel.record(question, options, format_question(question, options),
                        layout=robot.config.perception.frame_layout,
                        live=robot.buffer.pose_now())
    out = Asked(row, retrieval_ms=(time.perf_counter() - t0) * 1e3)
    found = solve_record(row["category"], record)
    out.letter, out.evidence = found.letter, found.evidence
    read = {(p.robot, p.id) for p in sel.placements or []}
    mine = [p for p in robot.recorder.store.placements([robot.config.memory.robot], rays=True)
            if (p.robot, p.id) in read]
    for k in (t["object"] for t in row["targets"]):
        error, covered = truth.score(mine, k, now)
        out.objects.append(k)
        out.errors.append(error)
        out.covered.append(covered)
        out.odometry.append(truth.odometry_error(k, now))
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


def retrieval_over(store: SqliteMemoryStore, config: Any, embedder: Any,
                   rows: Sequence[dict[str, Any]], hours: Sequence[float]
                   ) -> dict[float, list[float]]:
    """Retrieval times (ms) of every question at the end of memories of ``hours`` each: the
    rows stored again as long after as the tour lasted, until that length is reached, placed
    and embedded by a recorder starting on the memory, as after a restart (it embeds at most
    its backfill's rows)."""
    name = config.memory.robot
    bounds = store.bounds(name)
    if bounds is None or not hours:
        return {}
    ids = [i for i, _ in store.stamps(name, -math.inf, math.inf)]
    span = bounds[1] - bounds[0] + 1.0
    shift, out = span, {}
    for length in sorted(hours):
        while shift < length * HOUR_S - 1.0:
            for k in range(0, len(ids), 256):
                for r in store.get(ids[k:k + 256], thumbnails=True):
                    store.add(replace(r, id=None, stamp=r.stamp + float(shift)))
            shift += span
        MemoryRecorder(store, name, embedder=embedder).close()
        retriever = retriever_for(config, store, embedder)
        times = []
        for row in rows:
            t0 = time.perf_counter()
            sel = retriever.select(name, row["question"], row["options"])
            sel.record(row["question"], row["options"],
                       format_question(row["question"], row["options"]))
            times.append((time.perf_counter() - t0) * 1e3)
        out[length] = times
        log.info("retrieval over %g h of memory: p50 %.1f ms", length, float(np.median(times)))
    return out


@dataclass
class PreparedWorld:
    name: str
    dir: Path
    truth: TruthWorld
    table: TruthTable
    sets: dict[str, list[dict[str, Any]]]
    rows: list[dict[str, Any]]
    decidable: dict[str, Any]


def prepare(args: argparse.Namespace, seed: int, work: Path, world_dir: Path | None = None
            ) -> PreparedWorld:
    """World ``seed`` (or ``world_dir``, or ``--world``), its truth and its two sets of
    questions."""
    world_dir = world_dir or world_of(argparse.Namespace(**{**vars(args), "seed": seed}),
                                      work / f"w{seed}")
    truth = load_world(world_dir)
    spec = json.loads((world_dir / "world.json").read_text())["spec"]
    world = build_long_world(LongWorldSpec(**spec))
    table = truth_table(truth, world_dir / CACHE_NAME)
    name = f"seed {spec['seed']}, {spec['duration_s'] / 60:g} minutes"
    asked, decidable = object_map_questions(world, sightings_of(table, world), args.questions)
    sets = {k: [{**r, "world": name} for r in v] for k, v in asked.items()}
    rows = sorted(sets["label"] + sets["colour"], key=lambda r: (r["stamp_ns"], r["id"]))
    return PreparedWorld(name, world_dir, truth, table, sets, rows, decidable)


def pooled(played: Sequence[Played]) -> Played:
    """The tours of several worlds as one (their questions and placements together)."""
    first = played[0]
    return Played(first.perception, [a for p in played for a in p.asked],
                  {"worlds": [p.ingest for p in played],
                   "placements": sum(p.ingest["placements"] for p in played)},
                  [f for p in played for f in p.all_placements],
                  sum(p.unmatched for p in played),
                  next((p.hour_ms for p in played if p.hour_ms), []),
                  next((p.hour10_ms for p in played if p.hour10_ms), []),
                  sum(p.owned for p in played), sum(p.objects_placed for p in played))


def seeds(spec: str) -> list[int]:
    """``--seeds``: comma-separated world seeds."""
    try:
        return [int(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole numbers: {spec!r}") from None


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


def memory_hours(spec: str) -> list[float]:
    """``--retrieval-hours``: comma-separated lengths above 0."""
    try:
        values = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not numbers: {spec!r}") from None
    if any(v <= 0.0 for v in values):
        raise argparse.ArgumentTypeError(f"must be above 0: {spec!r}")
    return values


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
    add_world_options(parser, long_world=LEAVE)
    parser.add_argument("--questions", type=int, default=60,
                        help="questions per category in each set (spread over the horizons)")
    parser.add_argument("--box-noise", type=float, default=0.05,
                        help="SD of each box edge, a fraction of the box's side")
    parser.add_argument("--miss-rate", type=float, default=0.2,
                        help="share of the objects a grounding reply leaves out")
    parser.add_argument("--wrong-label-rate", type=float, default=0.1,
                        help="share of the objects given another object's name")
    parser.add_argument("--synonym-rate", type=float, default=0.2,
                        help="share of the other objects called by a synonym or a broader word")
    parser.add_argument("--seeds", type=seeds, default=None,
                        help="comma-separated world seeds played and pooled (default: --seed)")
    parser.add_argument("--worlds", type=lambda v: [d for d in v.split(",") if d],
                        default=None, help="comma-separated long-world folders played and "
                        "pooled, before the worlds of --seeds (their truth is kept in each)")
    parser.add_argument("--odometry-drift", type=float, default=0.0,
                        help="after the tours, the VLM's again on the first world with the "
                        "odometry drifting by this share of the distance travelled (a seeded "
                        "random walk)")
    parser.add_argument("--yaw-drift-deg-min", type=float, default=0.0,
                        help="... and its heading by this many degrees a minute")
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
    parser.add_argument("--retrieval-hours", type=memory_hours, default=[1.0, 10.0],
                        help="comma-separated memory lengths (hours) retrieval is timed over "
                        "after the first tour (empty: none)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the worlds, each tour's memory and its questions in this "
                        "folder (what lab.placement_replay places again)")
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
    work = args.keep or Path(tempfile.mkdtemp(prefix="vlm-object-map-"))
    work.mkdir(parents=True, exist_ok=True)
    figs: dict[str, Any] = {}
    rows_out: list[dict[str, Any]] = []
    missed: list[str] = []
    try:
        worlds = [prepare(args, 0, work, Path(d)) for d in args.worlds or ()]
        worlds += [prepare(args, seed, work) for seed in args.seeds
                   or ([] if worlds else [args.seed])]
        meta = {"world": ", ".join(w.name for w in worlds),
                "questions": {s: sum(len(w.sets[s]) for w in worlds) for s in SETS},
                "decidable": worlds[0].decidable,
                "noise": {"box_noise": args.box_noise, "miss_rate": args.miss_rate,
                          "wrong_label_rate": args.wrong_label_rate,
                          "synonym_rate": args.synonym_rate, "seed": args.vlm_seed},
                "grounding": args.grounding, "matching": "the true object most of a "
                "placement's sightings came from; the placement seen last per object",
                "load_average_1min_at_start": round(os.getloadavg()[0], 2),
                "seconds": 0.0}

        def tours(perception: str, tag: str, first_only: bool = False, **kwargs: Any
                  ) -> Played:
            out = []
            for n, w in enumerate(worlds[:1] if first_only else worlds):
                reasoned = (reasoner_subset(w.sets[OWN_SET[perception]], args.reasoner)
                            if tag == "main" else set())
                log.info("%s (%s) on %s: %d questions, %d read by the 135M readers",
                         perception, tag, w.name, len(w.rows), len(reasoned))
                out.append(play(perception, args, w.dir, w.truth, w.table, w.rows, reasoned,
                                work / f"{perception}-{tag}-{n}.sqlite3",
                                hours=args.retrieval_hours if tag == "main" and n == 0
                                else (), **kwargs))
                if args.keep is not None and tag == "main":  # for lab.placement_replay
                    (work / f"{perception}-{tag}-{n}.json").write_text(json.dumps(
                        {"world": str(w.dir), "memory": f"{perception}-{tag}-{n}.sqlite3",
                         "rows": w.rows}), encoding="utf-8")
            return pooled(out)

        for perception in perceptions:
            played = tours(perception, "main")
            figs[perception] = summarise(played)
            rows_out += [row_record(perception, a) for a in played.asked]
            missed = targets(figs)
            meta["seconds"] = round(time.perf_counter() - started, 1)
            write_all(args, argv, figs, missed, meta, rows_out)  # what is done so far
        if args.odometry_drift or args.yaw_drift_deg_min:
            log.info("vlm with odometry drift %g and %g deg/min", args.odometry_drift,
                     args.yaw_drift_deg_min)
            played = tours("vlm", "drift", first_only=True, drifting=True)
            figs["drift"] = drift_figures(played, args.odometry_drift, args.yaw_drift_deg_min)
            rows_out += [row_record("vlm-drift", a) for a in played.asked]
            missed = targets(figs)
            meta["seconds"] = round(time.perf_counter() - started, 1)
            write_all(args, argv, figs, missed, meta, rows_out)
        for rate in args.also_wrong_label_rates:
            log.info("vlm at a wrong-label rate of %g", rate)
            played = tours("vlm", f"wrong-{rate:g}", wrong_label_rate=rate)
            figs.setdefault("vlm_wrong_label_rates", {})[f"{rate:g}"] = sensitivity(
                summarise(played))
            meta["seconds"] = round(time.perf_counter() - started, 1)
            write_all(args, argv, figs, missed, meta, rows_out)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(markdown(figs, missed, meta))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

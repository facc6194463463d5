"""Long-horizon memory questions by horizon: the window alone, the memory, and the text's ceiling.

A long world (``python -m lab.long_world``: rooms off a corridor, 30 minutes of tour, questions
asked along it, each labelled ``short`` < 2 min, ``medium`` 2-15 min or ``long`` > 15 min by how
far back it reaches) is played in time order through what the robot runs: the frame buffer's
store (:class:`~embodied_r_ros.agent.frame_store.FrameStore`: key frames, odometry) and the
``offline`` profile's perception, whose question-agnostic description of each key frame goes
into a SQLite memory (:class:`~embodied_r_ros.memory.MemoryRecorder`). Each question is answered
when the tour reaches its ask time (``now`` = ``t_ask``) in three ways:

- **window**: today's query without memory, the key-frame budget (32) of the frame buffer's
  window (``window_sec`` 0: the whole buffer, 300 s), read by the shipped reasoner;
- **memory**: the key frames :class:`~embodied_r_ros.memory.Retriever` selects from the whole
  memory, written by :meth:`Selection.text`, read by the shipped reasoner;
- **oracle**: the same memory text read by :mod:`lab.long_world.oracle` (rules,
  no ground truth): what the text allows at best. The oracle also reads the window text, for
  the window's ceiling.

"The shipped reasoner" is what the ``offline`` profile loads: its ``reasoning.model`` reads the
window's text, and its ``reasoning.memory_model`` (where set) the memory's, as on the robot
(:meth:`~embodied_r_ros.core.pipeline.EmbodiedR.reader_for`, by the question's scope). Where the
two differ the memory reader also reads the window's text (**window_memory_reader**), so that
the memory's own share of the gain is measured apart from the reader's.

Questions are generated only where the text can decide them
(:mod:`lab.long_world.questions`: no shared colour left untold apart, no answer
within the text's rounding of a boundary, the route back as the first turn towards where the
object was last seen); the candidates skipped, by category and reason, are reported with the
figures (``skipped``).

Retrieval recall: for each object a question names, whether a frame that shows it clearly (the
row's ``targets``) is among the frames retrieved. Accuracies carry 95 % bootstrap intervals.
Targets: oracle >= 90 % at every horizon; memory >= window + 20 points at ``long``; recall >=
95 % at every horizon. Exits 1 when one is missed.

Run: ``.venv/bin/python bench/memory_horizons.py [--world DIR | --seed 23] [--reasoner 20 |
--reasoner short=5,medium=5,long=-1] --out results/bench/memory_horizons``
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _figures import add_json_option, write_figures

from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import PerceptionRecord
from embodied_r_ros.core.request import SCOPE_MEMORY, SCOPE_WINDOW, QueryError, validate_query
from embodied_r_ros.intervals import bootstrap_ci, paired_difference
from embodied_r_ros.memory import Retriever, SqliteMemoryStore
from embodied_r_ros.memory.factory import retriever_for
from lab.long_world.oracle import solve_record
from lab.long_world.world import NAMED_SPECS, REVISIT, SMALL_SPECS, LongWorldSpec
from lab.replay import TourRobot, world_questions

log = logging.getLogger("memory_horizons")

HORIZONS = ("short", "medium", "long")
METHODS = ("window", "memory", "oracle", "window_oracle", "window_memory_reader")
ORACLE_TARGET = 0.90
GAIN_TARGET = 0.20
RECALL_TARGET = 0.95


@dataclass
class Answered:
    """One question's outcome in every method."""

    row: dict[str, Any]
    letters: dict[str, str | None] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)
    #: per named object: whether a frame showing it was retrieved (memory) / in the window
    recall: list[bool] = field(default_factory=list)
    window_recall: list[bool] = field(default_factory=list)
    retrieval_ms: float = 0.0
    frames: int = 0
    window_frames: int = 0
    notes: list[str] = field(default_factory=list)

    def hit(self, method: str) -> bool | None:
        letter = self.letters.get(method, "-")
        if letter == "-":
            return None  # not asked in this method
        if method in ("oracle", "window_oracle"):  # undecided: the first option, as oracle.py
            return (letter or "A") == self.row["answer"]
        return letter == self.row["answer"]  # a reply without an answer is wrong


def generate(seed: int, minutes: float, out: Path, small: bool = False,
             long_world: str = REVISIT) -> Path:
    """A long world with a compressed bag and no video, as the CLI writes it: the named
    ``long_world`` (:data:`~lab.long_world.world.NAMED_SPECS`), ``small``: its three-minute
    version of the tests."""
    from lab.long_world.generate import generate_long_world

    base = SMALL_SPECS[long_world].to_dict() if small else {
        **NAMED_SPECS[long_world].to_dict(), "duration_s": minutes * 60.0}
    spec = LongWorldSpec(**{**base, "seed": seed})
    generate_long_world(spec, out, raw=False, compressed=True, video=False, force=True)
    return out


def add_world_options(parser: argparse.ArgumentParser, long_world: str = REVISIT) -> None:
    """The long world a benchmark plays: a folder, or one generated from a seed (the named
    world ``long_world`` by default)."""
    parser.add_argument("--world", type=Path, default=None,
                        help="a long world's folder (default: generate one with --seed)")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--long-world", choices=sorted(NAMED_SPECS), default=long_world,
                        help="revisit: every room again and again; leave: a wing toured, then "
                        f"left for good, more rooms and objects (default {long_world})")
    parser.add_argument("--small", action="store_true", help="that world's three-minute "
                        "version the tests use (a quick check)")


def world_of(args: argparse.Namespace, work: Path) -> Path:
    """The ``--world`` folder, else a world generated under ``work`` (:func:`add_world_options`)
    in a folder named by the world's kind and size, so no other world's files are read."""
    name = f"world-{args.long_world}{'-small' if args.small else ''}"
    return args.world or generate(args.seed, args.minutes, work / name, args.small,
                                  args.long_world)


def covered(stamps: Sequence[float], targets: Sequence[Mapping[str, Any]]) -> list[bool]:
    """Per target with frames: whether one of ``stamps`` is a frame showing it."""
    have = {round(s * 1e3) for s in stamps}
    return [any(round(ns / 1e6) in have for ns in t["stamps_ns"])
            for t in targets if t.get("stamps_ns")]


def run(args: argparse.Namespace, world: Path, work: Path
        ) -> tuple[list[Answered], dict[str, Any]]:
    """Every question answered at its ask time, and the ingest figures."""
    config = load_config("offline", overrides={"memory": {
        "enabled": True, "path": str(work / "memory.sqlite3"),
        "embedder": "off" if args.no_embedder else "auto"}})
    rows = world_questions(world)
    if args.limit:
        rows = rows[:: max(1, len(rows) // args.limit)][: args.limit]
    reasoned = reasoner_subset(rows, args.reasoner)
    pipeline = load_pipeline(config, perception=bool(reasoned), reasoning=bool(reasoned))
    store = SqliteMemoryStore(config.memory.path, writable=True, max_mb=config.memory.max_mb)
    robot = TourRobot(world, config, pipeline, store)
    retriever: Retriever = retriever_for(config, store, robot.recorder.embedder)
    done = robot.play(rows, lambda row, r: answer(row, r, retriever, row["id"] in reasoned))
    ingest = {"keyframes": robot.keyframes,
              "ingest_s_per_keyframe": round(robot.ingest_sec / max(robot.keyframes, 1), 4),
              "store_mb": round(Path(config.memory.path).stat().st_size / 2**20, 2)}
    store.close()
    pipeline.close()
    return done, ingest


def reasoner_counts(spec: str) -> dict[str, int]:
    """``--reasoner``: one count for every horizon (``20``), or one per horizon
    (``short=5,medium=5,long=-1``; a horizon left out gets 0); -1 is every question."""
    try:
        if "=" not in spec:
            return dict.fromkeys(HORIZONS, int(spec))
        counts = dict.fromkeys(HORIZONS, 0)
        for part in spec.split(","):
            horizon, _, n = part.partition("=")
            if horizon.strip() not in counts:
                raise ValueError(f"unknown horizon {horizon.strip()!r}")
            counts[horizon.strip()] = int(n)
        return counts
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--reasoner {spec!r}: {exc}") from None


def reasoner_subset(rows: Sequence[Mapping[str, Any]], counts: Mapping[str, int]) -> set[str]:
    """Ids of the questions the reasoner reads: ``counts[horizon]`` of each horizon (-1:
    every one), spread over the categories in turn."""
    chosen: set[str] = set()
    for horizon in HORIZONS:
        per_horizon = counts.get(horizon, 0)
        if per_horizon < 0:
            chosen |= {r["id"] for r in rows if r["horizon"] == horizon}
            continue
        by_cat: dict[str, list[str]] = defaultdict(list)
        for r in rows:
            if r["horizon"] == horizon:
                by_cat[r["category"]].append(r["id"])
        queues = [list(v) for _, v in sorted(by_cat.items())]
        picked = 0
        while picked < per_horizon and any(queues):
            for q in queues:
                if q and picked < per_horizon:
                    chosen.add(q.pop(0))
                    picked += 1
    return chosen


def answer(row: dict[str, Any], robot: TourRobot, retriever: Retriever,
           reason: bool) -> Answered:
    question, options = row["question"], row["options"]
    out = Answered(row)
    now = row["stamp_ns"] / 1e9
    sel = retriever.select(robot.config.memory.robot, question, options, now=now)
    out.retrieval_ms = sel.seconds * 1e3
    out.frames = len(sel.rows)
    out.notes = sel.notes
    out.recall = covered([r.stamp for r in sel.rows], row["targets"])
    memory_rec = sel.record(question, options, format_question(question, options),
                            layout=robot.config.perception.frame_layout)
    records: dict[str, PerceptionRecord | None] = {SCOPE_MEMORY: memory_rec}
    try:
        result, stamps = robot.window(validate_query(question, options))
        records[SCOPE_WINDOW] = result.record
    except QueryError as exc:
        records[SCOPE_WINDOW], stamps = None, []
        out.notes.append(f"window: {exc}")
    texts = {scope: render(rec, robot.pipeline.prompts) if rec is not None else ""
             for scope, rec in records.items()}
    window = texts[SCOPE_WINDOW]
    out.window_frames = len(stamps)
    out.window_recall = covered(stamps, row["targets"])
    for method, scope in (("oracle", SCOPE_MEMORY), ("window_oracle", SCOPE_WINDOW)):
        rec = records[scope]
        a = solve_record(row["category"], rec) if rec is not None else None
        out.letters[method] = a.letter if a else None
        out.evidence[method] = a.evidence if a else "no text"
    if reason:
        for method, scope in (("memory", SCOPE_MEMORY), ("window", SCOPE_WINDOW)):
            if not texts[scope]:
                out.letters[method] = None
                continue
            r = robot.pipeline.reason(texts[scope], options, scope=scope)
            out.letters[method] = r.answer
        memory_reader = robot.pipeline.reader_for(SCOPE_MEMORY)
        if memory_reader is not robot.pipeline.lm:
            out.letters["window_memory_reader"] = robot.pipeline.reason(
                window, options, reader=memory_reader).answer if window else None
    else:
        out.letters["memory"] = out.letters["window"] = "-"
    return out


def colour_shared(row: Mapping[str, Any], colours: Mapping[str, int]) -> bool | None:
    """Whether an object the question names shares its colour with another object of the
    world (the geometric text names colours only); None for a question naming none."""
    names = [t["name"] for t in row["targets"]]
    if not names:
        return None
    return any(colours.get(n.split()[0], 0) > 1 for n in names)


def summarise(done: Sequence[Answered], colours: Mapping[str, int]) -> dict[str, Any]:
    """Accuracy with 95 % intervals per method and horizon, recall and retrieval time, and
    the oracle split by whether the named objects' colours are unique in the world."""
    figs: dict[str, Any] = {}
    split: dict[str, Any] = {}
    for label, want in (("unique_colour", False), ("shared_colour", True)):
        hits = [float(bool(a.hit("oracle"))) for a in done
                if colour_shared(a.row, colours) is want]
        lo, hi = bootstrap_ci(hits)
        split[label] = {"n": len(hits), "oracle": round(float(np.mean(hits)), 4) if hits
                        else None, "ci95": [round(lo, 4), round(hi, 4)]}
    figs["oracle_by_colour"] = split
    for horizon in (*HORIZONS, "all"):
        group = [a for a in done if horizon == "all" or a.row["horizon"] == horizon]
        h: dict[str, Any] = {"questions": len(group)}
        for method in METHODS:
            hits = [float(x) for a in group if (x := a.hit(method)) is not None]
            lo, hi = bootstrap_ci(hits)
            h[method] = {"n": len(hits), "accuracy": round(float(np.mean(hits)), 4) if hits
                         else None, "ci95": [round(lo, 4), round(hi, 4)]}
        for key, window in (("memory_minus_window", "window"),
                            ("memory_minus_window_same_reader", "window_memory_reader")):
            paired = [a for a in group if a.hit("memory") is not None
                      and a.hit(window) is not None]
            if paired:
                d, lo, hi = paired_difference([float(bool(a.hit("memory"))) for a in paired],
                                              [float(bool(a.hit(window))) for a in paired])
                h[key] = {"n": len(paired), "points": round(100 * d, 1),
                          "ci95": [round(100 * lo, 1), round(100 * hi, 1)]}
        for key, get in (("recall", lambda a: a.recall),
                         ("window_recall", lambda a: a.window_recall)):
            flags = [float(x) for a in group for x in get(a)]
            lo, hi = bootstrap_ci(flags)
            h[key] = {"objects": len(flags), "rate": round(float(np.mean(flags)), 4)
                      if flags else None, "ci95": [round(lo, 4), round(hi, 4)]}
        ms = [a.retrieval_ms for a in group]
        h["retrieval_ms"] = {"p50": round(float(np.median(ms)), 2),
                             "p95": round(float(np.percentile(ms, 95)), 2)} if ms else {}
        figs[horizon] = h
    per_cat: dict[str, dict[str, Any]] = {}
    for cat in sorted({a.row["category"] for a in done}):
        group = [a for a in done if a.row["category"] == cat]
        per_cat[cat] = {"questions": len(group)}
        for method in METHODS:
            hits = [float(x) for a in group if (x := a.hit(method)) is not None]
            per_cat[cat][method] = round(float(np.mean(hits)), 4) if hits else None
        per_cat[cat]["undecided_oracle"] = sum(a.letters.get("oracle") is None for a in group)
    figs["by_category"] = per_cat
    return figs


def targets(figs: Mapping[str, Any]) -> list[str]:
    """The targets missed, each with by how much."""
    missed = []
    for horizon in HORIZONS:
        h = figs[horizon]
        acc = h["oracle"]["accuracy"]
        if acc is not None and acc < ORACLE_TARGET:
            missed.append(f"oracle {horizon}: {100 * acc:.1f} % < {100 * ORACLE_TARGET:.0f} % "
                          f"(by {100 * (ORACLE_TARGET - acc):.1f} points)")
        rate = h["recall"]["rate"]
        if rate is not None and rate < RECALL_TARGET:
            missed.append(f"recall {horizon}: {100 * rate:.1f} % < {100 * RECALL_TARGET:.0f} % "
                          f"(by {100 * (RECALL_TARGET - rate):.1f} points)")
    gain = figs["long"].get("memory_minus_window")
    if gain is not None and gain["points"] < 100 * GAIN_TARGET:
        missed.append(f"memory - window at long: {gain['points']:+.1f} points < "
                      f"+{100 * GAIN_TARGET:.0f} (by {100 * GAIN_TARGET - gain['points']:.1f})")
    return missed


def row_record(a: Answered) -> dict[str, Any]:
    r = a.row
    return {"id": r["id"], "category": r["category"], "horizon": r["horizon"],
            "horizon_s": r["horizon_s"], "t_ask": r["t_ask"], "question": r["question"],
            "answer": r["answer"], "letters": a.letters, "evidence": a.evidence,
            "recall": a.recall, "window_recall": a.window_recall, "frames": a.frames,
            "window_frames": a.window_frames, "retrieval_ms": round(a.retrieval_ms, 2),
            "notes": a.notes, "references": [t.get("reference") for t in r["targets"]]}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown(figs: Mapping[str, Any], missed: Sequence[str], meta: Mapping[str, Any]) -> str:
    lines = ["# Memory questions by horizon", "",
             f"World: {meta['world']}; {meta['questions']} questions; reasoner on "
             f"{meta['reasoned']} of them; {meta['seconds']:.0f} s in all.", "",
             "| horizon | questions | window (reasoner) | memory (reasoner) | memory - window, "
             "points | window (memory reader) | memory - window, same reader, points | "
             "oracle on memory | oracle on window | recall (memory) | recall "
             "(window) | retrieval p50 ms |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for horizon in (*HORIZONS, "all"):
        h = figs[horizon]

        def cell(m: str, h: Mapping[str, Any] = h) -> str:
            v = h[m]
            return (f"{pct(v['accuracy'])} [{pct(v['ci95'][0])}, {pct(v['ci95'][1])}] "
                    f"(n {v['n']})") if v["n"] else "-"

        def gain(key: str, h: Mapping[str, Any] = h) -> str:
            g = h.get(key)
            return f"{g['points']:+.1f} [{g['ci95'][0]:+.1f}, {g['ci95'][1]:+.1f}]" if g else "-"

        rec = h["recall"]
        wrec = h["window_recall"]
        lines.append(f"| {horizon} | {h['questions']} | {cell('window')} | {cell('memory')} | "
                     f"{gain('memory_minus_window')} | {cell('window_memory_reader')} | "
                     f"{gain('memory_minus_window_same_reader')} | "
                     f"{cell('oracle')} | {cell('window_oracle')} | "
                     f"{pct(rec['rate'])} ({rec['objects']}) | {pct(wrec['rate'])} | "
                     f"{h['retrieval_ms'].get('p50', '-')} |")
    lines += ["", "| category | questions | window | memory | oracle | oracle on window | "
              "oracle undecided |", "|---|---|---|---|---|---|---|"]
    for cat, c in figs["by_category"].items():
        lines.append(f"| {cat} | {c['questions']} | {pct(c['window'])} | {pct(c['memory'])} | "
                     f"{pct(c['oracle'])} | {pct(c['window_oracle'])} | "
                     f"{c['undecided_oracle']} |")
    split = figs["oracle_by_colour"]
    lines += ["", "The oracle on questions whose objects' colours are unique in the world: "
              f"{pct(split['unique_colour']['oracle'])} % (n {split['unique_colour']['n']}); "
              f"sharing a colour with another object: {pct(split['shared_colour']['oracle'])} % "
              f"(n {split['shared_colour']['n']}). The geometric perception names colours only."]
    skipped = meta.get("skipped") or {}
    if skipped:
        lines += ["", "Candidates the generator skipped because the text cannot decide them "
                  "(or for the question's own rules), by reason:", "",
                  "| category | asked | skipped by reason |", "|---|---|---|"]
        for cat, c in figs["by_category"].items():
            reasons = skipped.get(cat, {})
            lines.append(f"| {cat} | {c['questions']} | " + "; ".join(
                f"{why} {n}" for why, n in sorted(reasons.items(), key=lambda x: -x[1]))
                + " |")
    lines += ["", "Targets missed:" if missed else "Every target met.", ""]
    lines += [f"- {m}" for m in missed]
    return "\n".join(lines) + "\n"


def plot(figs: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(HORIZONS))
    labels = {"window": "window, reasoner", "memory": "memory, reasoner",
              "oracle": "memory, oracle", "window_oracle": "window, oracle",
              "window_memory_reader": "window, memory reader"}
    shown = [m for m in METHODS if any(figs[h][m]["accuracy"] is not None for h in HORIZONS)]
    width = 0.8 / len(shown)
    for k, method in enumerate(shown):
        acc = [figs[h][method]["accuracy"] for h in HORIZONS]
        lo = [figs[h][method]["ci95"][0] for h in HORIZONS]
        hi = [figs[h][method]["ci95"][1] for h in HORIZONS]
        vals = np.array([a if a is not None else np.nan for a in acc])
        err = np.array([vals - lo, np.array(hi) - vals])
        ax.bar(x + (k - (len(shown) - 1) / 2) * width, 100 * vals, width, yerr=100 * err,
               capsize=3,
               label=labels[method])
    recall = [figs[h]["recall"]["rate"] for h in HORIZONS]
    ax.plot(x, [100 * r if r is not None else np.nan for r in recall], "k^--",
            label="retrieval recall")
    ax.axhline(100 * ORACLE_TARGET, color="grey", lw=0.8, ls=":")
    ax.set_xticks(x, [f"{h}\n({figs[h]['questions']} q)" for h in HORIZONS])
    ax.set_ylabel("% correct / % retrieved")
    ax.set_ylim(0, 105)
    ax.set_title("Memory questions by horizon (95 % bootstrap intervals)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(out: Path, figs: Mapping[str, Any], missed: Sequence[str],
              meta: Mapping[str, Any], done: Sequence[Answered],
              args: argparse.Namespace, argv: Sequence[str] | None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {**meta, "figures": figs, "missed": list(missed),
              "rows": [row_record(a) for a in done]}
    write_figures(out.with_suffix(".json"), "memory_horizons", argv, args, record)
    if args.json is not None and args.json != out.with_suffix(".json"):
        write_figures(args.json, "memory_horizons", argv, args, record)
    out.with_suffix(".md").write_text(markdown(figs, missed, meta), encoding="utf-8")
    plot(figs, out.with_suffix(".png"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_world_options(parser)
    parser.add_argument("--limit", type=int, default=0,
                        help="ask only this many questions, spread over the tour (0: all)")
    parser.add_argument("--reasoner", type=reasoner_counts, default="-1",
                        help="questions per horizon the reasoner reads (-1: all, 0: none), or "
                        "per horizon: short=5,medium=5,long=-1")
    parser.add_argument("--no-embedder", action="store_true",
                        help="full-text search alone, even where the embedder is installed")
    parser.add_argument("--out", type=Path, default=None,
                        help="write OUT.json, OUT.md and OUT.png")
    add_json_option(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="memory-horizons-"))
    try:
        world = world_of(args, work)
        done, ingest = run(args, world, work)
        built = json.loads((world / "world.json").read_text())
        spec = built["spec"]
        label = f"seed {spec['seed']}, {spec['duration_s'] / 60:g} minutes"
        colours = Counter(o["name"].split()[0] for o in built["objects"])
        skipped = built.get("questions_skipped", {})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figs = summarise(done, colours)
    missed = targets(figs)
    manifest = {"world": label, "questions": len(done),
                "reasoned": sum(a.hit("memory") is not None for a in done),
                "seconds": round(time.perf_counter() - started, 1),
                "ingest": ingest, "skipped": skipped,
                "skipped_total": {c: sum(r.values()) for c, r in skipped.items()}}
    print(markdown(figs, missed, manifest))
    if args.out is not None:
        write_all(args.out, figs, missed, manifest, done, args, argv)
    elif args.json is not None:
        write_figures(args.json, "memory_horizons", argv, args,
                      {**manifest, "figures": figs, "missed": missed,
                       "rows": [row_record(a) for a in done]})
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

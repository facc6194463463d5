"""The object-map benchmark's outcomes (``bench/vlm_object_map.py``), summed up and written:
per perception, placement error and reader accuracy by horizon, every placement at the end,
retrieval times; the targets, the Markdown report and the figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.intervals import bootstrap_ci
from lab.long_world.object_spread import MAP_CATEGORIES, MOST_NAMED_SHARE, SETS
from lab.long_world.question_rules import HORIZONS as HORIZON_SPANS
from lab.long_world.questions import CATEGORIES as ALL_CATEGORIES

HORIZONS = tuple(h[0] for h in HORIZON_SPANS)
PERCEPTIONS = ("vlm", "geometric")
#: the question set each perception's records decide
OWN_SET = {"vlm": "label", "geometric": "colour"}
CATEGORIES = MAP_CATEGORIES
MEDIAN_TARGET_M = 1.0
READER_TARGET = 0.90
RETRIEVAL_TARGET_MS = 100.0
RETRIEVAL_10H_TARGET_MS = 300.0
P90_TARGET_M = 3.0
UNPLACED_TARGET = 0.10
COVERAGE_TARGET = 0.90
PER_OBJECT_TARGET = 1.2
#: at every horizon each world's questions name at least this many objects, none in more than
#: the share
OBJECTS_NAMED_TARGET = 10
NAMED_SHARE_TARGET = MOST_NAMED_SHARE
DRIFT_MARGIN_M = 1.0


@dataclass
class Asked:
    """One question answered from one perception's memory."""

    row: dict[str, Any]
    letter: str | None = None
    evidence: str = ""
    #: per object the question names: its index in the world, its placement's error in
    #: metres (None: unplaced), whether the stated uncertainty covers that error, and the
    #: error a perfect perception would make from the drifted odometry
    objects: list[int] = field(default_factory=list)
    errors: list[float | None] = field(default_factory=list)
    covered: list[bool | None] = field(default_factory=list)
    odometry: list[float | None] = field(default_factory=list)
    retrieval_ms: float = 0.0
    #: the 135M readers' letters, where they read it
    readers: dict[str, str | None] = field(default_factory=dict)

    def hit(self) -> bool:
        return self.letter is not None and self.letter == self.row["answer"]


@dataclass
class Played:
    """What one perception's tour gave."""

    perception: str
    asked: list[Asked]
    ingest: dict[str, Any]
    all_placements: list[tuple[float, float, bool]]  # error m, age s, triangulated
    unmatched: int
    hour_ms: list[float]
    hour10_ms: list[float] = field(default_factory=list)
    owned: int = 0  # placements of some true object, at the end
    objects_placed: int = 0  # the true objects they are of


def horizon_of_age(age_s: float) -> str:
    """The horizon of a sighting ``age_s`` old (no margin at the edges)."""
    return next(label for label, lo, hi in HORIZON_SPANS if lo <= age_s < hi)


# -- figures --------------------------------------------------------------------------------

def spread(values: Sequence[float], unplaced: int = 0) -> dict[str, Any]:
    """Median and 90th percentile of placement errors (m), how many, and how many unplaced."""
    v = np.asarray(values, dtype=np.float64)
    return {"n": int(len(v)), "unplaced": unplaced,
            "median": round(float(np.median(v)), 3) if len(v) else None,
            "p90": round(float(np.percentile(v, 90)), 3) if len(v) else None}


def accuracy(group: Sequence[Asked]) -> dict[str, Any]:
    hits = [float(a.hit()) for a in group]
    lo, hi = bootstrap_ci(hits)
    return {"n": len(hits), "accuracy": round(float(np.mean(hits)), 4) if hits else None,
            "ci95": [round(lo, 4), round(hi, 4)],
            "undecided": sum(a.letter is None for a in group)}


def reader_figures(group: Sequence[Asked]) -> dict[str, Any]:
    """The 135M readers' accuracy on the questions they read."""
    out: dict[str, Any] = {}
    for reader in ("memory_reader", "shipped"):
        hits = [float(a.readers[reader] == a.row["answer"]) for a in group if reader in a.readers]
        out[reader] = {"n": len(hits), "accuracy": round(float(np.mean(hits)), 4)
                       if hits else None}
    return out


def summarise(played: Played) -> dict[str, Any]:
    """One perception's figures: placement error, reader accuracy per set, the 135M readers
    on its own set, every placement at the end, retrieval."""
    asked = played.asked
    figs: dict[str, Any] = {"ingest": played.ingest, "placement_error_m": {},
                            "reader_accuracy": {s: {} for s in SETS}, "readers_135m": {},
                            "all_placements": {}}
    for horizon in (*HORIZONS, "all"):
        group = [a for a in asked if horizon == "all" or a.row["horizon"] == horizon]
        errors = [e for a in group for e in a.errors]
        figs["placement_error_m"][horizon] = spread([e for e in errors if e is not None],
                                                    sum(e is None for e in errors))
        figs.setdefault("objects", {})[horizon] = by_object(group)
        for s in SETS:
            figs["reader_accuracy"][s][horizon] = accuracy(
                [a for a in group if a.row["question_set"] == s])
        figs["readers_135m"][horizon] = reader_figures(
            [a for a in group if a.row["question_set"] == OWN_SET[played.perception]])
        ends = [e for e, age, _ in played.all_placements
                if horizon == "all" or horizon_of_age(age) == horizon]
        figs["all_placements"][horizon] = spread(ends)
    figs["all_placements"]["unmatched"] = played.unmatched
    figs["all_placements"]["triangulated"] = sum(t for _, _, t in played.all_placements)
    figs["by_category"] = {
        c: {s: accuracy([a for a in asked if a.row["category"] == c
                         and a.row["question_set"] == s]) for s in SETS} for c in CATEGORIES}
    figs["placements_per_object"] = (round(played.owned / played.objects_placed, 3)
                                     if played.objects_placed else None)
    tour = [a.retrieval_ms for a in asked]
    figs["retrieval_ms"] = {
        "tour": {"p50": round(float(np.median(tour)), 2), "p90": round(float(
            np.percentile(tour, 90)), 2), "n": len(tour)} if tour else {},
        "one_hour": {"p50": round(float(np.median(played.hour_ms)), 2), "p90": round(float(
            np.percentile(played.hour_ms, 90)), 2), "n": len(played.hour_ms)}
        if played.hour_ms else {},
        "ten_hours": {"p50": round(float(np.median(played.hour10_ms)), 2), "p90": round(float(
            np.percentile(played.hour10_ms, 90)), 2), "n": len(played.hour10_ms)}
        if played.hour10_ms else {}}
    return figs


def by_object(group: Sequence[Asked]) -> dict[str, Any]:
    """Per horizon: how many objects the questions name (objects are told apart by world and
    index; per world on average and in the world naming fewest) and the share of the mentions
    the most named one has (pooled, and in the world where it is largest), the share unplaced,
    the stated uncertainty's coverage, and the placement error as a median over objects (each
    object's median once)."""
    named: dict[tuple[str, int], list[float | None]] = {}
    covered = []
    for a in group:
        for k, e, c in zip(a.objects, a.errors, a.covered, strict=True):
            named.setdefault((a.row.get("world", ""), k), []).append(e)
            if c is not None:
                covered.append(c)
    counts = [len(v) for v in named.values()]
    placed = [float(np.median([e for e in v if e is not None])) for v in named.values()
              if any(e is not None for e in v)]
    unplaced = [e is None for v in named.values() for e in v]
    worlds = {w for w, _ in named}
    per_world = {w: [len(v) for (x, _), v in named.items() if x == w] for w in worlds}
    return {"named": len(named), "named_per_world": round(len(named) / max(len(worlds), 1), 1),
            "named_fewest_per_world": min((len(c) for c in per_world.values()), default=0),
            "most_named_share": round(max(counts) / sum(counts), 3) if counts else None,
            "most_named_share_per_world": max((round(max(c) / sum(c), 3)
                                               for c in per_world.values()), default=None),
            "unplaced_share": round(float(np.mean(unplaced)), 3) if unplaced else None,
            "coverage": round(float(np.mean(covered)), 3) if covered else None,
            "placement_error_by_object_m": spread(placed)}


def drift_figures(played: Played, share: float, yaw_deg_min: float) -> dict[str, Any]:
    """By horizon: the median placement error and the median odometry error of the same
    questions (each object a question names, placed), with drift."""
    out: dict[str, Any] = {"odometry_drift": share, "yaw_drift_deg_min": yaw_deg_min}
    for horizon in (*HORIZONS, "all"):
        pairs = [(e, o) for a in played.asked if horizon == "all" or a.row["horizon"] == horizon
                 for e, o in zip(a.errors, a.odometry, strict=True)
                 if e is not None and o is not None]
        errors = [e for e, _ in pairs]
        odo = [o for _, o in pairs]
        corr = (float(np.corrcoef(errors, odo)[0, 1])
                if len(pairs) > 2 and np.std(errors) > 0 and np.std(odo) > 0 else None)
        out[horizon] = {"n": len(pairs),
                        "median_error_m": round(float(np.median(errors)), 3) if pairs else None,
                        "median_odometry_error_m": round(float(np.median(odo)), 3)
                        if pairs else None,
                        "p90_error_m": round(float(np.percentile(errors, 90)), 3)
                        if pairs else None,
                        "correlation": None if corr is None else round(corr, 3)}
    return out


def sensitivity(figs: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of a tour at another noise setting: placement error and the rule reader
    on the labelled set by horizon, and how many placements the memory held at the end."""
    return {"placement_error_m": figs["placement_error_m"],
            "reader_accuracy": {h: figs["reader_accuracy"]["label"][h]["accuracy"]
                                for h in (*HORIZONS, "all")},
            "placements": figs["ingest"]["placements"]}


def headline(figs: Mapping[str, Any]) -> dict[str, Any]:
    """The figures the targets are stated in (the VLM's): the JSON file's top-level keys."""
    vlm = figs.get("vlm")
    if vlm is None:
        return {}
    obj = vlm["objects"]
    out = {
        "placement_error_m": {h: {k: vlm["placement_error_m"][h][k]
                                  for k in ("median", "p90", "n", "unplaced")}
                              for h in (*HORIZONS, "all")},
        "reader_accuracy": {h: vlm["reader_accuracy"]["label"][h]["accuracy"]
                            for h in (*HORIZONS, "all")},
        "retrieval_p50_ms": vlm["retrieval_ms"]["one_hour"].get("p50"),
        "retrieval_p50_ms_10h": vlm["retrieval_ms"]["ten_hours"].get("p50"),
        "unplaced_share": {h: obj[h]["unplaced_share"] for h in (*HORIZONS, "all")},
        "coverage": {h: obj[h]["coverage"] for h in (*HORIZONS, "all")},
        "placements_per_object": vlm["placements_per_object"],
        "objects_named": {h: obj[h]["named"] for h in (*HORIZONS, "all")},
        "objects_named_per_world": {h: obj[h]["named_per_world"] for h in HORIZONS},
        "objects_named_fewest_per_world": {h: obj[h]["named_fewest_per_world"]
                                           for h in HORIZONS},
        "most_named_share": {h: obj[h]["most_named_share"] for h in HORIZONS},
        "most_named_share_per_world": {h: obj[h]["most_named_share_per_world"]
                                       for h in HORIZONS},
        "placement_error_by_object_m": {h: {k: obj[h]["placement_error_by_object_m"][k]
                                            for k in ("median", "p90", "n")}
                                        for h in (*HORIZONS, "all")}}
    if "drift" in figs:
        out["drift"] = {h: {k: figs["drift"][h][k] for k in
                            ("median_error_m", "median_odometry_error_m", "n")}
                        for h in (*HORIZONS, "all")}
    return out


def _over(missed: list[str], what: str, value: float | None, limit: float, unit: str = "",
          below: bool = False) -> None:
    if value is None:
        missed.append(f"{what}: not measured")
    elif (value < limit) if below else (value > limit):
        missed.append(f"{what}: {value}{unit} {'<' if below else '>'} {limit}{unit}")


def targets(figs: Mapping[str, Any]) -> list[str]:
    """The targets the VLM's figures miss, each with by how much."""
    head = headline(figs)
    if not head:
        return []
    missed: list[str] = []
    for h in HORIZONS:
        e, o = head["placement_error_m"][h], head["placement_error_by_object_m"][h]
        _over(missed, f"median placement error {h}", e["median"], MEDIAN_TARGET_M, " m")
        _over(missed, f"p90 placement error {h}", e["p90"], P90_TARGET_M, " m")
        _over(missed, f"median placement error over objects {h}", o["median"],
              MEDIAN_TARGET_M, " m")
        _over(missed, f"p90 placement error over objects {h}", o["p90"], P90_TARGET_M, " m")
        _over(missed, f"rule reader {h}", head["reader_accuracy"][h], READER_TARGET,
              below=True)
        _over(missed, f"unplaced share {h}", head["unplaced_share"][h], UNPLACED_TARGET)
        _over(missed, f"coverage {h}", head["coverage"][h], COVERAGE_TARGET, below=True)
        _over(missed, f"objects named in the world naming fewest {h}",
              head["objects_named_fewest_per_world"][h], OBJECTS_NAMED_TARGET, below=True)
        _over(missed, f"most named object's share in a world {h}",
              head["most_named_share_per_world"][h], NAMED_SHARE_TARGET)
        if "drift" in head:
            d = head["drift"][h]
            limit = (None if d["median_odometry_error_m"] is None
                     else round(d["median_odometry_error_m"] + DRIFT_MARGIN_M, 3))
            if limit is not None:
                _over(missed, f"median error with drift {h}", d["median_error_m"], limit, " m")
    _over(missed, "placements per object", head["placements_per_object"], PER_OBJECT_TARGET)
    _over(missed, "retrieval p50 over one hour", head["retrieval_p50_ms"],
          RETRIEVAL_TARGET_MS, " ms")
    _over(missed, "retrieval p50 over ten hours", head["retrieval_p50_ms_10h"],
          RETRIEVAL_10H_TARGET_MS, " ms")
    return missed


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown(figs: Mapping[str, Any], missed: Sequence[str], meta: Mapping[str, Any]) -> str:
    done = [p for p in PERCEPTIONS if p in figs]
    lines = ["# Where things are, with a grounding VLM", "",
             f"World: {meta['world']}. Scripted VLM: box noise {meta['noise']['box_noise']:g} "
             f"of the box's size, miss rate {meta['noise']['miss_rate']:g}, wrong-label rate "
             f"{meta['noise']['wrong_label_rate']:g}; grounding `{meta['grounding']}`. "
             f"{meta['seconds']:.0f} s in all.", "",
             "Placement error (m) of the objects the questions name, by the question's horizon "
             "(median / 90th percentile, placed / unplaced):", "",
             "| horizon | " + " | ".join(done) + " |", "|---|" + "---|" * len(done)]
    for h in (*HORIZONS, "all"):
        cells = [(f"{e['median']} / {e['p90']} ({e['n']} / {e['unplaced']})"
                  if e["n"] else f"- ({e['unplaced']} unplaced)")
                 for e in (figs[p]["placement_error_m"][h] for p in done)]
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    if "vlm" in figs:
        o = figs["vlm"]["objects"]
        lines += ["", "The VLM's named objects by horizon: objects named (per world on average, "
                  "fewest in a world), the most named one's share of the mentions (pooled, "
                  "largest in a world), share unplaced, the stated uncertainty's coverage, "
                  "placement error over objects (median / p90 m):", "",
                  "| horizon | named (per world, fewest) | most named (in a world) | unplaced | "
                  "coverage | by object |", "|---|---|---|---|---|---|"]
        for h in (*HORIZONS, "all"):
            b = o[h]["placement_error_by_object_m"]
            lines.append(f"| {h} | {o[h]['named']} ({o[h]['named_per_world']}, "
                         f"{o[h]['named_fewest_per_world']}) | {o[h]['most_named_share']} "
                         f"({o[h]['most_named_share_per_world']}) | {o[h]['unplaced_share']} | "
                         f"{o[h]['coverage']} | {b['median']} / {b['p90']} |")
        lines += ["", f"Placements per true object placed: {figs['vlm']['placements_per_object']}."]
    if "drift" in figs:
        d = figs["drift"]
        lines += ["", f"With odometry drift ({d['odometry_drift']:g} of the distance, "
                  f"{d['yaw_drift_deg_min']:g} deg/min): median placement error / median "
                  "odometry error (m), correlation, n: " + "; ".join(
                      f"{h} {d[h]['median_error_m']} / {d[h]['median_odometry_error_m']}, "
                      f"r {d[h]['correlation']}, {d[h]['n']}" for h in (*HORIZONS, "all")) + "."]
    lines += ["", "The rule reader on the memory text, % right [95 % interval] (n, undecided):",
              "", "| horizon | " + " | ".join(f"{p}, {s} set" for p in done for s in SETS)
              + " |", "|---|" + "---|" * (len(done) * len(SETS))]
    for h in (*HORIZONS, "all"):
        cells = []
        for p in done:
            for s in SETS:
                a = figs[p]["reader_accuracy"][s][h]
                cells.append(f"{pct(a['accuracy'])} [{pct(a['ci95'][0])}, {pct(a['ci95'][1])}]"
                             f" ({a['n']}, {a['undecided']})" if a["n"] else "-")
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    lines += ["", "The 135M readers on each perception's own set (no target), % right (n):", "",
              "| horizon | " + " | ".join(f"{p}: memory reader | {p}: shipped reasoner"
                                         for p in done) + " |",
              "|---|" + "---|" * (2 * len(done))]
    for h in (*HORIZONS, "all"):
        cells = [f"{pct(r[k]['accuracy'])} ({r[k]['n']})"
                 for p in done for r in [figs[p]["readers_135m"][h]]
                 for k in ("memory_reader", "shipped")]
        lines.append(f"| {h} | " + " | ".join(cells) + " |")
    dec = meta["decidable"]
    lines += ["", "Questions decidable (every candidate kept), by the records' kind: colour "
              "records (geometric) / labelled records (VLM):", "",
              "| category | " + " | ".join(HORIZONS) + " |", "|---|" + "---|" * len(HORIZONS)]
    for c in ALL_CATEGORIES:
        lines.append(f"| {c} | " + " | ".join(
            f"{dec['colour'][c][h]} / {dec['label'][c][h]}" for h in HORIZONS) + " |")
    lines += ["", "Every placement at the end of the tour against its matched object, by how "
              "long ago it was seen last (median / p90 m, n): " + "; ".join(
                  f"{p}: " + ", ".join(
                      f"{h} {figs[p]['all_placements'][h]['median']} / "
                      f"{figs[p]['all_placements'][h]['p90']} ({figs[p]['all_placements'][h]['n']})"
                      for h in HORIZONS)
                  + f"; {figs[p]['all_placements']['unmatched']} matched no object"
                  for p in done) + ".", "",
              "Retrieval (selection and places block), p50 / p90 ms: " + "; ".join(
                  f"{p}: {figs[p]['retrieval_ms']['tour'].get('p50')} / "
                  f"{figs[p]['retrieval_ms']['tour'].get('p90')} during the tour, "
                  f"{figs[p]['retrieval_ms']['one_hour'].get('p50')} / "
                  f"{figs[p]['retrieval_ms']['one_hour'].get('p90')} over one hour, "
                  f"{figs[p]['retrieval_ms']['ten_hours'].get('p50')} / "
                  f"{figs[p]['retrieval_ms']['ten_hours'].get('p90')} over ten hours"
                  for p in done) + ".", ""]
    others = figs.get("vlm_wrong_label_rates") or {}
    if others:
        lines += ["The VLM's tour at other wrong-label rates (no target): median / p90 "
                  "placement error (m) and the rule reader on the labelled set, by horizon:", "",
                  "| wrong-label rate | placements at the end | " + " | ".join(HORIZONS)
                  + " |", "|---|---|" + "---|" * len(HORIZONS)]
        for rate, f in others.items():
            cells = [f"{f['placement_error_m'][h]['median']} / {f['placement_error_m'][h]['p90']}"
                     f"; {pct(f['reader_accuracy'][h])} %" for h in HORIZONS]
            lines.append(f"| {rate} | {f['placements']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Targets missed:" if missed else "Every target met.", ""]
    lines += [f"- {m}" for m in missed]
    return "\n".join(lines) + "\n"


def plot(figs: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [p for p in PERCEPTIONS if p in figs]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    x = np.arange(len(HORIZONS))
    width = 0.8 / max(len(done), 1)
    for k, p in enumerate(done):
        e = [figs[p]["placement_error_m"][h] for h in HORIZONS]
        med = np.array([v["median"] if v["median"] is not None else np.nan for v in e])
        p90 = np.array([v["p90"] if v["p90"] is not None else np.nan for v in e])
        at = x + (k - (len(done) - 1) / 2) * width
        ax.bar(at, med, width, label=f"{p}: median")
        ax.plot(at, p90, "k_", markersize=14, label="90th percentile" if k == 0 else None)
        for s, style in zip(SETS, ("o-", "s--"), strict=True):
            acc = [figs[p]["reader_accuracy"][s][h]["accuracy"] for h in HORIZONS]
            bx.plot(x, [100 * a if a is not None else np.nan for a in acc], style,
                    label=f"{p}, {s} set")
    ax.axhline(MEDIAN_TARGET_M, color="grey", lw=0.8, ls=":")
    ax.set_xticks(x, HORIZONS)
    ax.set_ylabel("placement error, m")
    ax.set_title("Named objects' placement error by horizon")
    ax.legend(fontsize=7)
    bx.axhline(100 * READER_TARGET, color="grey", lw=0.8, ls=":")
    bx.set_xticks(x, HORIZONS)
    bx.set_ylim(0, 105)
    bx.set_ylabel("% right (rule reader, memory text)")
    bx.set_title("Where is X now / how far")
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def row_record(perception: str, a: Asked) -> dict[str, Any]:
    r = a.row
    return {"perception": perception, "id": r["id"], "set": r["question_set"],
            "category": r["category"], "horizon": r["horizon"], "t_ask": r["t_ask"],
            "question": r["question"], "answer": r["answer"], "letter": a.letter,
            "evidence": a.evidence, "readers": a.readers,
            "errors_m": [None if e is None else round(e, 3) for e in a.errors],
            "covered": a.covered,
            "odometry_errors_m": [None if e is None else round(e, 3) for e in a.odometry],
            "world": r.get("world"),
            "objects": [t["name"] for t in r["targets"]],
            "retrieval_ms": round(a.retrieval_ms, 2)}

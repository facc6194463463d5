"""The object map's figures again in seconds: a kept tour's key frames placed anew and scored.

``bench/vlm_object_map.py --keep DIR`` keeps each tour's memory (every key frame's perception
record with its odometry pose), its world and its questions. This replay feeds those records,
in stamp order, to a fresh :class:`~embodied_r_ros.memory.placements.Placer` (the memory's
label matcher, with the embedder where installed) and, at each question's ask time, scores the
placements as the benchmark does (:mod:`lab.object_map_truth`): the placement error of each
named object, unplaced objects, the stated uncertainty's coverage, and the rule reader
(:mod:`lab.long_world.oracle`) on the places block written from the placements, counted from
the robot's odometry pose at the ask as the query server counts it
(:meth:`~embodied_r_ros.memory.places.Now.counted_from`). Perception and retrieval are not
run again, so a change of the placer is measured without the tours (the places block is all
the rule reader reads for the benchmark's two kinds of question). At the end of each tour,
the placements per true object placed.

Run: ``.venv/bin/python -m lab.placement_replay DIR [DIR ...] [--json OUT]`` (each DIR a
``--keep`` folder; its tours are pooled).
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.egomotion import camera_matrix
from embodied_r_ros.core.grounding import box_foot_deg
from embodied_r_ros.core.poses import StampedPose
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord
from embodied_r_ros.memory.embedder import load_embedder
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.placements import Placer, frame_rays
from embodied_r_ros.memory.places import Now, place_notes
from embodied_r_ros.memory.sqlite_store import SqliteMemoryStore
from embodied_r_ros.recordings.bags import BagReader
from lab.long_world.oracle import solve_record
from lab.long_world.question_rules import HORIZONS as HORIZON_SPANS
from lab.object_map_truth import Truth, covers
from lab.odometry_drift import drift_track
from lab.scripted_vlm import CACHE_NAME
from lab.truth_boxes import load_world, truth_table

log = logging.getLogger("placement_replay")

HORIZONS = tuple(h[0] for h in HORIZON_SPANS)
#: the question set the VLM's labelled records decide (the rule reader's target is on it)
LABEL_SET = "label"


@dataclass
class Tally:
    """The scored questions of one horizon."""

    errors: list[float] = field(default_factory=list)
    unplaced: int = 0
    #: unplaced with not one sighting in the records yet (perception missed it every time)
    unreported: int = 0
    covered: list[bool] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        named = len(self.errors) + self.unplaced
        e = np.asarray(self.errors)
        return {"named": named,
                "unplaced_share": round(self.unplaced / named, 3) if named else None,
                "unplaced_unreported_share": round(self.unreported / named, 3)
                if named else None,
                "coverage": round(float(np.mean(self.covered)), 3) if self.covered else None,
                "median_m": round(float(np.median(e)), 3) if len(e) else None,
                "p90_m": round(float(np.percentile(e, 90)), 3) if len(e) else None,
                "rule_reader": round(float(np.mean(self.hits)), 3) if self.hits else None,
                "rule_reader_n": len(self.hits)}


def tour_truth(world: Path, manifest: dict[str, Any]) -> Truth:
    """The truth of ``world`` (its objects, truth boxes and exact odometry)."""
    truth_world = load_world(world)
    table = truth_table(truth_world, world / CACHE_NAME)
    reader = BagReader(world / "bag").open()
    try:
        track = reader.read_poses(manifest["topics"]["odom"])
    finally:
        reader.close()
    exact = drift_track([t for t, _ in track], [p for _, p in track], 0.0, 0.0, seed=0)
    return Truth(truth_world.objects, table, exact)


def pose_at_ask(truth: Truth, ask: float) -> StampedPose:
    """The odometry's newest pose at ``ask``: what the tour's frame buffer held then."""
    track = truth.track
    i = max(bisect.bisect_right(track.stamps, ask + 1e-6) - 1, 0)
    return StampedPose(track.stamps[i], track.odometry[i])


def world_camera(manifest: dict[str, Any]) -> tuple[np.ndarray, int]:
    """The intrinsics of a world's images (its ``world.json``) and their height in rows."""
    cam = manifest["camera"]
    config = CameraConfig(**{k: cam[k] for k in ("fx", "fy", "cx", "cy", "width", "height")})
    return camera_matrix(config, cam["width"], cam["height"]), int(cam["height"])


def with_feet(record: FrameRecord, camera: tuple[np.ndarray, int]) -> FrameRecord:
    """``record`` with each boxed object's foot angle, as grounding now states it (a tour
    kept before grounding stated it)."""
    k, height = camera
    objects = tuple(replace(o, foot_deg=box_foot_deg(o.box, k, height))
                    if o.box is not None and o.foot_deg is None else o for o in record.objects)
    return replace(record, objects=objects)


def replay(tour: Path, matcher: LabelMatcher, tallies: dict[str, Tally],
           ends: list[dict[str, Any]], asked: list[dict[str, Any]], ranges: list[float]
           ) -> tuple[int, int]:
    """Place ``tour``'s (a ``--keep`` manifest) key frames again, scoring each question into
    ``tallies`` (each named object's also into ``asked``), each placement at the end into
    ``ends`` and each measured distance's relative error into ``ranges``; the placements of
    some true object at the end and the objects they are of."""
    kept = json.loads(tour.read_text())
    world = Path(kept["world"])
    manifest = json.loads((world / "world.json").read_text())
    truth = tour_truth(world, manifest)
    camera = world_camera(manifest)
    rows = sorted(kept["rows"], key=lambda r: (r["stamp_ns"], r["id"]))
    with SqliteMemoryStore(tour.parent / kept["memory"]) as store:
        robot = store.robots()[0]
        end = rows[-1]["stamp_ns"] / 1e9 + 1.0 if rows else math.inf
        ids = [i for i, t in store.stamps(robot, -math.inf, end)]
        frames = [r for k in range(0, len(ids), 256) for r in store.get(ids[k:k + 256])]
    frames.sort(key=lambda r: r.stamp)
    records = [with_feet(f.frame_record(), camera) for f in frames]
    reported: dict[int, float] = {}  # each object's first sighting in the records
    for record, f in zip(records, frames, strict=True):
        for _, ray in frame_rays(record, f.pose):
            k = truth.ray_object(ray.stamp, ray.angle)
            if k is not None:
                reported.setdefault(k, ray.stamp)
                if ray.distance_m is not None:  # against the distance to the object's centre
                    true = math.dist((ray.x, ray.y), truth.place(k))
                    ranges.append((ray.distance_m - true) / true)
    placer = Placer(robot, matcher=matcher)
    newest: StampedPose | None = None
    i = 0
    for row in rows:
        ask = row["stamp_ns"] / 1e9
        while i < len(frames) and frames[i].stamp <= ask + 1e-6:
            f = frames[i]
            placer.add_frame(records[i], f.pose)
            if f.pose is not None:
                newest = StampedPose(f.stamp, f.pose)
            i += 1
        now = None if newest is None else Now.counted_from(newest, pose_at_ask(truth, ask))
        placements = list(placer.placements.values())
        tally = tallies[row["horizon"]]
        for k in (t["object"] for t in row["targets"]):
            error, covered = truth.score(placements, k, ask)
            read = truth.read(placements, k)
            asked.append({"world": row["world"], "horizon": row["horizon"], "object": k,
                          "error_m": None if error is None else round(error, 3),
                          "uncertainty_m": None if read is None else round(read.uncertainty_m, 3),
                          "triangulated": None if read is None else read.triangulated,
                          "rays": None if read is None else len(read.rays),
                          "age_s": None if read is None else round(ask - read.last, 1),
                          "reported": reported.get(k, math.inf) <= ask})
            if error is None:
                tally.unplaced += 1
                tally.unreported += reported.get(k, math.inf) > ask
            else:
                tally.errors.append(error)
                tally.covered.append(bool(covered))
        if row["question_set"] == LABEL_SET and now is not None:
            notes = place_notes(placements, row["question"], row["options"], now, matcher)
            record = PerceptionRecord((), row["question"], tuple(row["options"]), "",
                                      places=notes)
            found = solve_record(row["category"], record)
            tally.hits.append(found.letter == row["answer"])
            asked[-1].update(rule_reader=tally.hits[-1], evidence=found.evidence)
    for record, f in zip(records[i:], frames[i:], strict=True):
        placer.add_frame(record, f.pose)
    owned: list[int] = []
    last = frames[-1].stamp if frames else 0.0
    for p in placer.placements.values():
        k = truth.owner(p)
        if k is None:
            continue
        owned.append(k)
        error = truth.error(p.position, k, last)
        ends.append({"error_m": round(error, 3), "uncertainty_m": round(p.uncertainty_m, 3),
                     "covered": covers(error, p.uncertainty_m),
                     "triangulated": p.triangulated, "age_s": round(last - p.last, 1),
                     "rays": len(p.rays), "label": p.label})
    return len(owned), len(set(owned))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, nargs="+",
                        help="folders bench/vlm_object_map.py --keep wrote")
    parser.add_argument("--no-embedder", action="store_true",
                        help="match labels by their words alone")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tours = sorted(t for d in args.kept for t in d.glob("vlm-main-*.json"))
    if not tours:
        parser.error("no kept tour (vlm-main-*.json) in " + ", ".join(map(str, args.kept)))
    matcher = LabelMatcher(None if args.no_embedder else load_embedder("auto"))
    tallies = {h: Tally() for h in HORIZONS}
    owned = objects = 0
    ends: list[dict[str, Any]] = []
    asked: list[dict[str, Any]] = []
    ranges: list[float] = []
    for tour in tours:
        o, n = replay(tour, matcher, tallies, ends, asked, ranges)
        owned, objects = owned + o, objects + n
        log.info("%s: %d placements of %d objects", tour, o, n)
    figs: dict[str, Any] = {h: t.figures() for h, t in tallies.items()}
    figs["placements_per_object"] = round(owned / objects, 3) if objects else None
    cover = [e["covered"] for e in ends]
    figs["at_end"] = {"placements": len(ends),
                      "coverage": round(float(np.mean(cover)), 3) if cover else None,
                      "guesses": sum(not e["triangulated"] for e in ends)}
    rel = np.asarray(ranges)
    figs["measured_distances"] = {
        "rays": len(rel), "median_relative_error": round(float(np.median(rel)), 3),
        "p90_abs_relative_error": round(float(np.percentile(np.abs(rel), 90)), 3)} if len(
        rel) else {"rays": 0}
    figs["tours"] = [str(t) for t in tours]
    print(json.dumps(figs, indent=1))
    if args.json is not None:
        detail = {**figs, "placements": ends, "asked": asked}
        args.json.write_text(json.dumps(detail, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

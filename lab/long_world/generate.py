"""Render a long world once and write it: bag, video, questions and a manifest.

The outputs have the short worlds' names and layout (``bag/`` with ``/camera/image_raw`` and
``/odom``, ``video.mp4``, ``questions.jsonl``, ``world.json``), so tools that read one read
the other. Frames are streamed; only each frame's visible pixels per object are kept, for the
questions generated last.

A question row (one JSON object a line) holds:

- ``id``, ``scene_seed``, ``world`` (``"long"``), ``category`` (see
  :data:`~lab.long_world.questions.CATEGORIES`), ``source`` (``navqa`` or
  ``embodied_r``), ``variant``;
- ``question``, ``options`` (``"A. text"``), ``answer`` (the letter), ``answer_text``;
- ``horizon`` (``short`` < 2 min, ``medium`` 2-15 min, ``long`` > 15 min) and ``horizon_s``;
- when it is asked: ``frame``, ``t_ask`` (seconds from the first frame), ``stamp_ns`` (bag
  time), and the clip it covers, as in the short worlds: ``t_start``/``t_end``,
  ``stamp_start_ns``/``stamp_end_ns`` (the tour's start to the question);
- ``targets``: per object the question needs, its index, ``name``, ``area``, the
  ``reference`` the question used, and the ``frames``/``stamps_ns`` (up to the question) that
  show it clearly: a retrieval that keeps none of them cannot have seen it;
- ``why``: the numbers the answer was decided from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from embodied_r_ros.sim.generate import (
    BAG_DIR,
    MANIFEST,
    QUESTIONS,
    VIDEO,
    WorldPaths,
    exclusive_output,
    prepare_out_dir,
)
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import EPOCH_NS, trajectory_twist
from embodied_r_ros.sim.writers import BagWriter, Mp4Writer, Topics, write_json, write_jsonl
from lab.long_world.questions import CATEGORIES, generate_long_questions, parse_counts
from lab.long_world.render import LongRenderer
from lab.long_world.sightings import Sightings
from lab.long_world.textures import make_atlases
from lab.long_world.world import LongWorld, LongWorldSpec, build_long_world

log = logging.getLogger(__name__)

LONG_GENERATOR_VERSION = 2  # bump when the same spec would render differently
LONG_QUESTIONS = 20 * len(CATEGORIES)


def long_renderer(world: LongWorld) -> LongRenderer:
    """The world's ray-cast renderer, its textures drawn from the world's seed."""
    return LongRenderer(world.plan, world.objects, make_atlases(world.plan, world.spec.seed),
                        world.camera)


def long_sightings(world: LongWorld) -> Sightings:
    """Render every frame (no files) and keep what it showed: for tests and analyses."""
    renderer = long_renderer(world)
    pixels = np.array([renderer.render(p).object_pixels for p in world.poses])
    return Sightings(Visibility.from_pixels(pixels, world.spec.width * world.spec.height,
                                            world.spec.rate_hz))


def long_manifest(world: LongWorld, sightings: Sightings, counts: Mapping[str, int],
                  rows: list[dict], skipped: Mapping[str, Mapping[str, int]],
                  topics: Topics) -> dict[str, Any]:
    """Everything needed to understand or check the outputs without re-rendering."""
    cam, plan, rate = world.camera, world.plan, world.spec.rate_hz
    gap = round(60.0 * rate)
    return {
        "generator": "embodied_r_ros.sim",
        "mode": "long",
        "generator_version": LONG_GENERATOR_VERSION,
        "spec": world.spec.to_dict(),
        "question_counts": {c: int(counts.get(c, 0)) for c in CATEGORIES},
        "questions_written": len(rows),
        "questions_skipped": {c: dict(r) for c, r in skipped.items()},
        "epoch_ns": EPOCH_NS,
        "topics": asdict(topics),
        "camera": {"width": cam.width, "height": cam.height, "fx": cam.fx, "fy": cam.fy,
                   "cx": cam.cx, "cy": cam.cy},
        "wall_height": plan.height,
        "areas": [{"name": a.name, "kind": a.kind, "x0": a.x0, "y0": a.y0, "x1": a.x1,
                   "y1": a.y1} for a in plan.areas],
        "doors": [{"areas": list(d.areas), "x": d.x, "y": d.y, "width": d.width}
                  for d in plan.doors],
        "objects": [
            {"name": o.name, "colour": o.colour, "shape": o.shape,
             "area": plan.areas[world.object_areas[k]].name, "x": round(o.x, 4),
             "y": round(o.y, 4), "size": [round(v, 4) for v in o.size],
             "yaw_deg": round(o.yaw_deg, 3),
             "sightings_s": [[round(a / rate, 3), round(b / rate, 3)]
                             for a, b in sightings.visits(k, gap)]}
            for k, o in enumerate(world.objects)
        ],
        "segments": [
            {"action": s.action, "amount": round(s.amount, 4), "t0": round(s.t0, 4),
             "duration": round(s.duration, 4)}
            for s in world.trajectory.segments
        ],
        "frames": [
            {"t": round(float(t), 4), "x": round(p.x, 5), "y": round(p.y, 5),
             "z": round(p.z, 5), "yaw_deg": round(p.yaw_deg, 4),
             "pitch_deg": round(p.pitch_deg, 4), "area": world.area_of_frame(i)}
            for i, (t, p) in enumerate(zip(world.times, world.poses, strict=True))
        ],
    }


def generate_long_world(spec: LongWorldSpec, out_dir: Path | str,
                        counts: Mapping[str, int] | str | int = LONG_QUESTIONS, *,
                        bag: bool = True, raw: bool = True, compressed: bool = False,
                        video: bool = True, force: bool = False,
                        topics: Topics | None = None) -> WorldPaths:
    """Render ``spec`` and write its bag, video, questions and manifest under ``out_dir``."""
    counts = parse_counts(counts)
    topics = topics or Topics()
    out = Path(out_dir)
    world = build_long_world(spec)
    with exclusive_output(out):
        prepare_out_dir(out, force, bag, video)
        paths = WorldPaths(out, out / BAG_DIR if bag else None, out / VIDEO if video else None,
                           out / QUESTIONS, out / MANIFEST)
        sightings = _render_and_write(world, paths, topics, raw=raw, compressed=compressed)
        rows, skipped = generate_long_questions(world, sightings, counts)
        short = {c: n for c, n in counts.items()
                 if n > sum(1 for r in rows if r["category"] == c)}
        if short:
            log.warning("geometry allowed fewer questions than asked for: %s",
                        ", ".join(f"{c} ({n} asked)" for c, n in short.items()))
        write_jsonl(paths.questions, rows)
        write_json(paths.manifest, long_manifest(world, sightings, counts, rows, skipped,
                                                 topics))
    return paths


def _render_and_write(world: LongWorld, paths: WorldPaths, topics: Topics, *, raw: bool,
                      compressed: bool) -> Sightings:
    spec = world.spec
    renderer = long_renderer(world)
    pixels = np.zeros((world.n_frames, len(world.objects)), np.int64)
    with ExitStack() as stack:
        bag_writer = stack.enter_context(BagWriter(
            paths.bag, world.camera, raw=raw, compressed=compressed, topics=topics
        )) if paths.bag else None
        mp4 = stack.enter_context(Mp4Writer(
            paths.video, spec.width, spec.height, spec.rate_hz
        )) if paths.video else None
        frames = tqdm(enumerate(world.poses), total=world.n_frames, unit="frame",
                      desc="long world", disable=None)
        for i, pose in frames:
            frame = renderer.render(pose)
            pixels[i] = frame.object_pixels
            if bag_writer:
                twist = trajectory_twist(world.trajectory, float(world.times[i]), pose)
                bag_writer.write(world.stamp_ns(i), frame.image, pose, twist)
            if mp4:
                mp4.write(frame.image)
    log.info("rendered %d frames of the long world", world.n_frames)
    return Sightings(Visibility.from_pixels(pixels, spec.width * spec.height, spec.rate_hz))

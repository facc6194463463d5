"""Accuracy of the core's visual ego-motion against the simulator's true actions, per action.

Two protocols on rendered worlds (deterministic for the seeds):

* ``segment``: for every action segment of the trajectory, the frames at its start and
  ``--window`` seconds later (inside the segment) go to ``motion_between``; the estimate's
  ``primary_action`` is compared with the segment's action. This isolates each action.
* ``keyframe``: the key frames of the whole video (``select_keyframes`` with the default
  configuration: 1 fps, overlap 0.5, clamp [4, 32]) and ``keyframe_motions`` between
  consecutive ones, as the perception pipeline uses them; the truth is ``primary_action`` of
  the true relative motion between the two key frames' poses (often a mix of segments).

A ``None`` estimate (no model fitted) counts as wrong. Bound: each protocol's overall accuracy
is at least ``--min-accuracy`` (0.85 by default; measured 0.92 and 0.90 on seeds 1-6); the
script exits 1 when either is below it.

Run: ``.venv/bin/python bench/egomotion_accuracy.py [--seeds 1 2 3] [--frames 300]
[--resolution 640x480] [--window 1.0] [--min-accuracy 0.85] [--json PATH]``
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from _figures import add_json_option, write_figures

from embodied_r_ros.core.actions import ACTIONS, primary_action
from embodied_r_ros.core.config import KeyframeConfig
from embodied_r_ros.core.egomotion import keyframe_motions, motion_between
from embodied_r_ros.core.keyframes import select_keyframes
from embodied_r_ros.core.poses import relative_motion
from embodied_r_ros.sim.render import Renderer
from embodied_r_ros.sim.world import WorldSpec, build_world

NONE = "none"
MIN_ACCURACY = 0.85


def evaluate(seeds: Sequence[int], frames: int, width: int, height: int,
             window_s: float) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """Per protocol, per true action: the list of (truth, estimate) labels."""
    out: dict[str, dict[str, list[tuple[str, str]]]] = {"segment": defaultdict(list),
                                                          "keyframe": defaultdict(list)}
    kf = KeyframeConfig()
    for seed in seeds:
        world = build_world(WorldSpec(seed=seed, frames=frames, width=width, height=height))
        renderer = Renderer(world.scene, world.camera)
        images = [renderer.render(p).image for p in world.poses]
        cam = world.camera.to_config()
        rate = world.spec.rate_hz
        for seg in world.trajectory.segments:
            i0 = math.ceil(seg.t0 * rate - 1e-9)
            i1 = min(i0 + round(window_s * rate), math.floor(seg.t1 * rate + 1e-9),
                     world.n_frames - 1)
            if i1 - i0 < round(0.5 * rate):
                continue
            est = motion_between(images[i0], images[i1], kf, cam)
            label = (primary_action(est) or NONE) if est is not None else NONE
            out["segment"][seg.action].append((seg.action, label))
        sel = select_keyframes(zip(images, (float(t) for t in world.times), strict=True), kf)
        motions = keyframe_motions(sel, kf, cam)
        for (a, b), est in zip(zip(sel.indices, sel.indices[1:], strict=False), motions,
                               strict=True):
            truth = primary_action(relative_motion(world.poses[a], world.poses[b])) or NONE
            label = (primary_action(est) or NONE) if est is not None else NONE
            out["keyframe"][truth].append((truth, label))
    return out


def report(results: dict[str, dict[str, list[tuple[str, str]]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for protocol, per_action in results.items():
        print(f"\n{protocol} protocol")
        print(f"  {'action':15s} {'n':>4s} {'correct':>8s} {'accuracy':>9s}  confused with")
        rows = {}
        total = correct = 0
        for action in (*ACTIONS, NONE):
            pairs = per_action.get(action, [])
            if not pairs:
                continue
            ok = sum(1 for t, e in pairs if t == e)
            wrong = Counter(e for t, e in pairs if t != e).most_common(2)
            confused = ", ".join(f"{e} x{n}" for e, n in wrong)
            print(f"  {action:15s} {len(pairs):4d} {ok:8d} {ok / len(pairs):9.2f}  {confused}")
            rows[action] = {"n": len(pairs), "correct": ok, "accuracy": ok / len(pairs)}
            total += len(pairs)
            correct += ok
        overall = correct / total if total else float("nan")
        print(f"  {'overall':15s} {total:4d} {correct:8d} {overall:9.2f}")
        summary[protocol] = {"per_action": rows, "n": total, "accuracy": overall}
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--resolution", default="640x480")
    p.add_argument("--window", type=float, default=1.0,
                   help="seconds between the two frames of the segment protocol")
    p.add_argument("--min-accuracy", type=float, default=MIN_ACCURACY,
                   help="bound on each protocol's overall accuracy (exit 1 below it)")
    add_json_option(p)
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.resolution.lower().split("x"))
    t0 = time.perf_counter()
    results = evaluate(args.seeds, args.frames, width, height, args.window)
    summary = report(results)
    summary["config"] = {"seeds": args.seeds, "frames": args.frames,
                         "resolution": [width, height], "window_s": args.window,
                         "min_accuracy": args.min_accuracy}
    print(f"\n{len(args.seeds)} worlds in {time.perf_counter() - t0:.1f} s")
    # NaN (no pairs at all) fails the bound too: nothing was measured
    missed = [name for name in results
              if not summary[name]["accuracy"] >= args.min_accuracy]
    for name in results:
        verdict = "MISSED" if name in missed else "met"
        print(f"{name}: accuracy {summary[name]['accuracy']:.2f}, bound "
              f">= {args.min_accuracy}: {verdict}")
    summary["missed"] = missed
    write_figures(args.json, "egomotion_accuracy", argv, args, summary)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())

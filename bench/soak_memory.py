"""Memory under load: the all-in-one answering questions for minutes while a camera streams.

The all-in-one runs as on a robot (offline profile by default: geometric perception and the
real SmolLM2-135M reasoning LM). A camera streams 640x480 frames at 10 Hz with odometry; a
client asks a question every moment it can, through the shipped client, and every tenth request
is a hostile one (a 200,000-character option, a NaN window, nine options, an unknown camera).
The process's RSS is sampled every few seconds. Printed side by side: RSS after start, after the
warm-up, at the end and at peak, and the growth rate over the time after warm-up (a
least-squares slope), with a bound.

The frame buffer fills by design until it holds ``buffer_sec`` of frames (300 s by default, up to
``buffer_max_mb``) and the decoded key-frame cache until it holds its 40 frames: growth while
they fill is not a leak. The soak therefore runs the buffer at ``--buffer-sec 60`` and counts
the first two minutes as warm-up, so that the slope measures the steady state. ``--fast-lm``
swaps the reasoning LM for the tiny random one (8 tokens): hundreds of queries instead of dozens
on a CPU, so that a per-query leak shows.

Run: ``.venv/bin/python bench/soak_memory.py [--minutes 10] [--profile offline] [--fast-lm]
[--json PATH]``
"""

from __future__ import annotations

import argparse
import math
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import rclpy
from _figures import add_json_option, write_figures
from _ros_common import Camera, NodeProcess, wait_for
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from embodied_r_ros.client import SpatialQueryClient
from embodied_r_ros.core.error_codes import INTERNAL

SLOPE_BOUND_MB_PER_MIN = 2.0
QUESTIONS = [
    ("Which way did I turn?", ["A. left", "B. right"]),
    ("What is straight ahead now?", []),
    ("Did I move forward or backward?", ["A. forward", "B. backward", "C. neither"]),
]
HOSTILE = [
    {"question": "Which way?", "options": ["A. " + "x" * 200_000]},
    {"question": "Which way?", "window_sec": math.nan},
    {"question": "Which way?", "options": [f"{c}. x" for c in "ABCDEFGHI"]},
    {"question": "Which way?", "camera": "nope" * 1000},
]


def stream(stop: threading.Event, pub: object, odom: object, camera: Camera) -> None:
    from embodied_r_ros.core.poses import Pose
    from embodied_r_ros.nodes.conversions import sec_to_stamp

    t0, i = time.monotonic(), 0
    while not stop.is_set():
        t = 1000.0 + i / 10.0
        pub.publish(camera.cdr(i, t))  # type: ignore[attr-defined]
        msg = Odometry()
        msg.header.stamp = sec_to_stamp(t)
        q = Pose(yaw_deg=2.0 * (i / 10.0)).quaternion()
        o = msg.pose.pose.orientation
        o.x, o.y, o.z, o.w = q
        odom.publish(msg)  # type: ignore[attr-defined]
        i += 1
        time.sleep(max(0.0, t0 + i / 10.0 - time.monotonic()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--profile", default="offline")
    parser.add_argument("--sample-sec", type=float, default=5.0)
    parser.add_argument("--log-level", default="warn", help="of the all-in-one (its log file)")
    parser.add_argument("--buffer-sec", type=float, default=60.0, help="the frame buffer's span")
    parser.add_argument("--warmup-min", type=float, default=2.0)
    parser.add_argument("--fast-lm", action="store_true",
                        help="reason with the tiny random LM (many more queries per minute)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="embodied_r_soak_"))
    profile = args.profile
    if args.fast_lm:
        profile = str(tmp / "fast-lm.yaml")
        Path(profile).write_text(
            f"base: {args.profile}\nreasoning:\n  model: {{backend: transformers, "
            "model: tiny-qwen2, dtype: float32, device: cpu, max_new_tokens: 8}\n")
    node_proc = NodeProcess(
        "embodied_r_ros",
        ["-p", f"profile:={profile}", "-p", "query_timeout_sec:=120.0",
         "-p", f"buffer_sec:={args.buffer_sec}",
         "-r", "image:=/soak/image_raw", "-r", "odom:=/soak/odom", "--log-level", args.log_level],
        tmp / "allinone.log",
    )
    rclpy.init(args=[])
    node = rclpy.create_node("soak_camera")
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(Image, "/soak/image_raw", reliable)
    odom = node.create_publisher(Odometry, "/soak/odom", reliable)
    client = SpatialQueryClient("/embodied_r/query", context=node.context)
    stop = threading.Event()
    samples: list[tuple[float, float]] = []
    counts = {"ok": 0, "failed": 0, "hostile": 0}
    try:
        wait_for(lambda: client.wait_for_server(1.0), 600, "the all-in-one")
        started = node_proc.memory_mb()[0]
        wait_for(lambda: pub.get_subscription_count() > 0, 60, "the camera subscription")
        camera = Camera(640, 480, n_views=90, step_px=8)
        feeder = threading.Thread(target=stream, args=(stop, pub, odom, camera), daemon=True)
        feeder.start()
        time.sleep(5.0)  # some frames in the buffer
        t0 = time.monotonic()
        end = t0 + 60.0 * args.minutes
        next_sample = t0
        n = 0
        while time.monotonic() < end:
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic() - t0, node_proc.memory_mb()[0]))
                next_sample += args.sample_sec
            if n % 10 == 9:
                bad = HOSTILE[(n // 10) % len(HOSTILE)]
                a = client.ask(bad["question"], bad.get("options", []),
                               window_sec=bad.get("window_sec", 0.0),
                               camera=bad.get("camera", ""), timeout=60)
                counts["hostile"] += int(not a.success and a.error_code != INTERNAL)
            else:
                question, options = QUESTIONS[n % len(QUESTIONS)]
                a = client.ask(question, options, window_sec=30.0, timeout=180)
                counts["ok" if a.success else "failed"] += 1
                if not a.success:
                    print(f"  query failed: {a.error_code}: {a.error}", flush=True)
            n += 1
        samples.append((time.monotonic() - t0, node_proc.memory_mb()[0]))
        peak = node_proc.memory_mb()[1]
    finally:
        stop.set()
        client.close()
        node.destroy_node()
        rclpy.try_shutdown()
        code = node_proc.stop()
    times = np.array([t for t, _ in samples]) / 60.0
    rss = np.array([m for _, m in samples])
    warm = times >= min(args.warmup_min, args.minutes / 2)
    slope = float(np.polyfit(times[warm], rss[warm], 1)[0]) if warm.sum() >= 3 else float("nan")
    after_warmup = float(rss[warm][0]) if warm.any() else float("nan")
    lm = " (tiny LM)" if args.fast_lm else ""
    print(f"Soak: {args.minutes:g} min, profile {args.profile}{lm}, buffer "
          f"{args.buffer_sec:g} s, {counts['ok']} answered, "
          f"{counts['failed']} failed, {counts['hostile']} hostile requests refused with a code, "
          f"all-in-one exit {code}")
    print(f"  RSS after start {started:7.1f} MiB | after warm-up {after_warmup:7.1f} MiB | "
          f"end {rss[-1]:7.1f} MiB | peak {peak:7.1f} MiB")
    print(f"  growth after warm-up: {slope:+.2f} MiB/min "
          f"(bound {SLOPE_BOUND_MB_PER_MIN:g} MiB/min)")
    ok = slope <= SLOPE_BOUND_MB_PER_MIN and counts["failed"] == 0 and code == 0
    print(f"  -> {'OK' if ok else 'OVER'}")
    write_figures(args.json, "soak_memory", argv, args, {
        "queries": counts, "exit_code": code,
        "rss_mib": {"after_start": started, "after_warmup": after_warmup,
                    "end": float(rss[-1]), "peak": peak},
        "growth_after_warmup_mib_per_min": slope, "bound_mib_per_min": SLOPE_BOUND_MB_PER_MIN,
        "samples_min_mib": [[round(float(t), 3), round(float(m), 1)]
                            for t, m in zip(times, rss, strict=True)],
        "ok": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

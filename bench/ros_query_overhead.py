"""Query overhead of the ROS layer: total time minus model time, for a 60 s window.

The all-in-one process runs as on a robot; its buffer holds 60 s of a 1280x720 camera (one
pre-sampled frame per second, as the 1 fps sampler keeps) with odometry. Models are the
cheapest real ones (geometric perception, tiny Qwen2 reasoning, 1 new token) so that the run is
short; what is measured is what the ROS layer adds around them: validation, the window's
key-frame selection, odometry lookup (key frames are kept decoded, not decoded per query), the
executor and the service round trip. Reported as p50/p99 of
  server overhead = total_sec - perception_sec - reasoning_sec (inside the query server), and
  round trip      = client-side wall time - perception_sec - reasoning_sec.

Run: ``.venv/bin/python bench/ros_query_overhead.py [--queries 100] [--window 60] [--json PATH]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import rclpy
from _figures import add_json_option, write_figures
from _ros_common import (
    Camera,
    NodeProcess,
    StoredFrames,
    percentile,
    spin_in_background,
    wait_for,
)
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from embodied_r_ros.client import SpatialQueryClient

CONFIG = """base: tiny
cache: {enabled: false}
perception: {backend: geometric}
reasoning: {model: {max_new_tokens: 1}}
"""
P50_BOUND_SEC = 0.020  # server overhead (total minus models)
P99_BOUND_SEC = 0.040


def odometry(t: float, yaw_deg: float) -> Odometry:
    from embodied_r_ros.core.poses import Pose
    from embodied_r_ros.nodes.conversions import sec_to_stamp

    msg = Odometry()
    msg.header.stamp = sec_to_stamp(t)
    q = Pose(yaw_deg=yaw_deg).quaternion()
    o = msg.pose.pose.orientation
    o.x, o.y, o.z, o.w = q
    return msg


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--window", type=float, default=60.0, help="seconds of buffer asked")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    add_json_option(parser)
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="embodied_r_bench_"))
    (tmp / "bench.yaml").write_text(CONFIG)
    node_proc = NodeProcess(
        "embodied_r_ros",
        ["-p", "profile:=tiny", "-p", f"config_file:={tmp / 'bench.yaml'}",
         "-p", "diagnostics_period_sec:=0.5", "-r", "image:=/bench/image_raw",
         # frames are sent fast-forward, one per stream second: nothing for a filter to do
         "-p", "stamp_filter:=false",
         "-r", "odom:=/odom", "--log-level", "warn"],
        tmp / "allinone.log",
    )
    rclpy.init(args=[])
    node = rclpy.create_node("bench_client")
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(Image, "/bench/image_raw", reliable)
    odom = node.create_publisher(Odometry, "/odom", reliable)
    client = SpatialQueryClient("/embodied_r/query", context=node.context)
    stored = StoredFrames(node, "/embodied_r/frames/front/stored")
    executor, thread = spin_in_background(node)
    server, trip, frames = [], [], []
    try:
        camera = Camera(args.width, args.height, n_views=120, step_px=24)
        wait_for(lambda: client.wait_for_server(1.0), 300, "the all-in-one")
        wait_for(lambda: pub.get_subscription_count() > 0 and odom.get_subscription_count() > 0
                 and stored.sub.get_publisher_count() > 0, 60,
                 "the camera, odometry and stored-frame subscriptions")
        n = round(args.window) + 1
        for s in range(n):  # one frame per stream second: what 1 fps sampling keeps
            odom.publish(odometry(500.0 + s, yaw_deg=3.0 * s))
            stored.send(pub.publish, camera.cdr(s * 30, 500.0 + s), 500.0 + s)
        for i in range(args.queries + 5):
            t0 = time.perf_counter()
            r = client.ask("Which way did I turn?", ["A. left", "B. right"],
                           window_sec=args.window, timeout=60)
            wall = time.perf_counter() - t0
            if not r.success:
                raise SystemExit(f"query failed: {r.error_code} {r.error}")
            if i < 5:
                continue  # warm-up
            models = r.perception_sec + r.reasoning_sec
            server.append(r.total_sec - models)
            trip.append(wall - models)
            frames.append(len(r.key_frame_stamps))
    finally:
        client.close()
        executor.shutdown()
        thread.join(timeout=5)
        node.destroy_node()
        rclpy.try_shutdown()
        node_proc.stop()

    def ms(xs: list[float], q: float) -> str:
        return f"{1000 * percentile(xs, q):7.1f} ms"

    print(f"Query overhead over a {args.window:g} s window ({args.width}x{args.height} camera, "
          f"{statistics.median(frames):.0f} key frames per query, {len(server)} queries)")
    print(f"  server overhead (total - models): p50 {ms(server, 50)}  p99 {ms(server, 99)}")
    print(f"  client round trip - models:       p50 {ms(trip, 50)}  p99 {ms(trip, 99)}")
    ok = percentile(server, 50) <= P50_BOUND_SEC and percentile(server, 99) <= P99_BOUND_SEC
    print(f"  bounds: server overhead p50 <= {1000 * P50_BOUND_SEC:.0f} ms, p99 <= "
          f"{1000 * P99_BOUND_SEC:.0f} ms -> {'OK' if ok else 'OVER'}")
    write_figures(args.json, "ros_query_overhead", argv, args, {
        "key_frames_median": statistics.median(frames), "queries": len(server),
        "server_overhead_ms": {"p50": 1000 * percentile(server, 50),
                               "p99": 1000 * percentile(server, 99)},
        "round_trip_minus_models_ms": {"p50": 1000 * percentile(trip, 50),
                                       "p99": 1000 * percentile(trip, 99)},
        "bounds_ms": {"p50": 1000 * P50_BOUND_SEC, "p99": 1000 * P99_BOUND_SEC}, "ok": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

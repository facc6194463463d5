"""Frame-buffer ingestion cost: a 30 Hz 1280x720 rgb8 camera into the frame-buffer node,
the old path and the new one side by side.

Real-rate phase (``--seconds`` of stream, for each path in its own node process): the node's
CPU time per second of stream, from /proc of the node's process. Old path (``raw_ingest: false,
stamp_filter: false``): every frame crosses Fast DDS into the process and rclpy deserialises
every 2.6 MiB message before the stamp check throws 29 of 30 away; raw: the subscription is
raw, the stamp is read from the CDR bytes and only kept frames are deserialised; new (the
default): raw, and once the sampling grid is known a DDS content filter on ``header.stamp``
lets only the frames near the grid times (about 3 a second) reach the process at all. Memory
phase (new path; fast-forward to ``--minutes`` of stream): only the frames
the 1 fps pre-sampler keeps are sent, which leaves the buffer exactly as a real-rate stream
would; then the node's memory is read. Both are checked against bounds.

Run: ``.venv/bin/python bench/ros_ingest.py [--seconds 30] [--minutes 10]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import rclpy
from _ros_common import (
    Camera,
    Diagnostics,
    NodeProcess,
    bench_env,
    spin_in_background,
    wait_for,
)
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

CPU_BOUND = 0.10  # core-seconds per second of stream, new path
STATUS = "embodied_r: camera front"


PATHS = {  # name: (raw_ingest, stamp_filter, what it is)
    "old": (False, False, "rclpy deserialises every message"),
    "raw": (True, False, "stamp read from the CDR bytes, kept frames deserialised"),
    "new": (True, True, "raw + a DDS content filter on the stamp (the default)"),
}


def start_node(path: str, args: argparse.Namespace, log: Path) -> NodeProcess:
    raw, flt, _ = PATHS[path]
    return NodeProcess(
        "embodied_r_ros.nodes.frame_buffer",
        ["-p", "profile:=offline", "-p", "diagnostics_period_sec:=0.5",
         "-p", f"buffer_max_mb:={args.buffer_mb}", "-p", f"raw_ingest:={str(raw).lower()}",
         "-p", f"stamp_filter:={str(flt).lower()}", "-r", "image:=/bench/image_raw"],
        log,
    )


def real_rate(node_proc: NodeProcess, pub: object, diag: Diagnostics, camera: Camera,
              args: argparse.Namespace, t_stream: float) -> tuple[float, float, int]:
    """(CPU core-s per second of stream, frames delivered, frames sent)."""
    period = 1.0 / args.fps
    n_real = round(args.seconds * args.fps)
    cpu0, wall0 = node_proc.cpu_sec(), time.monotonic()
    for i in range(n_real):
        delay = wall0 + i * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pub.publish(camera.cdr(i, t_stream + i * period))  # type: ignore[attr-defined]
    time.sleep(1.0)  # the last frames are processed
    cpu = node_proc.cpu_sec() - cpu0
    return cpu / (n_real * period), diag.get(STATUS, "frames_received"), n_real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="real-rate phase length, for each path")
    parser.add_argument("--minutes", type=float, default=10.0, help="stream length for memory")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--buffer-mb", type=float, default=64.0)
    args = parser.parse_args()

    tmp = Path(tempfile.gettempdir())
    bench_env()  # this process and the nodes it starts share one private domain
    rclpy.init(args=[])
    node = rclpy.create_node("bench_camera")
    pub = node.create_publisher(Image, "/bench/image_raw",
                                QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))
    diag = Diagnostics(node)
    executor, thread = spin_in_background(node)
    camera = Camera(args.width, args.height)
    results: dict[str, tuple[float, float, int]] = {}
    node_proc = None
    try:
        for path in PATHS:
            node_proc = start_node(path, args, tmp / f"embodied_r_bench_ingest_{path}.log")
            wait_for(lambda: pub.get_subscription_count() > 0, 60, "the frame buffer")
            diag.values.clear()
            wait_for(lambda: STATUS in diag.values, 30, "its diagnostics")
            rss_idle, _ = node_proc.memory_mb()
            t_stream = 1000.0
            results[path] = real_rate(node_proc, pub, diag, camera, args, t_stream)
            if path != "new":
                node_proc.stop()
                wait_for(lambda: pub.get_subscription_count() == 0, 30, "the old node to go")
        # memory: fast-forward the new path's node, one frame per stream second
        assert node_proc is not None
        stream_real = args.seconds
        n_total_sec = round(args.minutes * 60)
        for s in range(round(stream_real) + 1, n_total_sec):
            pub.publish(camera.cdr(s * round(args.fps), 1000.0 + s))
            time.sleep(0.03)
        target = min(n_total_sec - stream_real, 300) - 3
        wait_for(lambda: diag.get(STATUS, "buffer_span_sec") >= target, 60,
                 f"the buffer to fill ({diag.values.get(STATUS)})")
        time.sleep(1.0)
        rss, peak = node_proc.memory_mb()
        buffer_mb = diag.get(STATUS, "buffer_size_mb")
        buffer_frames = diag.get(STATUS, "buffer_frames")
        span = diag.get(STATUS, "buffer_span_sec")
    finally:
        executor.shutdown()
        thread.join(timeout=5)
        node.destroy_node()
        rclpy.try_shutdown()
        if node_proc is not None:
            node_proc.stop()

    mem_bound = rss_idle + args.buffer_mb + 64
    print(f"Frame-buffer ingestion, {args.width}x{args.height} rgb8 at {args.fps:g} Hz "
          f"({camera.bytes_per_frame / 2**20:.1f} MiB/frame, "
          f"{camera.bytes_per_frame * args.fps / 2**20:.0f} MiB/s over loopback DDS), "
          f"{args.seconds:g} s of stream per path")
    for path, (_raw, _flt, label) in PATHS.items():
        cpu, received, sent = results[path]
        print(f"  {path:>3s} ({label}): {cpu:.3f} core-s per s of stream, "
              f"{received:.0f}/{sent} frames delivered to the node")
    cpu_per_sec = results["new"][0]
    print(f"  ratio old/new: {results['old'][0] / cpu_per_sec:.1f}x; new bound {CPU_BOUND} "
          f"-> {'OK' if cpu_per_sec <= CPU_BOUND else 'OVER'}")
    print(f"  after {args.minutes:g} min of stream: RSS {rss:.0f} MiB (idle {rss_idle:.0f}, "
          f"peak {peak:.0f}; bound {mem_bound:.0f}) -> {'OK' if peak <= mem_bound else 'OVER'}")
    print(f"  buffer: {buffer_frames:.0f} frames, {span:.0f} s, {buffer_mb:.1f} MiB of JPEG "
          f"(buffer_sec 300, buffer_max_mb {args.buffer_mb:g})")
    return 0 if cpu_per_sec <= CPU_BOUND and peak <= mem_bound else 1


if __name__ == "__main__":
    raise SystemExit(main())

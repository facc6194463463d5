"""Frame-buffer ingestion cost: a 30 Hz 1280x720 rgb8 camera into the frame-buffer node.

Phase 1 (real rate, ``--seconds`` of stream): the node's CPU time per second of stream, from
/proc of the node's own process; every frame crosses Fast DDS on loopback and ~29 of 30 are
refused on their stamp before decoding. Phase 2 (fast-forward to ``--minutes`` of stream): only
the frames the 1 fps pre-sampler keeps are sent, which leaves the buffer exactly as a real-rate
stream would; then the node's memory is read. Both are checked against bounds.

Run: ``.venv/bin/python bench/ros_ingest.py [--seconds 60] [--minutes 10]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import rclpy
from _ros_common import Camera, Diagnostics, NodeProcess, spin_in_background, wait_for
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

CPU_BOUND = 0.5  # core-seconds per second of stream
STATUS = "embodied_r: camera front"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="real-rate phase length")
    parser.add_argument("--minutes", type=float, default=10.0, help="stream length for memory")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--buffer-mb", type=float, default=64.0)
    args = parser.parse_args()

    log = Path(tempfile.gettempdir()) / "embodied_r_bench_ingest.log"
    node_proc = NodeProcess(
        "embodied_r_ros.nodes.frame_buffer",
        ["-p", "profile:=offline", "-p", "diagnostics_period_sec:=0.5",
         "-p", f"buffer_max_mb:={args.buffer_mb}", "-r", "image:=/bench/image_raw"],
        log,
    )
    rclpy.init(args=[])
    node = rclpy.create_node("bench_camera")
    pub = node.create_publisher(Image, "/bench/image_raw",
                                QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))
    diag = Diagnostics(node)
    executor, thread = spin_in_background(node)
    try:
        camera = Camera(args.width, args.height)
        wait_for(lambda: pub.get_subscription_count() > 0, 60, "the frame buffer")
        wait_for(lambda: STATUS in diag.values, 30, "its diagnostics")
        rss_idle, _ = node_proc.memory_mb()
        period = 1.0 / args.fps
        n_real = round(args.seconds * args.fps)
        t_stream = 1000.0
        cpu0, wall0 = node_proc.cpu_sec(), time.monotonic()
        for i in range(n_real):
            delay = wall0 + i * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pub.publish(camera.cdr(i, t_stream + i * period))
        time.sleep(1.0)  # the last frames are processed
        cpu_real = node_proc.cpu_sec() - cpu0
        received = diag.get(STATUS, "frames_received")
        stream_real = n_real * period
        # Phase 2: fast-forward. One frame per stream second (what 1 fps sampling keeps).
        n_total_sec = round(args.minutes * 60)
        for s in range(round(stream_real), n_total_sec):
            pub.publish(camera.cdr(s * round(args.fps), t_stream + s))
            time.sleep(0.03)
        target = min(n_total_sec - stream_real, 300) - 2
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
        node_proc.stop()

    cpu_per_sec = cpu_real / stream_real
    mem_bound = rss_idle + args.buffer_mb + 64
    print(f"Frame-buffer ingestion, {args.width}x{args.height} rgb8 at {args.fps:g} Hz "
          f"({camera.bytes_per_frame / 2**20:.1f} MiB/frame, "
          f"{camera.bytes_per_frame * args.fps / 2**20:.0f} MiB/s over loopback DDS)")
    print(f"  real-rate phase: {stream_real:.0f} s of stream, {received:.0f}/{n_real} frames "
          f"delivered to the node")
    print(f"  CPU time per second of stream: {cpu_per_sec:.3f} core-s "
          f"(bound {CPU_BOUND}) -> {'OK' if cpu_per_sec <= CPU_BOUND else 'OVER'}")
    print(f"  after {args.minutes:g} min of stream: RSS {rss:.0f} MiB (idle {rss_idle:.0f}, "
          f"peak {peak:.0f}; bound {mem_bound:.0f}) -> {'OK' if peak <= mem_bound else 'OVER'}")
    print(f"  buffer: {buffer_frames:.0f} frames, {span:.0f} s, {buffer_mb:.1f} MiB of JPEG "
          f"(buffer_sec 300, buffer_max_mb {args.buffer_mb:g})")
    return 0 if cpu_per_sec <= CPU_BOUND and peak <= mem_bound else 1


if __name__ == "__main__":
    raise SystemExit(main())

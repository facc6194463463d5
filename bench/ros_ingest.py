"""Frame-buffer ingestion cost: a 30 Hz 1280x720 rgb8 camera into the frame-buffer node,
with and without the DDS content filter on the stamp, side by side.

Real-rate phase (``--seconds`` of stream, for each path in its own node process): the node's
CPU time per second of stream, from /proc of the node's process. Both paths subscribe raw: the
stamp is read from the CDR bytes and only the frames the 1 fps pre-sampler keeps are
deserialised. ``unfiltered`` (``stamp_filter: false``): every frame still crosses Fast DDS into
the process; ``filtered`` (the default): once the sampling grid is known, a DDS content filter
on ``header.stamp`` lets only the frames near the grid times (about 3 a second) reach the
process at all. Memory phase (filtered path; fast-forward to ``--minutes`` of stream): only the
frames the pre-sampler keeps are sent, which leaves the buffer exactly as a real-rate stream
would; then the node's memory is read. Both are checked against bounds.

Memory bound: RSS (its peak) at most idle + ``buffer_max_mb`` + 64 MiB + ``IMAGE_HISTORY`` + 3
frames (the DDS history, and while a frame is processed its serialised bytes, the deserialised
message and the decoded array): 119 MiB more at 4K ``rgb8``, 13 MiB at 720p.

Run: ``.venv/bin/python bench/ros_ingest.py [--seconds 30] [--minutes 10] [--json PATH]``; 4K:
``--width 3840 --height 2160 --fps 46 --views 6 --paths filtered``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import rclpy
from _figures import add_json_option, write_figures
from _ros_common import (
    Camera,
    Diagnostics,
    NodeProcess,
    StoredFrames,
    bench_env,
    spin_in_background,
    wait_for,
)
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from embodied_r_ros.nodes.transport import IMAGE_HISTORY

CPU_BOUND = 0.10  # core-seconds per second of stream, filtered path
WORKING_COPIES = 3  # frame-sized copies while one frame is processed (see the bound below)
STATUS = "embodied_r: camera front"


PATHS = {  # name: (stamp_filter, what it is)
    "unfiltered": (False, "every frame reaches the process, its stamp read from the CDR bytes"),
    "filtered": (True, "a DDS content filter on the stamp before the process, the default"),
}
MEASURED = "filtered"  # the default: the bounds apply to it, the memory phase runs on it


def start_node(path: str, args: argparse.Namespace, log: Path) -> NodeProcess:
    stamp_filter, _ = PATHS[path]
    return NodeProcess(
        "embodied_r_ros.nodes.frame_buffer",
        ["-p", "profile:=offline", "-p", "diagnostics_period_sec:=0.5",
         "-p", f"buffer_max_mb:={args.buffer_mb}",
         "-p", f"stamp_filter:={str(stamp_filter).lower()}", "-r", "image:=/bench/image_raw"],
        log, env=dict(e.split("=", 1) for e in args.node_env),
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0,
                        help="real-rate phase length, for each path")
    parser.add_argument("--minutes", type=float, default=10.0, help="stream length for memory")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--buffer-mb", type=float, default=64.0)
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS),
                        help=f"ingestion paths to compare (the memory phase needs {MEASURED!r})")
    parser.add_argument("--node-env", nargs="*", default=[], metavar="NAME=VALUE",
                        help="extra environment of the node process (e.g. malloc tunables)")
    parser.add_argument("--views", type=int, default=90,
                        help="distinct camera views pre-serialised (fewer for 4K: RAM)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if MEASURED not in args.paths:
        parser.error(f"--paths must include {MEASURED!r} (the memory phase runs on it)")
    paths = [p for p in PATHS if p in args.paths]

    tmp = Path(tempfile.gettempdir())
    bench_env()  # this process and the nodes it starts share one private domain
    rclpy.init(args=[])
    node = rclpy.create_node("bench_camera")
    pub = node.create_publisher(Image, "/bench/image_raw",
                                QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))
    diag = Diagnostics(node)
    stored = StoredFrames(node, "/frames/front/stored")
    executor, thread = spin_in_background(node)
    camera = Camera(args.width, args.height, n_views=args.views)
    results: dict[str, tuple[float, float, int]] = {}
    stream_rss: dict[str, tuple[float, float, float]] = {}  # idle, after, peak
    node_proc = None
    try:
        for path in paths:
            node_proc = start_node(path, args, tmp / f"embodied_r_bench_ingest_{path}.log")
            wait_for(lambda: pub.get_subscription_count() > 0, 60, "the frame buffer")
            diag.values.clear()
            wait_for(lambda: STATUS in diag.values, 30, "its diagnostics")
            rss_idle, _ = node_proc.memory_mb()
            print(f"  [{path}] RSS by kind idle: {node_proc.memory_split_mb()}", flush=True)
            t_stream = 1000.0
            results[path] = real_rate(node_proc, pub, diag, camera, args, t_stream)
            stream_rss[path] = (rss_idle, *node_proc.memory_mb())
            print(f"  [{path}] RSS by kind after the stream: {node_proc.memory_split_mb()}",
                  flush=True)
            if path != MEASURED:
                node_proc.stop()
                wait_for(lambda: pub.get_subscription_count() == 0, 30, "its node to go")
        # memory: fast-forward the filtered path's node, one frame per stream second, each
        # sent once the one before is stored
        assert node_proc is not None
        wait_for(lambda: stored.sub.get_publisher_count() > 0, 30, "the stored frames")
        stream_real = args.seconds
        n_total_sec = round(args.minutes * 60)
        for s in range(round(stream_real) + 1, n_total_sec):
            stored.send(pub.publish, camera.cdr(s * round(args.fps), 1000.0 + s), 1000.0 + s)
        target = min(n_total_sec - stream_real, 300) - 3
        wait_for(lambda: diag.get(STATUS, "buffer_span_sec") >= target, 60,
                 f"the buffer to fill ({diag.values.get(STATUS)})")
        time.sleep(1.0)
        rss, peak = node_proc.memory_mb()
        split = node_proc.memory_split_mb()
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
    # while a frame is processed: the DDS history and the working copies of one frame (the
    # serialised bytes, the deserialised message, the decoded array)
    frame_mb = camera.bytes_per_frame / 2**20
    peak_bound = mem_bound + (IMAGE_HISTORY + WORKING_COPIES) * frame_mb
    print(f"Frame-buffer ingestion, {args.width}x{args.height} rgb8 at {args.fps:g} Hz "
          f"({camera.bytes_per_frame / 2**20:.1f} MiB/frame, "
          f"{camera.bytes_per_frame * args.fps / 2**20:.0f} MiB/s over loopback DDS), "
          f"{args.seconds:g} s of stream per path")
    for path in paths:
        cpu, received, sent = results[path]
        idle, after, top = stream_rss[path]
        print(f"  {path:>10s} ({PATHS[path][1]}): {cpu:.3f} core-s per s of stream, "
              f"{received:.0f}/{sent} frames delivered to the node; RSS idle {idle:.0f}, "
              f"after the stream {after:.0f}, peak {top:.0f} MiB")
    cpu_per_sec = results[MEASURED][0]
    ratio = (f"ratio unfiltered/filtered: {results['unfiltered'][0] / cpu_per_sec:.1f}x; "
             if "unfiltered" in results else "")
    print(f"  {ratio}filtered bound {CPU_BOUND} -> "
          f"{'OK' if cpu_per_sec <= CPU_BOUND else 'OVER'}")
    mem_ok = peak <= peak_bound
    print(f"  after {args.minutes:g} min of stream: RSS {rss:.0f} MiB, peak {peak:.0f} (idle "
          f"{rss_idle:.0f}; idle + buffer_max_mb + 64 = {mem_bound:.0f}, + "
          f"{IMAGE_HISTORY + WORKING_COPIES} frames = {peak_bound:.0f}, the bound) -> "
          f"{'OK' if mem_ok else 'OVER'}")
    print("  RSS by kind at the end: " + ", ".join(f"{k} {v:.0f}" for k, v in split.items())
          + " MiB")
    print(f"  buffer: {buffer_frames:.0f} frames, {span:.0f} s, {buffer_mb:.1f} MiB of JPEG "
          f"(buffer_sec 300, buffer_max_mb {args.buffer_mb:g})")
    ok = cpu_per_sec <= CPU_BOUND and mem_ok
    write_figures(args.json, "ros_ingest", argv, args, {
        "frame_mib": frame_mb,
        "cpu_core_s_per_s": {p: results[p][0] for p in paths},
        "frames_delivered": {p: results[p][1] for p in paths},
        "frames_sent": {p: results[p][2] for p in paths},
        "rss_mib_idle_after_peak": {p: list(stream_rss[p]) for p in paths},
        "cpu_bound": CPU_BOUND,
        "memory": {"rss_mib": rss, "peak_mib": peak, "idle_mib": rss_idle,
                   "peak_bound_mib": peak_bound, "by_kind_mib": split,
                   "buffer_frames": buffer_frames, "buffer_span_s": span,
                   "buffer_mib": buffer_mb},
        "ok": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""What watching costs: the all-in-one process's CPU time per second of a 30 Hz 1280x720 rgb8
camera stream, with the viewer off, on with no client, and on with a Foxglove client subscribed
to every channel, side by side over repeated rounds (each mode in its own process, the modes
interleaved in each round so a busy machine weighs on all of them alike).

The process is ``python -m embodied_r_ros`` on the ``tiny`` profile (its models built into a
temporary cache), perception per query and the memory off, so what is measured is ingestion and
what the viewer adds to it: the new ROS topics (``~/path``, ``~/boxes/<camera>``, ...) have no
subscriber in any mode, the key frames and the path go to the client when it is connected.
Target: viewer on with a client at most 0.05 core-s per s (5 % of a core) above off.

Run: ``.venv/bin/python bench/viewer_cost.py [--seconds 15] [--rounds 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import rclpy
from _figures import add_json_option, write_figures
from _ros_common import Camera, NodeProcess, bench_env, spin_in_background, wait_for
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from lab.foxglove_client import FoxgloveClient

TARGET = 0.05  # core-s per s of stream, on with a client minus off
MODES = {"off": "viewer.enabled false", "on": "viewer on, no client",
         "client": "viewer on, a Foxglove client subscribed to every channel"}
CONFIG = "base: tiny\ncache: {{enabled: false}}\nviewer: {{enabled: {on}, port: {port}}}\n"
NS = "/embodied_r"
CHANNELS = [f"{NS}/frame_buffer/key_frames", f"{NS}/frame_buffer/path",
            f"{NS}/perception/boxes/front", f"{NS}/query/trace", f"{NS}/query/key_frames"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(mode: str, args: argparse.Namespace, pub: object, camera: Camera, tmp: Path,
            env: dict[str, str], t0: float, key_frames: list[int]) -> float:
    """Core-s of the process per s of stream in ``mode`` (the key frames a client received
    appended to ``key_frames``)."""
    port = free_port()
    config = tmp / f"viewer_{mode}.yaml"
    config.write_text(CONFIG.format(on=str(mode != "off").lower(), port=port))
    proc = NodeProcess("embodied_r_ros", ["-p", "profile:=tiny", "-p", f"config_file:={config}",
                                          "-r", "image:=/bench/image_raw"],
                       tmp / f"viewer_cost_{mode}.log", env=env)
    client = None
    try:
        wait_for(lambda: pub.get_subscription_count() > 0, 180,  # type: ignore[attr-defined]
                 f"the all-in-one ({mode})")
        if mode == "client":
            client = FoxgloveClient(f"ws://127.0.0.1:{port}")
            client.subscribe(CHANNELS)
        period = 1.0 / args.fps
        n = round(args.seconds * args.fps)
        for i in range(round(2 * args.fps)):  # warm-up: the sampling grid and filter settle
            pub.publish(camera.cdr(i, t0 + i * period))  # type: ignore[attr-defined]
            time.sleep(period)
        start = round(2 * args.fps)
        cpu0, wall0 = proc.cpu_sec(), time.monotonic()
        for i in range(n):
            delay = wall0 + i * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pub.publish(camera.cdr(start + i, t0 + (start + i) * period))  # type: ignore[attr-defined]
        time.sleep(1.0)
        cpu = (proc.cpu_sec() - cpu0) / args.seconds
        if client is not None:
            frames = len(client.messages[CHANNELS[0]])
            paths = len(client.messages[CHANNELS[1]])
            print(f"    the client received {frames} key frames and {paths} paths", flush=True)
            key_frames.append(frames)
        return cpu
    finally:
        if client is not None:
            client.close()
        proc.stop()
        wait_for(lambda: pub.get_subscription_count() == 0, 60,  # type: ignore[attr-defined]
                 "the process to go")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="stream per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each mode")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--step-px", type=int, default=48,
                        help="the camera's pan per frame: 48 makes about every sampled frame a "
                             "key frame (the viewer's heaviest case); 8 is the ingestion "
                             "benchmark's slow pan")
    add_json_option(parser)
    args = parser.parse_args(argv)

    from embodied_r_ros.backends.offline import ensure_offline_model

    tmp = Path(tempfile.mkdtemp(prefix="viewer_cost_"))
    for name in ("tiny-qwen2", "tiny-qwen2.5-vl"):
        ensure_offline_model(name, tmp / "models")
    env = {"EMBODIED_R_MODEL_CACHE": str(tmp / "models"), "OMP_NUM_THREADS": "1"}
    bench_env()
    rclpy.init(args=[])
    node = rclpy.create_node("bench_camera")
    pub = node.create_publisher(Image, "/bench/image_raw",
                                QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))
    executor, thread = spin_in_background(node)
    camera = Camera(args.width, args.height, n_views=30, step_px=args.step_px)
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    key_frames: list[int] = []
    try:
        for r in range(args.rounds):
            for mode in MODES:
                cpu[mode].append(measure(mode, args, pub, camera, tmp, env, 1000.0 + 1e4 * r,
                                         key_frames))
                print(f"  round {r + 1} {mode:>6s}: {cpu[mode][-1]:.3f} core-s per s",
                      flush=True)
    finally:
        executor.shutdown()
        thread.join(timeout=5)
        node.destroy_node()
        rclpy.try_shutdown()

    median = {m: statistics.median(v) for m, v in cpu.items()}
    extra = median["client"] - median["off"]
    print(f"All-in-one CPU at {args.width}x{args.height} rgb8, {args.fps:g} Hz, "
          f"{args.seconds:g} s x {args.rounds} rounds (median core-s per s of stream):")
    for mode, what in MODES.items():
        runs = ", ".join(f"{v:.3f}" for v in cpu[mode])
        print(f"  {mode:>6s} ({what}): {median[mode]:.3f}  [{runs}]")
    print(f"  on with a client - off: {extra:+.3f} (target <= {TARGET}) -> "
          f"{'OK' if extra <= TARGET else 'OVER'}; on/off ratio "
          f"{median['on'] / median['off']:.2f}, client/off {median['client'] / median['off']:.2f}")
    write_figures(args.json, "viewer_cost", argv, args, {
        "cpu_core_s_per_s": cpu, "median": median, "client_minus_off": extra,
        "client_key_frames": key_frames,
        "target": TARGET, "ok": extra <= TARGET})
    return 0 if extra <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())

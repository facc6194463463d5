"""Shared by the ROS benchmarks: a node process to measure, a camera to feed it, diagnostics.

The measured node runs in its own process (as on a robot), so its CPU time and memory come
from ``/proc/<pid>`` without the benchmark's own publishing mixed in. Frames are published as
pre-serialised CDR with the stamp patched in place, so the publisher's cost stays small.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

CLK_TCK = os.sysconf("SC_CLK_TCK")


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(30, 99)))
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    # The benchmark publishes the frames: shared memory, as a tuned camera driver would.
    from embodied_r_ros.nodes.transport import use_large_frame_transport

    use_large_frame_transport()
    return env


class NodeProcess:
    """``python -m <module> --ros-args ...`` with CPU and memory readings from /proc."""

    def __init__(self, module: str, ros_args: Sequence[str], log: Path,
                 env: dict[str, str] | None = None) -> None:
        self._log = log.open("w")
        # a native crash (abort) prints every Python thread's stack into the log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--ros-args", *ros_args],
            env={**bench_env(), "PYTHONFAULTHANDLER": "1", **(env or {})}, stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def cpu_sec(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime

    def memory_mb(self) -> tuple[float, float]:
        """(current RSS, peak RSS) in MiB."""
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text()
            .splitlines() if ":" in line
        )
        return (int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024)

    def memory_split_mb(self) -> dict[str, float]:
        """RSS by kind in MiB: ``anon`` (heap, malloc), ``file`` (code), ``shmem`` (shared
        memory mapped in, e.g. a Fast DDS sender's segment)."""
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text()
            .splitlines() if ":" in line
        )
        return {kind: int(status[f"Rss{kind.capitalize()}"].split()[0]) / 1024
                for kind in ("anon", "file", "shmem")}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()
        return int(self.proc.returncode or 0)


def textured_canvas(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = cv2.resize(rng.integers(0, 255, (h // 16, w // 16, 3), dtype=np.uint8), (w, h),
                      interpolation=cv2.INTER_CUBIC)
    for _ in range(h * w // 3000):
        colour = tuple(int(c) for c in rng.integers(0, 255, 3))
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        cv2.circle(base, (x, y), int(rng.integers(4, 40)), colour, -1)
    return base


class Camera:
    """A camera panning over a canvas, as serialised ``sensor_msgs/Image`` CDR (rgb8)."""

    def __init__(self, width: int, height: int, n_views: int = 90, step_px: int = 8) -> None:
        from rclpy.serialization import serialize_message

        from embodied_r_ros.nodes.conversions import rgb_to_image

        canvas = textured_canvas(height, width + n_views * step_px)
        self.frames = []
        for i in range(n_views):
            view = np.ascontiguousarray(canvas[:, i * step_px : i * step_px + width])
            self.frames.append(bytearray(serialize_message(rgb_to_image(view, 0.0, "camera"))))
        assert self.frames[0][:2] == b"\x00\x01", "expected little-endian CDR"
        self.bytes_per_frame = len(self.frames[0])

    def cdr(self, index: int, stamp: float) -> bytes:
        """View ``index`` (ping-pong over the canvas) stamped ``stamp``: header.stamp is the
        first field after the 4-byte encapsulation header."""
        n = len(self.frames)
        k = index % (2 * n - 2)
        buf = self.frames[k if k < n else 2 * n - 2 - k]
        ns = round(stamp * 1e9)
        buf[4:8] = (ns // 1_000_000_000).to_bytes(4, "little", signed=True)
        buf[8:12] = (ns % 1_000_000_000).to_bytes(4, "little")
        return bytes(buf)


class Diagnostics:
    """The latest value of every ``/diagnostics`` key, by status name."""

    def __init__(self, node: Any) -> None:
        from diagnostic_msgs.msg import DiagnosticArray

        self.values: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on, 10)

    def _on(self, msg: Any) -> None:
        with self._lock:
            for status in msg.status:
                self.values[status.name] = {kv.key: kv.value for kv in status.values}

    def get(self, name: str, key: str, default: float = 0.0) -> float:
        with self._lock:
            return float(self.values.get(name, {}).get(key, default))


class StoredFrames:
    """Stamps of the frames a frame buffer stored, from its ``frames/<camera>/stored`` topic.

    A benchmark that sends frames faster than real time paces its camera on them: the camera
    subscription keeps a 2-frame history, so frames sent faster than the node stores them are
    dropped (48 of 61 720p frames arrived at one every 50 ms). Send a frame, wait for its stamp
    here, send the next.
    """

    def __init__(self, node: Any, topic: str) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from embodied_r_interfaces.msg import StoredFrame

        self._stamps: set[int] = set()
        self._cond = threading.Condition()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.sub = node.create_subscription(StoredFrame, topic, self._on, reliable)

    def _on(self, msg: Any) -> None:
        stamp = msg.image.header.stamp
        with self._cond:
            self._stamps.add(stamp.sec * 1_000_000_000 + stamp.nanosec)
            self._cond.notify_all()

    def wait(self, stamp: float, timeout: float) -> bool:
        """Whether the frame stamped ``stamp`` is stored within ``timeout`` seconds."""
        ns = round(stamp * 1e9)
        with self._cond:
            return self._cond.wait_for(lambda: ns in self._stamps, timeout)

    def send(self, publish: Any, cdr: bytes, stamp: float, timeout: float = 60.0,
             resend_sec: float = 5.0) -> None:
        """Publish ``cdr`` (a frame stamped ``stamp``) and return once it is stored; a frame
        still missing after ``resend_sec`` is published again (best effort may drop one)."""
        deadline = time.monotonic() + timeout
        while True:
            publish(cdr)
            if self.wait(stamp, min(resend_sec, max(0.0, deadline - time.monotonic()))):
                return
            if time.monotonic() >= deadline:
                raise SystemExit(f"timed out waiting for the frame at {stamp:.3f} s to be stored")


def spin_in_background(node: Any) -> tuple[Any, threading.Thread]:
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return executor, thread


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def percentile(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, float), q))

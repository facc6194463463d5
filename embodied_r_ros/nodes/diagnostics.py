"""``/diagnostics`` publishing without ``diagnostic_updater`` (not on the pip route).

Each node hands a function returning its statuses; a timer publishes them as one
``diagnostic_msgs/DiagnosticArray`` so ``rqt_runtime_monitor`` / Foxglove show camera rate,
buffer span and size, backend health and query latency.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter

from embodied_r_ros.nodes.params import DIAGNOSTICS_SPEC

# DiagnosticStatus levels are one-byte ``bytes`` in rclpy (b"\x00" = OK).
OK: bytes = DiagnosticStatus.OK
WARN: bytes = DiagnosticStatus.WARN
ERROR: bytes = DiagnosticStatus.ERROR

DIAGNOSTICS_TOPIC = "/diagnostics"


class RateMeter:
    """Events per second over a sliding time window (monotonic clock), thread-safe."""

    def __init__(self, window_sec: float = 5.0) -> None:
        self.window_sec = window_sec
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._times.append(now)
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._times and now - self._times[0] > self.window_sec:
            self._times.popleft()

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._trim(now)
            if len(self._times) < 2:
                return 0.0
            span = self._times[-1] - self._times[0]
            return (len(self._times) - 1) / span if span > 0 else 0.0


def make_status(
    name: str, level: bytes, message: str, values: dict[str, object], hardware_id: str = ""
) -> DiagnosticStatus:
    return DiagnosticStatus(
        level=level,
        name=name,
        message=message,
        hardware_id=hardware_id,
        values=[KeyValue(key=k, value=_fmt(v)) for k, v in values.items()],
    )


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


class DiagnosticsPublisher:
    """Publishes ``collect()`` on ``/diagnostics`` every ``period_sec``, and from then on at the
    period the node's ``diagnostics_period_sec`` parameter is set to."""

    def __init__(
        self,
        node: Node,
        period_sec: float,
        collect: Callable[[], list[DiagnosticStatus]],
        callback_group: CallbackGroup | None = None,
    ) -> None:
        self._node = node
        self._collect = collect
        self._pub = node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        self._timer = node.create_timer(period_sec, self.publish, callback_group=callback_group)
        node.add_post_set_parameters_callback(self._follow)

    def _follow(self, params: list[Parameter]) -> None:
        for param in params:
            if param.name == DIAGNOSTICS_SPEC.name:
                self._timer.timer_period_ns = round(float(param.value) * 1e9)
                self._timer.reset()  # the next message one new period from now, not the old

    def publish(self) -> None:
        msg = DiagnosticArray()
        msg.header.stamp = self._node.get_clock().now().to_msg()
        msg.status = self._collect()
        self._pub.publish(msg)

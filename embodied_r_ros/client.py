"""Ask Embodied-R from any Python program: a client with its own ROS context and executor.

``SpatialQueryClient`` works from plain (non-ROS) code, as llama_ros's client does: it owns an
rclpy context, a node and a background executor thread, so a caller just calls :meth:`ask`
(the ``SpatialQuery`` service) or :meth:`ask_action` (the action, with progress feedback and
cancel) and gets a :class:`~embodied_r_ros.core.query_result.QueryResult`. Both use
``QUERY_QOS`` (reliable, depth 256): with ROS's default depth of 10 a burst of concurrent calls
loses replies on the client side.

    from embodied_r_ros.client import SpatialQueryClient

    with SpatialQueryClient() as client:          # /embodied_r/query
        a = client.ask("Which way did I turn?", ["A. left", "B. right"], window_sec=30)
        print(a.success, a.error_code, a.answer, a.answer_text, a.total_sec)

A call that gets no reply within ``timeout`` raises :class:`TimeoutError`; server-side failures
come back as ``QueryResult(success=False, error_code=...)``, with the codes ``SpatialQuery.srv``
lists, and a goal the action server does not accept as ``REJECTED``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import rclpy
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

from embodied_r_ros.core.error_codes import REJECTED
from embodied_r_ros.core.query_result import QueryResult
from embodied_r_ros.nodes.conversions import query_result_of
from embodied_r_ros.nodes.remote_engine import done_event
from embodied_r_ros.nodes.transport import QUERY_QOS

DEFAULT_SERVICE = "/embodied_r/query"


@dataclass(frozen=True)
class Progress:
    """One action feedback message: the stage, key frames perceived, the latest text."""

    stage: str
    frames_done: int
    frames_total: int
    partial_text: str


class SpatialQueryClient:
    """See the module docstring. Thread-safe: several threads may ask at once."""

    def __init__(
        self,
        service: str = DEFAULT_SERVICE,
        *,
        node_name: str = "embodied_r_client",
        context: Context | None = None,
        domain_id: int | None = None,
    ) -> None:
        from embodied_r_interfaces.action import SpatialQuery as QueryAction
        from embodied_r_interfaces.srv import SpatialQuery

        self._owns_context = context is None
        if context is None:
            context = Context()
            rclpy.init(args=[], context=context,
                       **({"domain_id": domain_id} if domain_id is not None else {}))
        self.context = context
        self._types = (SpatialQuery, QueryAction)
        self.node = rclpy.create_node(node_name, context=context)
        self._service = self.node.create_client(SpatialQuery, service, qos_profile=QUERY_QOS)
        self._action = ActionClient(
            self.node, QueryAction, service, goal_service_qos_profile=QUERY_QOS,
            result_service_qos_profile=QUERY_QOS, cancel_service_qos_profile=QUERY_QOS,
        )
        self._executor = MultiThreadedExecutor(num_threads=2, context=context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="embodied_r_client",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except ExternalShutdownException:
            pass

    def wait_for_server(self, timeout: float = 10.0) -> bool:
        """Whether the query service and action are there within ``timeout`` seconds."""
        return bool(self._service.wait_for_service(timeout_sec=timeout)
                    and self._action.wait_for_server(timeout_sec=timeout))

    def _request_fields(self, question: str, options: Sequence[str], window_sec: float,
                        camera: str, scope: str) -> dict[str, Any]:
        return {"question": question, "options": list(options),
                "window_sec": float(window_sec), "camera": camera, "scope": scope}

    def ask(
        self,
        question: str,
        options: Sequence[str] = (),
        *,
        window_sec: float = 0.0,
        camera: str = "",
        scope: str = "",
        timeout: float | None = 600.0,
    ) -> QueryResult:
        """Ask over the service; raises TimeoutError when no reply came within ``timeout``.
        ``scope="memory"`` answers from the spatial memory (``memory_frames`` of the result)."""
        request = self._types[0].Request(**self._request_fields(question, options, window_sec,
                                                                camera, scope))
        future = self._service.call_async(request)
        if not done_event(future).wait(timeout):
            self._service.remove_pending_request(future)
            raise TimeoutError(f"no reply from {self._service.srv_name} within {timeout:g} s")
        return query_result_of(future.result())

    def ask_action(
        self,
        question: str,
        options: Sequence[str] = (),
        *,
        window_sec: float = 0.0,
        camera: str = "",
        scope: str = "",
        on_progress: Callable[[Progress], None] | None = None,
        cancel: threading.Event | None = None,
        timeout: float | None = 600.0,
    ) -> QueryResult:
        """Ask over the action: ``on_progress`` gets each feedback, setting ``cancel`` cancels
        the goal (the answer then has ``error_code`` CANCELLED)."""
        goal = self._types[1].Goal(**self._request_fields(question, options, window_sec, camera,
                                                          scope))

        def feedback(msg: Any) -> None:
            if on_progress is not None:
                fb = msg.feedback
                on_progress(Progress(fb.stage, fb.frames_done, fb.frames_total, fb.partial_text))

        sent = self._action.send_goal_async(goal, feedback_callback=feedback)
        if not done_event(sent).wait(timeout):
            raise TimeoutError(f"the goal was not accepted within {timeout:g} s")
        handle = sent.result()
        if not handle.accepted:
            return QueryResult.failure(REJECTED, "the query server rejected the goal")
        result = handle.get_result_async()
        finished = done_event(result)
        cancelled = False
        deadline = None if timeout is None else time.monotonic() + timeout
        while not finished.wait(0.05):
            if cancel is not None and cancel.is_set() and not cancelled:
                handle.cancel_goal_async()
                cancelled = True
            if deadline is not None and time.monotonic() > deadline:
                handle.cancel_goal_async()
                raise TimeoutError(f"no result within {timeout:g} s")
        return query_result_of(result.result().result)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(timeout_sec=5.0)
        self._thread.join(timeout=5.0)
        self._action.destroy()
        self.node.destroy_node()
        if self._owns_context:
            rclpy.try_shutdown(context=self.context)

    def __enter__(self) -> SpatialQueryClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

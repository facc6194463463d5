"""Query server: the public ``SpatialQuery`` service and action, both at ``/embodied_r/query``.

Both go through one :class:`QueryRunner`: same validation, same ``max_concurrent_queries`` limit
(further requests are answered at once with ``BUSY``), same timeout, same answer; a goal's
cancel reaches its work at once. Callbacks are reentrant and the process spins a multi-threaded
executor, so a query that runs for seconds never holds up frame ingestion. Stand-alone
(``ros2 run embodied_r_ros query_server``) it reaches the frame buffers, the perception node and
the reasoning node over ROS; in the all-in-one process it calls them in-process.

With ``memory.enabled`` a request with ``scope: memory`` is answered from the spatial memory
(:class:`~embodied_r_ros.memory.service.MemoryReader`). In the all-in-one this process also
writes the memory and serves ``memory/stats`` and ``memory/clear``; stand-alone it reads the
memory the perception node writes (which serves those two), named by the same
``profile``/``config_file``.

Clients: the request and response queues are deep (``QUERY_QOS``, depth 256) so a burst is
answered (or refused with ``BUSY``), never lost; a client should use the same depth on its side,
as :mod:`embodied_r_ros.client` does.

Every answer (or refusal) is traced on ``query/trace`` and its key frames on
``query/key_frames`` (:mod:`embodied_r_ros.nodes.viewer_topics`), while someone listens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from embodied_r_ros.agent.frame_store import Window
from embodied_r_ros.agent.guard import (
    GoalTokens,
    finish_goal,
    guard_execute,
    guard_service,
)
from embodied_r_ros.agent.query_runner import (
    MAX_CONCURRENT,
    TIMEOUT_SEC,
    Engine,
    MemorySource,
    QueryRequest,
    QueryRunner,
)
from embodied_r_ros.core.error_codes import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BACKEND_TIMEOUT,
)
from embodied_r_ros.core.query_result import QueryResult
from embodied_r_ros.core.request import (
    DEFAULT_LIMITS,
    MAX_FEEDBACK_CHARS,
    MAX_OPTIONS,
    MAX_SETTABLE_CHARS,
)
from embodied_r_ros.memory.service import MemoryReader, MemoryWriter
from embodied_r_ros.nodes.conversions import fill_query_response
from embodied_r_ros.nodes.diagnostics import OK, WARN, DiagnosticsPublisher, make_status
from embodied_r_ros.nodes.memory_services import MemoryServices
from embodied_r_ros.nodes.params import (
    CONFIG_SPECS,
    DEFAULT_CAMERA,
    DIAGNOSTICS_SPEC,
    Spec,
    declare,
    load_node_config,
)
from embodied_r_ros.nodes.remote_engine import BACKEND_WAIT_SEC, WINDOW_TIMEOUT_SEC, RemoteEngine
from embodied_r_ros.nodes.transport import PERCEPTION_ACTION, QUERY_QOS, REASONING_ACTION
from embodied_r_ros.nodes.viewer_topics import (
    LATCHED,
    ViewerTopic,
    key_frame_msg,
    now_sec,
    trace_msg,
)
from embodied_r_ros.viewer.content import query_trace

#: a query that last failed with one of these turns the server's diagnostics to WARN
BACKEND_CODES = frozenset({BACKEND_DOWN, BACKEND_TIMEOUT, BACKEND_FAILED})

SPECS: tuple[Spec, ...] = (
    DIAGNOSTICS_SPEC,
    Spec("cameras", [DEFAULT_CAMERA], "names of the cameras this server answers for (one frame "
         "buffer each, matching its camera_name)"),
    Spec("default_camera", "", "camera used when a request leaves 'camera' empty "
         "(empty = the first of 'cameras')", read_only=False),
    Spec("max_concurrent_queries", MAX_CONCURRENT, "queries answered at once; more are "
         "refused with BUSY; set on a running node, at most its value at start (the process's "
         "threads are sized for it)", 1, 64, read_only=False),
    Spec("max_question_chars", DEFAULT_LIMITS.max_question_chars, "longest accepted question "
         "(QUESTION_TOO_LONG above)", 1, MAX_SETTABLE_CHARS, read_only=False),
    Spec("max_option_chars", DEFAULT_LIMITS.max_option_chars, "longest accepted option "
         f"(BAD_OPTIONS above); at most {MAX_OPTIONS} options", 1, MAX_SETTABLE_CHARS,
         read_only=False),
    Spec("query_timeout_sec", TIMEOUT_SEC, "a query not answered by then fails with "
         "BACKEND_TIMEOUT", 0.1, 86400.0, read_only=False),
)

# Only a stand-alone server talks to its peers over ROS.
REMOTE_SPECS: tuple[Spec, ...] = (
    Spec("perception_action", PERCEPTION_ACTION, "Perceive action of the perception node"),
    Spec("reasoning_action", REASONING_ACTION, "Reason action of the reasoning node"),
    Spec("backend_wait_sec", BACKEND_WAIT_SEC, "how long to wait for a peer node before "
         "BACKEND_DOWN", 0.0, 600.0, read_only=False),
    Spec("window_timeout_sec", WINDOW_TIMEOUT_SEC, "how long a frame buffer has to answer "
         "before BACKEND_DOWN", 0.1, 600.0, read_only=False),
)
#: settable parameters and the attribute of the query runner, or of the remote engine, that
#: each sets (every question reads them as it arrives)
RUNNER_LIMITS = {"default_camera": "default_camera", "max_concurrent_queries": "max_concurrent",
                 "max_question_chars": "max_question_chars",
                 "max_option_chars": "max_option_chars", "query_timeout_sec": "timeout_sec"}
REMOTE_LIMITS = {"backend_wait_sec": "wait_sec", "window_timeout_sec": "window_timeout_sec"}


def request_of(msg: Any) -> QueryRequest:
    return QueryRequest(
        question=msg.question,
        options=list(msg.options),
        window_sec=float(msg.window_sec),
        camera=msg.camera,
        scope=msg.scope,
    )


class QueryServerNode(Node):
    """``engine=None``: stand-alone, peers over ROS. The all-in-one passes its local engine
    through :meth:`attach` after building the other nodes (it reads ``cameras`` from here)."""

    def __init__(self, node_name: str = "query_server", *, local: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = declare(self, SPECS + CONFIG_SPECS + (() if local else REMOTE_SPECS),
                    check=self._check, on_change=self._apply)
        self.params = p
        self.cameras: list[str] = [c for c in p["cameras"] if c]
        if not self.cameras:
            raise ValueError("parameter 'cameras' must name at least one camera")
        self._max_concurrent_at_start = p["max_concurrent_queries"]
        self.threads_needed = p["max_concurrent_queries"] * (1 if local else 2) + 2
        self.runner: QueryRunner | None = None
        self._remote: Any = None
        self._goals = GoalTokens()
        self._memory: MemorySource | None = None
        self._memory_services: MemoryServices | None = None
        #: the all-in-one's Foxglove server (viewer.enabled), stopped with this node
        self.viewer: Any = None
        self.viewer_topics: list[ViewerTopic] = []
        if not local:
            self._remote = RemoteEngine(
                self,
                self.cameras,
                perception_action=p["perception_action"],
                reasoning_action=p["reasoning_action"],
                wait_sec=p["backend_wait_sec"],
                window_timeout_sec=p["window_timeout_sec"],
            )
            # the memory the perception node writes, read here (SQLite: WAL readers beside
            # its one writer; PostgreSQL: a second connection)
            config = load_node_config(p)
            self.attach(self._remote,
                        memory=MemoryReader(config) if config.memory.enabled else None)

    def attach(self, engine: Engine, memory: MemorySource | None = None) -> None:
        """Start serving with ``engine`` (and ``memory`` for scope-memory questions); called
        once."""
        from embodied_r_interfaces.action import SpatialQuery as QueryAction
        from embodied_r_interfaces.srv import SpatialQuery

        p = self.params
        self.runner = QueryRunner(
            engine,
            self.cameras,
            default_camera=p["default_camera"],
            max_concurrent=p["max_concurrent_queries"],
            max_question_chars=p["max_question_chars"],
            max_option_chars=p["max_option_chars"],
            timeout_sec=p["query_timeout_sec"],
            memory=memory,
        )
        self._memory = memory
        self._publish_traces()
        group = ReentrantCallbackGroup()
        self._action_type = QueryAction
        log = self.get_logger()
        self.create_service(SpatialQuery, "query", guard_service(log, "query", self._on_query),
                            qos_profile=QUERY_QOS, callback_group=group)

        def on_cancel(goal_handle: Any) -> CancelResponse:
            self._goals.cancel(goal_handle)
            return CancelResponse.ACCEPT

        self._action = ActionServer(
            self,
            QueryAction,
            "query",
            execute_callback=guard_execute(log, "query action", QueryAction.Result,
                                           self._execute),
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=on_cancel,
            callback_group=group,
            goal_service_qos_profile=QUERY_QOS,
            result_service_qos_profile=QUERY_QOS,
            cancel_service_qos_profile=QUERY_QOS,
        )
        self._diag = DiagnosticsPublisher(
            self, p["diagnostics_period_sec"], self.diagnostics,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.get_logger().info(
            f"answering at {self.resolve_service_name('query')} for cameras {self.cameras}"
        )

    def _publish_traces(self) -> None:
        """One ``query/trace`` per answer, and its key frames on ``query/key_frames``."""
        from sensor_msgs.msg import CompressedImage

        from embodied_r_interfaces.msg import QueryTrace

        assert self.runner is not None
        self.trace = ViewerTopic(self, QueryTrace, "query/trace", trace_msg, "trace",
                                 qos=LATCHED)
        self.key_frames = ViewerTopic(self, CompressedImage, "query/key_frames", key_frame_msg,
                                      "key_frames", qos=10)
        self.viewer_topics = [self.trace, self.key_frames]
        runner = self.runner

        def answered(request: QueryRequest, result: QueryResult, window: Window | None
                     ) -> None:
            if not (self.trace.wanted or self.key_frames.wanted):
                return
            trace = query_trace(now_sec(), request.question, request.options, request.scope,
                                request.camera or runner.default_camera, result, window)
            self.trace.publish(trace)
            for frame in trace.key_frames:
                self.key_frames.publish(frame)

        runner.on_answer.append(answered)

    def serve_memory(self, writer: MemoryWriter | None, why_not: str) -> None:
        """Serve ``memory/stats`` and ``memory/clear`` for ``writer``, the memory this process
        writes (None: both answer ``MEMORY_UNAVAILABLE`` with ``why_not``); the node closes it."""
        self._memory_services = MemoryServices(self, writer, why_not)
        self.viewer_topics.append(self._memory_services.objects)

    @property
    def memory_writer(self) -> MemoryWriter | None:
        """The memory this process writes (None: it writes none)."""
        return self._memory_services.writer if self._memory_services else None

    def _check(self, name: str, value: Any) -> str | None:
        """Why a new value of a settable parameter is refused (None: it is not)."""
        if name == "default_camera" and value and value not in self.cameras:
            return f"default_camera {value!r} is not one of cameras {self.cameras}"
        if name == "max_concurrent_queries" and value > self._max_concurrent_at_start:
            return (f"max_concurrent_queries can be at most {self._max_concurrent_at_start} "
                    "(its value at start) on a running node: restart it to go higher")
        return None

    def _apply(self, name: str, value: Any) -> None:
        if name == "default_camera":
            value = value or self.cameras[0]
        if name in RUNNER_LIMITS and self.runner is not None:
            setattr(self.runner, RUNNER_LIMITS[name], value)
        elif name in REMOTE_LIMITS and self._remote is not None:
            setattr(self._remote, REMOTE_LIMITS[name], value)
        self.get_logger().info(f"{name} set to {value!r}")

    def _on_query(self, request: Any, response: Any) -> Any:
        assert self.runner is not None
        return fill_query_response(response, self.runner.run(request_of(request)))

    def _execute(self, goal_handle: Any) -> Any:
        assert self.runner is not None
        feedback_type = self._action_type.Feedback

        def progress(stage: str, done: int, total: int, text: str) -> None:
            goal_handle.publish_feedback(feedback_type(
                stage=stage, frames_done=done, frames_total=total,
                partial_text=text[:MAX_FEEDBACK_CHARS],
            ))

        token = self._goals.open(goal_handle)
        try:
            outcome = self.runner.run(request_of(goal_handle.request), on_progress=progress,
                                      cancel=token)
        finally:
            self._goals.close(goal_handle)
        result = fill_query_response(self._action_type.Result(), outcome)
        return finish_goal(goal_handle, result)

    def diagnostics(self) -> list[Any]:
        assert self.runner is not None
        s = self.runner.stats
        values = {
            "queries": s.served,
            "succeeded": s.succeeded,
            "busy": s.busy,
            "failed": s.failed,
            "in_flight": s.in_flight,
            "last_query_latency_sec": s.last_total_sec,
            "last_query_overhead_sec": s.last_overhead_sec,
            "last_error_code": s.last_error_code,
        }
        level = WARN if s.failed and s.last_error_code in BACKEND_CODES else OK
        message = f"{s.served} queries, last {s.last_total_sec:.2f} s"
        if self._memory_services is not None:
            memory, warning = self._memory_services.diagnostics()
            values.update(memory)
            if warning:
                level, message = WARN, f"{message}; {warning}"
        return [make_status("embodied_r: query server", level, message, values,
                            self.get_fully_qualified_name())]

    def close(self) -> None:
        if self.viewer is not None:
            self.viewer.stop()
        self._goals.cancel_all()
        if self.runner is not None:
            self.runner.close()
            self._action.destroy()
        if self._remote is not None:
            self._remote.close()
        close_memory = getattr(self._memory, "close", None)
        if close_memory is not None:
            close_memory()
        if self._memory_services is not None:
            self._memory_services.close()


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [QueryServerNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

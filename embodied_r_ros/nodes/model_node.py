"""The common shape of the perception and reasoning nodes: a ROS 2 managed (lifecycle) node
holding one model.

``configure`` reads the ``profile``/``config_file`` parameters as they are then (a bad profile
fails the transition, not the node's construction, and cleanup -> configure picks up a changed
one) and loads the model (logging what and how long), ``activate`` serves, ``deactivate`` keeps
the model but answers ``BACKEND_DOWN`` (goals in flight end with it), ``cleanup`` waits for those
goals to end and frees the model (and the CUDA cache), and ``shutdown`` ends. Whether the node
serves is rclpy's own managed-entity state; the label in diagnostics is derived from it.
With the ``autostart`` parameter (default true) the node drives itself to active when it
starts, so ``ros2 run`` behaves as a plain node; a model that cannot be loaded then fails the
start with one clear line. Requests are served on a reentrant group, apart from
the lifecycle services, so a node that is loading still answers ``BACKEND_DOWN`` at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import (
    LifecycleNode,
    LifecycleState,
    SimpleManagedEntity,
    TransitionCallbackReturn,
)

from embodied_r_ros.agent.guard import (
    GoalTokens,
    Heartbeat,
    fail,
    finish_goal,
    guard_execute,
    one_line,
)
from embodied_r_ros.agent.model_loading import describe_models
from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.config import Config
from embodied_r_ros.core.error_codes import BACKEND_DOWN
from embodied_r_ros.core.pipeline import EmbodiedR, QueryError
from embodied_r_ros.nodes.diagnostics import ERROR, OK, WARN, DiagnosticsPublisher, make_status
from embodied_r_ros.nodes.params import (
    AUTOSTART_SPEC,
    DIAGNOSTICS_SPEC,
    MODEL_CONFIG_SPECS,
    Spec,
    declare,
    load_node_config,
)
from embodied_r_ros.nodes.transport import ALIVE_QOS, alive_topic

SUCCESS = TransitionCallbackReturn.SUCCESS
FAILURE = TransitionCallbackReturn.FAILURE
#: how long cleanup and shutdown wait for goals in flight to end before freeing the model
GOALS_END_SEC = 10.0
#: the parameters of every model node; ``profile``/``config_file`` are read again on configure
SPECS: tuple[Spec, ...] = (DIAGNOSTICS_SPEC, AUTOSTART_SPEC, *MODEL_CONFIG_SPECS)


class StartError(RuntimeError):
    """A node that could not reach the active state at start (autostart); one line."""


class ModelNode(LifecycleNode):
    """Base of :class:`PerceptionNode` and :class:`ReasoningNode`."""

    role: Literal["perception", "reasoning"]
    threads_needed = 3  # a request being served + cancel/feedback + lifecycle/diagnostics

    def __init__(
        self,
        node_name: str,
        *,
        config: Config | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(node_name, **kwargs)
        self.params = declare(self, SPECS)
        self._given_config = config  # in-process use (the all-in-one): fixed, not parameters
        self.config: Config | None = None
        self.pipeline: EmbodiedR | None = None
        self.load_error = ""
        self._finalized = False
        self._serving = SimpleManagedEntity()  # rclpy's activation state of the request path
        self.add_managed_entity(self._serving)
        self._started = False
        self._lock = threading.Lock()
        self.calls = 0
        self.last_sec = 0.0
        self.goals = GoalTokens()
        self._alive_publishers: list[Any] = []
        self.requests = ReentrantCallbackGroup()  # served apart from the lifecycle services
        self._diag = DiagnosticsPublisher(
            self, self.params["diagnostics_period_sec"], self.diagnostics,
            callback_group=MutuallyExclusiveCallbackGroup(),  # a slow health check blocks no one
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """``autostart``: configure and activate now; a failure is one line (StartError)."""
        if self._started:
            return
        self._started = True
        if not self.params["autostart"]:
            self.get_logger().info("autostart is off: waiting for configure/activate")
            return
        if self.trigger_configure() != SUCCESS:
            raise StartError(f"{self.role} node: {self.load_error or 'configure failed'}")
        if self.trigger_activate() != SUCCESS:
            raise StartError(f"{self.role} node: activate failed")

    @property
    def state_label(self) -> str:
        """``unconfigured`` / ``inactive`` / ``active`` / ``finalized``, derived from rclpy's
        activation of the request path and whether a model is loaded."""
        if self._finalized:
            return "finalized"
        if self._serving.is_activated:
            return "active"
        return "inactive" if self.pipeline is not None else "unconfigured"

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            config = self._given_config or load_node_config(declare(self, MODEL_CONFIG_SPECS))
        except Exception as exc:  # noqa: BLE001 - a bad profile fails this transition only
            self.load_error = one_line(f"cannot read the configuration: {exc}")
            self.get_logger().error(self.load_error)
            return FAILURE
        self.config = config
        models = describe_models(config, perception=self.role == "perception",
                                 reasoning=self.role == "reasoning")
        self.get_logger().info(f"configure: loading {models}")
        start = time.perf_counter()
        try:
            self.pipeline = load_pipeline(
                config,
                perception=self.role == "perception",
                reasoning=self.role == "reasoning",
            )
        except Exception as exc:  # noqa: BLE001 - any load failure is one line, state stays
            self.load_error = one_line(f"cannot load {models}: {exc}")
            self.get_logger().error(self.load_error)
            return FAILURE
        self.load_error = ""
        self.get_logger().info(f"configure: loaded in {time.perf_counter() - start:.1f} s")
        return SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().info(f"active: serving {self.role}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_deactivate(state)  # new requests get BACKEND_DOWN from here on
        self.goals.cancel_all(BACKEND_DOWN, f"the {self.role} node was deactivated")
        self.get_logger().info("inactive: answering BACKEND_DOWN")
        return result

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._wait_for_goals("cleanup")
        self._free()
        self.config = None
        self.get_logger().info("cleanup: models freed")
        return SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._finalized = True
        self.goals.cancel_all(BACKEND_DOWN, f"the {self.role} node is shutting down")
        self._wait_for_goals("shutdown")
        self._free()
        return SUCCESS

    def _wait_for_goals(self, transition: str) -> None:
        """A model is never freed under a running goal: wait (bounded) for those in flight."""
        if not self.goals.wait_idle(GOALS_END_SEC):
            self.get_logger().warning(
                f"{transition}: {self.goals.in_flight} goal(s) still running after "
                f"{GOALS_END_SEC:g} s; freeing the model anyway")

    def _free(self) -> None:
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            pipeline.close()

    def serving(self) -> EmbodiedR:
        """The loaded pipeline while active, else QueryError ``BACKEND_DOWN``."""
        pipeline = self.pipeline
        if not self._serving.is_activated or pipeline is None:
            detail = f" ({self.load_error})" if self.load_error else ""
            raise QueryError(BACKEND_DOWN, f"the {self.role} node is {self.state_label}{detail}")
        return pipeline

    # -- goals -----------------------------------------------------------------------------

    def create_goal_server(self, action_type: Any, name: str,
                           execute: Callable[[Any], Any]) -> ActionServer:
        """An action server whose goals can be cancelled mid-work and never crash the node."""

        def on_cancel(goal_handle: Any) -> CancelResponse:
            self.goals.cancel(goal_handle)
            return CancelResponse.ACCEPT

        from std_msgs.msg import Empty

        # the process's sign of life that a paused Python keeps giving (RemoteEngine reads it)
        self._alive_publishers.append(self.create_publisher(Empty, alive_topic(name), ALIVE_QOS))
        return ActionServer(
            self, action_type, name,
            execute_callback=guard_execute(self.get_logger(), name, action_type.Result, execute),
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=on_cancel,
            callback_group=self.requests,
        )

    def serve_goal(
        self,
        goal_handle: Any,
        result: Any,
        work: Callable[[EmbodiedR, CancelToken], None],
        beat: Callable[[], None],
    ) -> float:
        """Run ``work(pipeline, cancel_token)`` for a goal (it fills ``result``), beating the
        heartbeat meanwhile; end the goal by the outcome. Returns the seconds spent."""
        start = time.perf_counter()
        token = self.goals.open(goal_handle)
        try:
            with Heartbeat(beat, logger=self.get_logger()):
                work(self.serving(), token)
            result.success = True
        except QueryError as exc:
            fail(result, exc.code, str(exc))
        finally:
            self.goals.close(goal_handle)
        seconds = time.perf_counter() - start
        self.record_call(seconds)
        finish_goal(goal_handle, result)
        return seconds

    # -- bookkeeping -----------------------------------------------------------------------

    def record_call(self, seconds: float) -> None:
        with self._lock:
            self.calls += 1
            self.last_sec = seconds

    def backend_status(self) -> tuple[str, bool, str]:
        """``(model id, healthy, error)`` of the backend this node serves."""
        raise NotImplementedError

    def diagnostics(self) -> list[Any]:
        if self.state_label != "active":
            level, message = WARN, f"{self.role} node is {self.state_label}"
            model, healthy, error = "", False, self.load_error
        else:
            model, healthy, error = self.backend_status()
            level = OK if healthy else ERROR
            message = "ok" if healthy else f"{self.role} backend unhealthy: {error}"
        values = {
            "state": self.state_label,
            "model": model,
            "healthy": healthy,
            "error": error,
            "calls": self.calls,
            f"last_{self.role}_sec": self.last_sec,
        }
        return [make_status(f"embodied_r: {self.role} backend", level, message, values,
                            self.get_fully_qualified_name())]

    def close(self) -> None:
        self.goals.cancel_all(BACKEND_DOWN, f"the {self.role} node is stopping")
        self._wait_for_goals("close")
        self._free()


def model_status(*backends: Any) -> tuple[str, bool, str]:
    """``(model ids, healthy, error)`` of the backends a node serves, healthy where every one
    is (their health checks never raise); with several, each id and error names its model."""
    checks = [(b.model_id, b.health()) for b in backends]
    if len(checks) == 1:
        model, health = checks[0]
        return model, health.ok, health.error
    return (", ".join(model for model, _ in checks), all(h.ok for _, h in checks),
            "; ".join(f"{model}: {h.error}" for model, h in checks if not h.ok))


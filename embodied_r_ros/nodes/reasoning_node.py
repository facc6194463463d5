"""Reasoning node: perception text in, think and answer out (the reasoning LM's side).

Serves the internal ``Reason`` service at ``~/reason``. The LM is loaded once at start-up.

Run alone: ``ros2 run embodied_r_ros reasoning_node --ros-args -p profile:=offline``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.pipeline import EmbodiedR, QueryError
from embodied_r_ros.nodes.diagnostics import ERROR, OK, DiagnosticsPublisher, make_status
from embodied_r_ros.nodes.models import build_pipeline, describe_models
from embodied_r_ros.nodes.params import CONFIG_SPECS, DIAGNOSTICS_SPEC, declare, load_node_config


class ReasoningNode(Node):
    threads_needed = 2

    def __init__(
        self,
        node_name: str = "reasoning",
        *,
        config: Config | None = None,
        pipeline: EmbodiedR | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(node_name, **kwargs)
        self.params = declare(self, (DIAGNOSTICS_SPEC,))
        if pipeline is not None:
            self.config = pipeline.config
        else:
            self.config = config or load_node_config(declare(self, CONFIG_SPECS))
        self.get_logger().info(f"loading reasoning: {describe_models(self.config)}")
        self._owns_pipeline = pipeline is None
        self.pipeline = pipeline or build_pipeline(self.config, perception=False, reasoning=True)
        self._lock = threading.Lock()
        self.calls = 0
        self.last_sec = 0.0
        from embodied_r_interfaces.srv import Reason

        self.create_service(Reason, "~/reason", self._on_reason,
                            callback_group=ReentrantCallbackGroup())
        self._diag = DiagnosticsPublisher(
            self, self.params["diagnostics_period_sec"], self.diagnostics,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )

    def _on_reason(self, request: Any, response: Any) -> Any:
        start = time.perf_counter()
        try:
            r = self.pipeline.reason(request.perception, list(request.options))
            response.success = True
            response.think, response.answer, response.answer_text, response.raw = (
                r.think, r.answer, r.answer_text, r.raw
            )
        except QueryError as exc:
            response.success, response.error_code, response.error = False, exc.code, str(exc)
        response.reasoning_sec = time.perf_counter() - start
        with self._lock:
            self.calls += 1
            self.last_sec = response.reasoning_sec
        return response

    def diagnostics(self) -> list[Any]:
        lm = self.pipeline.lm
        healthy = lm is not None and lm.healthy()
        values = {
            "model": lm.model_id if lm is not None else "",
            "healthy": healthy,
            "calls": self.calls,
            "last_reasoning_sec": self.last_sec,
        }
        return [make_status(
            "embodied_r: reasoning backend", OK if healthy else ERROR,
            "ok" if healthy else "reasoning backend is down", values,
            self.get_fully_qualified_name(),
        )]

    def close(self) -> None:
        if self._owns_pipeline:
            self.pipeline.close()


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [ReasoningNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

"""The common shape of the perception and reasoning nodes: one model, loaded once, diagnosed.

Both nodes load their half of the pipeline at start-up (never in a callback), count their calls
and publish the backend's health on ``/diagnostics``; only the request they serve differs.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.nodes.diagnostics import ERROR, OK, DiagnosticsPublisher, make_status
from embodied_r_ros.nodes.models import build_pipeline, describe_models
from embodied_r_ros.nodes.params import CONFIG_SPECS, DIAGNOSTICS_SPEC, declare, load_node_config


class ModelNode(Node):
    """Base of :class:`PerceptionNode` and :class:`ReasoningNode`."""

    role: Literal["perception", "reasoning"]
    threads_needed = 2  # a request being served + cancel/feedback/diagnostics traffic

    def __init__(
        self,
        node_name: str,
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
        self.get_logger().info(f"loading {self.role}: {describe_models(self.config)}")
        self._owns_pipeline = pipeline is None
        self.pipeline = pipeline or build_pipeline(
            self.config,
            perception=self.role == "perception",
            reasoning=self.role == "reasoning",
        )
        self._lock = threading.Lock()
        self.calls = 0
        self.last_sec = 0.0
        self._diag = DiagnosticsPublisher(
            self, self.params["diagnostics_period_sec"], self.diagnostics,
            callback_group=MutuallyExclusiveCallbackGroup(),  # a slow health check blocks no one
        )

    def backend_status(self) -> tuple[str, bool]:
        """``(model id, healthy)`` of the backend this node serves."""
        raise NotImplementedError

    def record_call(self, seconds: float) -> None:
        with self._lock:
            self.calls += 1
            self.last_sec = seconds

    def diagnostics(self) -> list[Any]:
        model, healthy = self.backend_status()
        values = {
            "model": model,
            "healthy": healthy,
            "calls": self.calls,
            f"last_{self.role}_sec": self.last_sec,
        }
        return [make_status(
            f"embodied_r: {self.role} backend", OK if healthy else ERROR,
            "ok" if healthy else f"{self.role} backend is down", values,
            self.get_fully_qualified_name(),
        )]

    def close(self) -> None:
        if self._owns_pipeline:
            self.pipeline.close()

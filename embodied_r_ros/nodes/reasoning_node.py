"""Reasoning node: perception text in, think and answer out (the reasoning LM's side).

Serves the internal ``Reason`` service at ``~/reason``. The LM is loaded once at start-up.

Run alone: ``ros2 run embodied_r_ros reasoning_node --ros-args -p profile:=offline``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup

from embodied_r_ros.core.pipeline import QueryError
from embodied_r_ros.nodes.model_node import ModelNode


class ReasoningNode(ModelNode):
    role = "reasoning"

    def __init__(self, node_name: str = "reasoning", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        from embodied_r_interfaces.srv import Reason

        self.create_service(Reason, "~/reason", self._on_reason,
                            callback_group=ReentrantCallbackGroup())

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
        self.record_call(response.reasoning_sec)
        return response

    def backend_status(self) -> tuple[str, bool]:
        lm = self.pipeline.lm
        return (lm.model_id, lm.healthy()) if lm is not None else ("", False)


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [ReasoningNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

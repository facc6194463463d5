"""Reasoning node: perception text in, think and answer out (the reasoning LM's side).

Serves the internal ``Reason`` action at ``~/reason``: an action so that a cancelled or timed-out
query stops the generation here too, with a feedback heartbeat twice a second while the LM
works. A managed node: ``configure`` loads the LM.

Debug topic ``~/prompts`` (``std_msgs/String``, published only while someone subscribes): the
JSON chat messages the LM is given for each question, byte for byte the ``prompt`` column of a
dataset that ``embodied-r-train build`` makes of the same window, so that what the robot asks
the LM can be compared with what it was trained on.

Run alone: ``ros2 run embodied_r_ros reasoning_node --ros-args -p profile:=offline``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.reasoning import Reasoning
from embodied_r_ros.core.request import (
    GOAL_LIMITS,
    SCOPE_WINDOW,
    validate_options,
    validate_perception,
)
from embodied_r_ros.nodes.model_node import ModelNode, model_status


class ReasoningNode(ModelNode):
    role = "reasoning"

    def __init__(self, node_name: str = "reasoning", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        from std_msgs.msg import String

        from embodied_r_interfaces.action import Reason

        self._action = Reason
        self._string = String
        self._prompts = self.create_publisher(String, "~/prompts", 10)
        self._server = self.create_goal_server(Reason, "~/reason", self._execute)

    def reason(self, perception: str, options: Sequence[str], cancel: CancelToken,
               scope: str = SCOPE_WINDOW, pipeline: EmbodiedR | None = None) -> Reasoning:
        """The LM's answer to a perception text of ``scope`` (the Reason action's and the
        all-in-one's path), its prompt published on ``~/prompts`` while subscribed.
        ``perception`` and ``options``: as checked where the request entered."""
        pipeline = pipeline or self.serving()
        if self._prompts.get_subscription_count() > 0:
            messages = pipeline.reasoning_messages(perception)
            self._prompts.publish(self._string(data=json.dumps(messages)))
        return pipeline.reason(perception, options, cancel, scope=scope)

    def _execute(self, goal_handle: Any) -> Any:
        goal = goal_handle.request
        result = self._action.Result()
        start = time.perf_counter()

        def work(pipeline: EmbodiedR, token: CancelToken) -> None:
            # the goal's entry: a hostile request is refused here, never published or read
            options = validate_options(list(goal.options), GOAL_LIMITS)
            perception = validate_perception(goal.perception)
            r = self.reason(perception, options, token, goal.scope or SCOPE_WINDOW, pipeline)
            result.think, result.answer, result.answer_text, result.raw = (
                r.think, r.answer, r.answer_text, r.raw
            )

        def beat() -> None:
            goal_handle.publish_feedback(
                self._action.Feedback(elapsed_sec=time.perf_counter() - start)
            )

        result.reasoning_sec = self.serve_goal(goal_handle, result, work, beat)
        return result

    def backend_status(self) -> tuple[str, bool, str]:
        """The reasoning LM's status, and the memory reader's where one is loaded."""
        pipeline = self.pipeline
        if pipeline is None or pipeline.lm is None:
            return "", False, "no LM loaded"
        return model_status(*(b for b in (pipeline.lm, pipeline.memory_lm) if b is not None))

    def close(self) -> None:
        self._server.destroy()
        super().close()


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [ReasoningNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

"""Perception node: key frames + question in, the perception text out (the VLM's side).

Serves the internal ``Perceive`` action at ``~/perceive`` so that the VLM can run on another
machine than the camera; feedback reports each key frame as it is described, and a cancel stops
before the next VLM call. Measured motions (odometry) arrive with the goal; missing ones are
filled with visual ego-motion here, where the images are. The VLM is loaded once at start-up.

Run alone: ``ros2 run embodied_r_ros perception_node --ros-args -p profile:=server``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup

from embodied_r_ros.core.backends.base import BACKEND_FAILED
from embodied_r_ros.core.pipeline import CANCELLED, QueryError
from embodied_r_ros.nodes.conversions import (
    CORRUPT_FRAME,
    compressed_jpeg_to_rgb,
    msg_to_motion,
    stamp_to_sec,
)
from embodied_r_ros.nodes.model_node import ModelNode
from embodied_r_ros.nodes.motion import perceive_window

FEEDBACK_CHARS = 2000  # partial text in feedback is for humans; keep messages small


class PerceptionNode(ModelNode):
    role = "perception"

    def __init__(self, node_name: str = "perception", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        from embodied_r_interfaces.action import Perceive

        self._action = Perceive
        self._server = ActionServer(
            self,
            Perceive,
            "~/perceive",
            execute_callback=self._execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )

    def _execute(self, goal_handle: Any) -> Any:
        goal = goal_handle.request
        result = self._action.Result()
        start = time.perf_counter()

        def feedback(_stage: str, done: int, total: int, text: str) -> None:
            goal_handle.publish_feedback(self._action.Feedback(
                frames_done=done, frames_total=total, partial_text=text[:FEEDBACK_CHARS]
            ))

        try:
            try:
                images = [compressed_jpeg_to_rgb(m) for m in goal.key_frames]
            except ValueError as exc:
                raise QueryError(CORRUPT_FRAME, f"key frame: {exc}") from None
            motions = [msg_to_motion(m) for m in goal.motions]
            if len(motions) != max(len(images) - 1, 0):
                raise QueryError(
                    BACKEND_FAILED, f"{len(images)} key frames came with {len(motions)} motions"
                )
            res = perceive_window(
                self.pipeline,
                images,
                [stamp_to_sec(m.header.stamp) for m in goal.key_frames],
                goal.question,
                list(goal.options),
                motions,
                on_progress=feedback,
                cancelled=lambda: bool(goal_handle.is_cancel_requested),
            )
            result.success = True
            result.perception = res.text
            result.descriptions = [f.observation for f in res.frames]
        except QueryError as exc:
            result.success, result.error_code, result.error = False, exc.code, str(exc)
        result.perception_sec = time.perf_counter() - start
        self.record_call(result.perception_sec)
        if result.error_code == CANCELLED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif result.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def backend_status(self) -> tuple[str, bool]:
        vlm = self.pipeline.vlm
        if vlm is None:
            return "geometric", self.pipeline.perceiver is not None
        return vlm.model_id, vlm.healthy()

    def close(self) -> None:
        self._server.destroy()
        super().close()


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [PerceptionNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

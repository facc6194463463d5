"""Perception node: key frames + question in, the perception text out (the VLM's side).

Serves the internal ``Perceive`` action at ``~/perceive`` so that the VLM can run on another
machine than the camera. All VLM calls of a goal go out together; feedback reports each key
frame as its reply arrives and beats at least twice a second (the query server treats a silent
node as gone), and a cancel drops the calls not yet sent and aborts those in flight. Measured
motions (odometry) arrive with the goal; missing ones are filled with visual ego-motion here,
where the images are. A managed node: ``configure`` loads the VLM.

In ``streaming`` mode it also describes key frames as the frame buffer publishes them (its
``key_frames/compressed`` topic), so a query mostly finds its descriptions ready.

Run alone: ``ros2 run embodied_r_ros perception_node --ros-args -p profile:=server``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.pipeline import BAD_REQUEST, EmbodiedR, QueryError, validate_query
from embodied_r_ros.nodes.conversions import (
    CORRUPT_FRAME,
    compressed_jpeg_to_rgb,
    msg_to_motion,
    stamp_to_sec,
)
from embodied_r_ros.nodes.model_node import ModelNode, model_status
from embodied_r_ros.nodes.motion import perceive_window

FEEDBACK_CHARS = 2000  # partial text in feedback is for humans; keep messages small
MAX_GOAL_FRAMES = 256  # a window's key frames after the clamp; far more is a malformed goal
MAX_JPEG_BYTES = 16 * 2**20
MAX_TEXT_CHARS = 20_000  # question bound of an internal goal (the query server's is tighter)


class PerceptionNode(ModelNode):
    role = "perception"

    def __init__(self, node_name: str = "perception", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        from embodied_r_interfaces.action import Perceive

        self._action = Perceive
        self._server = self.create_goal_server(Perceive, "~/perceive", self._execute)

    def _images(self, goal: Any) -> list[Any]:
        if len(goal.key_frames) > MAX_GOAL_FRAMES:
            raise QueryError(BAD_REQUEST, f"{len(goal.key_frames)} key frames; at most "
                             f"{MAX_GOAL_FRAMES} are accepted")
        if len(goal.motions) != max(len(goal.key_frames) - 1, 0):
            raise QueryError(BAD_REQUEST, f"{len(goal.key_frames)} key frames came with "
                             f"{len(goal.motions)} motions")
        images = []
        for i, frame in enumerate(goal.key_frames):
            if len(frame.data) > MAX_JPEG_BYTES:
                raise QueryError(BAD_REQUEST, f"key frame {i} is {len(frame.data)} bytes")
            try:
                images.append(compressed_jpeg_to_rgb(frame))
            except ValueError as exc:
                raise QueryError(CORRUPT_FRAME, f"key frame {i}: {exc}") from None
        return images

    def _execute(self, goal_handle: Any) -> Any:
        goal = goal_handle.request
        result = self._action.Result()
        progress = [0, len(goal.key_frames)]

        def feedback(_stage: str, done: int, total: int, text: str) -> None:
            progress[:] = [done, total]
            goal_handle.publish_feedback(self._action.Feedback(
                frames_done=done, frames_total=total, partial_text=text[:FEEDBACK_CHARS]
            ))

        def beat() -> None:
            goal_handle.publish_feedback(self._action.Feedback(
                frames_done=progress[0], frames_total=progress[1], partial_text=""
            ))

        def work(pipeline: EmbodiedR, token: CancelToken) -> None:
            question, options = validate_query(goal.question, list(goal.options), MAX_TEXT_CHARS)
            images = self._images(goal)
            res = perceive_window(
                pipeline,
                images,
                [stamp_to_sec(m.header.stamp) for m in goal.key_frames],
                question,
                options,
                [msg_to_motion(m) for m in goal.motions],
                on_progress=feedback,
                cancel=token,
            )
            result.perception = res.text
            result.descriptions = [f.observation for f in res.frames]

        result.perception_sec = self.serve_goal(goal_handle, result, work, beat)
        return result

    def backend_status(self) -> tuple[str, bool, str]:
        pipeline = self.pipeline
        if pipeline is None or pipeline.vlm is None:
            return "geometric", pipeline is not None and pipeline.perceiver is not None, ""
        return model_status(pipeline.vlm)

    def close(self) -> None:
        self._server.destroy()
        super().close()


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [PerceptionNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

"""The :class:`~embodied_r_ros.nodes.query.Engine` of a stand-alone query server: frames,
perception and reasoning come from other nodes (possibly other machines) over ROS.

Calls are made from the query's worker thread and waited on with events, never by spinning, so
the node's multi-threaded executor keeps delivering replies and camera frames meanwhile. A peer
that is not there within ``wait_sec`` is ``BACKEND_DOWN``; one that does not answer within
``timeout_sec`` is ``BACKEND_TIMEOUT`` (and a running perception goal is cancelled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rclpy.action import ActionClient
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.task import Future

from embodied_r_ros.core.backends.base import BACKEND_DOWN, BACKEND_FAILED, BACKEND_TIMEOUT
from embodied_r_ros.core.perception import ProgressFn
from embodied_r_ros.core.pipeline import CANCELLED, NO_FRAMES, QueryError
from embodied_r_ros.core.reasoning import Reasoning, is_well_formed
from embodied_r_ros.nodes.conversions import (
    compressed_jpeg_to_rgb,
    jpeg_to_compressed,
    motion_to_msg,
    msg_to_motion,
    stamp_to_sec,
)
from embodied_r_ros.nodes.frame_buffer import window_service_name
from embodied_r_ros.nodes.frame_store import Window

_POLL_SEC = 0.05


def wait_future(future: Future, timeout_sec: float) -> bool:
    """Block the calling (non-executor) thread until ``future`` is done or time is up."""
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    return done.wait(timeout_sec)


class RemoteEngine:
    def __init__(
        self,
        node: Node,
        cameras: Sequence[str],
        *,
        perception_action: str = "perception/perceive",
        reasoning_service: str = "reasoning/reason",
        wait_sec: float = 2.0,
        timeout_sec: float = 300.0,
    ) -> None:
        from embodied_r_interfaces.action import Perceive
        from embodied_r_interfaces.srv import GetWindow, Reason

        self._types = (GetWindow, Perceive, Reason)
        group = ReentrantCallbackGroup()
        self.node = node
        self.wait_sec = wait_sec
        self.timeout_sec = timeout_sec
        self._windows = {
            cam: node.create_client(GetWindow, window_service_name(cam), callback_group=group)
            for cam in cameras
        }
        self._perceive = ActionClient(node, Perceive, perception_action, callback_group=group)
        self._reason = node.create_client(Reason, reasoning_service, callback_group=group)

    def _call(self, client: Any, request: Any, what: str, down_code: str) -> Any:
        if not client.wait_for_service(timeout_sec=self.wait_sec):
            raise QueryError(down_code, f"{what} is not running (no {client.srv_name} service)")
        future = client.call_async(request)
        if not wait_future(future, self.timeout_sec):
            client.remove_pending_request(future)
            raise QueryError(BACKEND_TIMEOUT, f"{what} gave no answer in {self.timeout_sec:g} s")
        return future.result()

    def window(self, camera: str, window_sec: float) -> Window:
        get_window = self._types[0]
        res = self._call(self._windows[camera], get_window.Request(window_sec=window_sec),
                         f"the frame buffer of camera '{camera}'", NO_FRAMES)
        if not res.success:
            raise QueryError(res.error_code or NO_FRAMES, res.error)
        return Window(
            images=[compressed_jpeg_to_rgb(m) for m in res.key_frames],
            stamps=[stamp_to_sec(m.header.stamp) for m in res.key_frames],
            jpegs=[bytes(m.data) for m in res.key_frames],
            motions=[msg_to_motion(m) for m in res.motions],
            n_sampled=len(res.key_frames),
        )

    def perceive(
        self,
        window: Window,
        question: str,
        options: Sequence[str],
        on_progress: ProgressFn | None,
        cancelled: Callable[[], bool],
    ) -> str:
        perceive = self._types[1]
        if not self._perceive.wait_for_server(timeout_sec=self.wait_sec):
            raise QueryError(BACKEND_DOWN, "the perception node is not running")
        goal = perceive.Goal(
            question=question,
            options=list(options),
            key_frames=[jpeg_to_compressed(j, s) for j, s in zip(window.jpegs, window.stamps,
                                                                 strict=True)],
            motions=[motion_to_msg(m) for m in window.motions],
        )

        def feedback(msg: Any) -> None:
            if on_progress is not None:
                fb = msg.feedback
                on_progress("perception", fb.frames_done, fb.frames_total, fb.partial_text)

        sent = self._perceive.send_goal_async(goal, feedback_callback=feedback)
        if not wait_future(sent, self.timeout_sec):
            raise QueryError(BACKEND_TIMEOUT, "the perception node did not accept the goal")
        handle = sent.result()
        if not handle.accepted:
            raise QueryError(BACKEND_FAILED, "the perception node rejected the goal")
        result = handle.get_result_async()
        deadline = time.monotonic() + self.timeout_sec
        cancel_sent = False
        while not wait_future(result, _POLL_SEC):
            if not cancel_sent and (cancelled() or time.monotonic() > deadline):
                handle.cancel_goal_async()
                cancel_sent = True
                deadline = min(deadline, time.monotonic() + self.wait_sec)
            elif cancel_sent and time.monotonic() > deadline:
                break
        late = f"perception did not finish in {self.timeout_sec:g} s"
        if not result.done():
            raise QueryError(BACKEND_TIMEOUT, late)
        res = result.result().result
        if not res.success:
            if cancel_sent and res.error_code == CANCELLED and not cancelled():
                raise QueryError(BACKEND_TIMEOUT, late)
            raise QueryError(res.error_code or BACKEND_FAILED, res.error)
        return str(res.perception)

    def reason(self, perception: str, options: Sequence[str]) -> Reasoning:
        reason = self._types[2]
        res = self._call(self._reason, reason.Request(perception=perception, options=list(options)),
                         "the reasoning node", BACKEND_DOWN)
        if not res.success:
            raise QueryError(res.error_code or BACKEND_FAILED, res.error)
        return Reasoning(raw=res.raw, think=res.think, answer=res.answer,
                         answer_text=res.answer_text, well_formed=is_well_formed(res.raw))

    def close(self) -> None:
        self._perceive.destroy()

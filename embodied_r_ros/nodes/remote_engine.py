"""The :class:`~embodied_r_ros.agent.query_runner.Engine` of a stand-alone query server: frames,
perception and reasoning come from other nodes (possibly other machines) over ROS.

Calls are made from the query's worker thread and waited on in short slices, never by spinning,
so the node's multi-threaded executor keeps delivering replies and camera frames meanwhile.
Every wait ends: a peer that is not there within ``wait_sec`` is ``BACKEND_DOWN``; a peer that
vanishes mid-call is noticed within about two seconds (it leaves the ROS graph, or, when a
killed process lingers in discovery, its goal feedback heartbeat stops and its DDS liveliness is
lost) and is ``BACKEND_DOWN`` too; the frame buffer has ``window_timeout_sec`` to answer; and
the question's :class:`~embodied_r_ros.core.cancel.CancelToken` cancels a running goal on the
peer, so a timed-out or cancelled question stops the work there as well.

A pause is not a death. Heartbeats come from the peer's Python and are read by this process's
Python: a full garbage collection, a lazy import or a starved CPU on either side stops them for
seconds (a freshly started model node most of all: its first goal meets the garbage of its
start). So silence ends a goal only once the peer's DDS liveliness is lost too (or where it is
unknown); a peer whose liveliness holds (asserted by the middleware's own threads, Python
paused or not) is waited for up to ``STALLED_AFTER_SEC``, and time this process itself did not
run is not counted as silence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rclpy.action import ActionClient
from rclpy.callback_groups import CallbackGroup, ReentrantCallbackGroup
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node

from embodied_r_ros.agent.frame_store import Window
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import raise_if_stopped
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED
from embodied_r_ros.core.perception import ProgressFn
from embodied_r_ros.core.poses import StampedPose
from embodied_r_ros.core.reasoning import Reasoning, is_well_formed
from embodied_r_ros.core.request import SCOPE_WINDOW, QueryError, Question
from embodied_r_ros.nodes.conversions import (
    jpeg_to_compressed,
    motion_to_msg,
    msg_to_motion,
    msg_to_pose,
    stamp_to_sec,
)
from embodied_r_ros.nodes.transport import (
    ALIVE_QOS,
    PERCEPTION_ACTION,
    REASONING_ACTION,
    alive_topic,
    window_service_name,
)

_POLL_SEC = 0.05
#: the query server's ``backend_wait_sec`` and ``window_timeout_sec`` start here: how long a
#: peer has to appear, and a frame buffer to answer
BACKEND_WAIT_SEC = 2.0
WINDOW_TIMEOUT_SEC = 5.0
#: goal servers beat every 0.5 s; this long without a sign of life and a peer is gone, unless
#: its liveliness says it is only paused
HEARTBEAT_TIMEOUT_SEC = 2.0
#: this long without a heartbeat and a peer is stuck, however alive its process
STALLED_AFTER_SEC = 30.0
#: a wait between two checks longer than the poll by this much: this process did not run
_LOCAL_PAUSE_SEC = 0.1
#: this long missing from the graph and a peer is gone (not a discovery hiccup)
GONE_AFTER_SEC = 0.5
CANCEL_WAIT_SEC = 1.0


def done_event(future: Any) -> threading.Event:
    """An event set when the rclpy ``future`` is done (resolved by a spinning executor)."""
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    return done


class _Presence:
    """Debounced "is the peer still in the graph" while waiting on it."""

    def __init__(self, is_ready: Callable[[], bool], what: str) -> None:
        self.is_ready = is_ready
        self.what = what
        self._missing_since: float | None = None

    def check(self) -> None:
        if self.is_ready():
            self._missing_since = None
            return
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
        elif now - self._missing_since >= GONE_AFTER_SEC:
            raise QueryError(BACKEND_DOWN, f"{self.what} went away")


class _Liveliness:
    """Whether a goal server's process is alive, from the DDS liveliness of its
    ``<action>/alive`` topic (:data:`~embodied_r_ros.nodes.transport.ALIVE_QOS`); None until the
    middleware first reports it (a peer without the topic: its heartbeat alone decides)."""

    def __init__(self, node: Node, action: str, group: CallbackGroup) -> None:
        from std_msgs.msg import Empty

        self.alive_count: int | None = None
        node.create_subscription(
            Empty, alive_topic(action), lambda _msg: None, ALIVE_QOS, callback_group=group,
            event_callbacks=SubscriptionEventCallbacks(liveliness=self._changed),
        )

    def _changed(self, info: Any) -> None:
        self.alive_count = int(info.alive_count)

    @property
    def alive(self) -> bool:
        return bool(self.alive_count)


class RemoteEngine:
    def __init__(
        self,
        node: Node,
        cameras: Sequence[str],
        *,
        perception_action: str = PERCEPTION_ACTION,
        reasoning_action: str = REASONING_ACTION,
        wait_sec: float = BACKEND_WAIT_SEC,
        window_timeout_sec: float = WINDOW_TIMEOUT_SEC,
    ) -> None:
        from embodied_r_interfaces.action import Perceive, Reason
        from embodied_r_interfaces.srv import GetWindow

        self._types = (GetWindow, Perceive, Reason)
        group = ReentrantCallbackGroup()
        self.node = node
        self.wait_sec = wait_sec
        self.window_timeout_sec = window_timeout_sec
        self._windows = {
            cam: node.create_client(GetWindow, window_service_name(cam), callback_group=group)
            for cam in cameras
        }
        self._perceive = ActionClient(node, Perceive, perception_action, callback_group=group)
        self._reason = ActionClient(node, Reason, reasoning_action, callback_group=group)
        self._liveliness = {
            id(self._perceive): _Liveliness(node, perception_action, group),
            id(self._reason): _Liveliness(node, reasoning_action, group),
        }

    def _wait_ready(self, is_ready: Callable[[], bool], what: str, cancel: CancelToken) -> None:
        deadline = time.monotonic() + cancel.bound(self.wait_sec)
        while not is_ready():
            raise_if_stopped(cancel)
            if time.monotonic() >= deadline:
                raise QueryError(BACKEND_DOWN, f"{what} is not running")
            time.sleep(_POLL_SEC)

    # -- frames --------------------------------------------------------------------------------

    def _get_window(self, camera: str, request: Any, cancel: CancelToken) -> Any:
        """The frame buffer's answer to ``request``; raises :class:`QueryError`."""
        client = self._windows[camera]
        what = f"the frame buffer of camera '{camera}'"
        self._wait_ready(client.service_is_ready, what, cancel)
        future = client.call_async(request)
        limit = time.monotonic() + cancel.bound(self.window_timeout_sec)
        presence = _Presence(client.service_is_ready, what)
        answered = done_event(future)
        try:
            while not answered.wait(_POLL_SEC):
                raise_if_stopped(cancel)
                presence.check()
                if time.monotonic() >= limit:
                    raise QueryError(BACKEND_DOWN, f"{what} did not answer within "
                                     f"{self.window_timeout_sec:g} s")
        except BaseException:
            client.remove_pending_request(future)
            raise
        res = future.result()
        if not res.success:
            raise QueryError(res.error_code or BACKEND_FAILED, res.error)
        return res

    def window(self, camera: str, window_sec: float, cancel: CancelToken) -> Window:
        res = self._get_window(camera, self._types[0].Request(window_sec=window_sec), cancel)
        # JPEG bytes only: they are shipped on to the perception node and decoded there, once
        return Window(
            stamps=[stamp_to_sec(m.header.stamp) for m in res.key_frames],
            jpegs=[bytes(m.data) for m in res.key_frames],
            motions=[msg_to_motion(m) for m in res.motions],
            n_sampled=len(res.key_frames),
        )

    def pose_now(self, camera: str, cancel: CancelToken) -> StampedPose | None:
        """The frame buffer's pose now; None (logged) where it cannot say: the memory's question
        is then answered from its newest frame, not refused, nor kept waiting for a buffer that
        is not running."""
        if not self._windows[camera].service_is_ready():
            self.node.get_logger().warning(
                f"no frame buffer of camera '{camera}' to ask the pose now: the memory counts "
                "from its newest frame", throttle_duration_sec=30.0)
            return None
        try:
            res = self._get_window(camera, self._types[0].Request(pose_only=True), cancel)
            if not res.has_pose_now:
                return None
            return StampedPose(stamp_to_sec(res.pose_now_stamp), msg_to_pose(res.pose_now))
        except (QueryError, ValueError) as exc:
            raise_if_stopped(cancel)
            self.node.get_logger().warning(
                f"no pose now from camera '{camera}' (the memory counts from its newest "
                f"frame): {exc}", throttle_duration_sec=30.0)
            return None

    # -- goals ---------------------------------------------------------------------------------

    def _run_goal(self, client: ActionClient, goal: Any, what: str,
                  on_feedback: Callable[[Any], None] | None, cancel: CancelToken) -> Any:
        """Send ``goal`` and wait for its result while the peer shows signs of life."""
        self._wait_ready(client.server_is_ready, what, cancel)
        liveliness = self._liveliness[id(client)]
        last_sign = [time.monotonic()]
        last_check = [last_sign[0]]

        def feedback(msg: Any) -> None:
            last_sign[0] = time.monotonic()
            if on_feedback is not None:
                on_feedback(msg.feedback)

        presence = _Presence(client.server_is_ready, what)
        gone: list[bool] = []  # set when the peer is found gone (left the graph, or silent)

        def alive() -> None:
            now = time.monotonic()
            paused = now - last_check[0] - _POLL_SEC
            last_check[0] = now
            if paused > _LOCAL_PAUSE_SEC:
                # this process did not run meanwhile: what the peer sent then waits unread
                last_sign[0] += paused
            try:
                presence.check()
            except QueryError:
                gone.append(True)
                raise
            silent = now - last_sign[0]
            if silent <= HEARTBEAT_TIMEOUT_SEC:
                return
            if not liveliness.alive:
                gone.append(True)
                raise QueryError(BACKEND_DOWN, f"{what} stopped answering (no sign of life "
                                 f"for {silent:.1f} s)")
            if silent > STALLED_AFTER_SEC:  # its process lives, its goal does not move
                raise QueryError(BACKEND_DOWN, f"{what} is stuck (no heartbeat for "
                                 f"{silent:.1f} s)")

        sent = client.send_goal_async(goal, feedback_callback=feedback)
        accepted = done_event(sent)
        while not accepted.wait(_POLL_SEC):
            raise_if_stopped(cancel)
            alive()
        handle = sent.result()
        if not handle.accepted:
            raise QueryError(BACKEND_FAILED, f"{what} rejected the goal")
        last_sign[0] = time.monotonic()
        result = handle.get_result_async()
        finished = done_event(result)
        try:
            while not finished.wait(_POLL_SEC):
                raise_if_stopped(cancel)
                alive()
        except BaseException:
            # stop the work there too (a timed-out or cancelled question, or a stuck peer); a
            # peer that alive() found gone cannot answer the cancel, so it is not waited for
            handle.cancel_goal_async()
            if not gone:
                finished.wait(CANCEL_WAIT_SEC)
            raise
        res = result.result().result
        if not res.success:
            raise QueryError(res.error_code or BACKEND_FAILED, res.error)
        return res

    def perceive(
        self,
        window: Window,
        question: Question,
        on_progress: ProgressFn | None,
        cancel: CancelToken,
    ) -> str:
        goal = self._types[1].Goal(
            question=question.text,
            options=list(question.options),
            key_frames=[jpeg_to_compressed(j, s) for j, s in zip(window.jpegs, window.stamps,
                                                                 strict=True)],
            motions=[motion_to_msg(m) for m in window.motions],
        )

        def feedback(fb: Any) -> None:
            if on_progress is not None and fb.partial_text:  # heartbeats carry no text
                on_progress("perception", fb.frames_done, fb.frames_total, fb.partial_text)

        res = self._run_goal(self._perceive, goal, "the perception node", feedback, cancel)
        return str(res.perception)

    def reason(self, perception: str, question: Question, cancel: CancelToken,
               scope: str = SCOPE_WINDOW) -> Reasoning:
        goal = self._types[2].Goal(perception=perception, options=list(question.options),
                                   scope=scope)
        res = self._run_goal(self._reason, goal, "the reasoning node", None, cancel)
        return Reasoning(raw=res.raw, think=res.think, answer=res.answer,
                         answer_text=res.answer_text, well_formed=is_well_formed(res.raw))

    def close(self) -> None:
        self._perceive.destroy()
        self._reason.destroy()

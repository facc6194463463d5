"""Perception node: key frames + question in, the perception text out (the VLM's side).

Serves the internal ``Perceive`` action at ``~/perceive`` so that the VLM can run on another
machine than the camera. All VLM calls of a goal go out together; feedback reports each key
frame as its reply arrives and beats at least twice a second (the query server treats a silent
node as gone), and a cancel drops the calls not yet sent and aborts those in flight. Measured
motions (odometry) arrive with the goal; missing ones are filled with visual ego-motion here,
where the images are. A managed node: ``configure`` loads the VLM.

In ``streaming`` mode (``perception.mode``, with a VLM) it also describes frames in the
background as they arrive: from the frame buffers of ``cameras`` (their
``frames/<camera>/stored`` topic) in separate mode, handed over in-process in the all-in-one.
The descriptions are cached, so a query mostly finds its window's ready; key frames' are
published on ``~/descriptions`` to be recorded and watched, and the boxes a VLM grounded in
each on ``~/boxes/<camera>``. With ``memory.enabled`` key frames
are described in the background whatever the mode (geometrically without a VLM), and each
description also goes to the spatial memory's writer: in separate processes this node writes
the memory itself (each key frame with the pose its frame buffer sent with it) and serves
``memory/stats`` and ``memory/clear``; in the all-in-one the query server's process does
(``note_listeners``).

With ``perception.grounding`` on and no intrinsics in the config (``perception.camera.fx``),
it subscribes to ``camera_info`` (``sensor_msgs/CameraInfo``; remap it to the camera's) and
places the objects the VLM grounds with the newest intrinsics it received, scaled to the key
frames' size; until one arrives, from the configured field of view.

Run alone: ``ros2 run embodied_r_ros perception_node --ros-args -p profile:=server``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

from embodied_r_ros.agent.guard import guard_subscription
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.error_codes import CORRUPT_FRAME
from embodied_r_ros.core.perception_text import observation
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.request import (
    GOAL_LIMITS,
    MAX_FEEDBACK_CHARS,
    QueryError,
    check_key_frames,
    validate_query,
)
from embodied_r_ros.core.streaming import BackgroundDescriber, KeyFrameNote
from embodied_r_ros.nodes.conversions import (
    compressed_jpeg_to_rgb,
    msg_to_motion,
    msg_to_pose,
    sec_to_stamp,
    stamp_to_sec,
)
from embodied_r_ros.nodes.memory_services import MemoryServices, open_writer
from embodied_r_ros.nodes.model_node import SUCCESS, ModelNode, model_status
from embodied_r_ros.nodes.params import DEFAULT_CAMERA, Spec, declare
from embodied_r_ros.nodes.transport import stored_frames_topic
from embodied_r_ros.nodes.viewer_topics import ViewerTopic, boxes_msg
from embodied_r_ros.recordings.bags import CameraInfo
from embodied_r_ros.viewer.content import frame_boxes

KEY_POSES_KEPT = 1024  # poses of key frames received and not yet written to the memory
NOT_CONFIGURED = "the perception node is not configured"

SPECS: tuple[Spec, ...] = (
    Spec("cameras", [DEFAULT_CAMERA], "streaming mode, separate processes: the cameras whose "
         "stored frames (frames/<camera>/stored) are described as they arrive (read on configure)",
         read_only=False),
    Spec("subscribe_frames", True, "streaming mode or memory.enabled: subscribe to those topics "
         "and, with the memory, write it (the all-in-one hands frames over in-process and "
         "writes the memory itself instead)"),
)


class PerceptionNode(ModelNode):
    role = "perception"

    def __init__(self, node_name: str = "perception", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        from std_msgs.msg import Header

        from embodied_r_interfaces.action import Perceive
        from embodied_r_interfaces.msg import KeyFrameDescription

        self.stream_params = declare(self, SPECS)
        from sensor_msgs.msg import CameraInfo as CameraInfoMsg

        self._action = Perceive
        self._camera_info_type = CameraInfoMsg
        self._server = self.create_goal_server(Perceive, "~/perceive", self._execute)
        self.describer: BackgroundDescriber | None = None
        self._note_type = KeyFrameDescription
        self._header_type = Header
        self._notes = self.create_publisher(KeyFrameDescription, "~/descriptions", 10)
        self._inputs: list[Any] = []  # subscriptions made on configure, destroyed on cleanup
        #: called with each key frame's description (on the describer's thread: only enqueue)
        self.note_listeners: list[Callable[[KeyFrameNote], None]] = []
        #: stand-alone: this node writes the memory (opened on configure, closed on cleanup)
        self.memory = (MemoryServices(self, None, NOT_CONFIGURED)
                       if self.stream_params["subscribe_frames"] else None)
        self._key_poses: OrderedDict[tuple[str, float], Pose] = OrderedDict()
        self._poses_lock = threading.Lock()
        self.note_listeners.append(self._record)
        #: each camera's grounded boxes (``~/boxes/<camera>``), made as cameras appear
        self._boxes: dict[str, ViewerTopic] = {}
        self._boxes_lock = threading.Lock()
        for camera in self.stream_params["cameras"]:
            self.boxes_topic(camera)

    def boxes_topic(self, camera: str) -> ViewerTopic:
        """The topic of ``camera``'s grounded boxes (made on first use)."""
        with self._boxes_lock:
            topic = self._boxes.get(camera)
            if topic is None:
                from visualization_msgs.msg import ImageMarker

                topic = self._boxes[camera] = ViewerTopic(
                    self, ImageMarker, f"~/boxes/{camera}", boxes_msg, "boxes")
            return topic

    @property
    def viewer_topics(self) -> list[ViewerTopic]:
        with self._boxes_lock:
            return list(self._boxes.values())

    # -- streaming perception ------------------------------------------------------------

    @property
    def _streaming(self) -> bool:
        cfg = self.config
        return (cfg is not None and cfg.perception.mode == "streaming"
                and cfg.perception.backend == "vlm")

    @property
    def _describing(self) -> bool:
        """Key frames are described as they arrive: for streaming, or for the memory."""
        return self._streaming or (self.config is not None and self.config.memory.enabled)

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_configure(state)
        if result == SUCCESS and self.memory is not None and self.config is not None:
            self.memory.writer, why_not = open_writer(self.config, self.get_logger())
            self.memory.why_not = why_not or NOT_CONFIGURED
        if result == SUCCESS and self._grounding_needs_camera_info:
            self._inputs.append(self.create_subscription(
                self._camera_info_type, "camera_info",
                guard_subscription(self.get_logger(), "camera info", self._on_camera_info),
                qos_profile_sensor_data, callback_group=self.requests))
        if result == SUCCESS and self._describing and self.stream_params["subscribe_frames"]:
            from embodied_r_interfaces.msg import StoredFrame

            reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
            self._inputs = [
                self.create_subscription(
                    StoredFrame, stored_frames_topic(camera),
                    guard_subscription(self.get_logger(), "stored frame",
                                       lambda msg, cam=camera: self._on_stored(cam, msg)),
                    reliable, callback_group=self.requests,
                )
                for camera in self.stream_params["cameras"]
            ]
        return result

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_cleanup(state)
        for sub in self._inputs:
            self.destroy_subscription(sub)
        self._inputs = []
        self._close_memory()
        return result

    def _close_memory(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory.why_not = NOT_CONFIGURED
        with self._poses_lock:
            self._key_poses.clear()

    # -- the camera's intrinsics, for grounding ---------------------------------------

    @property
    def _grounding_needs_camera_info(self) -> bool:
        perception = self.config.perception if self.config is not None else None
        return (perception is not None and perception.backend == "vlm"
                and perception.grounding.mode != "off" and perception.camera.fx is None)

    def _on_camera_info(self, msg: Any) -> None:
        """The newest intrinsics, for the objects perception grounds from now on."""
        perceiver = self.pipeline.perceiver if self.pipeline is not None else None
        info = CameraInfo.from_message(msg)
        if perceiver is None or info is None:
            return
        camera = info.to_config(perceiver.cfg.camera)
        if camera != perceiver.camera:
            if perceiver.camera is None:
                self.get_logger().info(
                    f"grounding places objects with the intrinsics of camera_info "
                    f"({info.width}x{info.height}, fx {info.fx:.1f})")
            perceiver.camera = camera

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        pipeline = self.pipeline
        if self._describing and pipeline is not None and pipeline.perceiver is not None:
            self.describer = BackgroundDescriber(
                pipeline.perceiver, queue_size=pipeline.config.perception.streaming_queue,
                on_described=self._publish_note,
            )
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_describer()
        return super().on_deactivate(state)

    def _free(self) -> None:
        self._stop_describer()  # before the VLM it uses goes (cleanup, shutdown)
        self._close_memory()  # after the describer: its last notes are written
        super()._free()

    def _stop_describer(self) -> None:
        describer, self.describer = self.describer, None
        if describer is not None:
            describer.close()

    def submit_frame(self, camera: str, stamp: float, image: np.ndarray, keyframe: bool
                     ) -> None:
        """A new stored frame to describe in the background (no-op unless streaming or
        recording the memory, which takes key frames only)."""
        if self.describer is not None and (keyframe or self._streaming):
            self.describer.submit(camera, stamp, image, keyframe)

    def _on_stored(self, camera: str, msg: Any) -> None:
        stamp = stamp_to_sec(msg.image.header.stamp)
        if msg.keyframe and msg.has_pose and self.memory is not None:
            try:
                pose = msg_to_pose(msg.pose)
            except ValueError:  # a zero quaternion: the row is stored without a pose
                pose = None
            if pose is not None:
                with self._poses_lock:
                    self._key_poses[(camera, stamp)] = pose
                    while len(self._key_poses) > KEY_POSES_KEPT:
                        self._key_poses.popitem(last=False)
        self.submit_frame(camera, stamp, compressed_jpeg_to_rgb(msg.image), bool(msg.keyframe))

    def _pose_of(self, camera: str) -> Callable[[float], Pose | None]:
        def lookup(stamp: float) -> Pose | None:
            with self._poses_lock:
                return self._key_poses.pop((camera, stamp), None)

        return lookup

    def _record(self, note: KeyFrameNote) -> None:
        """A key frame's description into the memory this node writes (stand-alone)."""
        writer = self.memory.writer if self.memory is not None else None
        if writer is not None:
            writer.submit(note, note.image, self._pose_of(note.camera))

    def _publish_note(self, note: KeyFrameNote) -> None:
        msg = self._note_type(
            header=self._header_type(stamp=sec_to_stamp(note.stamp), frame_id=note.camera),
            model=self.pipeline.perceiver.model_id if self.pipeline else "",
            action=note.record.vlm_action or "", description=observation(note.record),
        )
        if note.previous_stamp is not None:
            msg.previous_stamp = sec_to_stamp(note.previous_stamp)
        self._notes.publish(msg)
        boxes = self.boxes_topic(note.camera)
        if boxes.wanted:
            found = frame_boxes(note.camera, note.record)
            if found.boxes:
                boxes.publish(found)
        for listener in self.note_listeners:
            listener(note)

    def _images(self, goal: Any) -> list[Any]:
        check_key_frames([len(frame.data) for frame in goal.key_frames], len(goal.motions))
        images = []
        for i, frame in enumerate(goal.key_frames):
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
                frames_done=done, frames_total=total, partial_text=text[:MAX_FEEDBACK_CHARS]
            ))

        def beat() -> None:
            goal_handle.publish_feedback(self._action.Feedback(
                frames_done=progress[0], frames_total=progress[1], partial_text=""
            ))

        def work(pipeline: EmbodiedR, token: CancelToken) -> None:
            question = validate_query(goal.question, list(goal.options), GOAL_LIMITS)
            images = self._images(goal)
            res = pipeline.perceive_window(
                images,
                [stamp_to_sec(m.header.stamp) for m in goal.key_frames],
                question,
                [msg_to_motion(m) for m in goal.motions],
                on_progress=feedback,
                cancel=token,
            )
            result.perception = res.text
            result.descriptions = [observation(f) for f in res.frames]

        result.perception_sec = self.serve_goal(goal_handle, result, work, beat)
        return result

    def backend_status(self) -> tuple[str, bool, str]:
        pipeline = self.pipeline
        if pipeline is None or pipeline.vlm is None:
            return "geometric", pipeline is not None and pipeline.perceiver is not None, ""
        return model_status(pipeline.vlm)

    def diagnostics(self) -> list[Any]:
        statuses = super().diagnostics()
        d = self.describer
        if d is not None:
            from diagnostic_msgs.msg import KeyValue

            values = {"descriptions_pending": d.pending, "described_per_sec": f"{d.rate():.3f}",
                      "vlm_busy_fraction": f"{d.busy_fraction():.3f}",
                      "descriptions_done": d.described, "descriptions_dropped": d.dropped,
                      "descriptions_failed": d.failed}
            statuses[0].values.extend(KeyValue(key=k, value=str(v)) for k, v in values.items())
        if self.memory is not None:
            from diagnostic_msgs.msg import KeyValue

            memory, warning = self.memory.diagnostics()
            statuses[0].values.extend(KeyValue(key=k, value=str(v)) for k, v in memory.items())
            if warning:
                statuses[0].message = f"{statuses[0].message}; {warning}"
        return statuses

    def close(self) -> None:
        self._stop_describer()
        self._server.destroy()
        super().close()


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [PerceptionNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

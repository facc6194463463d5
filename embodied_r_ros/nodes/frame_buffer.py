"""Frame-buffer node: camera in, an egocentric window of key frames out.

Subscribes to ``image`` (``sensor_msgs/Image``), ``image/compressed``
(``sensor_msgs/CompressedImage``) and ``odom`` (``nav_msgs/Odometry``) with sensor-data QoS, or,
with ``pose_source: tf``, reads the camera's pose from the tf tree (``nodes/tf_poses.py``). A node
that has received no frame 10 s after it started (``no_frame_warning_sec``) says so once, naming
the topics it listens on: an unmapped ``image`` is the usual cause.
The subscriptions are raw: the header stamp is read from the serialised bytes and checked
against the pre-sampling rate, and only the frames kept (about one a second) are deserialised
and decoded, so the ~29 of 30 frames a second that are not kept cost a callback, a copy and a
comparison, not a deserialisation. Kept frames are converted with rosbags-image and stored by
:class:`FrameStore`; key frames are republished on ``~/key_frames`` for Foxglove/RViz, stored
frames on ``frames/<camera>/stored`` (for streaming perception elsewhere, only while someone
listens). The query server reads windows through ``frames/<camera_name>/get_window`` (or
in-process in the all-in-one).

Run alone: ``ros2 run embodied_r_ros frame_buffer --ros-args -r image:=/camera/image_raw``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import astuple
from typing import Any, TypeVar

from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType, JumpThreshold
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image

from embodied_r_ros.agent.frame_store import (
    BUFFER_MAX_BYTES,
    BUFFER_SEC,
    JPEG_QUALITY,
    STAMP_CONFIRM,
    STAMP_JUMP_SEC,
    FrameStore,
    Window,
    stamp_filter,
)
from embodied_r_ros.agent.guard import guard_service, guard_subscription, one_line
from embodied_r_ros.core.config import Config
from embodied_r_ros.core.error_codes import INTERNAL
from embodied_r_ros.nodes.conversions import (
    FrameError,
    compressed_to_rgb,
    from_cdr,
    image_to_rgb,
    jpeg_to_compressed,
    motion_to_msg,
    odometry_to_pose,
    pose_to_msg,
    sec_to_stamp,
    stamp_of_cdr,
    stamp_to_sec,
)
from embodied_r_ros.nodes.diagnostics import (
    OK,
    WARN,
    DiagnosticsPublisher,
    RateMeter,
    make_status,
)
from embodied_r_ros.nodes.params import (
    CONFIG_SPECS,
    DEFAULT_CAMERA,
    DIAGNOSTICS_SPEC,
    Spec,
    declare,
    load_node_config,
    with_defaults,
)
from embodied_r_ros.nodes.tf_poses import TfPoses, tf_poses
from embodied_r_ros.nodes.transport import IMAGE_QOS, stored_frames_topic, window_service_name
from embodied_r_ros.nodes.viewer_topics import PathTopic, ViewerTopic, key_frame_image
from embodied_r_ros.viewer.content import KeyFrameImage

M = TypeVar("M", Image, CompressedImage)

#: the content filter the camera subscriptions start with when the stamp filter is on: every
#: frame passes (nanosec is unsigned), and the grid's filter later replaces it in place
PASS_ALL: tuple[str, list[str]] = ("header.stamp.nanosec >= %0", ["0"])

SPECS: tuple[Spec, ...] = (
    DIAGNOSTICS_SPEC,
    Spec("camera_name", DEFAULT_CAMERA, "this camera's name in SpatialQuery.camera"),
    Spec("buffer_sec", BUFFER_SEC, "seconds of pre-sampled frames kept", 1.0, 86400.0),
    Spec("buffer_max_mb", BUFFER_MAX_BYTES / 2**20, "memory bound of the JPEG frame store in "
         "MiB", 1.0, 65536.0),
    Spec("jpeg_quality", JPEG_QUALITY, "JPEG quality of stored frames", 10, 100),
    Spec("odom_tolerance_sec", -1.0, "max time between a key frame and its odometry pose; "
         "-1: the config's perception.odom_tolerance_sec, which datasets built from bags use "
         "too", -1.0, 10.0),
    Spec("window_anchor", "latest_frame", "end of a query window: the newest frame's stamp, or "
         "this node's clock (use_sim_time aware)", choices=("latest_frame", "clock"),
         read_only=False),
    Spec("publish_key_frames", True, "republish key frames on ~/key_frames"),
    Spec("image_qos", "sensor_data", "QoS of the image subscriptions: sensor_data (best effort, "
         "matches any camera) or reliable (only reliable cameras; survives UDP loss of large "
         "frames)", choices=("sensor_data", "reliable")),
    Spec("stamp_jump_sec", STAMP_JUMP_SEC, "a frame stamped this far off the stream's timeline "
         "is dropped (BAD_STAMP) unless the next frames confirm the jump", 0.5, 86400.0),
    Spec("stamp_confirm_frames", STAMP_CONFIRM, "consecutive frames that confirm a timeline "
         "jump (a bag loop, a clock reset)", 1, 100),
    Spec("stamp_filter", True, "once the sampling grid is known, subscribe with a DDS content "
         "filter on header.stamp, so only frames near the grid times are delivered at all"),
    Spec("pose_source", "odom", "where key frames' poses come from: odom (nav_msgs/Odometry "
         "on odom) or tf (the chain from perception.tf.odom_frame to the camera's frame on /tf "
         "and /tf_static; tf2_ros where installed)", choices=("odom", "tf")),
    Spec("no_frame_warning_sec", 10.0, "warn once, naming the image topics, when no frame has "
         "arrived this long after the start", 0.1, 3600.0),
    Spec("no_tf_warning_sec", 10.0, "pose_source tf: warn once, naming the frames missing from "
         "the tree, when the camera's chain is still missing this long after the start",
         0.1, 3600.0),
)


class FrameBufferNode(Node):
    """One camera's frame window; see the module docstring."""

    threads_needed = 3  # ingestion, odometry, a GetWindow call

    def __init__(
        self, node_name: str = "frame_buffer", *, config: Config | None = None,
        defaults: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """``defaults``: presets of :data:`SPECS` below the node's own parameter overrides (a
        multi-camera all-in-one hands each camera the ``frame_buffer`` section)."""
        super().__init__(node_name, **kwargs)
        p = declare(self, with_defaults(SPECS, defaults or {}))
        self.params = p
        self.config = config or load_node_config(declare(self, CONFIG_SPECS))
        self.camera_name: str = p["camera_name"]
        if not self.camera_name or "/" in self.camera_name:
            raise ValueError(f"camera_name {self.camera_name!r} must be a non-empty plain name")
        odom = MutuallyExclusiveCallbackGroup()  # poses keep flowing while a frame is processed
        #: the tf tree's camera chain (``pose_source: tf``), else None: odometry on ``odom``
        self.poses: TfPoses | None = (
            tf_poses(self, self.config.perception.tf, p["buffer_sec"] + 10.0, odom,
                     warn_after_sec=p["no_tf_warning_sec"])
            if p["pose_source"] == "tf" else None)
        self.store = FrameStore(
            self.config.keyframes,
            buffer_sec=p["buffer_sec"],
            buffer_max_bytes=int(p["buffer_max_mb"] * 2**20),
            jpeg_quality=p["jpeg_quality"],
            odom_tolerance_sec=(p["odom_tolerance_sec"] if p["odom_tolerance_sec"] >= 0
                                else self.config.perception.odom_tolerance_sec),
            stamp_jump_sec=p["stamp_jump_sec"],
            stamp_confirm=p["stamp_confirm_frames"],
            # streaming perception describes key frames: windows start at one
            snap_to_key_frames=self.config.perception.mode == "streaming",
            pose_track=self.poses,
        )
        self.rate = RateMeter()
        self._got_frame = False
        ingest = MutuallyExclusiveCallbackGroup()  # frames in order, one at a time
        self._io = ReentrantCallbackGroup()
        image_qos = (IMAGE_QOS if p["image_qos"] == "sensor_data"  # a 2-frame history
                     else QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE))
        log = self.get_logger()
        self._image_qos, self._ingest_group = image_qos, ingest
        self._filter: tuple[str, list[str]] | None = None
        self._filter_origin: float | None = None
        self._last_stored = (0, 0)  # (frames stored, frames received) at the last check
        self._image_subs = self._subscribe_images(PASS_ALL if p["stamp_filter"] else None)
        if p["stamp_filter"]:
            self._tuner = self.create_timer(0.5, self._tune_ingest, callback_group=ingest)
        self.odometry_subscription = self.create_subscription(
            Odometry, "odom", guard_subscription(log, "odometry", self._on_odom),
            qos_profile_sensor_data, callback_group=odom,
        ) if self.poses is None else None
        # steady time: with use_sim_time and no /clock yet, the node's clock stands still
        self._no_frame_timer = self.create_timer(
            p["no_frame_warning_sec"], self._warn_if_no_frame, callback_group=self._io,
            clock=Clock(clock_type=ClockType.STEADY_TIME))
        # /clock going back (use_sim_time, a bag replayed from its start): a new timeline
        self._jump_handler = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=Duration(seconds=-1.0),
                          on_clock_change=False),
            post_callback=guard_subscription(log, "clock jump", self._on_clock_jump),
        )
        self._key_pub = (ViewerTopic(self, Image, "~/key_frames", key_frame_image, "key_frames")
                         if p["publish_key_frames"] else None)
        self.path = PathTopic(self)
        #: the topics the all-in-one's viewer serves too
        self.viewer_topics = [t for t in (self._key_pub, self.path.topic) if t is not None]
        # every stored frame as its JPEG: what streaming perception in another process reads
        from embodied_r_interfaces.msg import StoredFrame

        self._stored_type = StoredFrame
        self._stored_pub = self.create_publisher(
            StoredFrame, stored_frames_topic(self.camera_name),
            QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE),
        )
        from embodied_r_interfaces.srv import GetWindow

        self.create_service(
            GetWindow, window_service_name(self.camera_name),
            guard_service(log, "get_window", self._on_get_window), callback_group=self._io,
        )
        self._diag = DiagnosticsPublisher(
            self, p["diagnostics_period_sec"], self.diagnostics, callback_group=self._io
        )
        poses = (f"poses from tf ({self.poses.backend})" if self.poses is not None
                 else "poses from odom")
        self.get_logger().info(
            f"camera '{self.camera_name}': sampling {self.config.keyframes.sample_fps:g} fps at "
            f"<= {self.config.keyframes.max_side} px, buffer {p['buffer_sec']:g} s / "
            f"{p['buffer_max_mb']:g} MiB, {poses}"
        )

    # -- ingestion ---------------------------------------------------------------------------

    def _ingest_cb(self, kind: type[M], decode: Callable[[M], Any]) -> Callable[[bytes], None]:
        def callback(raw: bytes) -> None:
            self.ingest_raw(raw, kind, decode)

        return guard_subscription(
            self.get_logger(), "camera frame", callback,
            on_error=lambda exc: self.store.note_dropped(INTERNAL, one_line(exc)),
        )

    @property
    def filtering(self) -> bool:
        """Whether the camera subscriptions carry the stamp filter."""
        return self._filter is not None

    @property
    def camera_subscriptions(self) -> tuple[Any, Any]:
        """The ``image`` and ``image/compressed`` subscriptions (their matched publishers tell
        whether a camera is connected)."""
        raw, compressed = self._image_subs
        return raw, compressed

    def _subscribe_images(self, flt: tuple[str, list[str]] | None) -> list[Any]:
        """The camera subscriptions, created once: with ``flt`` as their content filter when the
        stamp filter is on, so that later changes are made in place by :meth:`_set_filter`."""
        from rclpy.subscription_content_filter_options import ContentFilterOptions

        options = ContentFilterOptions(*flt) if flt is not None else None
        return [
            self.create_subscription(kind, topic, self._ingest_cb(kind, decode),
                                     self._image_qos, callback_group=self._ingest_group, raw=True,
                                     content_filter_options=options)
            for kind, topic, decode in ((Image, "image", image_to_rgb),
                                        (CompressedImage, "image/compressed", compressed_to_rgb))
        ]

    def _set_filter(self, flt: tuple[str, list[str]] | None) -> None:
        """Filter the camera subscriptions by ``flt`` (None: every frame passes).

        The filter changes in place (DDS ``set_filter_expression``); the subscriptions are never
        destroyed and created again, which raced the executor: a subscription destroyed while
        another executor thread builds its wait set makes rclpy raise InvalidHandle out of
        ``spin`` (the QoS event handle is entered, then refused when added to the wait set).
        """
        if not all(s.is_cft_enabled for s in self._image_subs):
            self._filter = None  # the RMW has no content filter: every frame comes in
            return
        for sub in self._image_subs:
            sub.set_content_filter(*(flt or PASS_ALL))
        self._filter = flt

    def _tune_ingest(self) -> None:
        """Keep the stamp filter in step with the sampling grid (a timer in the ingest group,
        so no frame callback runs meanwhile): set it once the grid is known, again when the
        grid moves, and drop it if frames arrive but none is stored any more."""
        st = self.store.stats
        stalled = (self._filter is not None and st.stored == self._last_stored[0]
                   and st.received > self._last_stored[1] + 3)
        self._last_stored = (st.stored, st.received)
        if stalled:
            self.get_logger().warning("frames arrive but none is sampled: dropping the stamp "
                                      "filter to learn the grid again")
            self._set_filter(None)
            self._filter_origin = None
            return
        sampling = self.store.sampling()
        if sampling is None:
            return
        origin, period, interval = sampling
        if self._filter_origin is not None and self._filter_origin == origin:
            return
        flt = stamp_filter(origin, period, interval)
        self._filter_origin = origin
        if flt is not None:
            self._set_filter(flt)
            state = "on" if self._filter is not None else "not supported by this RMW"
            self.get_logger().info(f"stamp filter {state} (grid {origin:.3f} s + k x "
                                   f"{period:g} s)")

    def _on_clock_jump(self, jump: Any) -> None:
        self.store.restart(f"the clock jumped by {jump.delta.nanoseconds * 1e-9:.1f} s")
        if self.poses is not None:
            self.poses.clear()

    def _warn_if_no_frame(self) -> None:
        """Once, a while after the start: no frame at all means nothing publishes where this
        node listens (a missing ``-r image:=...`` remap plays a whole bag into nothing)."""
        self._no_frame_timer.cancel()
        if self._got_frame:
            return
        topics = " or ".join(sub.topic_name for sub in self._image_subs)
        self.get_logger().warning(
            f"no camera frame in {self.params['no_frame_warning_sec']:g} s on {topics}: is the "
            "camera publishing there? Remap it, e.g. -r image:=/camera/image_raw")

    def ingest_raw(self, raw: bytes, kind: type[M], decode: Callable[[M], Any]) -> None:
        """A serialised frame: stamp from the bytes, deserialised only when kept."""
        self.rate.tick()
        self._got_frame = True
        try:
            stamp = stamp_of_cdr(raw)
        except FrameError as exc:
            self._dropped(exc)
            return
        try:
            if not self.store.wants(stamp):
                self.store.skip(stamp)
                return
            try:
                msg = from_cdr(raw, kind)
            except FrameError as exc:
                self._dropped(exc)
                return
            self._keep(msg, stamp, decode)
        finally:
            self.store.handled(stamp)

    def _dropped(self, exc: FrameError) -> None:
        self.store.note_dropped(exc.code, str(exc))
        self.get_logger().warning(f"dropped a frame ({exc.code}): {exc}",
                                  throttle_duration_sec=5.0)

    def _keep(self, msg: M, stamp: float, decode: Callable[[M], Any]) -> None:
        if self.poses is not None:
            self.poses.note_image_frame(msg.header.frame_id)
        try:
            rgb = decode(msg)
        except FrameError as exc:
            self._dropped(exc)
            return
        try:
            added = self.store.add(rgb, stamp)
        except Exception as exc:  # never let one frame take the camera down
            self.store.note_dropped(INTERNAL, f"{type(exc).__name__}: {exc}")
            self.get_logger().error(f"frame at {stamp:.3f} s failed: {exc}",
                                    throttle_duration_sec=5.0)
            return
        pose = self.store.pose_at(stamp) if added.decision.sampled else None
        if added.decision.sampled:
            self.path.add(stamp, pose)
        if added.decision.sampled and self._stored_pub.get_subscription_count():
            stored = self._stored_type(
                image=jpeg_to_compressed(added.jpeg, stamp, msg.header.frame_id),
                keyframe=added.decision.keyframe,
            )
            if pose is not None:
                stored.has_pose, stored.pose = True, pose_to_msg(pose)
            self._stored_pub.publish(stored)
        if added.decision.keyframe and self._key_pub is not None and self._key_pub.wanted:
            self._key_pub.publish(KeyFrameImage(self.camera_name, stamp, added.jpeg,
                                                added.image, msg.header.frame_id))

    def _on_odom(self, msg: Odometry) -> None:
        try:
            pose = odometry_to_pose(msg)
            if not all(math.isfinite(v) for v in astuple(pose)):
                raise ValueError("pose is not finite")
        except ValueError as exc:  # a zero or NaN quaternion
            self.get_logger().warning(f"ignored odometry: {exc}", throttle_duration_sec=5.0)
            return
        self.store.add_pose(stamp_to_sec(msg.header.stamp), pose)
        self.path.pose_arrived(self.store.pose_at)

    # -- reading -----------------------------------------------------------------------------

    def window(self, window_sec: float) -> Window:
        """Key frames of the last ``window_sec`` seconds (0 = all); raises QueryError (the
        store checks ``window_sec``)."""
        anchor = None
        if self.params["window_anchor"] == "clock":
            anchor = self.get_clock().now().nanoseconds * 1e-9
        return self.store.window(window_sec, anchor)

    def _on_get_window(self, request: Any, response: Any) -> Any:
        if not request.pose_only:
            w = self.window(float(request.window_sec))  # QueryError: answered by the guard
            response.key_frames = [jpeg_to_compressed(j, s) for j, s in zip(w.jpegs, w.stamps,
                                                                             strict=True)]
            response.motions = [motion_to_msg(m) for m in w.motions]
        now = self.store.pose_now()
        if now is not None:
            response.has_pose_now = True
            response.pose_now_stamp = sec_to_stamp(now.stamp)
            response.pose_now = pose_to_msg(now.pose)
        response.success = True
        return response

    def diagnostics(self) -> list[Any]:
        st = self.store.stats
        rate = self.rate.rate()
        values: dict[str, object] = {
            "camera_rate_hz": rate,
            "buffer_span_sec": self.store.span_sec,
            "buffer_size_mb": self.store.size_bytes / 2**20,
            "buffer_frames": len(self.store),
            "frames_received": st.received,
            "frames_stored": st.stored,
            "key_frames": st.keyframes,
            "frames_dropped": sum(st.dropped.values()),
            "pose_source": self.params["pose_source"],
            "odometry_poses": st.poses if self.poses is None else len(self.poses),
            "odometry_dropped_bad_stamp": self.store.poses_dropped,
            "stamp_filter": "on" if self.filtering else "off",
        }
        values.update({f"dropped_{code.lower()}": n for code, n in sorted(st.dropped.items())})
        if rate == 0.0:
            level, message = WARN, "no camera frames in the last 5 s"
        elif st.dropped_since_stored:
            level, message = WARN, f"dropping frames: {st.last_drop[1] if st.last_drop else ''}"
        else:
            level, message = OK, f"{rate:.1f} Hz, {self.store.span_sec:.0f} s buffered"
        return [make_status(f"embodied_r: camera {self.camera_name}", level, message, values,
                            self.get_fully_qualified_name())]


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(lambda ctx: [FrameBufferNode(context=ctx)], args)


if __name__ == "__main__":
    raise SystemExit(main())

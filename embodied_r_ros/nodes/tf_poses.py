"""The camera's pose from the live tf tree, for the frame buffer's ``pose_source: tf``.

Where a ROS 2 install has ``tf2_ros``, its ``Buffer`` and ``TransformListener`` keep the tree and
``lookup_transform`` gives the chain from ``perception.tf.odom_frame`` to the camera's frame.
Elsewhere (the pip route: the package index has no ``tf2_ros``) a small reader of that one chain
subscribes ``/tf`` (reliable, volatile) and ``/tf_static`` (reliable, transient-local, so the
mounts published before the node started still arrive) as tf2_ros's listener does, and keeps the
transforms in a :class:`~embodied_r_ros.recordings.transforms.TfBuffer`, whose lookup is the
one ``build`` applies to bags. Which one runs is decided by import; :attr:`TfPoses.backend` says
which. Both are :class:`~embodied_r_ros.core.odometry.PoseTrack`\\ s for the frame store.
Where the chain is still missing a while after the start (``no_tf_warning_sec``), one warning
names what the tree lacks, in the words the bag reader uses for the same gap
(:meth:`~embodied_r_ros.recordings.transforms.TfBuffer.missing_chain`): without it a camera mount
that never arrives only shows as key frames without motion.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rclpy.clock import Clock, ClockType

from embodied_r_ros.core.config import TfConfig
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.recordings.transforms import (
    ChainTrack,
    TfBuffer,
    Transform,
    camera_pose,
    frame_name,
)

#: where tf lives (absolute names, as tf2_ros uses them; remap with ``-r /tf:=/robot/tf``)
TF_TOPIC, TF_STATIC_TOPIC = "/tf", "/tf_static"


class TfPoses(ABC):
    """The camera chain of the live tf tree; the camera's frame is ``tf.camera_frame`` or,
    where that is empty, the frame the images' headers name (:meth:`note_image_frame`)."""

    backend = ""

    def __init__(self, tf: TfConfig) -> None:
        self.tf = tf
        self.odom_frame = frame_name(tf.odom_frame)
        self.camera_frame = frame_name(tf.camera_frame)

    def note_image_frame(self, frame_id: str) -> None:
        """The ``frame_id`` of a camera image (used where no camera frame is configured)."""
        if not self.tf.camera_frame:
            self.camera_frame = frame_name(frame_id)

    def missing(self) -> str | None:
        """What keeps the camera's chain from being known, in words (None: it is known)."""
        if not self.camera_frame:
            return ("the camera's frame is unknown: no image has arrived and "
                    "perception.tf.camera_frame is empty")
        why = self._missing_chain()
        return None if why is None else (
            f"no transform chain from {self.odom_frame!r} to {self.camera_frame!r}: {why}")

    @abstractmethod
    def _missing_chain(self) -> str | None:
        """:meth:`TfBuffer.missing_chain` of the chain to a known camera frame."""

    def warn_after(self, node: Any, seconds: float, callback_group: Any = None) -> None:
        """Once, ``seconds`` after now (steady time: with ``use_sim_time`` the node's clock
        may stand still): a warning of what the tree lacks, where the chain is still missing."""
        def check() -> None:
            self._warn_timer.cancel()
            why = self.missing()
            if why is not None:
                node.get_logger().warning(
                    f"no camera pose from tf after {seconds:g} s, {why}; is the camera's mount "
                    "published on /tf_static (transient-local)? perception.tf names the frames")

        self._warn_timer = node.create_timer(seconds, check, callback_group=callback_group,
                                             clock=Clock(clock_type=ClockType.STEADY_TIME))

    @abstractmethod
    def at(self, stamp: float, tolerance_sec: float) -> Pose | None:
        """The camera's pose at ``stamp`` (None: no chain, or no transform near enough)."""

    @abstractmethod
    def clear(self) -> None:
        """Time went back (``/clock``): forget the moving transforms."""

    @abstractmethod
    def __len__(self) -> int:
        """Whether (how many) transforms of the chain are known."""


class ChainReader(TfPoses):
    """The fallback: ``/tf`` and ``/tf_static`` into the core's buffer."""

    backend = "embodied_r tf reader"

    def __init__(self, node: Any, tf: TfConfig, keep_sec: float,
                 callback_group: Any = None) -> None:
        super().__init__(tf)
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        try:
            from tf2_msgs.msg import TFMessage
        except ImportError:
            raise ValueError("pose_source 'tf' needs tf2_msgs: source a ROS 2 install, or run "
                             "tools/setup_ros.py (it builds tf2_msgs where it is missing)"
                             ) from None
        self.buffer = TfBuffer(keep_sec)
        #: the moving edges of the chain, once it is known: the rest of /tf (a robot's joints)
        #: is not kept
        self._chain_edges: set[str] | None = None
        dynamic = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.VOLATILE)
        static = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                            durability=DurabilityPolicy.TRANSIENT_LOCAL,
                            history=HistoryPolicy.KEEP_LAST)
        self.subscriptions = [
            node.create_subscription(TFMessage, TF_TOPIC, self._on_tf, dynamic,
                                     callback_group=callback_group),
            node.create_subscription(TFMessage, TF_STATIC_TOPIC,
                                     lambda msg: self.buffer.add_message(msg, static=True),
                                     static, callback_group=callback_group),
        ]

    def _on_tf(self, msg: Any) -> None:
        self.buffer.add_message(msg, children=self._chain_edges)
        if self._chain_edges is None and self.camera_frame:
            chain = self.buffer.chain(self.odom_frame, self.camera_frame)
            if chain is not None:
                self._chain_edges = set(chain)
                self.buffer.retain(self._chain_edges)

    def note_image_frame(self, frame_id: str) -> None:
        before = self.camera_frame
        super().note_image_frame(frame_id)
        if self.camera_frame != before:
            self._chain_edges = None  # another camera frame: learn its chain from all of /tf

    def _chain(self) -> ChainTrack:
        return ChainTrack(self.buffer, self.odom_frame, self.camera_frame, self.tf.camera_axes)

    def at(self, stamp: float, tolerance_sec: float) -> Pose | None:
        return self._chain().at(stamp, tolerance_sec)

    def _missing_chain(self) -> str | None:
        return self.buffer.missing_chain(self.odom_frame, self.camera_frame)

    def clear(self) -> None:
        self.buffer.clear()

    def __len__(self) -> int:
        return len(self._chain())


class Tf2RosChain(TfPoses):
    """tf2_ros's buffer and listener (a ROS 2 install). tf2 interpolates between the samples
    around a stamp; past the newest sample the newest transform counts while it is within the
    tolerance, as in the core's rule."""

    backend = "tf2_ros"

    def __init__(self, node: Any, tf: TfConfig, keep_sec: float) -> None:
        super().__init__(tf)
        import tf2_ros
        from rclpy.duration import Duration

        self._tf2 = tf2_ros
        self.buffer = tf2_ros.Buffer(cache_time=Duration(seconds=keep_sec))
        self.listener = tf2_ros.TransformListener(self.buffer, node, spin_thread=False)

    def at(self, stamp: float, tolerance_sec: float) -> Pose | None:
        from rclpy.time import Time

        if not self.camera_frame:
            return None
        tf2 = self._tf2
        try:
            found = self.buffer.lookup_transform(self.odom_frame, self.camera_frame,
                                                 Time(nanoseconds=round(stamp * 1e9)))
        except tf2.ExtrapolationException:  # past the newest (or before the oldest) sample
            try:
                found = self.buffer.lookup_transform(self.odom_frame, self.camera_frame, Time())
            except tf2.TransformException:
                return None
            newest = found.header.stamp.sec + found.header.stamp.nanosec * 1e-9
            if abs(newest - stamp) > tolerance_sec:
                return None
        except tf2.TransformException:
            return None
        try:
            return camera_pose(Transform.from_msg(found.transform), self.tf.camera_axes)
        except ValueError:
            return None

    def _missing_chain(self) -> str | None:
        import yaml
        from rclpy.time import Time

        if self.buffer.can_transform(self.odom_frame, self.camera_frame, Time()):
            return None
        tree = TfBuffer()  # the tree's shape, for the core's account of the gap
        for child, edge in (yaml.safe_load(self.buffer.all_frames_as_yaml()) or {}).items():
            tree.add(str(edge["parent"]), str(child), 0.0, Transform(), static=True)
        return tree.missing_chain(self.odom_frame, self.camera_frame)

    def clear(self) -> None:
        self.buffer.clear()

    def __len__(self) -> int:
        from rclpy.time import Time

        return int(bool(self.camera_frame) and self.buffer.can_transform(
            self.odom_frame, self.camera_frame, Time()))


def tf_poses(node: Any, tf: TfConfig, keep_sec: float, callback_group: Any = None, *,
             warn_after_sec: float | None = None) -> TfPoses:
    """tf2_ros's chain where it can be imported, else the core's reader; with
    ``warn_after_sec``, one warning then where the chain is still missing."""
    poses: TfPoses
    try:
        import tf2_ros  # noqa: F401
    except ImportError:
        poses = ChainReader(node, tf, keep_sec, callback_group)
    else:
        poses = Tf2RosChain(node, tf, keep_sec)
    if warn_after_sec is not None:
        poses.warn_after(node, warn_after_sec, callback_group)
    return poses

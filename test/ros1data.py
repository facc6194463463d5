"""ROS 1 recordings for tests, written with rosbags' ROS 1 writer (no ROS needed).

:func:`rewrite_as_ros1` turns a generated world's rosbag2 into the bag a robot that publishes
its pose only as transforms records: the camera's images (``rgb8``, or ``mono8``), its
CameraInfo, and in place of ``/odom`` the tf tree, ``odom -> base_link`` on ``/tf`` and the
camera's mount on ``/tf_static`` (latched; ``static_latching=None``: a connection that records no
durability, as bags written by other tools often have it): ``base_link -> camera_link``, turned
90 degrees to the left and set off from the base, then ``camera_link -> camera_optical_frame``
(REP 103 optical axes), the frame the images' headers name. The base's poses are placed so that
the camera is exactly where the world's odometry put it: read right, the tf tree gives the same
camera motion as ``/odom``, while the base itself moves sideways to the camera.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.recordings.transforms import Transform

TF_DEFINITION = "geometry_msgs/TransformStamped[] transforms"
#: the camera's mount on the base: 20 cm ahead, 10 cm left, 30 cm up, looking to the left
MOUNT = Transform.of((0.2, 0.1, 0.3), (0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)))
#: camera_link -> camera_optical_frame: z forward, x right, y down (REP 103)
OPTICAL = Transform.of((0.0, 0.0, 0.0), (-0.5, 0.5, -0.5, 0.5))
CAMERA_FRAME = "camera_optical_frame"


def ros1_typestore() -> Any:
    """ROS 1 Noetic's message types, with ``tf2_msgs/TFMessage`` (not in rosbags' store)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    ts = get_typestore(Stores.ROS1_NOETIC)
    ts.register(get_types_from_msg(TF_DEFINITION, "tf2_msgs/msg/TFMessage"))
    return ts


def pose_transform(pose: Pose) -> Transform:
    """The camera body (x forward, y left, z up) of ``pose`` as a transform in its world."""
    return Transform.of((pose.x, pose.y, pose.z), pose.quaternion())


def base_of(camera: Pose) -> Transform:
    """Where the base is when its camera (body axes) is at ``camera``."""
    return pose_transform(camera) * MOUNT.inverse()


class _Ros1:
    """Builders of ROS 1 messages from the Noetic store."""

    def __init__(self) -> None:
        self.ts = ros1_typestore()
        self.t = self.ts.types
        self.seq = 0

    def header(self, stamp_ns: int, frame_id: str) -> Any:
        self.seq += 1
        stamp = self.t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9,
                                                     nanosec=stamp_ns % 10**9)
        return self.t["std_msgs/msg/Header"](seq=self.seq, stamp=stamp, frame_id=frame_id)

    def transform(self, stamp_ns: int, parent: str, child: str, tf: Transform) -> Any:
        t = self.t
        x, y, z = (float(v) for v in tf.translation)
        qx, qy, qz, qw = (float(v) for v in tf.rotation)
        return t["geometry_msgs/msg/TransformStamped"](
            header=self.header(stamp_ns, parent), child_frame_id=child,
            transform=t["geometry_msgs/msg/Transform"](
                translation=t["geometry_msgs/msg/Vector3"](x=x, y=y, z=z),
                rotation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw)))

    def tf(self, transforms: list[Any]) -> Any:
        return self.t["tf2_msgs/msg/TFMessage"](transforms=transforms)

    def image(self, src: Any, mono: bool) -> Any:
        h = src.header
        stamp_ns = int(h.stamp.sec) * 10**9 + int(h.stamp.nanosec)
        rgb = np.asarray(src.data, np.uint8).reshape(int(src.height), int(src.width), 3)
        pixels, encoding = (cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), "mono8") if mono \
            else (rgb, "rgb8")
        return self.t["sensor_msgs/msg/Image"](
            header=self.header(stamp_ns, h.frame_id), height=src.height, width=src.width,
            encoding=encoding, is_bigendian=0, step=pixels.shape[1] * (1 if mono else 3),
            data=np.ascontiguousarray(pixels).reshape(-1))

    def camera_info(self, src: Any) -> Any:
        h = src.header
        t = self.t
        roi = src.roi
        return t["sensor_msgs/msg/CameraInfo"](
            header=self.header(int(h.stamp.sec) * 10**9 + int(h.stamp.nanosec), h.frame_id),
            height=src.height, width=src.width, distortion_model=src.distortion_model,
            D=np.asarray(src.d, float), K=np.asarray(src.k, float), R=np.asarray(src.r, float),
            P=np.asarray(src.p, float), binning_x=0, binning_y=0,
            roi=t["sensor_msgs/msg/RegionOfInterest"](
                x_offset=roi.x_offset, y_offset=roi.y_offset, height=roi.height,
                width=roi.width, do_rectify=roi.do_rectify))


def rewrite_as_ros1(src: Path, dst: Path, *, mono: bool = False,
                    image_topic: str = "/camera/image_raw", odom_topic: str = "/odom",
                    info_topic: str = "/camera/camera_info",
                    static_latching: int | None = 1) -> Path:
    """``src`` (a generated world's rosbag2) as a ROS 1 bag at ``dst`` with tf in place of
    odometry; every message keeps its recording time."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag1 import Writer

    out = _Ros1()
    dst.unlink(missing_ok=True)
    with AnyReader([src]) as reader, Writer(dst) as writer:
        ts = out.ts
        image = writer.add_connection(image_topic, "sensor_msgs/msg/Image", typestore=ts)
        info = writer.add_connection(info_topic, "sensor_msgs/msg/CameraInfo", typestore=ts)
        tf = writer.add_connection("/tf", "tf2_msgs/msg/TFMessage", typestore=ts)
        static = writer.add_connection("/tf_static", "tf2_msgs/msg/TFMessage", typestore=ts,
                                       latching=static_latching)
        wanted = [c for c in reader.connections if c.topic in (image_topic, odom_topic,
                                                               info_topic)]
        first = True
        for conn, log_ns, raw in reader.messages(connections=wanted):
            msg = reader.deserialize(raw, conn.msgtype)
            if first:  # the mount, once, before anything moves (ROS 1 names: leading slashes)
                mount = out.tf([out.transform(log_ns, "/base_link", "/camera_link", MOUNT),
                                out.transform(log_ns, "camera_link", CAMERA_FRAME, OPTICAL)])
                writer.write(static, log_ns, ts.serialize_ros1(mount, "tf2_msgs/msg/TFMessage"))
                first = False
            if conn.topic == image_topic:
                writer.write(image, log_ns, ts.serialize_ros1(out.image(msg, mono),
                                                              "sensor_msgs/msg/Image"))
            elif conn.topic == info_topic:
                writer.write(info, log_ns, ts.serialize_ros1(out.camera_info(msg),
                                                             "sensor_msgs/msg/CameraInfo"))
            else:
                p, q = msg.pose.pose.position, msg.pose.pose.orientation
                camera = Pose.from_quaternion((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))
                stamp_ns = int(msg.header.stamp.sec) * 10**9 + int(msg.header.stamp.nanosec)
                wheel = Transform.of((0.0, 0.2, 0.0), (0.0, 0.0, 0.0, 1.0))  # a joint: not read
                moved = out.tf([out.transform(stamp_ns, "/odom", "/base_link", base_of(camera)),
                                out.transform(stamp_ns, "/base_link", "/wheel_left", wheel)])
                writer.write(tf, log_ns, ts.serialize_ros1(moved, "tf2_msgs/msg/TFMessage"))
    return dst


def write_euroc_like(dst: Path, n: int = 8) -> Path:
    """A ROS 1 bag laid out as EuRoC's Vicon-room sequences: a grey 752x480 camera on
    ``/cam0/image_raw`` (``mono8``, frame ``cam0``) and the motion-capture ground truth as
    ``geometry_msgs/TransformStamped`` on ``/vicon/firefly_sbx/firefly_sbx``, driving forward
    0.1 m and turning 2 degrees left a frame."""
    from rosbags.rosbag1 import Writer

    out = _Ros1()
    ts, t = out.ts, out.t
    dst.unlink(missing_ok=True)
    rng = np.random.default_rng(0)
    with Writer(dst) as writer:
        cam = writer.add_connection("/cam0/image_raw", "sensor_msgs/msg/Image", typestore=ts)
        vicon = writer.add_connection("/vicon/firefly_sbx/firefly_sbx",
                                      "geometry_msgs/msg/TransformStamped", typestore=ts)
        for i in range(n):
            stamp = 1_403_715_273_262_142_976 + i * 50_000_000  # 20 Hz
            pixels = rng.integers(0, 255, (480, 752), dtype=np.uint8)
            msg = t["sensor_msgs/msg/Image"](
                header=out.header(stamp, "cam0"), height=480, width=752, encoding="mono8",
                is_bigendian=0, step=752, data=pixels.reshape(-1))
            writer.write(cam, stamp, ts.serialize_ros1(msg, "sensor_msgs/msg/Image"))
            pose = pose_transform(Pose(x=0.1 * i, yaw_deg=2.0 * i))
            writer.write(vicon, stamp, ts.serialize_ros1(
                out.transform(stamp, "world", "vicon/firefly_sbx/firefly_sbx", pose),
                "geometry_msgs/msg/TransformStamped"))
    return dst

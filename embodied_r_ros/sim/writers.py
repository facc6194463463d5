"""Writers for a rendered world: a rosbag2 (MCAP) file, an mp4 video and JSON Lines.

The bag uses only standard message definitions (``sensor_msgs/Image``, ``CompressedImage``,
``CameraInfo``, ``nav_msgs/Odometry``) from the Jazzy typestore and rosbag2 format version 8
with zstd-compressed MCAP chunks, the layout ``ros2 bag record -s mcap`` produces, so
``ros2 bag info`` / ``ros2 bag play`` read it on a real ROS install. Stamps come from the
world's fixed epoch, so the same seed writes the same messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import cv2
import numpy as np
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode
from rosbags.typesys import Stores, get_typestore

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera

BAG_VERSION = 8  # rosbag2 metadata version written by Jazzy
TYPESTORE = Stores.ROS2_JAZZY
CAMERA_FRAME = "camera_optical_frame"
ODOM_FRAME = "odom"
BASE_FRAME = "base_link"
COMPRESSED_FORMAT = "rgb8; jpeg compressed bgr8"  # what image_transport's compressed writes
_FOREVER = QosTime(2147483647, 4294967295)
# The offered QoS ``ros2 bag record`` stores for a default reliable, volatile publisher.
OFFERED_QOS = Qos(QosHistory.UNKNOWN, 0, QosReliability.RELIABLE, QosDurability.VOLATILE,
                  _FOREVER, _FOREVER, QosLiveliness.AUTOMATIC, _FOREVER, False)


@dataclass(frozen=True)
class Topics:
    image: str = "/camera/image_raw"
    compressed: str = "/camera/image_raw/compressed"
    camera_info: str = "/camera/camera_info"
    odom: str = "/odom"


class BagWriter:
    """Writes one frame at a time: image (raw and/or JPEG), camera info and odometry.

    The odometry pose is the camera body (x along the view direction, y left, z up; REP-103)
    in the ``odom`` frame, so two odometry poses give the true ego-motion via
    :func:`embodied_r_ros.core.poses.relative_motion`.
    """

    def __init__(self, path: Path, camera: PinholeCamera, *, raw: bool = True,
                 compressed: bool = False, topics: Topics | None = None,
                 jpeg_quality: int = 90) -> None:
        if not raw and not compressed:
            raise ValueError("the bag needs raw images, compressed images or both")
        self.path = Path(path)
        self.camera = camera
        self.raw = raw
        self.compressed = compressed
        self.topics = topics or Topics()
        self.jpeg_quality = jpeg_quality
        self._ts = get_typestore(TYPESTORE)
        self._writer = Writer(self.path, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._conns: dict[str, object] = {}

    def __enter__(self) -> BagWriter:
        self._writer.open()
        wanted = [("camera_info", "sensor_msgs/msg/CameraInfo"), ("odom", "nav_msgs/msg/Odometry")]
        if self.raw:
            wanted.insert(0, ("image", "sensor_msgs/msg/Image"))
        if self.compressed:
            wanted.insert(1 if self.raw else 0, ("compressed", "sensor_msgs/msg/CompressedImage"))
        for key, msgtype in wanted:
            topic = getattr(self.topics, key)
            self._conns[key] = self._writer.add_connection(
                topic, msgtype, typestore=self._ts, offered_qos_profiles=[OFFERED_QOS]
            )
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self._writer.close()
        else:
            self._writer.abort()

    def _header(self, stamp_ns: int, frame_id: str) -> object:
        t = self._ts.types
        stamp = t["builtin_interfaces/msg/Time"](sec=stamp_ns // 1_000_000_000,
                                                nanosec=stamp_ns % 1_000_000_000)
        return t["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)

    def _put(self, key: str, stamp_ns: int, msg: object) -> None:
        data = self._ts.serialize_cdr(msg, msg.__msgtype__)  # type: ignore[attr-defined]
        self._writer.write(self._conns[key], stamp_ns, data)  # type: ignore[arg-type]

    def write(self, stamp_ns: int, image: np.ndarray, pose: Pose,
              twist: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """One frame: ``image`` is H x W x 3 uint8 RGB; ``twist`` is body (linear, angular)."""
        t = self._ts.types
        h, w = image.shape[:2]
        if self.raw:
            self._put("image", stamp_ns, t["sensor_msgs/msg/Image"](
                header=self._header(stamp_ns, CAMERA_FRAME), height=h, width=w,
                encoding="rgb8", is_bigendian=0, step=w * 3,
                data=np.ascontiguousarray(image, dtype=np.uint8).reshape(-1),
            ))
        if self.compressed:
            ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR),
                                    [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
            if not ok:
                raise RuntimeError("JPEG encoding failed")
            self._put("compressed", stamp_ns, t["sensor_msgs/msg/CompressedImage"](
                header=self._header(stamp_ns, CAMERA_FRAME), format=COMPRESSED_FORMAT,
                data=jpeg.reshape(-1),
            ))
        self._put("camera_info", stamp_ns, self._camera_info(stamp_ns))
        self._put("odom", stamp_ns, self._odometry(stamp_ns, pose, twist))

    def _camera_info(self, stamp_ns: int) -> object:
        t = self._ts.types
        cam = self.camera
        k = cam.K
        p = np.zeros((3, 4))
        p[:, :3] = k
        roi = t["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0, width=0,
                                                    do_rectify=False)
        return t["sensor_msgs/msg/CameraInfo"](
            header=self._header(stamp_ns, CAMERA_FRAME), height=cam.height, width=cam.width,
            distortion_model="plumb_bob", d=np.zeros(5), k=k.reshape(-1),
            r=np.eye(3).reshape(-1), p=p.reshape(-1), binning_x=0, binning_y=0, roi=roi,
        )

    def _odometry(self, stamp_ns: int, pose: Pose,
                  twist: tuple[np.ndarray, np.ndarray] | None) -> object:
        t = self._ts.types
        qx, qy, qz, qw = pose.quaternion()
        geo_pose = t["geometry_msgs/msg/Pose"](
            position=t["geometry_msgs/msg/Point"](x=pose.x, y=pose.y, z=pose.z),
            orientation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw),
        )
        lin, ang = twist if twist is not None else (np.zeros(3), np.zeros(3))
        vec = t["geometry_msgs/msg/Vector3"]
        geo_twist = t["geometry_msgs/msg/Twist"](
            linear=vec(x=float(lin[0]), y=float(lin[1]), z=float(lin[2])),
            angular=vec(x=float(ang[0]), y=float(ang[1]), z=float(ang[2])),
        )
        return t["nav_msgs/msg/Odometry"](
            header=self._header(stamp_ns, ODOM_FRAME), child_frame_id=BASE_FRAME,
            pose=t["geometry_msgs/msg/PoseWithCovariance"](pose=geo_pose,
                                                           covariance=np.zeros(36)),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](twist=geo_twist,
                                                             covariance=np.zeros(36)),
        )


class Mp4Writer:
    """An ``mp4v`` video of RGB frames (OpenCV's built-in FFmpeg)."""

    def __init__(self, path: Path, width: int, height: int, rate_hz: float) -> None:
        self.path = Path(path)
        self._size = (width, height)
        self._video = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"),
                                      float(rate_hz), self._size)
        if not self._video.isOpened():
            raise OSError(f"cannot open an mp4 writer at {self.path}")

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._video.release()

    def write(self, image: np.ndarray) -> None:
        if (image.shape[1], image.shape[0]) != self._size:
            raise ValueError(f"frame size {image.shape[1]}x{image.shape[0]} != {self._size}")
        self._video.write(cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def write_jsonl(path: Path, rows: Sequence[Mapping]) -> None:
    """Stable JSON Lines (same rows, same bytes)."""
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                          encoding="utf-8")


def write_json(path: Path, data: Mapping) -> None:
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                          encoding="utf-8")

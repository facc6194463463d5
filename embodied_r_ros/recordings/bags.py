"""Reading recorded bags without ROS: camera frames, camera poses and camera info.

Dataset building, the bag player and the demo all need the same three things from a recording
(a rosbag2 directory with ``metadata.yaml``, a bare ``.mcap`` / ``.db3`` file, or a ROS 1
``.bag`` such as EuRoC's or TUM RGB-D's), so they live here once, on top of ``rosbags`` and
``rosbags-image``. Frames come out as ``(rgb_image, stamp_seconds)`` pairs like every other
video source (:mod:`.video`), converted as the robot converts them (:mod:`.ros_images`: mono,
16-bit and Bayer pictures too). Poses come from an odometry topic or from the tf tree
(:meth:`BagReader.pose_track`). Everything that goes wrong with a bag (missing, truncated,
corrupt, wrong topic, undecodable image, no transform chain) is one :class:`BagError` whose
one-line message names the bag.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np

from embodied_r_ros.core.config import CameraConfig, TfConfig
from embodied_r_ros.core.odometry import PoseTrack, SampledPoses
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.recordings.ros_images import FrameError, message_to_rgb
from embodied_r_ros.recordings.transforms import ChainTrack, TfBuffer, frame_name

log = logging.getLogger(__name__)

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
ODOMETRY_TYPES = (
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/PoseWithCovarianceStamped",
    "geometry_msgs/msg/TransformStamped",  # motion-capture ground truth (EuRoC's Vicon rooms)
)
#: a pose topic of this type is the tf tree: the chain from the odometry frame to the camera
TF_TYPE = "tf2_msgs/msg/TFMessage"
POSE_TYPES = (*ODOMETRY_TYPES, TF_TYPE)
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
#: how far header stamps may drift from the recording clock and still be found in a window
WINDOW_SLACK_NS = 5_000_000_000
#: rosbag2 storage files, and a ROS 1 bag
STORAGE_SUFFIXES = (".mcap", ".db3", ".bag")

TimeBase = Literal["header", "log"]


class BagError(Exception):
    """A bag that cannot be used; the message is one line naming the bag."""


@dataclass(frozen=True)
class TopicInfo:
    name: str
    msgtype: str
    count: int


@dataclass(frozen=True)
class CameraInfo:
    """Pinhole intrinsics from a ``sensor_msgs/CameraInfo`` message."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    frame_id: str = ""

    @classmethod
    def from_message(cls, msg: Any) -> CameraInfo | None:
        """A ``sensor_msgs/CameraInfo`` of a bag or a live topic (ROS 1: ``K``); None where it
        has no intrinsics (an uncalibrated camera publishes zeros)."""
        k = [float(v) for v in (msg.k if hasattr(msg, "k") else msg.K)]
        if k[0] <= 0.0 or k[4] <= 0.0:
            return None
        return cls(width=int(msg.width), height=int(msg.height), fx=k[0], fy=k[4], cx=k[2],
                   cy=k[5], frame_id=str(msg.header.frame_id))

    def to_config(self, base: CameraConfig | None = None) -> CameraConfig:
        """The core's camera config with these intrinsics and the image size they are for
        (``hfov_deg`` kept from ``base``)."""
        hfov = (base or CameraConfig()).hfov_deg
        return CameraConfig(fx=self.fx, fy=self.fy, cx=self.cx, cy=self.cy, hfov_deg=hfov,
                            width=self.width or None, height=self.height or None)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _storage_path(path: Path) -> Path:
    """A bag directory, or the single storage file of a directory without metadata."""
    if path.is_dir() and not (path / "metadata.yaml").exists():
        files = sorted(p for p in path.iterdir() if p.suffix in STORAGE_SUFFIXES)
        if len(files) == 1:
            return files[0]
        raise BagError(
            f"bag {path}: no metadata.yaml and {len(files)} bag files (.mcap/.db3/.bag) in it"
        )
    return path


def _stamp_ns(msg: Any) -> int:
    header = getattr(msg, "header", None)
    if header is None:
        return 0
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


class BagReader:
    """An open recording (rosbag2 or ROS 1); use as a context manager (``with BagReader(path)
    as bag:``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._reader: Any = None
        self._offsets: dict[str, int] = {}
        self._ros2_store: Any = None

    # -- lifetime -----------------------------------------------------------------------------

    def open(self) -> BagReader:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore

        if not self.path.exists():
            raise BagError(f"bag {self.path}: no such file or directory")
        if self.path.is_file() and self.path.suffix not in STORAGE_SUFFIXES:
            raise BagError(f"bag {self.path}: not a bag file (expected a rosbag2 .mcap or .db3, "
                           "or a ROS 1 .bag)")
        if self.path.is_file() and self.path.stat().st_size == 0:
            raise BagError(f"bag {self.path}: empty file (0 bytes)")
        storage = _storage_path(self.path)
        try:
            reader = AnyReader([storage], default_typestore=get_typestore(Stores.ROS2_JAZZY))
            reader.open()
        except BagError:
            raise
        except Exception as exc:  # noqa: BLE001 - rosbags raises many types for bad files
            raise BagError(
                f"bag {self.path}: cannot open ({_one_line(exc)}); is it truncated or corrupt?"
            ) from None
        self._reader = reader
        return self

    def close(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            finally:
                self._reader = None

    def __enter__(self) -> BagReader:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- metadata -----------------------------------------------------------------------------

    @property
    def reader(self) -> Any:
        if self._reader is None:
            raise BagError(f"bag {self.path}: not open")
        return self._reader

    @property
    def topics(self) -> dict[str, TopicInfo]:
        out: dict[str, TopicInfo] = {}
        for conn in self.reader.connections:
            prev = out.get(conn.topic)
            count = conn.msgcount + (prev.count if prev else 0)
            out[conn.topic] = TopicInfo(conn.topic, conn.msgtype, count)
        return out

    @property
    def start_ns(self) -> int:
        return int(self.reader.start_time)

    @property
    def end_ns(self) -> int:
        return int(self.reader.end_time)

    def _connections(self, topic: str, types: Sequence[str]) -> list[Any]:
        conns = [c for c in self.reader.connections if c.topic == topic]
        if not conns:
            known = ", ".join(f"{t.name} [{t.msgtype}]" for t in self.topics.values()) or "none"
            raise BagError(f"bag {self.path}: no topic {topic!r} (topics: {known})")
        bad = sorted({c.msgtype for c in conns if c.msgtype not in types})
        if bad:
            raise BagError(
                f"bag {self.path}: topic {topic!r} has type {bad[0]}; expected one of "
                + ", ".join(types)
            )
        return conns

    @property
    def is_ros1(self) -> bool:
        return not self.reader.is2

    def cdr_converter(self, conn: Any) -> Callable[[bytes | memoryview], bytes | memoryview]:
        """What turns a message of ``conn`` into the CDR bytes ROS 2 publishes: nothing for a
        rosbag2; for a ROS 1 bag rosbags' conversion to the ROS 2 (Jazzy) definition, which
        ``rosbags-convert`` uses too (the header loses ``seq``; a type Jazzy lacks keeps the
        bag's definition)."""
        if not self.is_ros1:
            return lambda raw: raw
        from rosbags.convert.converter import generate_message_converter
        from rosbags.typesys import Stores, get_types_from_msg, get_typestore

        if self._ros2_store is None:
            self._ros2_store = get_typestore(Stores.ROS2_JAZZY)
        store = self._ros2_store
        if conn.msgtype not in store.fielddefs:
            types = get_types_from_msg(
                self.reader.typestore.generate_msgdef(conn.msgtype, ros_version=2)[0],
                conn.msgtype)
            types.pop("std_msgs/msg/Header", None)
            store.register(types)
        return generate_message_converter(self.reader.typestore, store, conn.msgtype,
                                          conn.msgtype, {}, src_is2=False, dst_is2=True)

    @staticmethod
    def latched(conn: Any) -> bool | None:
        """Whether ``conn`` was recorded from a latched (ROS 1) or transient-local (ROS 2)
        publisher, as ``/tf_static`` is: a player must offer it the same way, or a late
        subscriber (tf's static listener) never gets it. None where the bag does not say (no
        ``latching`` field, no offered QoS profiles: bags written by other tools)."""
        from rosbags.interfaces import QosDurability

        if hasattr(conn.ext, "latching"):
            return None if conn.ext.latching is None else bool(conn.ext.latching)
        profiles = [q for q in getattr(conn.ext, "offered_qos_profiles", None) or []
                    if not isinstance(q, str)]
        if not profiles:
            return None
        return any(getattr(q, "durability", None) == QosDurability.TRANSIENT_LOCAL
                   for q in profiles)

    def require_topic(self, topic: str, types: Sequence[str] = IMAGE_TYPES) -> TopicInfo:
        """The topic's info; BagError when it is missing or of another type."""
        self._connections(topic, types)
        return self.topics[topic]

    def _messages(
        self, conns: list[Any], start: int | None = None, stop: int | None = None
    ) -> Iterator[tuple[int, Any]]:
        """``(log_time_ns, message)`` pairs; any rosbags failure becomes a BagError."""
        try:
            for conn, log_ns, raw in self.reader.messages(
                connections=conns, start=start, stop=stop
            ):
                yield int(log_ns), self.reader.deserialize(raw, conn.msgtype)
        except BagError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise BagError(
                f"bag {self.path}: cannot read messages ({_one_line(exc)}); is it corrupt?"
            ) from None

    # -- data ---------------------------------------------------------------------------------

    def iter_images(
        self,
        topic: str,
        start_ns: int | None = None,
        end_ns: int | None = None,
        *,
        time_base: TimeBase = "header",
    ) -> Iterator[tuple[np.ndarray, float]]:
        """RGB frames of ``topic`` (Image or CompressedImage) with ``start_ns <= stamp <=
        end_ns``, as ``(image, stamp_seconds)``.

        ``time_base="header"`` uses each message's header stamp (the log time where it is 0),
        ``"log"`` the recording time. Only frames inside the window are decoded.
        """
        for image, stamp in self.iter_images_ns(topic, start_ns, end_ns, time_base=time_base):
            yield image, stamp / 1e9

    def iter_images_ns(
        self,
        topic: str,
        start_ns: int | None = None,
        end_ns: int | None = None,
        *,
        time_base: TimeBase = "header",
    ) -> Iterator[tuple[np.ndarray, int]]:
        """As :meth:`iter_images` with integer nanosecond stamps (exact window arithmetic)."""
        conns = self._connections(topic, IMAGE_TYPES)
        # Read only around the window: header stamps are assumed to trail the recording clock
        # by a steady offset (measured on the first message), give or take WINDOW_SLACK_NS.
        offset = self._header_offset(topic, conns) if time_base == "header" else 0
        slack = WINDOW_SLACK_NS if time_base == "header" else 0
        start = None if start_ns is None else start_ns - offset - slack
        stop = None if end_ns is None else end_ns - offset + slack + 1
        for log_ns, msg in self._messages(conns, start, stop):
            stamp = (_stamp_ns(msg) or log_ns) if time_base == "header" else log_ns
            if (start_ns is not None and stamp < start_ns) or (
                end_ns is not None and stamp > end_ns
            ):
                continue
            try:
                image = message_to_rgb(msg)
            except FrameError as exc:
                raise BagError(
                    f"bag {self.path}: cannot decode an image on {topic} at "
                    f"{stamp / 1e9:.3f} s ({_one_line(exc)})"
                ) from None
            yield np.ascontiguousarray(image, dtype=np.uint8), stamp

    def image_stamps_ns(self, topic: str, *, time_base: TimeBase = "header") -> list[int]:
        """Sorted stamps of ``topic``'s frames, without decoding an image."""
        conns = self._connections(topic, IMAGE_TYPES)
        stamps = [(_stamp_ns(msg) or log_ns) if time_base == "header" else log_ns
                  for log_ns, msg in self._messages(conns)]
        return sorted(stamps)

    def _header_offset(self, topic: str, conns: list[Any]) -> int:
        """Header stamp minus recording time of the topic's first message (0 without headers)."""
        if topic not in self._offsets:
            offset = 0
            for log_ns, msg in self._messages(conns):
                stamp = _stamp_ns(msg)
                offset = stamp - log_ns if stamp else 0
                break
            self._offsets[topic] = offset
        return self._offsets[topic]

    def read_poses(
        self,
        topic: str,
        start_ns: int | None = None,
        end_ns: int | None = None,
        *,
        time_base: TimeBase = "header",
    ) -> list[tuple[float, Pose]]:
        """``(stamp_seconds, Pose)`` from Odometry / PoseStamped / TransformStamped messages,
        sorted by stamp."""
        conns = self._connections(topic, ODOMETRY_TYPES)
        poses: list[tuple[float, Pose]] = []
        for log_ns, msg in self._messages(conns):
            stamp = (_stamp_ns(msg) or log_ns) if time_base == "header" else log_ns
            if (start_ns is not None and stamp < start_ns) or (
                end_ns is not None and stamp > end_ns
            ):
                continue
            if hasattr(msg, "transform"):
                p, q = msg.transform.translation, msg.transform.rotation
            else:
                pose = msg.pose.pose if hasattr(msg.pose, "pose") else msg.pose
                p, q = pose.position, pose.orientation
            try:
                value = Pose.from_quaternion((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))
            except ValueError as exc:
                raise BagError(f"bag {self.path}: bad pose on {topic}: {exc}") from None
            poses.append((stamp / 1e9, value))
        poses.sort(key=lambda sp: sp[0])
        return poses

    def camera_info(self, topic: str) -> CameraInfo | None:
        """The first CameraInfo on ``topic`` (None if it has no message or no intrinsics)."""
        conns = self._connections(topic, (CAMERA_INFO_TYPE,))
        for _, msg in self._messages(conns):
            return CameraInfo.from_message(msg)
        return None

    # -- poses from the tf tree ------------------------------------------------------------------

    def image_frame_id(self, topic: str) -> str:
        """The ``frame_id`` of the first image on ``topic`` (the camera's frame)."""
        for _, msg in self._messages(self._connections(topic, IMAGE_TYPES)):
            return frame_name(str(msg.header.frame_id))
        return ""

    def read_tf(self, topic: str, *, tree: bool = False,
                children: set[str] | None = None) -> TfBuffer:
        """The transforms of a ``tf2_msgs/TFMessage`` topic, and the static ones of its sibling
        ``<topic>_static`` (``/tf`` and ``/tf_static``) where the bag has it. ``tree``: only
        the tree's shape (each edge's last transform, kept as static); ``children``: only the
        edges to these frames (a robot's /tf holds far more than the camera's chain)."""
        buffer = TfBuffer()
        static = f"{topic}_static"
        sources = [(topic, False)] + ([(static, True)] if static in self.topics else [])
        for name, is_static in sources:
            for _, msg in self._messages(self._connections(name, (TF_TYPE,))):
                buffer.add_message(msg, static=is_static or tree, children=children)
        return buffer

    def pose_track(self, topic: str, *, image_topic: str | None = None,
                   tf: TfConfig | None = None) -> PoseTrack:
        """The camera's poses from ``topic``: its samples for an odometry topic; for a tf topic
        the chain from ``tf.odom_frame`` to ``tf.camera_frame`` (empty: the frame of
        ``image_topic``'s headers), static mounts from ``<topic>_static``."""
        info = self.require_topic(topic, POSE_TYPES)
        if info.msgtype != TF_TYPE:
            return SampledPoses.of(self.read_poses(topic))
        tf = tf or TfConfig()
        camera = frame_name(tf.camera_frame) or (
            self.image_frame_id(image_topic) if image_topic else "")
        if not camera:
            raise BagError(f"bag {self.path}: poses from {topic} need the camera's frame: set "
                           "perception.tf.camera_frame (the images have no frame_id)")
        tree = self.read_tf(topic, tree=True)
        chain = tree.chain(tf.odom_frame, camera)
        if chain is None:
            raise BagError(
                f"bag {self.path}: no transform chain from {tf.odom_frame!r} to {camera!r} on "
                f"{topic} and {topic}_static ({tree.missing_chain(tf.odom_frame, camera)}); "
                "set perception.tf.odom_frame and perception.tf.camera_frame")
        return ChainTrack(self.read_tf(topic, children=set(chain)), tf.odom_frame, camera,
                          tf.camera_axes)

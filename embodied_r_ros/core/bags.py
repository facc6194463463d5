"""Reading recorded ROS 2 bags without ROS: camera frames, odometry poses and camera info.

Dataset building, the bag player and the demo all need the same three things from a rosbag2
recording (a directory with ``metadata.yaml``, or a bare ``.mcap`` / ``.db3`` file), so they live
here once, on top of ``rosbags`` and ``rosbags-image``. Frames come out as ``(rgb_image,
stamp_seconds)`` pairs like every other video source in the core. Everything that goes wrong
with a bag (missing, truncated, corrupt, wrong topic, undecodable image) is one
:class:`BagError` whose one-line message names the bag.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np

from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.poses import Pose

log = logging.getLogger(__name__)

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
POSE_TYPES = (
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/PoseWithCovarianceStamped",
)
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
#: how far header stamps may drift from the recording clock and still be found in a window
WINDOW_SLACK_NS = 5_000_000_000
STORAGE_SUFFIXES = (".mcap", ".db3")

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

    def to_config(self, base: CameraConfig | None = None) -> CameraConfig:
        """The core's camera config with these intrinsics (``hfov_deg`` kept from ``base``)."""
        hfov = (base or CameraConfig()).hfov_deg
        return CameraConfig(fx=self.fx, fy=self.fy, cx=self.cx, cy=self.cy, hfov_deg=hfov)


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
            f"bag {path}: no metadata.yaml and {len(files)} storage files (.mcap/.db3) in it"
        )
    return path


def _stamp_ns(msg: Any) -> int:
    header = getattr(msg, "header", None)
    if header is None:
        return 0
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


class BagReader:
    """An open rosbag2 recording; use as a context manager (``with BagReader(path) as bag:``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self._reader: Any = None
        self._offsets: dict[str, int] = {}

    # -- lifetime -----------------------------------------------------------------------------

    def open(self) -> BagReader:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore

        if not self.path.exists():
            raise BagError(f"bag {self.path}: no such file or directory")
        if self.path.is_file() and self.path.suffix not in STORAGE_SUFFIXES:
            raise BagError(f"bag {self.path}: not a rosbag2 file (expected .mcap or .db3)")
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
        from rosbags.image import message_to_cvimage

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
                image = message_to_cvimage(msg, "rgb8")
            except Exception as exc:  # noqa: BLE001 - ImageError, AssertionError on bad JPEG
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
        """``(stamp_seconds, Pose)`` from Odometry / PoseStamped messages, sorted by stamp."""
        conns = self._connections(topic, POSE_TYPES)
        poses: list[tuple[float, Pose]] = []
        for log_ns, msg in self._messages(conns):
            stamp = (_stamp_ns(msg) or log_ns) if time_base == "header" else log_ns
            if (start_ns is not None and stamp < start_ns) or (
                end_ns is not None and stamp > end_ns
            ):
                continue
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
            k = [float(v) for v in msg.k]
            if k[0] <= 0.0 or k[4] <= 0.0:
                return None
            return CameraInfo(
                width=int(msg.width),
                height=int(msg.height),
                fx=k[0],
                fy=k[4],
                cx=k[2],
                cy=k[5],
                frame_id=str(msg.header.frame_id),
            )
        return None

"""Conversions between rclpy messages and the core's plain types (numpy RGB, seconds, Motion).

Images are converted by the core (:mod:`embodied_r_ros.recordings.ros_images`, on ``rosbags-image``,
which reads live rclpy ``Image``/``CompressedImage`` messages as well as bag messages;
``cv_bridge`` is not installable on the pip route), as ``build`` converts a bag's. Every way a
frame can be unusable ends in :class:`FrameError` with a code the frame buffer counts, so a bad
frame is dropped and the stream goes on.
"""

from __future__ import annotations

import math
import struct
from typing import Any, TypeVar

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose as PoseMsg
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CompressedImage, Image

from embodied_r_ros.backends.images import decode_bounded
from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.error_codes import CORRUPT_FRAME
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.query_result import MemoryFrameUsed, QueryResult
from embodied_r_ros.core.request import MAX_IMAGE_PIXELS

# the node's names for the core's conversions
from embodied_r_ros.recordings.ros_images import FrameError as FrameError
from embodied_r_ros.recordings.ros_images import compressed_to_rgb as compressed_to_rgb
from embodied_r_ros.recordings.ros_images import image_to_rgb as image_to_rgb

M = TypeVar("M")


def stamp_to_sec(stamp: Time) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


_CDR_LE, _CDR_BE = b"\x00\x01", b"\x00\x00"


def stamp_of_cdr(raw: bytes) -> float:
    """``header.stamp`` (seconds) of a serialised ``Image``/``CompressedImage``, read from the
    CDR bytes without deserialising: the header is the first field, right after the 4-byte
    encapsulation, so the stamp is ``int32 sec, uint32 nanosec`` at bytes 4..12."""
    if len(raw) < 12:
        raise FrameError(CORRUPT_FRAME, f"message of {len(raw)} bytes has no header")
    kind = bytes(raw[:2])
    if kind not in (_CDR_LE, _CDR_BE):
        raise FrameError(CORRUPT_FRAME, f"unknown CDR encapsulation {kind.hex()}")
    order = "<" if kind == _CDR_LE else ">"
    sec, nanosec = struct.unpack_from(order + "iI", raw, 4)
    return sec + nanosec * 1e-9


def from_cdr(raw: bytes, msg_type: type[M]) -> M:
    """Deserialise a message the stamp check kept; a truncated one is a CORRUPT_FRAME."""
    from rclpy.serialization import deserialize_message

    try:
        return deserialize_message(raw, msg_type)
    except Exception as exc:  # noqa: BLE001 - rmw raises plain RuntimeErrors for bad bytes
        raise FrameError(CORRUPT_FRAME, f"cannot deserialise the message: {exc}".splitlines()[0]
                         ) from None


def sec_to_stamp(seconds: float) -> Time:
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def rgb_to_image(img: np.ndarray, stamp: float, frame_id: str = "") -> Image:
    msg = Image()
    msg.header.stamp = sec_to_stamp(stamp)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.encoding = "rgb8"
    msg.step = msg.width * 3
    msg.data = np.ascontiguousarray(img, dtype=np.uint8).tobytes()
    return msg


def jpeg_to_compressed(jpeg: bytes, stamp: float, frame_id: str = "") -> CompressedImage:
    msg = CompressedImage()
    msg.header.stamp = sec_to_stamp(stamp)
    msg.header.frame_id = frame_id
    msg.format = "jpeg"
    msg.data = jpeg
    return msg


def compressed_jpeg_to_rgb(msg: CompressedImage, max_pixels: int = MAX_IMAGE_PIXELS
                           ) -> np.ndarray:
    """The frame buffer's JPEGs back to RGB (internal transport); the size is read from the
    header first, so a hostile 'JPEG' of huge dimensions is refused before any allocation."""
    return decode_bounded(bytes(msg.data), max_pixels)


def odometry_to_pose(msg: Odometry) -> Pose:
    return msg_to_pose(msg.pose.pose)


def msg_to_pose(msg: PoseMsg) -> Pose:
    """A ``geometry_msgs/Pose`` as the core's pose (roll dropped); raises ValueError for a
    zero quaternion."""
    p, q = msg.position, msg.orientation
    return Pose.from_quaternion((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))


def pose_to_msg(pose: Pose) -> PoseMsg:
    msg = PoseMsg()
    msg.position.x, msg.position.y, msg.position.z = pose.x, pose.y, pose.z
    q = msg.orientation
    q.x, q.y, q.z, q.w = pose.quaternion()
    return msg


def motion_to_msg(motion: Motion | None) -> Any:
    from embodied_r_interfaces.msg import EgoMotion

    if motion is None:
        return EgoMotion(valid=False)
    return EgoMotion(
        valid=True,
        yaw_deg=float(motion.yaw_deg),
        pitch_deg=float(motion.pitch_deg),
        forward=float(motion.forward),
        left=float(motion.left),
        up=float(motion.up),
        metric=bool(motion.metric),
    )


def msg_to_motion(msg: Any) -> Motion | None:
    """The motion of an ``EgoMotion`` (None when invalid or not finite: unknown motion)."""
    values = (msg.yaw_deg, msg.pitch_deg, msg.forward, msg.left, msg.up)
    if not msg.valid or not all(math.isfinite(v) for v in values):
        return None
    return Motion(
        yaw_deg=msg.yaw_deg,
        pitch_deg=msg.pitch_deg,
        forward=msg.forward,
        left=msg.left,
        up=msg.up,
        metric=msg.metric,
    )


#: the fields a ``SpatialQuery`` response (service or action result) shares with QueryResult,
#: besides the key frame stamps
_QUERY_TEXT_FIELDS = ("error_code", "error", "answer", "answer_text", "reasoning", "perception")
_QUERY_SEC_FIELDS = ("perception_sec", "reasoning_sec", "total_sec")


def fill_query_response(response: M, result: QueryResult) -> M:
    """``result`` copied into a ``SpatialQuery`` service response or action result."""
    out: Any = response
    out.success = result.success
    for name in _QUERY_TEXT_FIELDS + _QUERY_SEC_FIELDS:
        setattr(out, name, getattr(result, name))
    out.key_frame_stamps = [sec_to_stamp(s) for s in result.key_frame_stamps]
    if result.memory_frames:
        from embodied_r_interfaces.msg import MemoryFrame

        out.memory_frames = [
            MemoryFrame(stamp=sec_to_stamp(f.stamp), age_sec=f.age_sec, camera=f.camera,
                        reasons=list(f.reasons), description=f.description)
            for f in result.memory_frames]
    return response


def query_result_of(msg: Any) -> QueryResult:
    """A ``SpatialQuery`` service response or action result as a :class:`QueryResult`."""
    return QueryResult(
        success=bool(msg.success),
        **{name: str(getattr(msg, name)) for name in _QUERY_TEXT_FIELDS},
        **{name: float(getattr(msg, name)) for name in _QUERY_SEC_FIELDS},
        key_frame_stamps=[stamp_to_sec(s) for s in msg.key_frame_stamps],
        memory_frames=[MemoryFrameUsed(stamp_to_sec(f.stamp), float(f.age_sec), str(f.camera),
                                       tuple(f.reasons), str(f.description))
                       for f in getattr(msg, "memory_frames", ())],
    )

"""rclpy message <-> numpy/core conversions through rosbags-image, including bad frames."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ros_helpers import odom_msg, require_ros

require_ros()

from sensor_msgs.msg import CompressedImage, Image  # noqa: E402

from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402
from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.core.actions import Motion  # noqa: E402
from embodied_r_ros.core.error_codes import CORRUPT_FRAME, UNSUPPORTED_ENCODING  # noqa: E402
from embodied_r_ros.core.query_result import QueryResult  # noqa: E402
from embodied_r_ros.core.records import FrameRecord  # noqa: E402
from embodied_r_ros.nodes.conversions import (  # noqa: E402
    FrameError,
    compressed_to_rgb,
    fill_query_response,
    image_to_rgb,
    motion_to_msg,
    msg_to_motion,
    odometry_to_pose,
    query_result_of,
    rgb_to_image,
    sec_to_stamp,
    stamp_to_sec,
)

RGB = np.zeros((6, 8, 3), np.uint8)
RGB[..., 0] = 200  # red
RGB[:, 4:, 2] = 100


def raw(data: np.ndarray, encoding: str, step: int | None = None) -> Image:
    h, w = data.shape[:2]
    buf = np.ascontiguousarray(data).tobytes()
    return Image(height=h, width=w, encoding=encoding, step=step or len(buf) // h, data=buf)


@pytest.mark.parametrize(
    ("encoding", "data"),
    [
        ("rgb8", RGB),
        ("bgr8", RGB[..., ::-1]),
        ("rgba8", np.dstack([RGB, np.full(RGB.shape[:2], 255, np.uint8)])),
        ("bgra8", np.dstack([RGB[..., ::-1], np.full(RGB.shape[:2], 255, np.uint8)])),
        ("rgb16", RGB.astype(np.uint16) * 257),
    ],
)
def test_colour_encodings_become_rgb(encoding: str, data: np.ndarray) -> None:
    out = image_to_rgb(raw(data, encoding))
    assert out.dtype == np.uint8 and out.shape == (6, 8, 3)
    assert np.abs(out.astype(int) - RGB.astype(int)).max() <= 1


def test_mono_and_padded_rows() -> None:
    mono = np.arange(48, dtype=np.uint8).reshape(6, 8)
    out = image_to_rgb(raw(mono, "mono8"))
    assert out.shape == (6, 8, 3) and (out[..., 1] == mono).all()
    padded = np.zeros((6, 32), np.uint8)  # rgb8 rows of 24 bytes padded to 32
    padded[:, :24] = RGB.reshape(6, 24)
    msg = Image(height=6, width=8, encoding="rgb8", step=32, data=padded.tobytes())
    assert (image_to_rgb(msg) == RGB).all()


def test_live_rclpy_message_round_trip() -> None:
    msg = rgb_to_image(RGB, 12.5, "cam")
    assert isinstance(msg, Image) and msg.header.frame_id == "cam"
    assert stamp_to_sec(msg.header.stamp) == 12.5
    assert (image_to_rgb(msg) == RGB).all()


@pytest.mark.parametrize(
    ("msg", "code"),
    [
        (raw(np.zeros((4, 4), np.float32), "32FC1"), UNSUPPORTED_ENCODING),
        (raw(RGB, "not_an_encoding"), UNSUPPORTED_ENCODING),
        (Image(height=6, width=8, encoding="rgb8", step=24, data=b"\x00" * 10), CORRUPT_FRAME),
        (Image(height=0, width=8, encoding="rgb8", step=24, data=b""), CORRUPT_FRAME),
        (CompressedImage(format="jpeg", data=b"\xff\xd8 definitely not a jpeg"), CORRUPT_FRAME),
        (CompressedImage(format="jpeg", data=b""), CORRUPT_FRAME),
        (CompressedImage(format="theora", data=b"\x00\x01"), UNSUPPORTED_ENCODING),
    ],
)
def test_bad_frames_raise_frame_error_with_a_code(msg: Image | CompressedImage, code: str) -> None:
    with pytest.raises(FrameError) as err:
        (compressed_to_rgb if isinstance(msg, CompressedImage) else image_to_rgb)(msg)
    assert err.value.code == code and str(err.value)


def test_compressed_jpeg_png_and_grey() -> None:
    big = cv2.resize(RGB, (64, 48), interpolation=cv2.INTER_NEAREST)
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(big, cv2.COLOR_RGB2BGR))
    out = compressed_to_rgb(CompressedImage(format="rgb8; jpeg compressed bgr8",
                                            data=jpeg.tobytes()))
    assert np.abs(out.astype(int) - big.astype(int)).mean() < 6
    ok, png = cv2.imencode(".png", big[..., 0])
    grey = compressed_to_rgb(CompressedImage(format="png", data=png.tobytes()))
    assert grey.shape == (48, 64, 3) and (grey[..., 0] == big[..., 0]).all()


def test_stamps_motions_and_odometry() -> None:
    t = sec_to_stamp(1700000000.123456789)
    assert t.sec == 1700000000 and abs(t.nanosec - 123456789) < 1000
    assert msg_to_motion(motion_to_msg(None)) is None
    m = Motion(yaw_deg=30.0, forward=1.5, left=-0.25, metric=True)
    back = msg_to_motion(motion_to_msg(m))
    assert back is not None and back.metric
    assert (back.yaw_deg, back.forward, back.left) == pytest.approx((30.0, 1.5, -0.25))
    pose = odometry_to_pose(odom_msg(3.0, 1.0, 2.0, 45.0))
    assert (pose.x, pose.y, pose.yaw_deg) == pytest.approx((1.0, 2.0, 45.0))


@pytest.mark.parametrize(
    "msg",
    [
        raw(RGB, "rgb8"), raw(RGB[..., ::-1], "bgr8"), raw(RGB.astype(np.uint16) * 257, "rgb16"),
        raw(np.dstack([RGB, RGB[..., :1]]), "rgba8"), raw(RGB[..., 0], "mono8"),
        raw(RGB[..., 0].astype(np.uint16), "mono16"), raw(RGB[..., 0], "bayer_rggb8"),
        raw(np.zeros((6, 16), np.uint8), "yuv422"),
        CompressedImage(format="jpeg", data=cv2.imencode(".jpg", RGB)[1].tobytes()),
        CompressedImage(format="rgb8; png compressed bgr8",
                        data=cv2.imencode(".png", RGB)[1].tobytes()),
    ],
    ids=lambda m: getattr(m, "encoding", None) or m.format,
)
def test_stamps_are_read_from_the_serialised_bytes(msg: object) -> None:
    from rclpy.serialization import serialize_message

    from embodied_r_ros.nodes.conversions import from_cdr, stamp_of_cdr

    msg.header.stamp = sec_to_stamp(1_700_000_123.456789)  # type: ignore[attr-defined]
    msg.header.frame_id = "a_long_camera_frame_name"  # type: ignore[attr-defined]
    data = serialize_message(msg)
    assert stamp_of_cdr(data) == pytest.approx(1_700_000_123.456789, abs=1e-9)
    back = from_cdr(data, type(msg))
    assert back == msg  # the kept frames deserialise to the very message


def test_truncated_and_foreign_bytes_are_corrupt_frames() -> None:
    from rclpy.serialization import serialize_message

    from embodied_r_ros.nodes.conversions import from_cdr, stamp_of_cdr

    data = serialize_message(raw(RGB, "rgb8"))
    for bad in (data[:5], b"\x7f\x7f" + data[2:20], b""):
        with pytest.raises(FrameError) as err:
            stamp_of_cdr(bad)
        assert err.value.code == CORRUPT_FRAME
    assert stamp_of_cdr(data[:40]) == 0.0  # the stamp is there, the pixels are not
    with pytest.raises(FrameError) as err:
        from_cdr(data[: len(data) // 2], Image)
    assert err.value.code == CORRUPT_FRAME


@pytest.mark.parametrize("response_type", [SpatialQuery.Response, QueryAction.Result])
def test_a_query_result_crosses_the_wire_as_the_response_fields(response_type: type) -> None:
    """What the server sends is what the client gets back; the fields the response does not
    carry (the raw reply, the per-frame parts, the indices) stay behind."""
    sent = QueryResult(
        success=True, answer="B", answer_text="B. right", reasoning="the view slid left",
        raw="<think>the view slid left</think><answer>B</answer>", well_formed=True,
        perception="Frame 0: a door", frames=(FrameRecord(1.5, vlm_text="a door"),),
        key_frame_stamps=[1.5, 2.25], key_frame_indices=[3, 7], keyframes_sec=0.5,
        perception_sec=1.25, reasoning_sec=0.75, total_sec=2.5, perception_from_cache=True,
    )
    back = query_result_of(fill_query_response(response_type(), sent))
    assert back == QueryResult(
        success=True, answer="B", answer_text="B. right", reasoning="the view slid left",
        perception="Frame 0: a door", key_frame_stamps=[1.5, 2.25], perception_sec=1.25,
        reasoning_sec=0.75, total_sec=2.5,
    )
    failed = QueryResult.failure("BUSY", "too many queries in progress", total_sec=0.25)
    assert query_result_of(fill_query_response(response_type(), failed)) == failed

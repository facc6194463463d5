"""Camera pictures as robots record them (recordings/ros_images.py): grey, 16-bit and Bayer images
become RGB for bags and live topics alike; what is no picture is refused with a code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from embodied_r_ros.core.error_codes import CORRUPT_FRAME, UNSUPPORTED_ENCODING
from embodied_r_ros.recordings.ros_images import FrameError, image_to_rgb, message_to_rgb, to_8bit

RGB = (200, 100, 50)
#: where each colour sits in the 2x2 tile of a Bayer pattern (row-major)
TILES = {"rggb": "RGGB", "bggr": "BGGR", "gbrg": "GBRG", "grbg": "GRBG"}


def image(pixels: np.ndarray, encoding: str, *, bigendian: bool = False, pad: int = 0) -> Any:
    """A ``sensor_msgs/Image`` of rosbags' Jazzy store (what a bag gives): rows padded by
    ``pad`` bytes."""
    from rosbags.typesys import Stores, get_typestore

    t = get_typestore(Stores.ROS2_JAZZY).types
    h, w = pixels.shape[:2]
    data = pixels.astype(pixels.dtype.newbyteorder(">" if bigendian else "<")).tobytes()
    row = len(data) // h
    rows = np.frombuffer(data, np.uint8).reshape(h, row)
    data = np.hstack([rows, np.zeros((h, pad), np.uint8)]).reshape(-1)
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=1, nanosec=0),
                                      frame_id="cam0")
    return t["sensor_msgs/msg/Image"](header=header, height=h, width=w, encoding=encoding,
                                      is_bigendian=int(bigendian), step=row + pad, data=data)


def mosaic(tile: str, h: int = 16, w: int = 20, scale: int = 1) -> np.ndarray:
    """A uniform RGB scene as a Bayer sensor with ``tile`` records it."""
    value = dict(zip("RGB", RGB, strict=True))
    out = np.zeros((h, w), np.uint16 if scale > 1 else np.uint8)
    for i, colour in enumerate(tile):
        out[i // 2::2, i % 2::2] = value[colour] * scale
    return out


def test_grey_becomes_three_equal_channels() -> None:
    grey = np.arange(48, dtype=np.uint8).reshape(6, 8)
    for encoding in ("mono8", "8UC1"):
        out = message_to_rgb(image(grey, encoding, pad=3))
        assert out.shape == (6, 8, 3) and out.dtype == np.uint8
        assert all((out[..., c] == grey).all() for c in range(3)), encoding


@pytest.mark.parametrize("encoding", ["mono16", "16UC1"])
def test_sixteen_bit_pictures_fill_eight_bits(encoding: str) -> None:
    # a 12-bit sensor (0..4095) packed into 16 bits: its top 8 bits, not its top byte (~0)
    twelve = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 64 + 15)
    out = image_to_rgb(image(twelve, encoding))
    assert (out[..., 0] == (twelve >> 4)).all() and out.max() == 4047 >> 4
    # full-range 16-bit data keeps its top byte, big-endian bytes too
    full = np.array([[0, 256, 65535, 32768]], np.uint16)
    for bigendian in (False, True):
        out = image_to_rgb(image(full, encoding, bigendian=bigendian, pad=2))
        assert list(out[0, :, 1]) == [0, 1, 255, 128]
    assert to_8bit(np.zeros((2, 2), np.uint16)).max() == 0


@pytest.mark.parametrize("pattern", sorted(TILES))
@pytest.mark.parametrize("bits", [8, 16])
def test_bayer_pictures_are_demosaiced_to_their_colours(pattern: str, bits: int) -> None:
    raw = mosaic(TILES[pattern], scale=16 if bits == 16 else 1)  # 16-bit: 12 bits used
    out = image_to_rgb(image(raw, f"bayer_{pattern}{bits}"))
    assert out.shape == (16, 20, 3)
    inner = out[4:-4, 4:-4].reshape(-1, 3).astype(int)
    want = np.array(RGB) if bits == 8 else np.array(RGB) * 16 >> 4
    assert np.abs(inner - want).max() <= 2, (pattern, inner.mean(axis=0))


def test_what_is_no_picture_is_refused_with_a_code() -> None:
    depth = np.ones((4, 4), np.float32)
    with pytest.raises(FrameError) as err:
        image_to_rgb(image(depth.view(np.uint8).reshape(4, 16), "32FC1"))
    assert err.value.code == UNSUPPORTED_ENCODING and "float32" in str(err.value)
    with pytest.raises(FrameError) as err:
        image_to_rgb(image(np.zeros((4, 4), np.uint8), "bayer_xyz8"))
    assert err.value.code == UNSUPPORTED_ENCODING
    short = image(np.zeros((4, 4), np.uint16), "mono16")
    short.data = short.data[:10]
    with pytest.raises(FrameError) as err:
        image_to_rgb(short)
    assert err.value.code == CORRUPT_FRAME and "needs 32 bytes" in str(err.value)

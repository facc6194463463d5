"""Camera messages (``sensor_msgs/Image``, ``CompressedImage``) to RGB, for bags and live topics.

One conversion for the frame buffer's live frames and the frames ``build`` reads from bags, so a
dataset's pixels are the robot's. Messages may be rclpy's or rosbags' (the same fields).
Colour, Bayer and YUV encodings go through ``rosbags-image``; what it leaves dark or refuses is
handled first: 16-bit pictures (``mono16``, ``16UC1``, ``bayer_*16``, ``rgb16``) are scaled to
8 bits by the bits their brightest pixel uses, so a 10- or 12-bit sensor packed into 16 bits
fills the 8 bits instead of reading almost black; one-channel pictures of a generic encoding
(``8UC1``, ``16UC1``) are grey. Grey becomes three equal channels. Every way a frame can be
unusable is a :class:`FrameError` with a code the frame buffer counts
(``UNSUPPORTED_ENCODING``: float, signed or unknown pixels; ``CORRUPT_FRAME``: too few bytes, a
broken JPEG).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from rosbags.image import ImageError, message_to_cvimage

from embodied_r_ros.core.error_codes import CORRUPT_FRAME, UNSUPPORTED_ENCODING

# Pixel types that make a camera picture (depth in millimetres is one too: a grey picture);
# float and signed images are not.
_PICTURE_TYPES = ("uint8", "uint16")


class FrameError(ValueError):
    """A frame that cannot become an RGB image (``code``: UNSUPPORTED_ENCODING, CORRUPT_FRAME)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class _Packed:
    """An ``Image`` without row padding, in the fields rosbags-image reads."""

    encoding: str
    height: int
    width: int
    is_bigendian: int
    data: Any


def _cvtype(encoding: str) -> tuple[int, bool, str, int]:
    """``(bits per channel, generic?, numpy type, channels)`` of a ROS encoding."""
    from rosbags.image.image import Format, to_cvtype

    try:
        depth, fmt, typestr, nchan = to_cvtype(encoding)
    except ImageError as exc:
        raise FrameError(UNSUPPORTED_ENCODING, f"encoding {encoding!r}: {exc}") from None
    return depth, fmt == Format.GENERIC, typestr, nchan


def to_8bit(image: np.ndarray) -> np.ndarray:
    """A 16-bit picture in 8 bits, shifted by the bits its brightest pixel uses (at least 8):
    full-range 16-bit data keeps its top byte, 12-bit data its top 8 of 12 bits."""
    bits = max(8, int(image.max(initial=0)).bit_length())
    return (image >> (bits - 8)).astype(np.uint8)


def _eight_bit_encoding(encoding: str, generic: bool, nchan: int) -> str:
    """The 8-bit encoding a 16-bit or generic picture is converted as."""
    if generic:
        return {1: "mono8", 3: "rgb8", 4: "rgba8"}.get(nchan, f"8UC{nchan}")
    return encoding[:-2] + "8" if encoding.endswith("16") else encoding


def grey_or_colour_to_rgb(img: np.ndarray, source: str) -> np.ndarray:
    """A 1/3/4-channel 8- or 16-bit OpenCV image in ``source`` order ('rgb' or 'bgr') to RGB."""
    if img.dtype not in (np.uint8, np.uint16):
        raise FrameError(UNSUPPORTED_ENCODING, f"pixel type {img.dtype} is not a colour image")
    if img.dtype == np.uint16:
        img = to_8bit(img)
    if img.ndim == 2 or img.shape[2] == 1:
        return cv2.cvtColor(img.reshape(img.shape[:2]), cv2.COLOR_GRAY2RGB)
    if img.shape[2] == 4:
        code = cv2.COLOR_BGRA2RGB if source == "bgr" else cv2.COLOR_RGBA2RGB
        return cv2.cvtColor(img, code)
    if img.shape[2] != 3:
        raise FrameError(UNSUPPORTED_ENCODING, f"{img.shape[2]}-channel images are not supported")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if source == "bgr" else np.ascontiguousarray(img)


def image_to_rgb(msg: Any) -> np.ndarray:
    """``sensor_msgs/Image`` (colour, mono, Bayer, YUV; 8 or 16 bits; padded rows) to RGB
    uint8."""
    encoding = str(msg.encoding)
    depth, generic, typestr, nchan = _cvtype(encoding)
    if typestr not in _PICTURE_TYPES:
        raise FrameError(UNSUPPORTED_ENCODING,
                         f"encoding {encoding!r}: {typestr} pixels are not a camera picture")
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    row = w * max(1, depth // 8) * nchan
    if h <= 0 or w <= 0:
        raise FrameError(CORRUPT_FRAME, f"image is {w}x{h}")
    if step < row or len(msg.data) < step * h:
        raise FrameError(
            CORRUPT_FRAME,
            f"{w}x{h} {encoding} needs {row * h} bytes (step {step}), got {len(msg.data)}",
        )
    data: Any = msg.data
    bigendian = int(msg.is_bigendian)
    if step != row:  # drop row padding; rosbags-image assumes packed rows
        packed = np.frombuffer(data, np.uint8, count=step * h).reshape(h, step)[:, :row]
        data = np.ascontiguousarray(packed).tobytes()
    if typestr == "uint16" or generic:
        pixels = np.frombuffer(data, np.dtype(typestr).newbyteorder(">" if bigendian else "<"),
                               count=h * w * nchan)
        if typestr == "uint16":
            pixels = to_8bit(pixels.astype(np.uint16))
        encoding = _eight_bit_encoding(encoding, generic, nchan)
        data, bigendian = np.ascontiguousarray(pixels, dtype=np.uint8).tobytes(), 0
    view = _Packed(encoding, h, w, bigendian, data)
    try:
        img = message_to_cvimage(view, "rgb8")  # type: ignore[arg-type]
    except (ImageError, cv2.error) as exc:
        raise FrameError(UNSUPPORTED_ENCODING, f"encoding {encoding!r}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise FrameError(CORRUPT_FRAME, f"{encoding} frame: {exc}") from None
    return grey_or_colour_to_rgb(np.asarray(img), "rgb")


def compressed_to_rgb(msg: Any) -> np.ndarray:
    """``sensor_msgs/CompressedImage`` (JPEG/PNG, also ``image_transport``'s "rgb8; jpeg ...")."""
    if len(msg.data) == 0:
        raise FrameError(CORRUPT_FRAME, "compressed frame has no data")
    fmt = (msg.format or "").lower()
    if fmt and not any(k in fmt for k in ("jpeg", "jpg", "png")):
        raise FrameError(UNSUPPORTED_ENCODING, f"compressed format {msg.format!r}")
    try:
        img = message_to_cvimage(msg)
    except (AssertionError, cv2.error, ValueError) as exc:
        raise FrameError(CORRUPT_FRAME, f"cannot decode {msg.format or 'image'}: {exc}") from None
    if img is None:
        raise FrameError(CORRUPT_FRAME, f"cannot decode {msg.format or 'image'}")
    return grey_or_colour_to_rgb(np.asarray(img), "bgr")


def message_to_rgb(msg: Any) -> np.ndarray:
    """An ``Image`` or a ``CompressedImage`` to RGB uint8."""
    return compressed_to_rgb(msg) if hasattr(msg, "format") else image_to_rgb(msg)

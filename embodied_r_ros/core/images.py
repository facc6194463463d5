"""A frame's pixels (uint8 H x W x 3 RGB): size limits, JPEG as the frame buffer stores it.
OpenCV works in BGR, so the colour order is swapped exactly here, at encode and decode."""

from __future__ import annotations

import cv2
import numpy as np


def check_image(image: object) -> np.ndarray:
    """The image itself if it is H x W x 3 uint8, else a ``ValueError`` saying what is wrong."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be H x W x 3 uint8 RGB, got {image.shape} {image.dtype}")
    return image


def max_side_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """``(width, height)`` of an image of that size after :func:`resize_max_side`."""
    longest = max(height, width)
    if max_side <= 0 or longest <= max_side:
        return width, height
    scale = max_side / longest
    return max(1, round(width * scale)), max(1, round(height * scale))


def resize_max_side(image: np.ndarray, max_side: int) -> np.ndarray:
    """Shrink so the longest side is at most ``max_side`` (0 = as is); never enlarges."""
    height, width = image.shape[:2]
    size = max_side_size(width, height, max_side)
    if size == (width, height):
        return image
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    bgr = cv2.cvtColor(check_image(image), cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()


def decode_image(data: bytes) -> np.ndarray:
    """Any format OpenCV reads (JPEG, PNG, ...) to RGB uint8."""
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("not a decodable image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


#: JPEG quality the robot's frame buffer stores frames at (its ``jpeg_quality`` default)
STORED_JPEG_QUALITY = 90


def as_stored(image: np.ndarray, max_side: int, quality: int = STORED_JPEG_QUALITY
              ) -> tuple[np.ndarray, bytes]:
    """``(pixels, jpeg)`` of a frame as the frame buffer keeps it: shrunk to the processing
    resolution, JPEG-encoded, and decoded again, which is what perception sees on the robot
    (datasets built from bags perceive the same pixels)."""
    jpeg = encode_jpeg(resize_max_side(image, max_side), quality)
    return decode_image(jpeg), jpeg

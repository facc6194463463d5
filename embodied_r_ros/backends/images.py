"""Image helpers shared by the backends: checking message parts, resizing, JPEG data URLs.

Images in the core are numpy uint8 H x W x 3 RGB; OpenCV works in BGR, so the colour order is
swapped exactly here, at the encode/decode boundary.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import cv2
import numpy as np

from embodied_r_ros.backends.base import Conversation, InvalidConversation, Message

DATA_URL_PREFIX = "data:image/jpeg;base64,"


def check_image(image: object) -> np.ndarray:
    """The image itself if it is H x W x 3 uint8, else a ``ValueError`` saying what is wrong."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be H x W x 3 uint8 RGB, got {image.shape} {image.dtype}")
    return image


def content_parts(message: Message) -> str | list[dict[str, Any]]:
    """A message's content checked: a string, or text/image parts with valid images."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidConversation("message content must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image":
            try:
                parts.append({"type": "image", "image": check_image(part.get("image"))})
            except ValueError as exc:
                raise InvalidConversation(str(exc)) from None
        else:
            raise InvalidConversation(f"unsupported content part {kind!r}")
    return parts


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


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image header alone: nothing is decoded or allocated."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as probe:
            return probe.size
    except Image.DecompressionBombError:  # PIL's own bound (far above any of ours)
        raise ValueError(f"image larger than {2 * Image.MAX_IMAGE_PIXELS} pixels") from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise ValueError("not a decodable image") from None


def decode_image(data: bytes, max_pixels: int | None = None) -> np.ndarray:
    """Any format OpenCV reads (JPEG, PNG, ...) to RGB uint8. With ``max_pixels`` the size
    is read from the header first, so a small file of huge dimensions is refused before the
    decoder allocates for it."""
    if max_pixels is not None:
        width, height = image_size(data)
        if width * height > max_pixels:
            raise ValueError(f"{width}x{height} is larger than {max_pixels} pixels")
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("not a decodable image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def to_data_url(image: np.ndarray, max_side: int = 0, quality: int = 90) -> str:
    """A ``data:image/jpeg;base64,...`` URL as OpenAI-compatible chat APIs accept."""
    jpeg = encode_jpeg(resize_max_side(check_image(image), max_side), quality)
    return DATA_URL_PREFIX + base64.b64encode(jpeg).decode("ascii")


def data_url_bytes(url: str) -> bytes:
    """The bytes of a base64 image data URL (any image media type); other URLs are refused."""
    if not url.startswith("data:image/") or ";base64," not in url:
        raise ValueError("only base64 image data URLs are supported")
    try:
        return base64.b64decode(url.split(";base64,", 1)[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("image data URL is not valid base64") from None


def from_data_url(url: str, max_pixels: int | None = None) -> np.ndarray:
    """Decode a base64 image data URL; ``max_pixels``: see :func:`decode_image`."""
    return decode_image(data_url_bytes(url), max_pixels)


def to_openai_messages(conversation: Conversation, image_max_side: int = 0) -> list[dict[str, Any]]:
    """Core messages -> OpenAI chat messages; images become base64 JPEG data URLs."""
    out: list[dict[str, Any]] = []
    for msg in conversation:
        content = content_parts(msg)
        if not isinstance(content, str):
            content = [
                {
                    "type": "image_url",
                    "image_url": {"url": to_data_url(part["image"], max_side=image_max_side)},
                }
                if part["type"] == "image"
                else part
                for part in content
            ]
        out.append({"role": msg["role"], "content": content})
    return out


#: JPEG quality the robot's frame buffer stores frames at (its ``jpeg_quality`` default)
STORED_JPEG_QUALITY = 90


def as_stored(image: np.ndarray, max_side: int, quality: int = STORED_JPEG_QUALITY
              ) -> tuple[np.ndarray, bytes]:
    """``(pixels, jpeg)`` of a frame as the frame buffer keeps it: shrunk to the processing
    resolution, JPEG-encoded, and decoded again, which is what perception sees on the robot
    (datasets built from bags perceive the same pixels)."""
    jpeg = encode_jpeg(resize_max_side(image, max_side), quality)
    return decode_image(jpeg), jpeg

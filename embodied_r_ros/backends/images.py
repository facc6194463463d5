"""Image helpers shared by the backends: checking message parts, JPEG data URLs, OpenAI
messages (a frame's pixels and JPEG encoding are :mod:`embodied_r_ros.core.images`')."""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import numpy as np

from embodied_r_ros.core.chat import Conversation, InvalidConversation, Message
from embodied_r_ros.core.images import check_image, decode_image, encode_jpeg, resize_max_side

DATA_URL_PREFIX = "data:image/jpeg;base64,"


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


def decode_bounded(data: bytes, max_pixels: int | None = None) -> np.ndarray:
    """:func:`~embodied_r_ros.core.images.decode_image` of a frame from outside: with
    ``max_pixels`` the size is read from the header first, so a small file of huge dimensions
    is refused before the decoder allocates for it."""
    if max_pixels is not None:
        width, height = image_size(data)
        if width * height > max_pixels:
            raise ValueError(f"{width}x{height} is larger than {max_pixels} pixels")
    return decode_image(data)


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
    """Decode a base64 image data URL; ``max_pixels``: see :func:`decode_bounded`."""
    return decode_bounded(data_url_bytes(url), max_pixels)


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

"""An OpenAI chat-completions request body -> a core conversation and generation settings.

Everything a client can get wrong is a :class:`RequestError` (an HTTP 4xx with one line),
raised before the model sees the request; unknown parameters are refused, never ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.backends.base import MAX_CHARS_PER_TOKEN
from embodied_r_ros.backends.images import data_url_bytes, image_size
from embodied_r_ros.core.chat import Conversation
from embodied_r_ros.core.images import decode_image
from embodied_r_ros.core.request import MAX_IMAGE_PIXELS

#: request keys understood (others are refused, not silently ignored)
KNOWN_KEYS = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
    "stop", "n", "stream", "user", "top_k", "repetition_penalty",
})
MAX_STOP = 4
#: the most new tokens a request may ask for when the model's context is unknown (the
#: schema's bound on ``max_new_tokens``)
MAX_NEW_TOKENS = 32768
#: prompt characters allowed when the model's context is unknown
DEFAULT_MAX_PROMPT_CHARS = 1 << 20


@dataclass(frozen=True)
class Limits:
    """What one request may hold; each is checked before anything large is allocated."""

    max_images: int = 16
    #: an image's header is read first: a 1 MB PNG of 16000 x 16000 is refused undecoded
    max_image_pixels: int = MAX_IMAGE_PIXELS
    #: all images of a request together (decoded RGB is 3 bytes a pixel: 192 MiB here)
    max_request_pixels: int = 4 * MAX_IMAGE_PIXELS
    #: a configured maximum; the model's context bounds it too (see ``prompt_char_limit``)
    max_prompt_chars: int | None = None

    def prompt_char_limit(self, context_tokens: int | None) -> int:
        bounds = [b for b in (self.max_prompt_chars,) if b is not None]
        if context_tokens is not None:
            bounds.append(MAX_CHARS_PER_TOKEN * context_tokens)
        return min(bounds) if bounds else DEFAULT_MAX_PROMPT_CHARS


class RequestError(ValueError):
    """A client mistake, answered with an HTTP 4xx and a JSON error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def from_openai_messages(messages: object, limits: Limits | None = None) -> Conversation:
    """OpenAI chat messages -> core messages; ``image_url`` data URLs become RGB arrays (at
    most ``limits.max_images`` of at most ``limits.max_image_pixels`` each)."""
    limits = limits or Limits()
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    images = sum(
        1
        for msg in messages
        if isinstance(msg, dict) and isinstance(msg.get("content"), list)
        for part in msg["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )
    if images > limits.max_images:
        raise RequestError(400, f"{images} images in one request; at most {limits.max_images}")
    conversation: Conversation = []
    budget = [limits.max_request_pixels]  # pixels the request's images may still decode to
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise RequestError(400, "each message must be an object with a string 'role'")
        content = msg.get("content")
        if content is None:
            content = ""
        if isinstance(content, str):
            conversation.append({"role": msg["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise RequestError(400, "message 'content' must be a string or a list of parts")
        parts = [_part(p, limits, budget) for p in content]
        conversation.append({"role": msg["role"], "content": parts})
    return conversation


def prompt_chars(conversation: Conversation) -> int:
    """Characters of text in a conversation (what a tokenizer would have to read)."""
    total = 0
    for msg in conversation:
        content = msg["content"]
        if isinstance(content, str):
            total += len(content)
        else:
            total += sum(len(p["text"]) for p in content if p["type"] == "text")
    return total


def _part(part: object, limits: Limits, budget: list[int]) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise RequestError(400, "content parts must be objects")
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        ref = part.get("image_url")
        url = ref.get("url") if isinstance(ref, dict) else ref
        if not isinstance(url, str):
            raise RequestError(400, "image_url part needs a 'url'")
        try:
            data = data_url_bytes(url)
            width, height = image_size(data)
            if width * height > limits.max_image_pixels:
                raise ValueError(f"{width}x{height} is larger than {limits.max_image_pixels} "
                                 "pixels")
            budget[0] -= width * height
            if budget[0] < 0:
                raise ValueError(f"the request's images are over {limits.max_request_pixels} "
                                 "pixels in all")
            return {"type": "image", "image": decode_image(data)}
        except ValueError as exc:
            raise RequestError(400, f"image_url: {exc}") from None
    raise RequestError(400, f"unsupported content part type {kind!r}")


def _number(body: dict[str, Any], key: str, kind: type, low: float, high: float) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"'{key}' must be a number in [{low:g}, {high:g}]")
    if kind is int and value != int(value):
        raise RequestError(400, f"'{key}' must be an integer")
    return kind(value)


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400."""
    try:
        body = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        raise RequestError(400, "request body is not valid JSON") from None
    except RecursionError:  # e.g. 100,000 nested arrays
        raise RequestError(400, "request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    return body


@dataclass(frozen=True)
class Settings:
    """The generation settings of one request (hashable: equal settings batch together)."""

    max_new_tokens: int | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    stop: tuple[str, ...]
    #: vLLM's extensions; None: the served model's resolved settings
    top_k: int | None = None
    repetition_penalty: float | None = None

    def kwargs(self) -> dict[str, Any]:
        out = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
               "top_p": self.top_p, "seed": self.seed, "stop": self.stop}
        extensions = {"top_k": self.top_k, "repetition_penalty": self.repetition_penalty}
        return {**out, **{k: v for k, v in extensions.items() if v is not None}}


def parse_settings(body: dict[str, Any]) -> Settings:
    """Validated settings; unknown or unsupported parameters are a 400, never ignored."""
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        raise RequestError(400, f"unsupported parameter '{unknown[0]}'")
    if body.get("stream"):
        raise RequestError(400, "streaming is not supported ('stream' must be false)")
    n = _number(body, "n", int, 1, 1)
    del n  # only n=1 exists here
    max_tokens = _number(body, "max_tokens", int, 1, 1 << 20)
    if max_tokens is None:
        max_tokens = _number(body, "max_completion_tokens", int, 1, 1 << 20)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(x, str) for x in stop) and len(stop) <= MAX_STOP:
        stops = tuple(stop)
    else:
        raise RequestError(400, f"'stop' must be a string or a list of at most {MAX_STOP} strings")
    return Settings(
        max_new_tokens=max_tokens,
        temperature=_number(body, "temperature", float, 0.0, 2.0),
        top_p=_number(body, "top_p", float, 1e-6, 1.0),
        seed=_number(body, "seed", int, -(1 << 63), (1 << 63) - 1),
        stop=stops,
        top_k=_number(body, "top_k", int, 0, 1 << 20),
        repetition_penalty=_number(body, "repetition_penalty", float, 1e-6, 10.0),
    )

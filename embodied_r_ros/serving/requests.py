"""An OpenAI chat-completions request body -> a core conversation and generation settings.

Everything a client can get wrong is a :class:`RequestError` (an HTTP 4xx with one line),
raised before the model sees the request; unknown parameters are refused, never ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.backends.base import Conversation
from embodied_r_ros.core.backends.images import from_data_url

#: request keys understood (others are refused, not silently ignored)
KNOWN_KEYS = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
    "stop", "n", "stream", "user",
})
MAX_STOP = 4


class RequestError(ValueError):
    """A client mistake, answered with an HTTP 4xx and a JSON error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def from_openai_messages(messages: object) -> Conversation:
    """OpenAI chat messages -> core messages; ``image_url`` data URLs become RGB arrays."""
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    conversation: Conversation = []
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
        conversation.append({"role": msg["role"], "content": [_part(p) for p in content]})
    return conversation


def _part(part: object) -> dict[str, Any]:
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
            return {"type": "image", "image": from_data_url(url)}
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

    def kwargs(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "stop": self.stop}


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
    )

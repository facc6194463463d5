"""Deterministic stand-in backends for tests: scripted replies, counted calls, real interface."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from embodied_r_ros.core.backends.base import (
    ChatBackend,
    Completion,
    Conversation,
    ReplyFn,
    raise_if_stopped,
)
from embodied_r_ros.core.cancel import CancelToken


def prompt_of(conversation: Conversation) -> str:
    """The text parts of a conversation's last message."""
    content = conversation[-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


class ScriptedVLM(ChatBackend):
    """Answers from a script (cycled) and records what it was shown, in call order.

    ``delay_s`` makes every reply take that long (checking ``cancel`` meanwhile), so order,
    concurrency and cancellation are testable without a model.
    """

    model_id = "scripted-vlm"
    supports_images = True

    def __init__(self, replies: Sequence[str], delay_s: float = 0.0,
                 by_images: dict[int, str] | None = None) -> None:
        self.replies = list(replies)
        self.delay_s = delay_s
        self.by_images = by_images or {}  # reply by the number of images in the call
        self.seen: list[Conversation] = []
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def complete(
        self,
        conversations: Sequence[Conversation],
        *,
        cancel: CancelToken | None = None,
        on_reply: ReplyFn | None = None,
        **_: Any,
    ) -> list[Completion]:
        self.batches.append(len(conversations))
        out = []
        for i, conv in enumerate(conversations):
            raise_if_stopped(cancel)
            end = time.monotonic() + self.delay_s
            while time.monotonic() < end:
                raise_if_stopped(cancel)
                time.sleep(0.005)
            with self._lock:
                content = conv[-1]["content"]
                images = sum(p.get("type") == "image" for p in content) if isinstance(
                    content, list) else 0
                text = self.by_images.get(images) or self.replies[len(self.seen) %
                                                                  len(self.replies)]
                self.seen.append(conv)
            completion = Completion(text)
            out.append(completion)
            if on_reply is not None:
                on_reply(i, completion)
        return out

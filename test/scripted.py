"""Deterministic stand-in backends for tests: scripted replies, counted calls, real interface."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import (
    ChatBackend,
    Completion,
    Conversation,
    ReplyFn,
    raise_if_stopped,
)


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


class GroundingVLM(ChatBackend):
    """A VLM that grounds as Qwen2.5-VL does: a grounding prompt (one asking for ``bbox_2d``)
    is answered with ``boxes`` (fractions of the last image: ``(x1, y1, x2, y2, label)``) in the
    pixels of the image as the processor resizes what this backend received (``max_side``,
    then ``grid``), or with ``reply`` where one is given (for the images ``reply_if`` accepts,
    default all); asked within a perception call, the answer is ``description`` followed by
    the boxes; other prompts get ``description``. ``seen`` keeps the prompts, ``sizes`` the
    sizes of the images received."""

    model_id = "grounding-vlm"
    supports_images = True
    concurrent = True

    def __init__(self, boxes: Sequence[tuple[float, float, float, float, str]] = (),
                 *, grid: Any = None, max_side: int = 0, reply: str | None = None,
                 reply_if: Any = None,
                 description: str = "1. move forward\n2. a wall ahead\n3. none") -> None:
        from embodied_r_ros.core.chat import ImageGrid

        self.boxes = list(boxes)
        self.grid = grid or ImageGrid(28, 3136, 12845056)
        self.max_side = max_side
        self.reply = reply
        self.reply_if = reply_if
        self.description = description
        self.seen: list[str] = []
        self.sizes: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def _answer(self, conversation: Conversation) -> str:
        from embodied_r_ros.core.grounding import model_image_size

        prompt = prompt_of(conversation)
        images = [p["image"] for p in conversation[-1]["content"] if p.get("type") == "image"]
        with self._lock:
            self.seen.append(prompt)
            self.sizes.extend((im.shape[1], im.shape[0]) for im in images)
        if "bbox_2d" not in prompt:
            return self.description
        height, width = images[-1].shape[:2]
        mw, mh = model_image_size(width, height, self.max_side, self.grid)
        items = [{"bbox_2d": [round(x1 * mw), round(y1 * mh), round(x2 * mw), round(y2 * mh)],
                  "label": label} for x1, y1, x2, y2, label in self.boxes]
        scripted = self.reply is not None and (self.reply_if is None
                                                or self.reply_if(images[-1]))
        text = self.reply if scripted else f"```json\n{json.dumps(items)}\n```"
        # asked inside a perception call (the prompt names a ```json block): text, then boxes
        return f"{self.description}\n{text}" if "```json" in prompt else text

    def complete(self, conversations: Sequence[Conversation], *,
                 on_reply: ReplyFn | None = None, **_: Any) -> list[Completion]:
        out = []
        for i, conv in enumerate(conversations):
            out.append(Completion(self._answer(conv)))
            if on_reply is not None:
                on_reply(i, out[-1])
        return out

"""The chat interface the method calls its models through; every model backend implements it.

A conversation is OpenAI-style messages whose ``content`` is a string or a list of parts,
``{"type": "text", "text": str}`` or ``{"type": "image", "image": H x W x 3 uint8 RGB}``.
:meth:`ChatBackend.complete` takes a whole batch, reports each reply through ``on_reply`` as it
arrives and stops when its cancel token says so. Health is what really happened: a backend
whose last call failed reports that error until a call succeeds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.error_codes import BACKEND_FAILED, BACKEND_TIMEOUT, CANCELLED

Message = dict[str, Any]
Conversation = list[Message]


class BackendError(RuntimeError):
    """A model call that failed; ``code`` is what ROS responses and the CLI report."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class InvalidConversation(BackendError):
    """A conversation the backend cannot take (malformed content, an image for a text model):
    the caller's fault, so it fails the call without marking the backend unhealthy."""

    def __init__(self, message: str) -> None:
        super().__init__(BACKEND_FAILED, message)


def raise_if_stopped(cancel: CancelToken | None) -> None:
    """Raise the token's reason (CANCELLED or BACKEND_TIMEOUT) as a :class:`BackendError`."""
    why = cancel.reason() if cancel is not None else None
    if why is not None:
        raise BackendError(*why)


@dataclass(frozen=True)
class Completion:
    """One reply with what an OpenAI-compatible API reports about it."""

    text: str
    finish_reason: Literal["stop", "length"] = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ImageGrid(NamedTuple):
    """How a Qwen2-VL-style processor resizes an image (``smart_resize``): sides rounded to
    multiples of ``factor`` (patch x merge size), pixels kept within ``[min_pixels,
    max_pixels]``. Boxes a model grounds are in the pixels of that resized image."""

    factor: int
    min_pixels: int
    max_pixels: int


@dataclass(frozen=True)
class Health:
    ok: bool
    error: str = ""


#: called with (index in the batch, completion) as each reply arrives
ReplyFn = Callable[[int, Completion], None]


class ChatBackend(ABC):
    """Generates one reply per conversation; batching and concurrency are the backend's."""

    #: identifies the weights for caches and logs (hub id, path or offline name)
    model_id: str
    #: whether image parts are accepted
    supports_images: bool = False
    #: whether complete() may be called from several threads at once (no lock in the server)
    concurrent: bool = False
    #: the most conversations one complete() call is worth grouping (the server's batches)
    max_batch: int = 1
    #: positions of the model's context (prompt + completion), None where unknown (remote)
    context_tokens: int | None = None
    #: how the model resizes images (its processor's); None: unknown, grounding's bounds apply
    image_grid: ImageGrid | None = None

    def count_prompt_tokens(self, conversation: Conversation) -> int | None:
        """Tokens of the conversation's text as prompted (images not counted; None: unknown),
        so a server refuses a prompt that does not fit before generating."""
        return None

    @abstractmethod
    def complete(
        self,
        conversations: Sequence[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        repetition_penalty: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        cancel: CancelToken | None = None,
        on_reply: ReplyFn | None = None,
    ) -> list[Completion]:
        """Replies in input order. ``None`` settings fall back to the backend's resolved
        generation settings.

        Raises :class:`BackendError`; ``CANCELLED`` / ``BACKEND_TIMEOUT`` when ``cancel`` stops
        the batch (replies already delivered through ``on_reply`` stay delivered).
        """

    def generate(self, conversations: Sequence[Conversation], **settings: Any) -> list[str]:
        """The reply texts of :meth:`complete`."""
        return [c.text for c in self.complete(conversations, **settings)]

    # -- health ------------------------------------------------------------------------------

    _last_error: str | None = None

    def _record(self, error: BaseException | str | None,
                cancel: CancelToken | None = None) -> None:
        """Remember a call's error (None: success), unless it says nothing about the backend:
        cancelled, timed out, a conversation it cannot take, or any stop of the caller's."""
        if not (isinstance(error, InvalidConversation) or (isinstance(error, BackendError) and (
                error.code in (CANCELLED, BACKEND_TIMEOUT))) or (error is not None and (
                cancel is not None and cancel.stopped))):
            self._last_error = None if error is None else " ".join(str(error).split())

    def health(self) -> Health:
        """Whether the last call worked (in-process); remote backends also probe the server."""
        error = self._last_error
        return Health(ok=error is None, error=error or "")

    def healthy(self) -> bool:
        return self.health().ok

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release models, sessions or threads."""

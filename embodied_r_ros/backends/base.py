"""The one small interface every model backend implements.

A conversation is a list of OpenAI-style messages ``{"role": ..., "content": ...}`` where
``content`` is a string or a list of parts: ``{"type": "text", "text": str}`` or
``{"type": "image", "image": np.ndarray}`` (H x W x 3, uint8, RGB). Backends turn images into
whatever their model needs (processor tensors, base64 JPEG, vLLM multi-modal data).

:meth:`ChatBackend.complete` takes a whole batch: a backend that can run calls concurrently (an
HTTP endpoint, a batching engine) does, reports each reply through ``on_reply`` as it arrives,
and stops when the :class:`~embodied_r_ros.core.cancel.CancelToken` says so. Health is what
really happened: a backend whose last call failed reports that error until a call succeeds.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.error_codes import BACKEND_FAILED, BACKEND_TIMEOUT, CANCELLED

Message = dict[str, Any]
Conversation = list[Message]

#: characters one token can stand for, at most, in practice: bounds a prompt before it is
#: tokenised and a remote reply by its ``max_tokens``
MAX_CHARS_PER_TOKEN = 16

__all__ = [
    "MAX_CHARS_PER_TOKEN",
    "BackendError",
    "ChatBackend",
    "Completion",
    "Conversation",
    "Health",
    "ImageGrid",
    "Message",
    "cut_at_stop",
    "exclusive",
    "raise_if_stopped",
]

#: how often a caller waiting for an in-process model checks its cancel token
_LOCK_POLL_S = 0.05


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


@contextlib.contextmanager
def exclusive(lock: threading.Lock, cancel: CancelToken | None) -> Iterator[None]:
    """Hold an in-process model's ``lock``; a caller stopped while waiting for it stops waiting
    (raises through :func:`raise_if_stopped`)."""
    while not lock.acquire(timeout=_LOCK_POLL_S):
        raise_if_stopped(cancel)
    try:
        yield
    finally:
        lock.release()


def cut_at_stop(text: str, stop: Sequence[str]) -> str | None:
    """``text`` up to the first of the ``stop`` strings, or None if none occurs."""
    hits = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(hits)] if hits else None


def end_token_ids(generation_eos: int | list[int] | None, tokenizer: Any) -> set[int]:
    """The tokens that end a reply: the generation config's end-of-sequence id(s) and the
    tokenizer's end-of-sequence and padding tokens (one rule for every in-process backend)."""
    ids = set(generation_eos if isinstance(generation_eos, list)
              else [] if generation_eos is None else [generation_eos])
    for tok_id in (tokenizer.eos_token_id, tokenizer.pad_token_id):
        if tok_id is not None:
            ids.add(int(tok_id))
    return ids


@dataclass(frozen=True)
class Completion:
    """One reply with what an OpenAI-compatible API reports about it."""

    text: str
    finish_reason: Literal["stop", "length"] = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ImageGrid(NamedTuple):
    """How a Qwen2-VL-style processor resizes an image before the model sees it
    (``smart_resize``): sides rounded to multiples of ``factor`` (patch x merge size), the
    pixel count kept within ``[min_pixels, max_pixels]``. Boxes a model grounds are in the
    pixels of that resized image."""

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
    #: whether complete() may be called from several threads at once and batches or overlaps
    #: them itself (the OpenAI-compatible server then hands it requests without a lock)
    concurrent: bool = False
    #: the most conversations one complete() call is worth grouping (the server's batches)
    max_batch: int = 1
    #: positions of the model's context (prompt + completion), None where unknown (remote)
    context_tokens: int | None = None
    #: how the model resizes images where the backend knows it (its own processor); None:
    #: unknown here (a remote server), and ``perception.grounding``'s bounds are used
    image_grid: ImageGrid | None = None

    def count_prompt_tokens(self, conversation: Conversation) -> int | None:
        """Tokens of the conversation's text as the model would be prompted with it (images
        not counted), or None where the backend cannot tell; lets a server refuse a prompt
        that does not fit before generating."""
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
        :class:`~embodied_r_ros.backends.generation.GenerationSettings`.

        Raises :class:`BackendError`; ``CANCELLED`` / ``BACKEND_TIMEOUT`` when ``cancel`` stops
        the batch (replies already delivered through ``on_reply`` stay delivered).
        """

    def call_seeds(
        self, base_seed: int, temperature: float, seed: int | None, n: int
    ) -> list[int | None]:
        """The sampling seed of each of the ``n`` conversations of one call: the one seed rule of
        every backend.

        An explicit ``seed`` gives conversation ``i`` the seed ``seed + i``, at any temperature
        (at 0 it changes nothing, but it is sent). Without one, a greedy call has no seed, and a
        sampling call takes the next ``n`` seeds of this backend's own sequence ``base_seed,
        base_seed + 1, ...``: a fresh backend replays the same samples, successive calls and
        the conversations of one call (a GRPO group of one prompt) never share a seed.
        In-process batches draw from one stream seeded by their first conversation's seed.
        """
        if seed is None:
            if temperature <= 0:
                return [None] * n
            with self.__dict__.setdefault("_seed_lock", threading.Lock()):
                used = self.__dict__.get("_seeds_used", 0)
                self.__dict__["_seeds_used"] = used + n
            seed = base_seed + used
        return [seed + i for i in range(n)]

    def generate(self, conversations: Sequence[Conversation], **settings: Any) -> list[str]:
        """The reply texts of :meth:`complete`."""
        return [c.text for c in self.complete(conversations, **settings)]

    # -- health ------------------------------------------------------------------------------

    _last_error: str | None = None

    def _record(self, error: BaseException | str | None,
                cancel: CancelToken | None = None) -> None:
        """Remember the outcome of a call: the error, or None for success. Cancelled calls,
        conversations the backend cannot take, spent question budgets and any stop of the
        caller's ``cancel`` (a node deactivated mid-call is ``BACKEND_DOWN`` to its client) say
        nothing about the backend and are not recorded."""
        if isinstance(error, BackendError) and error.code in (CANCELLED, BACKEND_TIMEOUT):
            return
        if isinstance(error, InvalidConversation):
            return
        if error is not None and cancel is not None and cancel.stopped:
            return
        self._last_error = None if error is None else " ".join(str(error).split())

    def health(self) -> Health:
        """Whether the last call worked (in-process); remote backends also probe the server."""
        error = self._last_error
        return Health(ok=error is None, error=error or "")

    def healthy(self) -> bool:
        return self.health().ok

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release models, sessions or threads."""

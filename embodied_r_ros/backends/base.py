"""Helpers the model backends share behind the chat interface (:mod:`embodied_r_ros.core.chat`):
holding an in-process model while a caller may stop, cutting at stop strings, end tokens.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import ChatBackend, raise_if_stopped

#: characters one token can stand for, at most, in practice: bounds a prompt before it is
#: tokenised and a remote reply by its ``max_tokens``
MAX_CHARS_PER_TOKEN = 16

#: how often a caller waiting for an in-process model checks its cancel token
_LOCK_POLL_S = 0.05


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


def call_seeds(
    backend: ChatBackend, base_seed: int, temperature: float, seed: int | None, n: int
) -> list[int | None]:
    """The sampling seed of each of the ``n`` conversations of one call of ``backend``: the
    one seed rule of every backend.

    An explicit ``seed`` gives conversation ``i`` the seed ``seed + i``, at any temperature
    (at 0 it changes nothing, but it is sent). Without one, a greedy call has no seed, and a
    sampling call takes the next ``n`` seeds of the backend's own sequence ``base_seed,
    base_seed + 1, ...``: a fresh backend replays the same samples, successive calls and
    the conversations of one call (a GRPO group of one prompt) never share a seed.
    In-process batches draw from one stream seeded by their first conversation's seed.
    """
    if seed is None:
        if temperature <= 0:
            return [None] * n
        with backend.__dict__.setdefault("_seed_lock", threading.Lock()):
            used = backend.__dict__.get("_seeds_used", 0)
            backend.__dict__["_seeds_used"] = used + n
        seed = base_seed + used
    return [seed + i for i in range(n)]

"""The one small interface every model backend implements.

A conversation is a list of OpenAI-style messages ``{"role": ..., "content": ...}`` where
``content`` is a string or a list of parts: ``{"type": "text", "text": str}`` or
``{"type": "image", "image": np.ndarray}`` (H x W x 3, uint8, RGB). Backends turn images into
whatever their model needs (processor tensors, base64 JPEG, vLLM multi-modal data).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

Message = dict[str, Any]
Conversation = list[Message]


class BackendError(RuntimeError):
    """A model call that failed; ``code`` is what ROS responses and the CLI report."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


BACKEND_DOWN = "BACKEND_DOWN"
BACKEND_TIMEOUT = "BACKEND_TIMEOUT"
BACKEND_FAILED = "BACKEND_FAILED"


class ChatBackend(ABC):
    """Generates one reply per conversation; batching is the backend's business."""

    #: identifies the weights for caches and logs (hub id, path or offline name)
    model_id: str
    #: whether image parts are accepted
    supports_images: bool = False

    @abstractmethod
    def generate(
        self,
        conversations: list[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
    ) -> list[str]:
        """Replies in input order. ``None`` arguments fall back to the backend's config."""

    def healthy(self) -> bool:
        """Cheap liveness check (for diagnostics); in-process backends are always up."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release models, sessions or threads."""

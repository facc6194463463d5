"""Model backends behind one interface (:class:`ChatBackend`)."""

from embodied_r_ros.core.backends.base import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BACKEND_TIMEOUT,
    BackendError,
    ChatBackend,
    Conversation,
    Message,
)

__all__ = [
    "BACKEND_DOWN",
    "BACKEND_FAILED",
    "BACKEND_TIMEOUT",
    "BackendError",
    "ChatBackend",
    "Conversation",
    "Message",
]

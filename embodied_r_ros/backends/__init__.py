"""Model backends behind one interface (:class:`ChatBackend`).

Importing this package is cheap: torch, transformers and vLLM load only when
:func:`create_backend` builds a backend that needs them.
"""

from embodied_r_ros.backends.base import BackendError, ChatBackend, Conversation, Message
from embodied_r_ros.backends.factory import create_backend
from embodied_r_ros.backends.offline import OFFLINE_MODELS, resolve_model

__all__ = [
    "OFFLINE_MODELS",
    "BackendError",
    "ChatBackend",
    "Conversation",
    "Message",
    "create_backend",
    "resolve_model",
]

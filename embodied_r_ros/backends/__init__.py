"""Model backends behind the core's chat interface (:class:`~embodied_r_ros.core.chat.ChatBackend`).

Importing this package is cheap: torch, transformers and vLLM load only when
:func:`create_backend` builds a backend that needs them.
"""

from embodied_r_ros.backends.factory import create_backend
from embodied_r_ros.backends.offline import OFFLINE_MODELS, resolve_model

__all__ = [
    "OFFLINE_MODELS",
    "create_backend",
    "resolve_model",
]

"""``embodied-r serve``: a small OpenAI-compatible HTTP server around any ``ChatBackend``.

Serving, not algorithm: it lives outside the core and is split by job: :mod:`.requests`
(parsing and validating a chat request), :mod:`.batching` (grouping requests for an in-process
model), :mod:`.http` (the HTTP handler and its auth) and :mod:`.server` (the life cycle).
The command-line entry is ``embodied_r_ros.cli``.
"""

from embodied_r_ros.serving.requests import RequestError, Settings, parse_settings
from embodied_r_ros.serving.server import OpenAIServer, RequestHook, serve

__all__ = ["OpenAIServer", "RequestError", "RequestHook", "Settings", "parse_settings", "serve"]

"""The HTTP side: routes, bearer-token auth, status codes and JSON error bodies."""

from __future__ import annotations

import hmac
import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from embodied_r_ros.core.backends.base import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BACKEND_TIMEOUT,
    BackendError,
)
from embodied_r_ros.serving.requests import RequestError, parse_json

if TYPE_CHECKING:
    from embodied_r_ros.serving.server import OpenAIServer

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
#: HTTP status for each backend error code
_STATUS = {BACKEND_DOWN: 503, BACKEND_TIMEOUT: 504, BACKEND_FAILED: 500}


class Reply(Exception):
    """A non-200 answer that is not an error body (``/health`` of an unhealthy backend)."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload


def check_bearer(header: str | None, api_key: str | None) -> None:
    """A 401 unless ``header`` is ``Bearer <api_key>`` (compared in constant time)."""
    if api_key is None:
        return
    expected = f"Bearer {api_key}".encode()
    if not hmac.compare_digest((header or "").encode(), expected):
        raise RequestError(401, "missing or wrong API key")


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}


class Handler(BaseHTTPRequestHandler):
    server: HTTPServer
    server_version = "embodied-r"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        # request lines only; headers (and so API keys) are never logged
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            status, payload = 200, self._route(method, path)
        except Reply as reply:
            status, payload = reply.status, reply.payload
        except RequestError as exc:
            status, payload = exc.status, error_body(exc.status, str(exc))
        except BackendError as exc:
            status = _STATUS.get(exc.code, 500)
            payload = error_body(status, f"{exc.code}: {exc}")
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            logger.exception("request %s %s failed", method, path)
            status, payload = 500, error_body(500, f"internal error: {type(exc).__name__}: {exc}")
        try:
            self._send(status, payload)
        except ConnectionError:  # the client gave up (e.g. its timeout) before the reply
            logger.debug("client went away before the reply to %s %s", method, path)

    def _route(self, method: str, path: str) -> dict[str, Any]:
        app = self.server.app
        if app.request_hook is not None:
            app.request_hook(method, path, dict(self.headers.items()))
        # read the body even when refusing: unread data makes the reply a connection reset
        raw = self._read_body() if method == "POST" else b""
        app.check_auth(self.headers.get("Authorization"))
        if method == "GET" and path == "/health":
            status, payload = app.health()
            if status != 200:
                raise Reply(status, payload)
            return payload
        if method == "GET" and path == "/v1/models":
            return app.models()
        if method == "POST" and path == "/v1/chat/completions":
            return app.chat(parse_json(raw))
        raise RequestError(404, f"no route for {method} {path}")

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestError(411, "Content-Length required") from None
        if length > MAX_BODY_BYTES:
            raise RequestError(413, f"request body over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("POST")


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck generation must not block shutdown
    request_queue_size = 64  # a client batch opens max_concurrency connections at once
    app: OpenAIServer

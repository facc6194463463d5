"""The HTTP side: routes, bearer-token auth, status codes and JSON error bodies.

Hostile or broken clients cost bounded resources: auth is checked on the headers before any
body is read, a body is read only up to ``MAX_BODY_BYTES`` and within the read timeout (no
half-sent request holds a thread for ever), at most ``max_connections`` connections are served
at once (the rest get an immediate 503), and a chat request whose client disconnects stops
its generation through the same cancel token the nodes use.
"""

from __future__ import annotations

import hmac
import json
import logging
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED, BACKEND_TIMEOUT, CANCELLED
from embodied_r_ros.core.request import one_line
from embodied_r_ros.serving.requests import RequestError, parse_json

if TYPE_CHECKING:
    from embodied_r_ros.serving.server import OpenAIServer

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
#: a refused request's body is read (and dropped) up to this size so the client sees the
#: reply rather than a connection reset; a larger one is not read at all
_DRAIN_BYTES = 64 * 1024
READ_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 64
_DISCONNECT_POLL_S = 0.1
#: HTTP status for each backend error code (499: the client closed the request)
_STATUS = {BACKEND_DOWN: 503, BACKEND_TIMEOUT: 504, BACKEND_FAILED: 500, CANCELLED: 499}
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Connection: close\r\nContent-Length: 96\r\n\r\n"
         + json.dumps({"error": {"message": "too many connections", "type": "server_error",
                                 "code": 503}}).encode().ljust(96))


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
    """OpenAI's error shape; the message one line, as every error the project answers."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": one_line(message), "type": kind, "code": status}}


class Handler(BaseHTTPRequestHandler):
    server: HTTPServer
    server_version = "embodied-r"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        # request lines only; headers (and so API keys) are never logged
        logger.debug("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s  # every read, headers and body
        super().setup()

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        self._body_read = method != "POST"
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
        if not self._body_read:  # refused before its body was read: drop a small one
            self._drain()
        try:
            self._send(status, payload)
        except OSError:  # the client gave up (e.g. its timeout) before the reply
            logger.debug("client went away before the reply to %s %s", method, path)

    def _route(self, method: str, path: str) -> dict[str, Any]:
        app = self.server.app
        if app.request_hook is not None:
            app.request_hook(method, path, dict(self.headers.items()))
        app.check_auth(self.headers.get("Authorization"))  # on the headers, before the body
        if method == "GET" and path == "/health":
            status, payload = app.health()
            if status != 200:
                raise Reply(status, payload)
            return payload
        if method == "GET" and path == "/v1/models":
            return app.models()
        if method == "POST" and path == "/v1/chat/completions":
            body = parse_json(self._read_body())
            return app.chat(body, self._watch_disconnect())
        raise RequestError(404, f"no route for {method} {path}")

    def _content_length(self) -> int:
        text = self.headers.get("Content-Length")
        if text is None:
            raise RequestError(411, "Content-Length required")
        try:
            length = int(text)
        except ValueError:
            length = -1
        if length < 0:
            raise RequestError(400, "Content-Length must be a non-negative integer")
        if length > MAX_BODY_BYTES:
            raise RequestError(413, f"request body over {MAX_BODY_BYTES} bytes")
        return length

    def _read_body(self) -> bytes:
        try:
            length = self._content_length()
        except RequestError:
            self.close_connection = True  # the rest of the stream cannot be framed
            self._body_read = True
            raise
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            self._body_read = True
            raise RequestError(408, f"request body not received within "
                                    f"{self.server.read_timeout_s:g} s") from None
        self._body_read = True
        if len(data) < length:
            self.close_connection = True
            raise RequestError(400, f"request body ended after {len(data)} of {length} bytes")
        return data

    def _drain(self) -> None:
        """Read and drop a refused request's small body, or close after the reply."""
        try:
            length = self._content_length()
        except RequestError:
            length = _DRAIN_BYTES + 1
        if length > _DRAIN_BYTES:
            self.close_connection = True
            return
        try:
            self.rfile.read(length)
        except OSError:
            self.close_connection = True

    def _watch_disconnect(self) -> CancelToken:
        """A token cancelled when the client closes its connection while the reply is made."""
        token = CancelToken()
        conn, replied = self.connection, self._replied  # this request's, not the next one's
        poller = select.poll()  # not select(): any fd number
        poller.register(conn, select.POLLIN | select.POLLRDHUP)

        def watch() -> None:
            while not replied.wait(_DISCONNECT_POLL_S):
                try:
                    if not poller.poll(0):
                        continue
                    if conn.recv(1, socket.MSG_PEEK) == b"":
                        token.cancel(CANCELLED, "the client went away")
                except OSError:
                    token.cancel(CANCELLED, "the client went away")
                return  # gone, or it sent more (a pipelined request): stop watching

        threading.Thread(target=watch, name="openai-server-watch", daemon=True).start()
        return token

    def finish(self) -> None:
        super().finish()
        if self.close_connection and not self._body_read:
            self._linger()

    def _linger(self) -> None:
        """Half-close, then drop what the client still sends (up to 1 MiB, 1 s), so the
        reply is read before the close rather than lost to a connection reset."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(1.0)
            for _ in range(16):
                if not self.connection.recv(_DRAIN_BYTES):
                    return
        except OSError:
            return

    def handle_one_request(self) -> None:
        self._replied = threading.Event()
        self._body_read = True  # until a POST says otherwise
        try:
            super().handle_one_request()
        finally:
            self._replied.set()

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("POST")


class HTTPServer(ThreadingHTTPServer):
    """Threads per connection, at most ``max_connections`` of them; one more gets a 503."""

    daemon_threads = True  # a stuck generation must not block shutdown
    # nor an idle keep-alive connection: ThreadingMixIn's server_close otherwise joins every
    # handler thread, and one waiting for a client's next request holds it up to its read
    # timeout, so a SIGINT would not stop the model server for that long
    block_on_close = False
    request_queue_size = 64  # a client batch opens max_concurrency connections at once
    app: OpenAIServer

    def __init__(self, address: tuple[str, int], handler: type[Handler], *,
                 read_timeout_s: float = READ_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.read_timeout_s = read_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

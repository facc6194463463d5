"""A small OpenAI-compatible HTTP server around any :class:`ChatBackend` (stdlib only).

It lets a robot use a VLM running on another machine (``embodied-r serve``) through the
``openai`` backend, and gives the tests a real server on loopback. No maintained server on the
package index serves Qwen2.5-VL with images on CPU here (``transformers serve`` needs the stock
processor, hence torchvision, which does not import beside this torch), so this one stays, kept
honest: ``finish_reason`` is ``length`` when a reply was cut, ``usage`` counts tokens,
``top_p``/``seed``/``stop`` are honoured and other parameters rejected, the API key is compared
in constant time, and ``/health`` reports the backend's real state.

Endpoints: ``POST /v1/chat/completions`` (text and base64 ``image_url`` data-URL parts),
``GET /v1/models`` and ``GET /health``. Requests run on threads; a backend that handles
concurrent calls itself (``ChatBackend.concurrent``) gets them as they come, any other gets
them grouped into batches (one ``complete`` call per batch of requests with equal settings),
which is how an in-process model serves several clients at once.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from embodied_r_ros.core.backends.base import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BACKEND_TIMEOUT,
    BackendError,
    ChatBackend,
    Completion,
    Conversation,
)
from embodied_r_ros.core.backends.images import from_data_url
from embodied_r_ros.core.config import ModelConfig, api_key_from_env

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
#: request keys understood (others are refused, not silently ignored)
KNOWN_KEYS = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
    "stop", "n", "stream", "user",
})
MAX_STOP = 4
BATCH_WINDOW_S = 0.005  # how long a batch waits for more requests to join
#: HTTP status for each backend error code
_STATUS = {BACKEND_DOWN: 503, BACKEND_TIMEOUT: 504, BACKEND_FAILED: 500}

#: called with (method, path, headers) for every request, before it is handled
RequestHook = Callable[[str, str, Mapping[str, str]], None]


class RequestError(ValueError):
    """A client mistake, answered with an HTTP 4xx and a JSON error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def from_openai_messages(messages: object) -> Conversation:
    """OpenAI chat messages -> core messages; ``image_url`` data URLs become RGB arrays."""
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    conversation: Conversation = []
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise RequestError(400, "each message must be an object with a string 'role'")
        content = msg.get("content")
        if content is None:
            content = ""
        if isinstance(content, str):
            conversation.append({"role": msg["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise RequestError(400, "message 'content' must be a string or a list of parts")
        conversation.append({"role": msg["role"], "content": [_part(p) for p in content]})
    return conversation


def _part(part: object) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise RequestError(400, "content parts must be objects")
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        ref = part.get("image_url")
        url = ref.get("url") if isinstance(ref, dict) else ref
        if not isinstance(url, str):
            raise RequestError(400, "image_url part needs a 'url'")
        try:
            return {"type": "image", "image": from_data_url(url)}
        except ValueError as exc:
            raise RequestError(400, f"image_url: {exc}") from None
    raise RequestError(400, f"unsupported content part type {kind!r}")


def _number(body: dict[str, Any], key: str, kind: type, low: float, high: float) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"'{key}' must be a number in [{low:g}, {high:g}]")
    if kind is int and value != int(value):
        raise RequestError(400, f"'{key}' must be an integer")
    return kind(value)


def _parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        raise RequestError(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    return body


class _Reply(Exception):
    """A non-200 answer that is not an error body (``/health`` of an unhealthy backend)."""

    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload


@dataclass(frozen=True)
class Settings:
    """The generation settings of one request (hashable: equal settings batch together)."""

    max_new_tokens: int | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    stop: tuple[str, ...]

    def kwargs(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "stop": self.stop}


def parse_settings(body: dict[str, Any]) -> Settings:
    """Validated settings; unknown or unsupported parameters are a 400, never ignored."""
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        raise RequestError(400, f"unsupported parameter '{unknown[0]}'")
    if body.get("stream"):
        raise RequestError(400, "streaming is not supported ('stream' must be false)")
    n = _number(body, "n", int, 1, 1)
    del n  # only n=1 exists here
    max_tokens = _number(body, "max_tokens", int, 1, 1 << 20)
    if max_tokens is None:
        max_tokens = _number(body, "max_completion_tokens", int, 1, 1 << 20)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(x, str) for x in stop) and len(stop) <= MAX_STOP:
        stops = tuple(stop)
    else:
        raise RequestError(400, f"'stop' must be a string or a list of at most {MAX_STOP} strings")
    return Settings(
        max_new_tokens=max_tokens,
        temperature=_number(body, "temperature", float, 0.0, 2.0),
        top_p=_number(body, "top_p", float, 1e-6, 1.0),
        seed=_number(body, "seed", int, -(1 << 63), (1 << 63) - 1),
        stop=stops,
    )


def _shutting_down() -> BackendError:
    """What a request still waiting for the model gets once the server shuts down."""
    return BackendError(BACKEND_DOWN, "the server is shutting down")


class _Batcher:
    """One worker that serves queued requests in batches of up to ``max_batch`` with equal
    settings: concurrent clients of an in-process model share its batched ``complete``."""

    def __init__(self, backend: ChatBackend, max_batch: int) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self._queue: queue.Queue[tuple[Conversation, Settings, Future[Completion]] | None] = (
            queue.Queue()
        )
        self._held: list[tuple[Conversation, Settings, Future[Completion]]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="openai-server-batch",
                                        daemon=True)
        self._thread.start()

    def submit(self, conversation: Conversation, settings: Settings) -> Completion:
        future: Future[Completion] = Future()
        with self._lock:
            if self._closed:
                raise _shutting_down()
            self._queue.put((conversation, settings, future))
        return future.result()

    def _next_batch(self) -> list[tuple[Conversation, Settings, Future[Completion]]] | None:
        first = self._held.pop(0) if self._held else self._queue.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + BATCH_WINDOW_S
        while len(batch) < self.max_batch:
            same = [h for h in self._held if h[1] == first[1]]
            if same:
                self._held.remove(same[0])
                batch.append(same[0])
                continue
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)
                break
            if item[1] == first[1]:
                batch.append(item)
            else:
                self._held.append(item)
        return batch

    def _serve(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                replies = self.backend.complete([b[0] for b in batch], **batch[0][1].kwargs())
            except BaseException as exc:  # noqa: BLE001 - every waiting client gets the error
                for _, _, future in batch:
                    future.set_exception(exc)
                continue
            for (_, _, future), reply in zip(batch, replies, strict=True):
                future.set_result(reply)

    def close(self) -> None:
        """Stop the worker; requests it never took fail at once rather than hang."""
        with self._lock:
            self._closed = True
            self._queue.put(None)
        self._thread.join(timeout=5.0)
        if self._thread.is_alive():
            return  # a stuck generation: the worker still owns the queue
        pending = list(self._held)
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                pending.append(item)
        for _, _, future in pending:
            future.set_exception(_shutting_down())


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
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
        except _Reply as reply:
            status, payload = reply.status, reply.payload
        except RequestError as exc:
            status, payload = exc.status, _error_body(exc.status, str(exc))
        except BackendError as exc:
            status = _STATUS.get(exc.code, 500)
            payload = _error_body(status, f"{exc.code}: {exc}")
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            logger.exception("request %s %s failed", method, path)
            status, payload = 500, _error_body(500, f"internal error: {type(exc).__name__}: {exc}")
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
                raise _Reply(status, payload)
            return payload
        if method == "GET" and path == "/v1/models":
            return app.models()
        if method == "POST" and path == "/v1/chat/completions":
            return app.chat(_parse_json(raw))
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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck generation must not block shutdown
    request_queue_size = 64  # a client batch opens max_concurrency connections at once
    app: OpenAIServer


class OpenAIServer:
    """Serves ``backend`` over HTTP; ``url`` is the ``base_url`` for the ``openai`` backend."""

    def __init__(
        self,
        backend: ChatBackend | None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        api_key: str | None = None,
        request_hook: RequestHook | None = None,
    ) -> None:
        self.backend = backend  # None while the model loads (the port is bound first)
        self.request_hook = request_hook
        self._api_key = api_key
        self._lock = threading.Lock()
        self._batch: _Batcher | None = None
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.app = self
        self._thread: threading.Thread | None = None
        self._served = False  # BaseServer.shutdown() hangs if serve_forever never ran
        self._closed = False

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- request handling (called from handler threads) -----------------------------------

    def check_auth(self, header: str | None) -> None:
        if self._api_key is None:
            return
        expected = f"Bearer {self._api_key}".encode()
        if not hmac.compare_digest((header or "").encode(), expected):  # constant time
            raise RequestError(401, "missing or wrong API key")

    def health(self) -> tuple[int, dict[str, Any]]:
        if self.backend is None:
            return 503, {"status": "loading", "model": ""}
        state = self.backend.health()
        body = {"status": "ok" if state.ok else "unhealthy", "model": self.backend.model_id}
        if not state.ok:
            body["error"] = state.error
        return (200 if state.ok else 503), body

    def models(self) -> dict[str, Any]:
        model = {"id": self._ready().model_id, "object": "model", "owned_by": "embodied-r"}
        return {"object": "list", "data": [model]}

    def _ready(self) -> ChatBackend:
        if self.backend is None:
            raise BackendError(BACKEND_DOWN, "the model is still loading")
        return self.backend

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        backend = self._ready()
        settings = parse_settings(body)
        conversation = from_openai_messages(body.get("messages"))
        has_images = any(
            isinstance(m["content"], list) and any(p["type"] == "image" for p in m["content"])
            for m in conversation
        )
        if has_images and not backend.supports_images:
            raise RequestError(400, f"model '{backend.model_id}' does not accept images")
        if backend.concurrent:
            reply = backend.complete([conversation], **settings.kwargs())[0]
        else:
            reply = self._batcher().submit(conversation, settings)
        usage = {}
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            usage = {"prompt_tokens": reply.prompt_tokens,
                     "completion_tokens": reply.completion_tokens,
                     "total_tokens": reply.prompt_tokens + reply.completion_tokens}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": backend.model_id,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                }
            ],
            **({"usage": usage} if usage else {}),
        }

    def _batcher(self) -> _Batcher:
        with self._lock:
            if self._batch is None:
                assert self.backend is not None
                self._batch = _Batcher(self.backend, max(1, self.backend.max_batch))
            return self._batch

    # -- life cycle -------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Block serving requests until :meth:`shutdown` (from another thread)."""
        self._served = True
        self._httpd.serve_forever(poll_interval=0.1)

    def start(self) -> OpenAIServer:
        """Serve from a daemon thread and return at once."""
        if self._thread is None:
            self._served = True
            self._thread = threading.Thread(
                target=self.serve_forever, name=f"openai-server-{self.port}", daemon=True
            )
            self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and close the socket; idempotent. Does not close the backend."""
        if self._closed:
            return
        self._closed = True
        if self._served:
            self._httpd.shutdown()  # returns at once if serve_forever already ended
        if self._thread is not None:
            self._thread.join()
        self._httpd.server_close()
        if self._batch is not None:
            self._batch.close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()


def serve(
    backend: ChatBackend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    api_key: str | None = None,
    request_hook: RequestHook | None = None,
) -> OpenAIServer:
    """Start serving ``backend`` in a background thread (port 0 picks a free port)."""
    server = OpenAIServer(backend, host, port, api_key=api_key, request_hook=request_hook)
    return server.start()


def run_server(
    cfg: ModelConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    cache_dir: str | None = None,
    text_only: bool = False,
) -> None:
    """Bind the port, then load the model of ``cfg`` and serve it until interrupted
    (``embodied-r serve``): a busy or invalid port fails before minutes of loading.
    ``text_only``: a text role (reasoning LM, consistency reference), see ``create_backend``.

    If ``cfg.api_key_env`` is set, clients must send that variable's value as a Bearer token.
    """
    from embodied_r_ros.core.backends.factory import create_backend

    api_key = api_key_from_env(cfg.api_key_env) if cfg.api_key_env else None
    try:
        server = OpenAIServer(None, host, port, api_key=api_key)
    except OverflowError:
        raise BackendError(BACKEND_FAILED, f"port {port} is not a valid port (0-65535)") from None
    except OSError as exc:
        raise BackendError(
            BACKEND_FAILED, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    try:
        backend = create_backend(cfg, cache_dir=cache_dir, text_only=text_only)
    except BaseException:
        server.shutdown()
        raise
    server.backend = backend
    logger.info("serving %s at %s", backend.model_id, server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        logger.info("interrupted")
    finally:
        server.shutdown()
        backend.close()

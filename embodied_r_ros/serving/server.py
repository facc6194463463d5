"""The server's life cycle: bind the port, serve from a thread, shut down cleanly.

No maintained server on the package index serves Qwen2.5-VL with images on CPU here
(``transformers serve`` needs the stock processor, hence torchvision, which does not import
beside this torch), so this one stays, kept honest: ``finish_reason`` is ``length`` when a reply
was cut, ``usage`` counts tokens, ``top_p``/``seed``/``stop`` and vLLM's ``top_k`` and
``repetition_penalty`` are honoured and other parameters rejected, the API key is compared in
constant time, and ``/health`` reports the backend's real state.

Endpoints: ``POST /v1/chat/completions`` (text and base64 ``image_url`` data-URL parts),
``GET /v1/models`` and ``GET /health``. Requests run on threads; a backend that handles
concurrent calls itself (``ChatBackend.concurrent``) gets them as they come, any other gets
them grouped into batches (:mod:`.batching`).
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import FrameType, TracebackType
from typing import Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend, Conversation
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED
from embodied_r_ros.serving.batching import Batcher
from embodied_r_ros.serving.http_api import (
    MAX_CONNECTIONS,
    READ_TIMEOUT_S,
    Handler,
    HTTPServer,
    check_bearer,
)
from embodied_r_ros.serving.requests import (
    MAX_NEW_TOKENS,
    Limits,
    RequestError,
    Settings,
    from_openai_messages,
    parse_settings,
    prompt_chars,
)

logger = logging.getLogger(__name__)

#: called with (method, path, headers) for every request, before it is handled
RequestHook = Callable[[str, str, Mapping[str, str]], None]


class OpenAIServer:
    """Serves ``backend`` over HTTP; ``url`` is the ``base_url`` for the ``openai`` backend."""

    def __init__(
        self,
        backend: ChatBackend | None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        api_key: str | None = None,
        insecure: bool = False,
        request_hook: RequestHook | None = None,
        limits: Limits | None = None,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.backend = backend  # None while the model loads (the port is bound first)
        self.request_hook = request_hook
        self.limits = limits or Limits()
        self._api_key = api_key
        self._lock = threading.Lock()
        self._batch: Batcher | None = None
        try:
            self._httpd = HTTPServer((host, port), Handler, read_timeout_s=read_timeout_s,
                                     max_connections=max_connections)
        except OverflowError:
            raise BackendError(BACKEND_FAILED,
                               f"port {port} is not a valid port (0-65535)") from None
        except OSError as exc:
            raise BackendError(
                BACKEND_FAILED, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        if api_key is None and not self._loopback():
            if not insecure:
                self._httpd.server_close()
                raise BackendError(
                    BACKEND_FAILED,
                    f"refusing to serve on {host} (reachable from other machines) without an "
                    "API key: set one with --api-key-env NAME, bind 127.0.0.1, or pass --insecure",
                )
            logger.warning("serving on %s without an API key (--insecure): anyone who can "
                           "reach it can use the model", host)
        self._httpd.app = self
        self._thread: threading.Thread | None = None
        self._served = False  # BaseServer.shutdown() hangs if serve_forever never ran
        self._closed = False

    def _loopback(self) -> bool:
        """Whether the bound address is reachable from this machine only."""
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

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
        check_bearer(header, self._api_key)

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

    def chat(self, body: dict[str, Any], cancel: CancelToken | None = None) -> dict[str, Any]:
        """One chat completion; ``cancel`` stops it (the client went away)."""
        backend = self._ready()
        settings = parse_settings(body)
        conversation = from_openai_messages(body.get("messages"), self.limits)
        has_images = any(
            isinstance(m["content"], list) and any(p["type"] == "image" for p in m["content"])
            for m in conversation
        )
        if has_images and not backend.supports_images:
            raise RequestError(400, f"model '{backend.model_id}' does not accept images")
        settings = self._fit(backend, conversation, settings)
        if backend.concurrent:
            reply = backend.complete([conversation], **settings.kwargs(), cancel=cancel)[0]
        else:
            reply = self._batcher().submit(conversation, settings, cancel)
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

    def _fit(self, backend: ChatBackend, conversation: Conversation,
             settings: Settings) -> Settings:
        """Refuse a prompt that cannot fit the model's context (characters first, so a huge
        one is never tokenised), and clamp ``max_tokens`` to the room left after it."""
        context = backend.context_tokens
        chars = prompt_chars(conversation)
        limit = self.limits.prompt_char_limit(context)
        if chars > limit:
            raise RequestError(400, f"prompt of {chars} characters is over this server's limit "
                                    f"of {limit}")
        room = MAX_NEW_TOKENS
        if context is not None:
            used = backend.count_prompt_tokens(conversation)
            if used is not None and used >= context:
                raise RequestError(400, f"prompt of {used} tokens does not fit the model's "
                                        f"context of {context}")
            room = min(room, context - (used or 0))
        wanted = settings.max_new_tokens
        if wanted is not None and wanted > room:
            return replace(settings, max_new_tokens=room)
        return settings

    def _batcher(self) -> Batcher:
        with self._lock:
            if self._batch is None:
                assert self.backend is not None
                self._batch = Batcher(self.backend, max(1, self.backend.max_batch))
            return self._batch

    # -- life cycle -------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Block serving requests until :meth:`shutdown` (from another thread)."""
        self._served = True
        self._httpd.serve_forever(poll_interval=0.1)

    def serve_until_signalled(self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
                              ) -> int | None:
        """:meth:`serve_forever` on this (the main) thread until one of ``signals`` arrives;
        returns its number (``None`` if something else stopped the loop).

        The handlers only ask a helper thread to end the loop (``shutdown`` waits for it, so it
        cannot run on the loop's own thread): a ``KeyboardInterrupt`` raised wherever the main
        thread happens to be (a lock held, a handler thread half started) could leave the
        process unable to exit. The previous handlers are restored afterwards.
        """
        received: list[int] = []

        def stop(signum: int, _frame: FrameType | None) -> None:
            if not received:
                received.append(signum)
                threading.Thread(target=self._httpd.shutdown, name="openai-server-stop",
                                 daemon=True).start()

        previous = {sig: signal.signal(sig, stop) for sig in signals}
        try:
            self.serve_forever()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return received[0] if received else None

    def serve_until_stopped(self) -> None:
        """A command's server: :meth:`serve_until_signalled`, the signal logged, then
        :meth:`shutdown` whatever ended the loop."""
        try:
            signum = self.serve_until_signalled()
            if signum is not None:
                logger.info("%s: shutting down", signal.Signals(signum).name)
        finally:
            self.shutdown()

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
    **options: Any,
) -> OpenAIServer:
    """Start serving ``backend`` in a background thread (port 0 picks a free port);
    ``options``: the other keywords of :class:`OpenAIServer`."""
    server = OpenAIServer(backend, host, port, api_key=api_key, request_hook=request_hook,
                          **options)
    return server.start()

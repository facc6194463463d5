"""Backend for any OpenAI-compatible chat-completions endpoint (``vllm serve``, hosted APIs,
``embodied-r serve``), on the maintained ``openai`` client.

``base_url`` follows the OpenAI client convention: everything up to and including the version
path (``http://host:8000/v1``). One ``AsyncOpenAI`` client per backend runs on its own event-loop
thread, so a batch of conversations (the key frames of a question) is sent as up to
``max_concurrency`` requests at once over kept-alive connections, and a cancelled or timed-out
question aborts the requests in flight (the task is cancelled, the connection closed).

``timeout_s`` is a deadline for each call as a whole (one conversation's request, from when it
is sent): its ``retries`` of overload and connection failures, with exponential backoff, share
the time that is left, and a server trickling its reply byte by byte cannot stretch it. The
caller's :class:`~embodied_r_ros.core.cancel.CancelToken` caps everything at the time left in the
question. One failed call of a batch fails the batch with one error; the calls still in flight
are aborted quietly, and a retry is logged as a warning at most once per batch.

A reply is cut at ``max_new_tokens`` worth of text (``MAX_CHARS_PER_TOKEN`` characters a token,
``finish_reason`` ``length``): a server answering megabytes cannot blow up a perception text.
The API key comes only from the environment variable named by ``api_key_env``, is validated
once, and never appears in logs or errors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
from collections.abc import Sequence
from typing import Any

import openai

from embodied_r_ros.backends.base import MAX_CHARS_PER_TOKEN, call_seeds
from embodied_r_ros.backends.generation import (
    GenerationSettings,
    local_checkpoint,
    resolve_generation,
)
from embodied_r_ros.backends.images import to_openai_messages
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import (
    BackendError,
    ChatBackend,
    Completion,
    Conversation,
    Health,
    ReplyFn,
    raise_if_stopped,
)
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED, BACKEND_TIMEOUT
from embodied_r_ros.core.profiles import api_key_from_env

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0
BACKOFF_S = 0.25  # first retry delay; doubles per retry, with jitter
#: HTTP statuses worth retrying: overload and server-side failures
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_POLL_S = 0.05
_ERROR_BODY_CHARS = 300
#: sent when no key is configured, so the client never picks up an unrelated OPENAI_API_KEY
NO_KEY = "no-key"


class _RequestLinesAtDebug(logging.Filter):
    """The HTTP library logs every request at INFO, a node's health probe once a second among
    them: its request lines are demoted to DEBUG (where a user asking for them finds them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and str(record.msg).startswith("HTTP Request:"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _quiet_request_lines(name: str = "httpx2") -> None:
    http_log = logging.getLogger(name)
    if not any(isinstance(f, _RequestLinesAtDebug) for f in http_log.filters):
        http_log.addFilter(_RequestLinesAtDebug())


class _Attempt(Exception):
    """One failed attempt: the error, and whether another attempt may help."""

    def __init__(self, error: BackendError, retry: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry = retry


class OpenAIBackend(ChatBackend):
    """Chat completions over HTTP; see the module docstring."""

    supports_images = True  # the server decides; a text-only server answers with an HTTP error
    concurrent = True

    def __init__(self, cfg: ModelConfig) -> None:
        if not cfg.base_url:
            raise BackendError(BACKEND_FAILED, "backend 'openai' needs base_url")
        self.cfg = cfg
        self.model_id = cfg.model
        self.base_url = cfg.base_url.rstrip("/")
        # the server holds the weights: a checkpoint is read only where it is on this machine
        self.generation = resolve_generation(cfg, local_checkpoint(cfg.model))
        key = api_key_from_env(cfg.api_key_env) if cfg.api_key_env else None
        self._key = key
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"openai-{cfg.model}", daemon=True
        )
        self._thread.start()
        self._slots: asyncio.Semaphore | None = None  # made on the loop, with the client
        self._client = self._run(self._make_client(key or NO_KEY), None)
        self._closed = False

    async def _make_client(self, key: str) -> openai.AsyncOpenAI:
        import httpx2

        _quiet_request_lines()

        limits = httpx2.Limits(
            max_connections=self.cfg.max_concurrency,
            max_keepalive_connections=self.cfg.max_concurrency,
        )
        self._slots = asyncio.Semaphore(self.cfg.max_concurrency)
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=key,
            max_retries=0,  # retries, backoff and the deadline are ours (see the docstring)
            timeout=self.cfg.timeout_s,
            http_client=httpx2.AsyncClient(limits=limits, timeout=self.cfg.timeout_s),
        )

    def _run(self, coro: Any, timeout: float | None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- one request ---------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _failure(self, exc: BaseException, budget: float) -> _Attempt:
        url = f"{self.base_url}/chat/completions"
        if isinstance(exc, asyncio.TimeoutError | openai.APITimeoutError):
            error = BackendError(BACKEND_TIMEOUT, f"no reply from {url} within {budget:.3g} s")
            return _Attempt(error, retry=True)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self._scrub(" ".join(str(exc.message).split()))[:_ERROR_BODY_CHARS]
            if status == 404:
                detail += " (base_url must be the API root, e.g. http://host:8000/v1)"
            # 503 Service Unavailable: the server is up but its model is not (loading, dying)
            code = BACKEND_DOWN if status == 503 else BACKEND_FAILED
            error = BackendError(code, f"HTTP {status} from {url}: {detail}")
            return _Attempt(error, retry=status in RETRY_STATUSES)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            reason = self._scrub(" ".join(str(cause).split())) or type(cause).__name__
            return _Attempt(BackendError(BACKEND_DOWN, f"cannot reach {url}: {reason}"), True)
        reason = self._scrub(" ".join(str(exc).split()))[:_ERROR_BODY_CHARS]
        return _Attempt(BackendError(BACKEND_FAILED, f"bad reply from {url}: {reason}"), False)

    async def _attempt(self, body: dict[str, Any], budget: float) -> Completion:
        try:
            reply = await asyncio.wait_for(self._client.chat.completions.create(**body), budget)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one error code
            raise self._failure(exc, budget) from None
        try:
            choice = reply.choices[0]
            text = choice.message.content or ""
        except (AttributeError, IndexError, TypeError):
            error = BackendError(BACKEND_FAILED, "reply has no choices[0].message")
            raise _Attempt(error, retry=False) from None
        usage = getattr(reply, "usage", None)
        limit = MAX_CHARS_PER_TOKEN * body["max_tokens"]
        cut = len(text) > limit
        if cut:
            logger.debug("a reply of %d characters cut to %d", len(text), limit)
        return Completion(
            text=text[:limit],
            finish_reason="length" if cut or choice.finish_reason == "length" else "stop",
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )

    async def _request(
        self, body: dict[str, Any], cancel: CancelToken | None, warned: threading.Event
    ) -> Completion:
        """Attempts with backoff, all within ``timeout_s`` and the question's time."""
        assert self._slots is not None
        async with self._slots:
            url = f"{self.base_url}/chat/completions"
            deadline = CancelToken(self.cfg.timeout_s, parent=cancel,
                                   expired=f"no reply from {url} within {self.cfg.timeout_s:g} s")
            delay = BACKOFF_S
            for attempt in range(self.cfg.retries + 1):
                raise_if_stopped(cancel)
                budget = deadline.time_left()
                assert budget is not None
                try:
                    return await self._attempt(body, budget)
                except _Attempt as failed:
                    if cancel is not None and cancel.stopped:
                        raise_if_stopped(cancel)
                    wait = delay * (1.0 + 0.2 * random.random())
                    left = deadline.time_left() or 0.0
                    last = attempt == self.cfg.retries or wait >= left
                    if last or not failed.retry:
                        raise failed.error from None
                    log = logger.debug if warned.is_set() else logger.warning
                    warned.set()
                    log("%s (attempt %d of %d); retrying in %.2f s", failed.error, attempt + 1,
                        self.cfg.retries + 1, wait)
                    await asyncio.sleep(wait)
                    delay *= 2
        raise AssertionError("unreachable")

    async def _settled(
        self, body: dict[str, Any], cancel: CancelToken | None, warned: threading.Event
    ) -> Completion | BaseException:
        """The reply or the error as a value: a call abandoned because another failed must not
        end its task with an exception nobody retrieves (asyncio would print it)."""
        try:
            return await self._request(body, cancel, warned)
        except Exception as exc:  # noqa: BLE001 - returned, raised by complete()
            return exc

    def _body(
        self,
        conversation: Conversation,
        settings: GenerationSettings,
        top_p: float | None,
        seed: int | None,
        stop: Sequence[str],
    ) -> dict[str, Any]:
        """The request of one conversation. ``repetition_penalty`` and ``top_k`` (vLLM's and
        ``embodied-r serve``'s extensions, in ``extra_body``) are sent when configured, read
        from a local checkpoint or asked for by the call; otherwise the server's own apply
        (``vllm serve`` takes them from the checkpoint's generation config)."""
        temp = settings.temperature
        body: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": to_openai_messages(conversation, self.cfg.image_max_side),
            "max_tokens": settings.max_new_tokens,
            "temperature": temp,
        }
        if temp > 0 or top_p is not None:
            body["top_p"] = settings.top_p
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)
        extra: dict[str, Any] = {}
        if settings.chosen("repetition_penalty"):
            extra["repetition_penalty"] = settings.repetition_penalty
        if temp > 0 and settings.chosen("top_k"):
            extra["top_k"] = settings.top_k
        if extra:
            body["extra_body"] = extra
        return body

    # -- ChatBackend -------------------------------------------------------------------------

    def complete(
        self,
        conversations: Sequence[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        repetition_penalty: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        cancel: CancelToken | None = None,
        on_reply: ReplyFn | None = None,
    ) -> list[Completion]:
        """All conversations at once (at most ``max_concurrency`` in flight), in input order."""
        if self._closed:
            raise BackendError(BACKEND_DOWN, "the backend is closed")
        settings = self.generation.with_call(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            repetition_penalty=repetition_penalty)
        raise_if_stopped(cancel)
        seeds = call_seeds(self, self.cfg.seed, settings.temperature, seed, len(conversations))
        bodies = [self._body(c, settings, top_p, s, stop)
                  for c, s in zip(conversations, seeds, strict=True)]
        warned = threading.Event()  # one retry warning per batch
        futures = {
            asyncio.run_coroutine_threadsafe(self._settled(body, cancel, warned), self._loop): i
            for i, body in enumerate(bodies)
        }
        results: list[Completion | None] = [None] * len(bodies)
        pending = set(futures)
        try:
            while pending:
                done, pending = concurrent.futures.wait(
                    pending, timeout=_POLL_S, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    completion = future.result()
                    if isinstance(completion, BaseException):
                        raise completion
                    results[futures[future]] = completion
                    if on_reply is not None:
                        on_reply(futures[future], completion)
                raise_if_stopped(cancel)
        except BaseException as exc:
            for future in pending:  # not sent yet: dropped; in flight: aborted
                future.cancel()
            # a stop of the caller's says nothing about the server (see _record); a timeout
            # that is not the caller's is the server's: recorded as text
            if isinstance(exc, BackendError):
                self._record(exc if exc.code != BACKEND_TIMEOUT else str(exc), cancel)
            raise
        self._record(None)
        return [r for r in results if r is not None]

    def health(self) -> Health:
        """Reachable (``GET /models`` within 2 s) and the last call did not fail."""
        timeout = min(HEALTH_TIMEOUT_S, self.cfg.timeout_s)
        try:
            self._run(asyncio.wait_for(self._client.models.list(), timeout), timeout + 1.0)
        except Exception as exc:  # noqa: BLE001 - health is a report, never an exception
            error = self._failure(exc, timeout).error
            logger.debug("health check failed: %s", error)
            return Health(ok=False, error=str(error))
        return super().health()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._client.close(), 5.0)
        except Exception as exc:  # noqa: BLE001 - closing must not fail a shutdown
            logger.debug("closing the HTTP client: %s", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._loop.is_running():
            self._loop.close()

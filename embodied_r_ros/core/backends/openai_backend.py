"""Backend for any OpenAI-compatible chat-completions endpoint (``vllm serve``, hosted APIs,
``embodied-r serve``), using only the standard library.

``base_url`` follows the OpenAI client convention: everything up to and including the version
path (``http://host:8000/v1``); ``/chat/completions`` and ``/models`` are appended. The API key
is read from the environment variable named by ``api_key_env`` at request time and only ever
placed in the ``Authorization`` header: it is never logged and is scrubbed from error messages.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from embodied_r_ros.core.backends.base import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BACKEND_TIMEOUT,
    BackendError,
    ChatBackend,
    Conversation,
)
from embodied_r_ros.core.backends.images import content_parts, to_data_url
from embodied_r_ros.core.config import ModelConfig

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0
BACKOFF_S = 0.25  # first retry delay; doubles per retry
#: HTTP statuses worth retrying: overload and server-side failures
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_ERROR_BODY_CHARS = 300


class HTTPStatusError(BackendError):
    """The endpoint answered with an HTTP error status (kept for the retry decision)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(BACKEND_FAILED, message)
        self.status = status


def to_openai_messages(conversation: Conversation, image_max_side: int = 0) -> list[dict[str, Any]]:
    """Core messages -> OpenAI chat messages; images become base64 JPEG data URLs."""
    out: list[dict[str, Any]] = []
    for msg in conversation:
        content = content_parts(msg)
        if not isinstance(content, str):
            content = [
                {
                    "type": "image_url",
                    "image_url": {"url": to_data_url(part["image"], max_side=image_max_side)},
                }
                if part["type"] == "image"
                else part
                for part in content
            ]
        out.append({"role": msg["role"], "content": content})
    return out


class OpenAIBackend(ChatBackend):
    """Chat completions over HTTP; a batch is sent as concurrent requests."""

    supports_images = True  # the server decides; a text-only server answers with an HTTP error

    def __init__(self, cfg: ModelConfig) -> None:
        if not cfg.base_url:
            raise BackendError(BACKEND_FAILED, "backend 'openai' needs base_url")
        self.cfg = cfg
        self.model_id = cfg.model
        self.base_url = cfg.base_url.rstrip("/")

    # -- HTTP --------------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        if not self.cfg.api_key_env:
            return None
        key = os.environ.get(self.cfg.api_key_env)
        if not key:
            raise BackendError(
                BACKEND_FAILED, f"environment variable {self.cfg.api_key_env} is not set"
            )
        return key

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None, timeout: float
    ) -> dict[str, Any]:
        """One HTTP exchange; the key is scrubbed from whatever error comes out."""
        key = self._api_key()
        try:
            return self._exchange(method, path, body, timeout, key)
        except BackendError as err:
            if key and key in str(err):
                err.args = (str(err).replace(key, "***"),)
            raise

    def _exchange(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        timeout: float,
        key: str | None,
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = self.base_url + path
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        timed_out = f"no reply from {url} within {timeout:g} s"
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(_ERROR_BODY_CHARS).decode("utf-8", "replace").strip()
            if exc.code == 404:
                detail += " (base_url must be the API root, e.g. http://host:8000/v1)"
            raise HTTPStatusError(exc.code, f"HTTP {exc.code} from {url}: {detail}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):  # timed out while connecting
                raise BackendError(BACKEND_TIMEOUT, timed_out) from None
            raise BackendError(BACKEND_DOWN, f"cannot reach {url}: {exc.reason}") from None
        except TimeoutError:  # timed out waiting for the reply
            raise BackendError(BACKEND_TIMEOUT, timed_out) from None
        except OSError as exc:  # connection reset or dropped mid-exchange
            raise BackendError(BACKEND_DOWN, f"connection to {url} failed: {exc}") from None
        except http.client.HTTPException as exc:  # not speaking HTTP, truncated reply
            raise BackendError(BACKEND_FAILED, f"bad HTTP reply from {url}: {exc!r}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise BackendError(BACKEND_FAILED, f"reply from {url} is not JSON") from None

    @staticmethod
    def _retryable(err: BackendError) -> bool:
        if isinstance(err, HTTPStatusError):
            return err.status in RETRY_STATUSES
        return err.code in (BACKEND_DOWN, BACKEND_TIMEOUT)

    def _with_retries(self, body: dict[str, Any]) -> dict[str, Any]:
        delay = BACKOFF_S
        for attempt in range(self.cfg.retries + 1):
            try:
                return self._request("POST", "/chat/completions", body, self.cfg.timeout_s)
            except BackendError as err:
                if attempt == self.cfg.retries or not self._retryable(err):
                    raise
                logger.warning(
                    "%s (attempt %d of %d); retrying in %.2f s",
                    err,
                    attempt + 1,
                    self.cfg.retries + 1,
                    delay,
                )
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    # -- ChatBackend -------------------------------------------------------------------------

    def _complete(self, conversation: Conversation, max_new: int, temp: float) -> str:
        body: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": to_openai_messages(conversation, self.cfg.image_max_side),
            "max_tokens": max_new,
            "temperature": temp,
        }
        if temp > 0:
            body.update(top_p=self.cfg.top_p, seed=self.cfg.seed)
        reply = self._with_retries(body)
        try:
            content = reply["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise BackendError(BACKEND_FAILED, "reply has no choices[0].message") from None
        return content or ""

    def generate(
        self,
        conversations: list[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
    ) -> list[str]:
        max_new = max_new_tokens if max_new_tokens is not None else self.cfg.max_new_tokens
        temp = self.cfg.temperature if temperature is None else temperature
        if len(conversations) <= 1:
            return [self._complete(c, max_new, temp) for c in conversations]
        workers = min(self.cfg.max_concurrency, len(conversations))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai") as pool:
            futures = [pool.submit(self._complete, c, max_new, temp) for c in conversations]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for future in futures:  # the batch has failed: do not start the rest
                    future.cancel()
                raise

    def healthy(self) -> bool:
        timeout = min(HEALTH_TIMEOUT_S, self.cfg.timeout_s)
        try:
            self._request("GET", "/models", None, timeout)
        except BackendError as err:
            logger.debug("health check failed: %s", err)
            return False
        return True

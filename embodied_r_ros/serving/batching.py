"""Micro-batching for a backend that serves one ``complete`` call at a time: requests with
equal settings that arrive within a few milliseconds share one batched call. A request whose
client has gone is dropped before its batch starts, and a batch whose clients have all gone
is stopped mid-generation (so the next client does not wait for replies nobody reads)."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend, Completion, Conversation
from embodied_r_ros.core.error_codes import BACKEND_DOWN, CANCELLED
from embodied_r_ros.serving.requests import Settings

BATCH_WINDOW_S = 0.005  # how long a batch waits for more requests to join

_Item = tuple[Conversation, Settings, "Future[Completion]", CancelToken]


class AllStopped(CancelToken):
    """Stopped once every one of ``tokens`` is: one batch serves several clients."""

    def __init__(self, tokens: list[CancelToken]) -> None:
        super().__init__()
        self.tokens = tokens

    def reason(self) -> tuple[str, str] | None:
        own = super().reason()
        if own is not None:
            return own
        if all(t.stopped for t in self.tokens):
            return (CANCELLED, "every client of the batch went away")
        return None


def shutting_down() -> BackendError:
    """What a request still waiting for the model gets once the server shuts down."""
    return BackendError(BACKEND_DOWN, "the server is shutting down")


class Batcher:
    """One worker that serves queued requests in batches of up to ``max_batch`` with equal
    settings: concurrent clients of an in-process model share its batched ``complete``."""

    def __init__(self, backend: ChatBackend, max_batch: int) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._held: list[_Item] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="openai-server-batch",
                                        daemon=True)
        self._thread.start()

    def submit(
        self, conversation: Conversation, settings: Settings, cancel: CancelToken | None = None
    ) -> Completion:
        future: Future[Completion] = Future()
        with self._lock:
            if self._closed:
                raise shutting_down()
            self._queue.put((conversation, settings, future, cancel or CancelToken()))
        return future.result()

    def _next_batch(self) -> list[_Item] | None:
        first = self._held.pop(0) if self._held else self._queue.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + BATCH_WINDOW_S
        while len(batch) < self.max_batch:
            same = next((i for i, h in enumerate(self._held) if h[1] == first[1]), None)
            if same is not None:
                batch.append(self._held.pop(same))
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
            # a client that left while queued fails at once; each token is read once, so a
            # client leaving meanwhile cannot be dropped unanswered (and no list.remove: its
            # equality would compare conversations, whose images are arrays)
            kept = []
            for item in batch:
                if item[3].stopped:
                    item[2].set_exception(BackendError(CANCELLED, "the client went away"))
                else:
                    kept.append(item)
            batch = kept
            if not batch:
                continue
            try:
                replies = self.backend.complete(
                    [b[0] for b in batch], **batch[0][1].kwargs(),
                    cancel=AllStopped([b[3] for b in batch]),
                )
            except BaseException as exc:  # noqa: BLE001 - every waiting client gets the error
                for item in batch:
                    item[2].set_exception(exc)
                continue
            for item, reply in zip(batch, replies, strict=True):
                item[2].set_result(reply)

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
        for item in pending:
            item[2].set_exception(shutting_down())

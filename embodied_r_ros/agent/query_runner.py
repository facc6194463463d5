"""One code path for every spatial question, whether it came as a service call or an action goal,
and whether the models run in this process or in other nodes.

:class:`QueryRunner` validates the request, applies the concurrency limit (``BUSY`` at once when
full), and runs the question on a thread of its own under one
:class:`~embodied_r_ros.core.cancel.CancelToken` holding the whole time budget
(``query_timeout_sec``). A timeout or a cancel answers at once and frees the slot at once; the
token stops the abandoned work (calls not sent are dropped, HTTP requests aborted, in-process
generation stopped, remote goals cancelled). Every failure becomes an error code and one line of
text. Where frames, perception and reasoning come from is an :class:`Engine`; ROS is not
imported here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from embodied_r_ros.agent.frame_store import Window
from embodied_r_ros.agent.guard import error_of
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import raise_if_stopped
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BUSY, INTERNAL
from embodied_r_ros.core.perception import ProgressFn
from embodied_r_ros.core.poses import StampedPose
from embodied_r_ros.core.query_result import MemoryFrameUsed, QueryResult
from embodied_r_ros.core.reasoning import Reasoning
from embodied_r_ros.core.request import (
    DEFAULT_LIMITS,
    SCOPE_MEMORY,
    SCOPE_WINDOW,
    QueryError,
    Question,
    RequestLimits,
    check_camera,
    check_scope,
    check_window_sec,
    one_line,
    validate_query,
)

log = logging.getLogger(__name__)

_POLL_S = 0.02
#: the query server's ``query_timeout_sec`` and ``max_concurrent_queries`` start here
TIMEOUT_SEC = 300.0
MAX_CONCURRENT = 2


class Engine(Protocol):
    """Where a query's frames, perception and reasoning come from; every call stops when
    ``cancel`` does (raising ``QueryError``/``BackendError`` with its code)."""

    def window(self, camera: str, window_sec: float, cancel: CancelToken) -> Window: ...

    def perceive(
        self,
        window: Window,
        question: Question,
        on_progress: ProgressFn | None,
        cancel: CancelToken,
    ) -> str:
        """The assembled perception text."""
        ...

    def reason(
        self, perception: str, question: Question, cancel: CancelToken, scope: str
    ) -> Reasoning:
        """The reasoning LM's answer to ``question``'s options; ``scope`` names which LM reads
        the text (the memory reader reads a memory's)."""
        ...

    def pose_now(self, camera: str, cancel: CancelToken) -> StampedPose | None:
        """``camera``'s pose now, as its frame buffer last knew it; None where it knows none or
        cannot be reached (a memory question is then counted from the memory's newest frame)."""
        ...


class MemorySource(Protocol):
    """Where a scope-memory question's text comes from
    (:class:`~embodied_r_ros.memory.service.MemoryReader`)."""

    def perception(self, question: str, options: Sequence[str],
                   live: StampedPose | None = None) -> tuple[str, list[MemoryFrameUsed]]:
        """The reasoner's user message and the stored frames it was written from, where the
        named objects are now counted from ``live``, the robot's pose at the ask."""
        ...


@dataclass(frozen=True)
class QueryRequest:
    question: str
    options: Sequence[str] = ()
    window_sec: float = 0.0
    camera: str = ""
    #: SCOPE_WINDOW (empty means it too) or SCOPE_MEMORY
    scope: str = ""


def _failure(code: str, message: str) -> QueryResult:
    return QueryResult.failure(code, one_line(message) or code)


@dataclass
class QueryStats:
    served: int = 0
    succeeded: int = 0
    busy: int = 0
    failed: int = 0
    in_flight: int = 0
    last_total_sec: float = 0.0
    last_overhead_sec: float = 0.0  # total minus perception and reasoning time
    last_error_code: str = ""


class _Slot:
    """One of the concurrent-query slots, released exactly once (by whoever is first: the
    answer given to the client, or the abandoned work ending)."""

    def __init__(self, on_release: Callable[[], None]) -> None:
        self._on_release = on_release
        self._done = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._on_release()


class QueryRunner:
    """Runs questions against an :class:`Engine`; thread-safe. The limits (``max_concurrent``,
    the text bounds, ``timeout_sec``, ``default_camera``) may be changed while it serves: each
    question reads them as it arrives."""

    def __init__(
        self,
        engine: Engine,
        cameras: Sequence[str],
        *,
        default_camera: str = "",
        max_concurrent: int = MAX_CONCURRENT,
        max_question_chars: int = DEFAULT_LIMITS.max_question_chars,
        max_option_chars: int = DEFAULT_LIMITS.max_option_chars,
        timeout_sec: float = TIMEOUT_SEC,
        memory: MemorySource | None = None,
    ) -> None:
        """``memory``: the spatial memory scope-memory questions read (None: they are answered
        ``MEMORY_UNAVAILABLE``)."""
        if not cameras:
            raise ValueError("at least one camera is needed")
        self.engine = engine
        self.cameras = list(cameras)
        self.default_camera = default_camera or self.cameras[0]
        if self.default_camera not in self.cameras:
            raise ValueError(f"default camera {self.default_camera!r} not in {self.cameras}")
        self.max_question_chars = max_question_chars
        self.max_option_chars = max_option_chars
        self.timeout_sec = timeout_sec
        self.max_concurrent = max_concurrent
        self.memory = memory
        self.stats = QueryStats()
        self._lock = threading.Lock()
        self._closed = False
        self._tokens: set[CancelToken] = set()
        self._threads: set[threading.Thread] = set()
        #: told of every answer (the request, its result, the window read: None for scope
        #: memory or a refusal); called on the asking thread, after the answer is made
        self.on_answer: list[Callable[[QueryRequest, QueryResult, Window | None], None]] = []

    def close(self, wait_sec: float = 10.0) -> None:
        """Stop every query in flight (answered CANCELLED), refuse new ones, and wait (up to
        ``wait_sec``) for their work to end: a model must not be freed under a running query."""
        self._closed = True
        with self._lock:
            tokens, threads = list(self._tokens), list(self._threads)
        for token in tokens:
            token.cancel(message="the query server is stopping")
        deadline = time.monotonic() + wait_sec
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _validate(self, request: QueryRequest) -> tuple[Question, str, str]:
        """``(question, camera, scope)`` by the request contract
        (:mod:`embodied_r_ros.core.request`) under this runner's current limits."""
        limits = RequestLimits(self.max_question_chars, self.max_option_chars)
        question = validate_query(request.question, list(request.options), limits)
        camera = check_camera(request.camera, self.cameras, self.default_camera)
        check_window_sec(request.window_sec)
        scope = check_scope(request.scope, has_memory=self.memory is not None)
        return question, camera, scope

    def run(
        self,
        request: QueryRequest,
        on_progress: ProgressFn | None = None,
        cancel: CancelToken | None = None,
    ) -> QueryResult:
        """Answer ``request``; never raises. ``cancel`` (the caller's) stops it early."""
        windows: list[Window] = []
        outcome = self._run(request, on_progress, cancel, windows)
        for listener in list(self.on_answer):
            try:
                listener(request, outcome, windows[0] if windows else None)
            except Exception:  # a viewer hiccup must not fail the query
                log.exception("answer listener failed")
        return outcome

    def _run(self, request: QueryRequest, on_progress: ProgressFn | None,
             cancel: CancelToken | None, windows: list[Window]) -> QueryResult:
        start = time.perf_counter()
        try:
            question, camera, scope = self._validate(request)
        except QueryError as exc:
            return self._finish(_failure(exc.code, str(exc)), start)
        if self._closed:
            return self._finish(_failure(BACKEND_DOWN, "the query server is stopping"),
                                start)
        with self._lock:  # a slot: in_flight counts the slots taken
            free = self.stats.in_flight < self.max_concurrent
            if free:
                self.stats.in_flight += 1
        if not free:
            outcome = _failure(BUSY, "too many queries in progress; try again later")
            return self._finish(outcome, start)
        slot = _Slot(self._left)
        budget = self.timeout_sec if self.timeout_sec > 0 else None
        token = CancelToken(budget, parent=cancel,
                            expired=f"no answer within query_timeout_sec={self.timeout_sec:g}")
        with self._lock:
            self._tokens.add(token)
        box: list[QueryResult] = []
        answered = threading.Event()

        def work() -> None:
            try:
                box.append(self._answer(camera, request.window_sec, question, on_progress,
                                        token, scope, windows))
            finally:
                answered.set()
                slot.release()
                with self._lock:
                    self._tokens.discard(token)
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=work, name="embodied_r_query", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()
        while not answered.wait(_POLL_S) and not token.stopped:
            pass
        if box:
            outcome = box[0]
        else:  # answer now; the token stops the work, and the slot is free at once
            code, message = token.reason() or (INTERNAL, "stopped")
            outcome = _failure(code, message)
            slot.release()
        return self._finish(outcome, start)

    def _left(self) -> None:
        with self._lock:
            self.stats.in_flight -= 1

    def _answer(
        self,
        camera: str,
        window_sec: float,
        question: Question,
        on_progress: ProgressFn | None,
        cancel: CancelToken,
        scope: str = SCOPE_WINDOW,
        windows: list[Window] | None = None,
    ) -> QueryResult:
        def progress(stage: str, done: int, total: int, text: str) -> None:
            if on_progress is not None and not cancel.stopped:
                try:
                    on_progress(stage, done, total, text)
                except Exception:  # a feedback hiccup must not fail the query
                    log.exception("progress callback failed")

        try:
            progress("window", 0, 0, "")
            used: list[MemoryFrameUsed] = []
            t0 = time.perf_counter()
            if scope == SCOPE_MEMORY:
                assert self.memory is not None  # validated
                live = self.engine.pose_now(camera, cancel)
                raise_if_stopped(cancel)
                perception, used = self.memory.perception(question.text, question.options,
                                                          live)
                stamps = [u.stamp for u in used]
            else:
                window = self.engine.window(camera, window_sec, cancel)
                if windows is not None:
                    windows.append(window)
                raise_if_stopped(cancel)
                t0 = time.perf_counter()
                perception = self.engine.perceive(window, question, progress, cancel)
                stamps = list(window.stamps)
            t1 = time.perf_counter()
            raise_if_stopped(cancel)
            progress("reasoning", 0, 1, "")
            reasoning = self.engine.reason(perception, question, cancel, scope)
            t2 = time.perf_counter()
            raise_if_stopped(cancel)
            progress("done", 1, 1, reasoning.answer)
        except Exception as exc:  # keep the node up whatever a backend does
            code, message = error_of(exc)
            if code == INTERNAL:
                log.exception("query failed")
            return _failure(code, message)
        return QueryResult.answered(
            reasoning,
            perception,
            key_frame_stamps=stamps,
            memory_frames=used,
            perception_sec=t1 - t0,
            reasoning_sec=t2 - t1,
        )

    def _finish(self, outcome: QueryResult, start: float) -> QueryResult:
        outcome = replace(outcome, total_sec=time.perf_counter() - start)
        with self._lock:
            s = self.stats
            s.served += 1
            if outcome.success:
                s.succeeded += 1
                s.last_total_sec = outcome.total_sec
                s.last_overhead_sec = (
                    outcome.total_sec - outcome.perception_sec - outcome.reasoning_sec
                )
            elif outcome.error_code == BUSY:
                s.busy += 1
            else:
                s.failed += 1
                s.last_error_code = outcome.error_code
        return outcome

"""One code path for every spatial question, whether it came as a service call or an action goal,
and whether the models run in this process or in other nodes.

:class:`QueryRunner` validates the request, applies the concurrency limit (``BUSY`` at once when
full), enforces the overall timeout, and turns every failure into an error code and one line of
text. Where frames, perception and reasoning come from is an :class:`Engine`; ROS is not
imported here.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Protocol

from embodied_r_ros.core.backends.base import BACKEND_TIMEOUT, BackendError
from embodied_r_ros.core.perception import ProgressFn
from embodied_r_ros.core.pipeline import CANCELLED, QueryError, validate_query
from embodied_r_ros.core.reasoning import Reasoning
from embodied_r_ros.nodes.frame_store import Window

log = logging.getLogger(__name__)

BUSY = "BUSY"
UNKNOWN_CAMERA = "UNKNOWN_CAMERA"
BAD_WINDOW = "BAD_WINDOW"
INTERNAL = "INTERNAL"


class Engine(Protocol):
    """Where a query's frames, perception and reasoning come from."""

    def window(self, camera: str, window_sec: float) -> Window: ...

    def perceive(
        self,
        window: Window,
        question: str,
        options: Sequence[str],
        on_progress: ProgressFn | None,
        cancelled: Callable[[], bool],
    ) -> str:
        """The assembled perception text."""
        ...

    def reason(self, perception: str, options: Sequence[str]) -> Reasoning: ...


@dataclass(frozen=True)
class QueryRequest:
    question: str
    options: Sequence[str] = ()
    window_sec: float = 0.0
    camera: str = ""


@dataclass
class QueryOutcome:
    """Mirrors the fields of ``SpatialQuery`` responses (stamps in seconds)."""

    success: bool = False
    error_code: str = ""
    error: str = ""
    answer: str = ""
    answer_text: str = ""
    reasoning: str = ""
    perception: str = ""
    key_frame_stamps: list[float] = field(default_factory=list)
    perception_sec: float = 0.0
    reasoning_sec: float = 0.0
    total_sec: float = 0.0

    @classmethod
    def failure(cls, code: str, message: str, total_sec: float = 0.0) -> QueryOutcome:
        line = " ".join(str(message).split()) or code
        return cls(success=False, error_code=code, error=line, total_sec=total_sec)


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


class QueryRunner:
    """Runs questions against an :class:`Engine`; thread-safe."""

    def __init__(
        self,
        engine: Engine,
        cameras: Sequence[str],
        *,
        default_camera: str = "",
        max_concurrent: int = 2,
        max_question_chars: int = 2000,
        timeout_sec: float = 300.0,
    ) -> None:
        if not cameras:
            raise ValueError("at least one camera is needed")
        self.engine = engine
        self.cameras = list(cameras)
        self.default_camera = default_camera or self.cameras[0]
        if self.default_camera not in self.cameras:
            raise ValueError(f"default camera {self.default_camera!r} not in {self.cameras}")
        self.max_question_chars = max_question_chars
        self.timeout_sec = timeout_sec
        self.stats = QueryStats()
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._workers = ThreadPoolExecutor(max_concurrent, thread_name_prefix="embodied_r_query")
        self._lock = threading.Lock()

    def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)

    def run(
        self,
        request: QueryRequest,
        on_progress: ProgressFn | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> QueryOutcome:
        """Answer ``request``; never raises. ``cancelled`` is polled between model calls."""
        start = time.perf_counter()
        try:
            question, options = validate_query(
                request.question, list(request.options), self.max_question_chars
            )
            camera = request.camera.strip() or self.default_camera
            if camera not in self.cameras:
                raise QueryError(
                    UNKNOWN_CAMERA,
                    f"unknown camera {camera!r}; known: {', '.join(self.cameras)}",
                )
            if not math.isfinite(request.window_sec) or request.window_sec < 0:
                raise QueryError(BAD_WINDOW, f"window_sec must be >= 0, got {request.window_sec}")
        except QueryError as exc:
            return self._finish(QueryOutcome.failure(exc.code, str(exc)), start)
        if not self._slots.acquire(blocking=False):
            outcome = QueryOutcome.failure(BUSY, "too many queries in progress; try again later")
            return self._finish(outcome, start)
        stop = threading.Event()

        def is_cancelled() -> bool:
            return stop.is_set() or (cancelled is not None and cancelled())

        with self._lock:
            self.stats.in_flight += 1
        try:
            future = self._workers.submit(
                self._answer, camera, request.window_sec, question, options, on_progress,
                is_cancelled,
            )
        except RuntimeError:  # shutting down
            self._release()
            return self._finish(QueryOutcome.failure(INTERNAL, "the query server is stopping"),
                                start)
        future.add_done_callback(lambda _: self._release())
        try:
            outcome = future.result(timeout=self.timeout_sec if self.timeout_sec > 0 else None)
        except FutureTimeout:
            stop.set()  # the worker stops before its next model call and frees its slot
            outcome = QueryOutcome.failure(
                BACKEND_TIMEOUT, f"no answer within query_timeout_sec={self.timeout_sec:g}"
            )
        return self._finish(outcome, start)

    def _release(self) -> None:
        with self._lock:
            self.stats.in_flight -= 1
        self._slots.release()

    def _answer(
        self,
        camera: str,
        window_sec: float,
        question: str,
        options: list[str],
        on_progress: ProgressFn | None,
        cancelled: Callable[[], bool],
    ) -> QueryOutcome:
        def progress(stage: str, done: int, total: int, text: str) -> None:
            if on_progress is not None:
                try:
                    on_progress(stage, done, total, text)
                except Exception:  # a feedback hiccup must not fail the query
                    log.exception("progress callback failed")

        try:
            progress("window", 0, 0, "")
            window = self.engine.window(camera, window_sec)
            if cancelled():
                raise QueryError(CANCELLED, "cancelled before perception")
            t0 = time.perf_counter()
            perception = self.engine.perceive(window, question, options, progress, cancelled)
            t1 = time.perf_counter()
            if cancelled():
                raise QueryError(CANCELLED, "cancelled before reasoning")
            progress("reasoning", 0, 1, "")
            reasoning = self.engine.reason(perception, options)
            t2 = time.perf_counter()
            progress("done", 1, 1, reasoning.answer)
        except QueryError as exc:
            return QueryOutcome.failure(exc.code, str(exc))
        except BackendError as exc:
            return QueryOutcome.failure(exc.code, str(exc))
        except Exception as exc:  # keep the node up whatever a backend does
            log.exception("query failed")
            return QueryOutcome.failure(INTERNAL, f"{type(exc).__name__}: {exc}")
        return QueryOutcome(
            success=True,
            answer=reasoning.answer,
            answer_text=reasoning.answer_text,
            reasoning=reasoning.think,
            perception=perception,
            key_frame_stamps=list(window.stamps),
            perception_sec=t1 - t0,
            reasoning_sec=t2 - t1,
        )

    def _finish(self, outcome: QueryOutcome, start: float) -> QueryOutcome:
        outcome.total_sec = time.perf_counter() - start
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

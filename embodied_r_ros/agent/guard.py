"""No request takes a node down: every callback answers, whatever its request raises.

rclpy's executor re-raises an exception from any callback and the whole process dies (in the
all-in-one, the camera buffer and the query server with it). The wrappers here turn what a
request can raise into ``success=false`` with an error code and one line of text: the core's
``QueryError`` / ``BackendError`` keep their codes, anything unexpected is ``INTERNAL`` and is
logged once with its traceback. Subscriptions drop the message, count it and log (throttled).
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.error_codes import CANCELLED, INTERNAL
from embodied_r_ros.core.request import QueryError, one_line

_log = logging.getLogger(__name__)


def error_of(exc: BaseException) -> tuple[str, str]:
    """``(code, one line)`` of an exception raised while serving a request."""
    if isinstance(exc, QueryError | BackendError):
        return exc.code, one_line(exc)
    return INTERNAL, one_line(f"{type(exc).__name__}: {exc}")


def fail(response: Any, code: str, message: str) -> Any:
    """``response`` marked failed: ``success=False``, ``error_code``, one-line ``error``."""
    response.success = False
    response.error_code = code
    response.error = one_line(message) or code
    return response


def log_unexpected(logger: Any, what: str, exc: BaseException) -> None:
    """One log record with the traceback, for errors that are not the request's fault."""
    if isinstance(exc, QueryError | BackendError):
        return
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    logger.error(f"{what} failed unexpectedly (answered {INTERNAL}):\n{trace}")


def guard_service(logger: Any, what: str,
                  handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """A service callback that always returns a response (a fresh one when the handler failed
    half-way, so no half-filled fields go out)."""

    def callback(request: Any, response: Any) -> Any:
        try:
            return handler(request, response)
        except Exception as exc:  # noqa: BLE001 - the point: never into the executor
            log_unexpected(logger, what, exc)
            return fail(type(response)(), *error_of(exc))

    return callback


def guard_execute(logger: Any, what: str, result_type: type,
                  execute: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An action execute callback that always ends the goal (aborted on an error) and returns
    a result."""

    def callback(goal_handle: Any) -> Any:
        try:
            return execute(goal_handle)
        except Exception as exc:  # noqa: BLE001
            log_unexpected(logger, what, exc)
            try:
                if goal_handle.is_active:
                    goal_handle.abort()
            except Exception as end_exc:  # noqa: BLE001 - the goal may have ended meanwhile
                logger.debug(f"{what}: could not abort the goal: {end_exc}")
            return fail(result_type(), *error_of(exc))

    return callback


def guard_subscription(logger: Any, what: str, callback: Callable[[Any], None],
                       on_error: Callable[[BaseException], None] | None = None
                       ) -> Callable[[Any], None]:
    """A subscription callback that drops a message it cannot handle and goes on."""

    def guarded(msg: Any) -> None:
        try:
            callback(msg)
        except Exception as exc:  # noqa: BLE001
            if on_error is not None:
                on_error(exc)
            logger.error(f"{what}: dropped a message: {one_line(exc)}",
                         throttle_duration_sec=5.0)

    return guarded


def finish_goal(goal_handle: Any, result: Any, cancelled_code: str = CANCELLED) -> Any:
    """End an action goal by its result: canceled (when the client asked), succeeded, aborted."""
    if result.error_code == cancelled_code and goal_handle.is_cancel_requested:
        goal_handle.canceled()
    elif result.success:
        goal_handle.succeed()
    else:
        goal_handle.abort()
    return result


class GoalTokens:
    """The cancel token of every goal in flight, so a cancel request reaches the work."""

    def __init__(self) -> None:
        self._tokens: dict[bytes, CancelToken] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def open(self, goal_handle: Any, timeout: float | None = None) -> CancelToken:
        token = CancelToken(timeout)
        with self._lock:
            self._tokens[bytes(goal_handle.goal_id.uuid)] = token
        return token

    def close(self, goal_handle: Any) -> None:
        with self._lock:
            self._tokens.pop(bytes(goal_handle.goal_id.uuid), None)
            if not self._tokens:
                self._idle.notify_all()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._tokens)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no goal is in flight; False if some still are after ``timeout`` s."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._tokens, timeout)

    def cancel(self, goal_handle: Any) -> None:
        with self._lock:
            token = self._tokens.get(bytes(goal_handle.goal_id.uuid))
        if token is not None:
            token.cancel()

    def cancel_all(self, code: str = CANCELLED, message: str = "cancelled") -> None:
        """Stop every goal in flight with ``code`` (a deactivation is ``BACKEND_DOWN``, not the
        client's own ``CANCELLED``)."""
        with self._lock:
            tokens = list(self._tokens.values())
        for token in tokens:
            token.cancel(code, message)


class Heartbeat:
    """Calls ``beat()`` every ``period_sec`` from its own thread while a goal runs, so the
    client sees the node alive even while a model blocks the goal's thread for seconds. A beat
    that fails is logged (throttled) and the next one is tried: one failed publish must not
    make a live node look dead to its peers."""

    def __init__(self, beat: Callable[[], None], period_sec: float = 0.5,
                 logger: Any = None) -> None:
        self._beat = beat
        self._period = period_sec
        self._logger = logger
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._beat()
            except Exception as exc:  # noqa: BLE001 - keep beating, but say why one failed
                self.failures += 1
                text = f"heartbeat failed ({self.failures} so far): {one_line(exc)}"
                if self._logger is None:
                    _log.warning(text)
                else:
                    self._logger.warning(text, throttle_duration_sec=5.0)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

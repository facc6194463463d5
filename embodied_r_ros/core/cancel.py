"""Stopping work from another thread: an explicit cancel, or a deadline that passes.

A robot's question has a time budget and can be cancelled (an action goal, a timed-out query).
Every model call of the question gets the same :class:`CancelToken`, so the budget is one
number for the whole question (not per HTTP read or per attempt) and a cancel reaches calls
not yet sent, HTTP requests in flight and in-process generation alike. ``child`` tokens narrow
the deadline (one HTTP attempt) and are stopped with their parent.
"""

from __future__ import annotations

import threading
import time

from embodied_r_ros.core.error_codes import BACKEND_TIMEOUT, CANCELLED


class CancelToken:
    """Thread-safe stop signal with an optional deadline (``time.monotonic`` seconds)."""

    def __init__(
        self,
        timeout: float | None = None,
        *,
        deadline: float | None = None,
        parent: CancelToken | None = None,
        expired: str = "the time budget ran out",
    ) -> None:
        if timeout is not None:
            limit = time.monotonic() + max(0.0, timeout)
            deadline = limit if deadline is None else min(deadline, limit)
        if parent is not None and parent.deadline is not None:
            deadline = parent.deadline if deadline is None else min(deadline, parent.deadline)
        self.deadline = deadline
        self.parent = parent
        self.expired = expired  # the message once the deadline has passed
        self._event = threading.Event()
        self._why: tuple[str, str] | None = None

    def cancel(self, code: str = CANCELLED, message: str = "cancelled") -> None:
        """Stop the work; the first reason given wins."""
        if self._why is None:
            self._why = (code, message)
        self._event.set()

    def reason(self) -> tuple[str, str] | None:
        """``(code, message)`` once stopped (cancelled, or its deadline passed), else None."""
        if self._why is not None:
            return self._why
        if self.parent is not None:
            inherited = self.parent.reason()
            if inherited is not None:
                return inherited
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return (BACKEND_TIMEOUT, self.expired)
        return None

    @property
    def stopped(self) -> bool:
        return self.reason() is not None

    def time_left(self) -> float | None:
        """Seconds to the deadline (0 when past), None without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def bound(self, seconds: float) -> float:
        """``seconds``, cut to the time left."""
        left = self.time_left()
        return seconds if left is None else min(seconds, left)

    def child(self, timeout: float | None = None) -> CancelToken:
        """A token stopped with this one and, if given, after ``timeout`` seconds."""
        return CancelToken(timeout, parent=self)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` (cut to the deadline); True if stopped meanwhile."""
        self._chain_wait(self.bound(seconds))
        return self.stopped

    def _chain_wait(self, seconds: float) -> None:
        # a parent's cancel must wake a child: poll the chain in short slices
        end = time.monotonic() + seconds
        while not self.stopped:
            left = end - time.monotonic()
            if left <= 0:
                return
            self._event.wait(min(left, 0.05))


def stopped(token: CancelToken | None) -> tuple[str, str] | None:
    """``token.reason()``, or None for no token."""
    return token.reason() if token is not None else None

"""Streaming perception (beyond the paper, opt-in): key frames described as they arrive.

The paper conditions every VLM call on the question, so nothing can be described before the
question comes, and a 32-key-frame window costs 32 calls at question time. In ``streaming``
mode each new key frame is described in the background, question-agnostically, alone and
after the previous key frame of its camera, and every other stored frame (one a second) after
the last key frame, as the current view a window ends with (:meth:`Perceiver.prefetch`); all
into the perception cache. Windows then start at their first key frame, so a question finds
its window's descriptions ready, and only those not ready yet are described at query time
(concurrently). The answer never depends on how far the background got; its latency mostly
does. The trade-off: the VLM does not look for the question's objects.

:class:`BackgroundDescriber` owns one worker thread and a bounded queue (the oldest pending key
frame is dropped when it is full: it will be described at query time if a question needs it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.perception import Perceiver
from embodied_r_ros.core.records import FrameRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyFrameNote:
    """What the background made of one key frame: its record (no motion: the memory has the
    pose), compared with the camera's previous key frame."""

    camera: str
    record: FrameRecord
    previous_stamp: float | None  # the key frame it was compared with (None: first)
    seconds: float
    #: the key frame described (RGB, as the frame buffer stored it): the memory's thumbnail
    image: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def stamp(self) -> float:
        return self.record.stamp


@dataclass
class _Job:
    camera: str
    stamp: float
    image: np.ndarray
    previous: tuple[float, np.ndarray] | None  # the camera's last key frame
    keyframe: bool


class BackgroundDescriber:
    """See the module docstring; thread-safe ``submit``."""

    def __init__(
        self,
        perceiver: Perceiver,
        *,
        queue_size: int = 8,
        on_described: Callable[[KeyFrameNote], None] | None = None,
    ) -> None:
        self.perceiver = perceiver
        self.queue_size = queue_size
        self.on_described = on_described
        self._jobs: deque[_Job] = deque()
        self._last: dict[str, tuple[float, np.ndarray]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.described = 0
        self.dropped = 0
        self.failed = 0
        self.busy_sec = 0.0
        self._started = time.monotonic()
        self._recent: deque[float] = deque()  # completion times, for the rate
        self._thread = threading.Thread(target=self._work, name="streaming-perception",
                                        daemon=True)
        self._thread.start()

    def submit(self, camera: str, stamp: float, image: np.ndarray, keyframe: bool = True
               ) -> None:
        """A new stored frame of ``camera``; never blocks (a full queue drops its oldest job).

        A key frame is described alone and after the camera's previous key frame; any other
        stored frame only after the last key frame: it is the current view a question's window
        ends with, until the next frame replaces it.
        """
        with self._cond:
            previous = self._last.get(camera)
            if previous is not None and stamp <= previous[0]:  # a new timeline: start over
                previous = None
            if keyframe:
                self._last[camera] = (stamp, image)
            elif previous is None:
                return  # nothing to compare the view with yet
            if len(self._jobs) >= self.queue_size:
                self._jobs.popleft()
                self.dropped += 1
            self._jobs.append(_Job(camera, stamp, image, previous, keyframe))
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job = self._jobs.popleft()
            start = time.monotonic()
            try:
                record = self.perceiver.prefetch(job.previous[1] if job.previous else None,
                                                 job.image, alone=job.keyframe, stamp=job.stamp)
            except BackendError as exc:
                self.failed += 1
                log.warning("streaming perception of %.3f s failed: %s", job.stamp, exc)
                continue
            seconds = time.monotonic() - start
            with self._cond:
                self.described += 1
                self.busy_sec += seconds
                self._recent.append(time.monotonic())
            note = KeyFrameNote(job.camera, record, job.previous[0] if job.previous else None,
                                seconds, job.image)
            if job.keyframe and self.on_described is not None:
                try:
                    self.on_described(note)
                except Exception:  # a publishing hiccup must not stop the worker
                    log.exception("publishing a key-frame description failed")

    # -- diagnostics ---------------------------------------------------------------------

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)

    def rate(self, window_sec: float = 30.0) -> float:
        """Key frames described per second over the last ``window_sec``."""
        now = time.monotonic()
        with self._cond:
            while self._recent and now - self._recent[0] > window_sec:
                self._recent.popleft()
            span = min(window_sec, now - self._started)
            return len(self._recent) / span if span > 0 else 0.0

    def busy_fraction(self) -> float:
        """Share of the time since start the VLM spent on background descriptions."""
        elapsed = time.monotonic() - self._started
        return min(1.0, self.busy_sec / elapsed) if elapsed > 0 else 0.0

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5.0)

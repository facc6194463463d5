"""The memory as a running process serves it: one writer thread, a reader for questions, the
stats and the clear command. ROS-free: the all-in-one's query server and the command line
(``embodied-r memory``) both use it, so a question reads the same frames either way.

:class:`MemoryWriter` owns the one writable store of a database. Key frames arrive on the
threads that describe them; a bounded queue hands them to one writer thread, so a slow disk or
a server round trip never holds up perception, and a failed write is logged and counted: the
rows already stored stay, the process goes on.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from embodied_r_ros.core.config import Config, MemoryConfig
from embodied_r_ros.core.error_codes import BAD_TIME_PHRASE as QUERY_BAD_TIME_PHRASE
from embodied_r_ros.core.error_codes import MEMORY_UNAVAILABLE, NO_FRAMES
from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.pipeline import QueryError
from embodied_r_ros.core.poses import Pose, StampedPose
from embodied_r_ros.core.prompts import PromptSet, prompts_from
from embodied_r_ros.core.query_result import MemoryFrameUsed
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.streaming import KeyFrameNote
from embodied_r_ros.memory.errors import BAD_TIME_PHRASE, SpatialMemoryError
from embodied_r_ros.memory.factory import embedder_for, open_store, recorder_for, retriever_for
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.locate import Located, LocateRequest, locate
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.retrieval import Retriever, Selection
from embodied_r_ros.memory.store import MemoryStore

log = logging.getLogger(__name__)

#: the pose of a key frame at a stamp (the frame buffer's nearest-pose rule), None if unknown
PoseLookup = Callable[[float], Pose | None]


def query_error(err: SpatialMemoryError) -> QueryError:
    """A memory failure as a question's error: an unreadable time phrase is the asker's
    ``BAD_TIME_PHRASE``; every other code means the memory cannot be read
    (``MEMORY_UNAVAILABLE``), its own code kept at the start of the line."""
    if err.code == BAD_TIME_PHRASE:
        return QueryError(QUERY_BAD_TIME_PHRASE, err.args[0])
    return QueryError(MEMORY_UNAVAILABLE, str(err))


def location(cfg: MemoryConfig) -> str:
    """Where the memory is: the SQLite file, or the server's connection string."""
    return str(cfg.dsn) if cfg.backend == "postgres" else cfg.path


@dataclass(frozen=True)
class MemoryStats:
    """How much a memory holds (one robot's rows), and what this process wrote to it."""

    robot: str
    robots: list[str]
    rows: int
    first: float | None
    last: float | None
    size_bytes: int
    location: str
    recorded: int = 0
    failed: int = 0
    dropped: int = 0

    @property
    def span_sec(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first


def read_stats(store: MemoryStore, robot: str, where: str) -> MemoryStats:
    """The stats of ``robot``'s rows in ``store``; raises :class:`SpatialMemoryError`."""
    span = store.span(robot)
    return MemoryStats(robot, store.robots(), span.count, span.first, span.last,
                       store.size_bytes(), where)


def frames_used(selection: Selection) -> list[MemoryFrameUsed]:
    """The selected rows with their ages before the newest of them (the retrieval always
    includes the newest stored frames) and their reasons."""
    if not selection.rows:
        return []
    now = max(r.stamp for r in selection.rows)
    return [MemoryFrameUsed(stamp=r.stamp, age_sec=now - r.stamp, camera=r.camera,
                            reasons=selection.reasons.get(r.id, ()) if r.id is not None else (),
                            description=r.description)
            for r in selection.rows]


class MemoryReader:
    """Selects a question's frames from the memory and writes the reasoner's text; thread-safe
    (questions take turns: a selection costs milliseconds). The store is opened at the first
    question and again after a failure, so a memory created or repaired later is found."""

    def __init__(self, config: Config, prompts: PromptSet | None = None) -> None:
        self.config = config
        self.prompts = prompts or prompts_from(config.prompts)
        self._lock = threading.Lock()
        self._store: MemoryStore | None = None
        self._retriever: Retriever | None = None

    def _ready(self) -> Retriever:
        if self._retriever is None:
            store = open_store(self.config.memory)
            try:
                self._retriever = retriever_for(self.config, store, embedder_for(self.config))
            except BaseException:
                store.close()
                raise
            self._store = store
        return self._retriever

    def _drop(self) -> None:
        if self._store is not None:
            self._store.close()
        self._store = self._retriever = None

    def select(self, question: str, options: Sequence[str] = ()) -> Selection:
        """The frames for ``question``; raises :class:`SpatialMemoryError`."""
        with self._lock:
            try:
                return self._ready().select(self.config.memory.robot, question, options)
            except SpatialMemoryError as err:
                if err.code != BAD_TIME_PHRASE:
                    self._drop()
                raise

    def perception(self, question: str, options: Sequence[str],
                   live: StampedPose | None = None) -> tuple[str, list[MemoryFrameUsed]]:
        """The reasoner's user message and the frames it was written from, the named objects
        placed from ``live`` (the robot's pose at the ask) where given; raises
        :class:`QueryError` (``BAD_TIME_PHRASE``, ``MEMORY_UNAVAILABLE``, ``NO_FRAMES``)."""
        try:
            selection = self.select(question, options)
        except SpatialMemoryError as err:
            raise query_error(err) from None
        if not selection.rows:
            raise QueryError(NO_FRAMES, "; ".join(selection.notes) or "the memory is empty")
        record = selection.record(question, options, format_question(question, options),
                                  layout=self.config.perception.frame_layout, live=live)
        return render(record, self.prompts), frames_used(selection)

    def close(self) -> None:
        with self._lock:
            self._drop()


@dataclass
class _Job:
    note: KeyFrameNote
    image: np.ndarray | None
    pose_of: PoseLookup | None


class MemoryWriter:
    """The one writer of a memory (see the module notes). Opening raises
    :class:`SpatialMemoryError` (``WRITER_BUSY`` when another process writes it, ``DB_CORRUPT``
    for a damaged file, ...); after that no method raises but :meth:`clear`."""

    def __init__(self, config: Config, *, queue_size: int = 256) -> None:
        self.config = config
        self.robot = config.memory.robot
        self.location = location(config.memory)
        self.store = open_store(config.memory, writable=True)
        try:
            self.recorder = recorder_for(config, self.store, embedder_for(config))
        except BaseException:
            self.store.close()
            raise
        self.matcher = LabelMatcher(self.recorder.embedder)
        self.queue_size = queue_size
        self.failed = 0
        self.dropped = 0
        self.last_error = ""
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._io = threading.Lock()  # the store and recorder: one user at a time
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="memory-writer", daemon=True)
        self._thread.start()

    @property
    def recorded(self) -> int:
        return self.recorder.recorded

    def submit(self, note: KeyFrameNote, image: np.ndarray | None = None,
               pose_of: PoseLookup | None = None) -> None:
        """A described key frame to store; never blocks (a full queue drops its oldest). The
        pose is looked up when the row is written, so odometry arriving just after the frame
        still counts."""
        with self._cond:
            if self._closed:
                return
            if len(self._jobs) >= self.queue_size:
                self._jobs.popleft()
                self.dropped += 1
            self._jobs.append(_Job(note, image, pose_of))
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
                self._busy = True
            try:
                self._write(job)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, job: _Job) -> None:
        note = job.note
        try:
            pose = job.pose_of(note.stamp) if job.pose_of is not None else None
            with self._io:
                self.recorder.record_note(note, pose=pose,
                                          pose_source="odometry" if pose else None,
                                          image=job.image)
        except Exception as exc:  # a failed write costs its row, never the process
            self.failed += 1
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.error("memory: key frame %.3f s of %s not stored: %s", note.stamp,
                      note.camera, self.last_error)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until every submitted key frame is written (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._busy, timeout)

    def stats(self) -> MemoryStats:
        """Raises :class:`SpatialMemoryError` when the store cannot be read."""
        with self._io:
            s = read_stats(self.store, self.robot, self.location)
        return replace(s, recorded=self.recorded, failed=self.failed, dropped=self.dropped)

    def locate(self, request: LocateRequest) -> list[Located]:
        """The placed objects ``request`` names (:func:`~embodied_r_ros.memory.locate
        .locate`); raises :class:`SpatialMemoryError` when the store cannot be read."""
        with self._io:
            return locate(self.store, self.robot, request, self.matcher)

    def placements(self) -> list[Placement]:
        """This robot's placed objects as stored now. Raises :class:`SpatialMemoryError`."""
        with self._io:
            return self.store.placements([self.robot])

    def clear(self, before: float | None = None) -> tuple[int, int]:
        """Delete this robot's rows (those before ``before``): ``(deleted, rows left)``.
        Raises :class:`SpatialMemoryError`."""
        with self._io:
            self.recorder.flush()
            deleted = self.store.clear(self.robot, before)
            self.recorder.reload_placements()
            return deleted, self.store.span(self.robot).count

    def close(self, wait_sec: float = 10.0) -> None:
        """Write what is queued (up to ``wait_sec``), then release the store and its lock."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=wait_sec)
        with self._io:
            try:
                self.recorder.close()
            except Exception as exc:
                log.error("memory: pending embeddings not stored: %s", exc)
            finally:
                self.store.close()

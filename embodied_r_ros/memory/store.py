"""What the memory keeps of a key frame, and the one interface both databases implement.

:class:`MemoryStore` is the contract the SQLite and the PostgreSQL stores share (the same
contract tests run on both): one writer adds rows, any number of readers query them
concurrently, and the store keeps itself under ``memory.max_mb`` by pruning thumbnails first,
then the oldest rows. Rows are keyed by robot, so one server can hold a fleet. Beside the rows
each store keeps the objects the writer placed from them (:class:`~embodied_r_ros.memory
.placements.Placement`, one row per object), keyed by robot too.
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import numpy as np

from embodied_r_ros.core.perception_text import NOTHING_IN_VIEW
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory.errors import BAD_ROW, READ_ONLY, SpatialMemoryError
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.reading.legacy_text import observed_objects

#: where a row's pose came from: wheel/IMU odometry, or visual ego-motion integrated over time
PoseSource = Literal["odometry", "visual"]
POSE_SOURCES: tuple[str, ...] = ("odometry", "visual")
#: bumped when the tables change; a store refuses a database of another version, except that
#: its writer upgrades one of :data:`UPGRADABLE` in place (its rows keep their text)
SCHEMA_VERSION = 4
UPGRADABLE = (1, 2, 3)
#: how long a description may be; longer ones are refused, not cut silently
MAX_DESCRIPTION_CHARS = 8000
MAX_OBJECTS = 32
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$")
_TERM_RE = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class MemoryRow:
    """One key frame as the memory keeps it.

    ``description`` is the streaming (question-agnostic) perception's observation as text (a
    VLM's own words, or the geometric objects written out): what the full-text index and a
    person read. ``seen`` is the frame's record of objects and ``by_vlm`` whether a VLM
    described it; None for a row stored before the memory kept records, read then from its
    description. ``action`` is the VLM's action after the previous key frame of the same
    camera, as named then. ``pose`` is the camera pose at the frame where one was known; the
    motion between any two rows is computed from their poses when the text is written, so
    frames far apart still get one. ``objects`` are the names the full-text index searches.
    ``id`` is set by the store.
    """

    stamp: float
    description: str
    robot: str = "robot"
    camera: str = "camera"
    pose: Pose | None = None
    pose_source: PoseSource | None = None
    action: str | None = None
    objects: tuple[str, ...] = ()
    thumbnail: bytes | None = None
    id: int | None = None
    seen: tuple[SeenObject, ...] | None = None
    by_vlm: bool = True

    def frame_record(self) -> FrameRecord:
        """The row as a perception record (no motion: that is between two rows)."""
        if self.seen is None:  # stored before records: the description is all there is
            objects = observed_objects(self.description)
            by_vlm = not objects and self.description != NOTHING_IN_VIEW
        else:
            objects, by_vlm = self.seen, self.by_vlm
        return FrameRecord(self.stamp, pose=self.pose, pose_source=self.pose_source,
                           vlm_action=self.action, vlm_text=self.description if by_vlm else None,
                           objects=objects)


def seen_json(row: MemoryRow) -> str | None:
    """The ``seen`` column: the row's record of objects and who described it."""
    if row.seen is None:
        return None
    return json.dumps({"vlm": row.by_vlm, "objects": [o.to_dict() for o in row.seen]},
                      separators=(",", ":"))


def _seen_from_json(text: str | None) -> tuple[tuple[SeenObject, ...] | None, bool]:
    if not text:
        return None, True
    data = json.loads(text)
    return tuple(SeenObject.from_dict(o) for o in data.get("objects", ())), bool(data["vlm"])


@dataclass(frozen=True)
class Span:
    """How much one robot's memory holds: rows and the first and last stamps."""

    count: int
    first: float | None
    last: float | None


@dataclass(frozen=True)
class TextHit:
    """A row the full-text index matched; ``score``: higher is a better match."""

    id: int
    stamp: float
    score: float


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpatialMemoryError(BAD_ROW, f"{kind} name {name!r} must be 1-64 letters, digits or "
                                 "_.:/- (starting with a letter or digit)")
    return name


def check_row(row: MemoryRow) -> MemoryRow:
    """``row`` if it can be stored, else :class:`SpatialMemoryError` (``BAD_ROW``)."""
    check_name("robot", row.robot)
    check_name("camera", row.camera)
    if not isinstance(row.stamp, int | float) or not math.isfinite(row.stamp):
        raise SpatialMemoryError(BAD_ROW, f"stamp must be a finite number, got {row.stamp!r}")
    if not isinstance(row.description, str) or len(row.description) > MAX_DESCRIPTION_CHARS:
        raise SpatialMemoryError(BAD_ROW, f"description must be text of at most "
                                 f"{MAX_DESCRIPTION_CHARS} characters")
    if row.pose is not None:
        values = (row.pose.x, row.pose.y, row.pose.z, row.pose.yaw_deg, row.pose.pitch_deg)
        if not all(math.isfinite(v) for v in values):
            raise SpatialMemoryError(BAD_ROW, f"pose at {row.stamp} has a non-finite value")
        if row.pose_source not in POSE_SOURCES:
            raise SpatialMemoryError(BAD_ROW, f"a pose needs its source, one of "
                                     f"{', '.join(POSE_SOURCES)}; got {row.pose_source!r}")
    if len(row.objects) > MAX_OBJECTS or not all(isinstance(o, str) for o in row.objects):
        raise SpatialMemoryError(BAD_ROW, f"objects must be at most {MAX_OBJECTS} strings")
    if row.seen is not None and (len(row.seen) > MAX_OBJECTS or not all(
            isinstance(o, SeenObject) for o in row.seen)):
        raise SpatialMemoryError(BAD_ROW, f"seen must be at most {MAX_OBJECTS} objects")
    if row.thumbnail is not None and not isinstance(row.thumbnail, bytes):
        raise SpatialMemoryError(BAD_ROW, "thumbnail must be JPEG bytes")
    return row


def search_terms(terms: Sequence[str]) -> list[str]:
    """Lower-case alphanumeric words of ``terms``, in order, once each: the only text that
    reaches a full-text query, so no query syntax can be injected."""
    out: list[str] = []
    for term in terms:
        for word in _TERM_RE.findall(term.lower()):
            if word not in out:
                out.append(word)
    return out


def joined_objects(objects: Sequence[str]) -> str:
    return "; ".join(o.strip() for o in objects if o.strip())


def split_objects(text: str | None) -> tuple[str, ...]:
    return tuple(o for o in (text or "").split("; ") if o)


#: a row's columns in the order both stores select them (``f.``: the frames table aliased)
COLUMNS = ("id, robot, camera, stamp, x, y, z, yaw_deg, pitch_deg, pose_source, action, "
           "description, objects, seen")
F_COLUMNS = ", ".join(f"f.{c}" for c in COLUMNS.split(", "))


def row_from_columns(values: Sequence[Any], thumbnail: bytes | memoryview | None = None
                     ) -> MemoryRow:
    """A row selected as :data:`COLUMNS`, with its thumbnail when selected too."""
    (row_id, robot, camera, stamp, x, y, z, yaw, pitch, source, action, description,
     objects, seen) = values
    pose = Pose(x, y, z, yaw, pitch) if x is not None else None
    objs, by_vlm = _seen_from_json(seen)
    return MemoryRow(stamp=stamp, description=description, robot=robot, camera=camera,
                     pose=pose, pose_source=source, action=action,
                     objects=split_objects(objects),
                     thumbnail=bytes(thumbnail) if thumbnail is not None else None, id=row_id,
                     seen=objs, by_vlm=by_vlm)


class MemoryStore(ABC):
    """The memory's database: rows of key frames, a full-text index over their descriptions and
    objects, and (optionally) one text embedding a row for similarity search.

    Open a store once for writing (one writer: a second raises ``WRITER_BUSY``) and as many
    times as wanted for reading; a store object is used from one thread at a time (readers in
    other threads open their own). Every method raises :class:`SpatialMemoryError` on a
    database failure.
    """

    writable: bool

    # -- writing ---------------------------------------------------------------------------

    @abstractmethod
    def add(self, row: MemoryRow, vector: np.ndarray | None = None, model: str = "") -> int:
        """Store ``row`` (and its text embedding from ``model``), durable when this returns;
        then prune to the bound. Returns the row's id. A row whose robot, camera and stamp are
        stored already is replaced."""

    @abstractmethod
    def add_vectors(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        """Text embeddings of stored rows (one row of ``vectors`` per id)."""

    @abstractmethod
    def missing_vectors(self, robot: str, model: str, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` rows of ``robot`` without an embedding from ``model``, newest first
        (those a crash left unembedded)."""

    @abstractmethod
    def prune(self) -> int:
        """Thumbnails first, then the oldest rows, until the store is under its bound; returns
        how many rows were deleted."""

    @abstractmethod
    def clear(self, robot: str, before: float | None = None) -> int:
        """Delete ``robot``'s rows (only those stamped before ``before`` when given), with
        their thumbnails and vectors, in one transaction; returns how many rows went. An
        operator's command (the memory's clear service): nothing else deletes rows but the
        bound."""

    @abstractmethod
    def save_placements(self, robot: str, placements: Sequence[Placement],
                        gone: Sequence[int], through_id: int) -> None:
        """Store ``robot``'s changed ``placements`` (replacing those of the same id), delete
        those of ids ``gone`` (merged into others), and note that every row up to id
        ``through_id`` is placed: one transaction."""

    # -- reading ---------------------------------------------------------------------------

    @abstractmethod
    def placements(self, robots: Sequence[str] | None = None, rays: bool = False
                   ) -> list[Placement]:
        """The placements of ``robots`` (None: every robot's), by robot and id; ``rays``:
        with their rays (the writer's, to place more), else without (a reader's)."""

    @abstractmethod
    def placed_through(self, robot: str) -> int:
        """The newest row id of ``robot`` whose objects its placements hold (0: none)."""

    @abstractmethod
    def get(self, ids: Sequence[int], thumbnails: bool = False) -> list[MemoryRow]:
        """The rows of ``ids`` that still exist, oldest first."""

    @abstractmethod
    def latest(self, robot: str, n: int) -> list[MemoryRow]:
        """The newest ``n`` rows of ``robot``, oldest first."""

    @abstractmethod
    def stamps(self, robot: str, start: float, end: float) -> list[tuple[int, float]]:
        """``(id, stamp)`` of every row of ``robot`` with ``start <= stamp <= end``, by stamp."""

    @abstractmethod
    def nearest(self, robot: str, stamp: float, n: int) -> list[tuple[int, float]]:
        """``(id, stamp)`` of the ``n`` rows of ``robot`` nearest to ``stamp`` in time."""

    @abstractmethod
    def previous_ids(self, ids: Sequence[int]) -> dict[int, int | None]:
        """For each of ``ids``, the id of the row stored just before it (same robot and
        camera), None for a camera's first row."""

    @abstractmethod
    def search_text(self, robot: str, terms: Sequence[str], limit: int,
                    start: float | None = None, end: float | None = None) -> list[TextHit]:
        """Rows of ``robot`` whose description or objects match any of ``terms`` (stemmed),
        best first, optionally within ``[start, end]``."""

    @abstractmethod
    def vectors(self, robot: str, model: str, after_id: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, stamps, matrix)`` of the embeddings from ``model`` of rows of ``robot`` with
        an id above ``after_id``, by id (for an in-memory index that grows as rows come)."""

    @abstractmethod
    def span(self, robot: str) -> Span:
        """How many rows ``robot`` has and their first and last stamps."""

    @abstractmethod
    def bounds(self, robot: str) -> tuple[float, float] | None:
        """The first and last stamps of ``robot``'s rows (None: it has none); unlike
        :meth:`span` it does not count the rows."""

    @abstractmethod
    def robots(self) -> list[str]:
        """The robots with rows in this store."""

    @abstractmethod
    def thumbnail(self, row_id: int) -> bytes | None:
        """The row's JPEG thumbnail, None when it has none (or it was pruned)."""

    @abstractmethod
    def size_bytes(self) -> int:
        """The bytes the bound counts (each store says what it counts)."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection (and the writer's lock)."""

    # -- shared ----------------------------------------------------------------------------

    def require_writable(self) -> None:
        if not self.writable:
            raise SpatialMemoryError(READ_ONLY, "this memory store was opened for reading")

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def vector_blob(vector: np.ndarray) -> bytes:
    """An embedding as stored: float16, little-endian (half the bytes; cosine unchanged to
    about 1e-3)."""
    return np.asarray(vector, dtype="<f2").tobytes()


def vectors_from_blobs(blobs: Sequence[bytes]) -> np.ndarray:
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f2").reshape(len(blobs), -1).astype(
        np.float32)

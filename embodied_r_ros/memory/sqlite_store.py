"""The embedded default: one SQLite file in WAL mode, an FTS5 index over the descriptions.

Why these settings:

* **WAL** lets readers run while the one writer writes, and each ``add`` is one transaction:
  after a crash (even ``kill -9`` mid-write) the file opens with every committed row; only the
  row in flight is lost. ``synchronous=NORMAL`` keeps that for a process crash; a power cut may
  also lose the last commits before a checkpoint, never the file's consistency.
* **One writer** holds an advisory lock on ``<file>-writer.lock`` (released by the kernel when
  the process dies, so a crashed writer never blocks its restart).
* **The bound** counts the pages in use (file pages minus free pages) against ``max_mb``; the
  file is created with incremental auto-vacuum, so the pages pruning frees are given back to
  the file system, not kept as a high-water mark. The WAL beside it is truncated to 4 MiB.
* **Refusing, never repairing**: a file that is not a memory database, or is damaged, raises
  ``DB_CORRUPT`` and is left exactly as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from embodied_r_ros.memory.errors import (
    DB_CORRUPT,
    DB_MISSING,
    DB_UNAVAILABLE,
    SCHEMA_MISMATCH,
    WRITER_BUSY,
    SpatialMemoryError,
)
from embodied_r_ros.memory.placement_table import PlacementTable, add_votes, ddl
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.store import (
    COLUMNS,
    F_COLUMNS,
    SCHEMA_VERSION,
    UPGRADABLE,
    MemoryRow,
    MemoryStore,
    Span,
    TextHit,
    check_name,
    check_row,
    joined_objects,
    row_from_columns,
    search_terms,
    seen_json,
    vector_blob,
    vectors_from_blobs,
)

log = logging.getLogger(__name__)

_HEADER = b"SQLite format 3\x00"
_PLACEMENTS = ddl("placements", "REAL", "INTEGER", "INTEGER")  # placed objects (schema 3, votes 4)
_TABLE = PlacementTable("placements", "meta", "?")
_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE frames (id INTEGER PRIMARY KEY, robot TEXT NOT NULL, camera TEXT NOT NULL, "
    "stamp REAL NOT NULL, x REAL, y REAL, z REAL, yaw_deg REAL, pitch_deg REAL, "
    "pose_source TEXT, action TEXT, description TEXT NOT NULL, objects TEXT NOT NULL, "
    "seen TEXT, UNIQUE (robot, camera, stamp))",
    "CREATE INDEX frames_robot_stamp ON frames (robot, stamp)",
    "CREATE INDEX frames_stamp ON frames (stamp)",
    "CREATE TABLE thumbnails (frame_id INTEGER PRIMARY KEY, jpeg BLOB NOT NULL)",
    "CREATE TABLE vectors (frame_id INTEGER PRIMARY KEY, model TEXT NOT NULL, "
    "vec BLOB NOT NULL)",
    "CREATE VIRTUAL TABLE frames_fts USING fts5(description, objects, content='frames', "
    "content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER frames_added AFTER INSERT ON frames BEGIN "
    "INSERT INTO frames_fts (rowid, description, objects) "
    "VALUES (new.id, new.description, new.objects); END",
    "CREATE TRIGGER frames_deleted AFTER DELETE ON frames BEGIN "
    "INSERT INTO frames_fts (frames_fts, rowid, description, objects) "
    "VALUES ('delete', old.id, old.description, old.objects); "
    "DELETE FROM thumbnails WHERE frame_id = old.id; "
    "DELETE FROM vectors WHERE frame_id = old.id; END",
    *_PLACEMENTS,
)
#: at most this many rows deleted per step of pruning (each step is one transaction)
_PRUNE_STEP = 256
#: pruning goes down to this share of the bound, so it does not run on every add
_PRUNE_TO = 0.9
_MAX_PARAMS = 500
#: matches of a search ranked at most (the newest, where a word is in many rows)
_RANKED = 4000
#: page cache of a connection: the indexes of ten hours of memory stay in it
_CACHE_KIB = 32 * 1024


def _db_error(exc: sqlite3.Error, path: Path) -> SpatialMemoryError:
    text = str(exc)
    if isinstance(exc, sqlite3.DatabaseError) and any(
            s in text for s in ("not a database", "malformed", "corrupt")):
        return SpatialMemoryError(DB_CORRUPT, f"memory database {path} is damaged ({text}); "
                                  "it was left as it is")
    if "locked" in text or "busy" in text:
        return SpatialMemoryError(WRITER_BUSY, f"memory database {path} is locked ({text})")
    return SpatialMemoryError(DB_UNAVAILABLE, f"memory database {path}: {text}")


def _step(over: int, page: int) -> int:
    """How many thumbnails or rows one pruning step deletes: at least a page's worth of the
    bytes still over the bound, each freeing at most about a page."""
    return max(1, min(_PRUNE_STEP, -(-over // page)))


class SqliteMemoryStore(MemoryStore):
    """A memory in one SQLite file (see the module notes). ``writable`` opens it for the one
    writer, creating it where missing; a reader needs an existing file (``DB_MISSING``)."""

    def __init__(self, path: str | Path, *, writable: bool = False, max_mb: float = 1024.0,
                 busy_timeout_s: float = 5.0) -> None:
        self.path = Path(path).expanduser()
        self.writable = writable
        self.max_bytes = int(max_mb * 2**20)
        self._lock = threading.RLock()
        self._lock_file: IO[bytes] | None = None
        self._closed = False
        if writable:
            self._take_writer_lock()
        elif not self.path.is_file():
            raise SpatialMemoryError(DB_MISSING, f"no memory database at {self.path}")
        try:
            self._check_header()
            self._conn = self._connect(busy_timeout_s)
        except BaseException:
            self._release_writer_lock()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _take_writer_lock(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path.with_name(self.path.name + "-writer.lock"), "ab")
        except OSError as exc:
            raise SpatialMemoryError(DB_UNAVAILABLE, f"cannot create {self.path}: "
                                     f"{exc.strerror}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise SpatialMemoryError(WRITER_BUSY, f"another process writes {self.path}; a "
                                     "memory has one writer (open it for reading)") from None
        self._lock_file = handle

    def _release_writer_lock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing drops the flock
            self._lock_file = None

    def _check_header(self) -> None:
        """Refuse a file that is not SQLite before SQLite gets to touch it."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(_HEADER))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SpatialMemoryError(DB_UNAVAILABLE, f"cannot read {self.path}: "
                                     f"{exc.strerror}") from None
        if head and head != _HEADER:
            raise SpatialMemoryError(DB_CORRUPT, f"{self.path} is not an SQLite database; it "
                                     "was left as it is")

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        target = str(self.path) if self.writable else f"file:{self.path}?mode=ro"
        try:
            conn = sqlite3.connect(target, uri=not self.writable, timeout=busy_timeout_s,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _db_error(exc, self.path) from None
        try:
            self._prepare(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise _db_error(exc, self.path) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _upgrade(self, conn: sqlite3.Connection, found: int | None) -> None:
        """Schema 1 to 2: the record of objects beside each description (stored rows keep
        theirs as text, read from it); 2 to 3: the placements (their writer fills them); 3 to
        4: their label votes."""
        conn.execute("BEGIN IMMEDIATE")
        if found == 1:
            conn.execute("ALTER TABLE frames ADD COLUMN seen TEXT")
        if found == 3:
            conn.execute(add_votes("placements"))
        for statement in _PLACEMENTS:
            conn.execute(statement)
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
        log.info("upgraded the memory %s from schema %s to %d", self.path, found, SCHEMA_VERSION)

    def _prepare(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" in tables:
            version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            found = int(version[0]) if version is not None else None
            if self.writable and found in UPGRADABLE:
                self._upgrade(conn, found)
            elif found != SCHEMA_VERSION:
                hint = (": open it once for writing (the robot's memory writer) to upgrade it"
                        if found in UPGRADABLE else "; it was left as it is")
                raise SpatialMemoryError(SCHEMA_MISMATCH, f"{self.path} has memory schema "
                                         f"{found if found is not None else 'unknown'}, this "
                                         f"version reads {SCHEMA_VERSION}{hint}")
        elif tables:
            raise SpatialMemoryError(DB_CORRUPT, f"{self.path} is an SQLite database but not a "
                                     "memory database; it was left as it is")
        elif not self.writable:
            raise SpatialMemoryError(DB_MISSING, f"{self.path} holds no memory yet")
        if self.writable:
            if not tables:
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # before the first table
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA journal_size_limit={4 * 2**20}")
            if not tables:
                conn.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
                conn.execute("COMMIT")
                log.info("created memory database %s", self.path)
        else:
            conn.execute("PRAGMA query_only=ON")
        conn.execute(f"PRAGMA cache_size={-_CACHE_KIB}")

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise SpatialMemoryError(DB_UNAVAILABLE, f"memory store {self.path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise _db_error(exc, self.path) from None

    # -- writing ---------------------------------------------------------------------------

    def add(self, row: MemoryRow, vector: np.ndarray | None = None, model: str = "") -> int:
        self.require_writable()
        check_row(row)
        pose = row.pose
        values = (row.robot, row.camera, float(row.stamp),
                  *((pose.x, pose.y, pose.z, pose.yaw_deg, pose.pitch_deg) if pose
                    else (None,) * 5),
                  row.pose_source if pose else None, row.action, row.description,
                  joined_objects(row.objects), seen_json(row))
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM frames WHERE robot=? AND camera=? AND stamp=?", values[:3])
            row_id = int(db.execute(
                f"INSERT INTO frames ({COLUMNS.removeprefix('id, ')}) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", values).lastrowid or 0)
            if row.thumbnail:
                db.execute("INSERT INTO thumbnails VALUES (?, ?)", (row_id, row.thumbnail))
            if vector is not None:
                db.execute("INSERT INTO vectors VALUES (?, ?, ?)",
                           (row_id, model, vector_blob(vector)))
            db.execute("COMMIT")
        if self.size_bytes() > self.max_bytes:
            self.prune()
        return row_id

    def add_vectors(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        self.require_writable()
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO vectors SELECT id, ?, ? FROM frames "
                           "WHERE id = ?",
                           [(model, vector_blob(v), int(i)) for i, v in zip(ids, vectors,
                                                                            strict=True)])
            db.execute("COMMIT")

    def missing_vectors(self, robot: str, model: str, limit: int) -> list[MemoryRow]:
        with self._db() as db:
            rows = db.execute(
                f"SELECT {COLUMNS} FROM frames f WHERE robot=? AND NOT EXISTS (SELECT 1 FROM "
                "vectors v WHERE v.frame_id=f.id AND v.model=?) ORDER BY stamp DESC LIMIT ?",
                (robot, model, limit)).fetchall()
        return [row_from_columns(r) for r in rows]

    def prune(self) -> int:
        self.require_writable()
        if self.size_bytes() <= self.max_bytes:
            return 0
        target = int(self.max_bytes * _PRUNE_TO)
        thumbs = deleted = 0
        with self._db() as db:
            page = db.execute("PRAGMA page_size").fetchone()[0]
            while (over := self.size_bytes() - target) > 0:
                n = db.execute("DELETE FROM thumbnails WHERE frame_id IN (SELECT frame_id FROM "
                               "thumbnails ORDER BY frame_id LIMIT ?)", (_step(over, page),)
                               ).rowcount
                if n <= 0:
                    break
                thumbs += n
            while (over := self.size_bytes() - target) > 0:
                n = db.execute("DELETE FROM frames WHERE id IN (SELECT id FROM frames "
                               "ORDER BY stamp LIMIT ?)", (_step(over, page),)).rowcount
                if n <= 0:
                    break
                deleted += n
            _TABLE.prune(db.cursor(), "frames")
            # give the freed pages back to the file system; Python's sqlite3 steps this pragma
            # once, and one step frees one page
            db.execute("BEGIN IMMEDIATE")
            for _ in range(db.execute("PRAGMA freelist_count").fetchone()[0]):
                db.execute("PRAGMA incremental_vacuum(1)")
            db.execute("COMMIT")
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        log.info("memory %s over %.1f MB: pruned %d thumbnails and %d oldest rows", self.path,
                 self.max_bytes / 2**20, thumbs, deleted)
        return deleted

    def clear(self, robot: str, before: float | None = None) -> int:
        self.require_writable()
        check_name("robot", robot)
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")  # the delete trigger drops thumbnails and vectors
            end = float("inf") if before is None else float(before)
            n = db.execute("DELETE FROM frames WHERE robot=? AND stamp<?", (robot, end)).rowcount
            _TABLE.forget(db.cursor(), "frames", robot, end)
            db.execute("COMMIT")
        log.info("memory %s: cleared %d rows of %s", self.path, n, robot)
        return int(n)

    def save_placements(self, robot: str, placements: Sequence[Placement],
                        gone: Sequence[int], through_id: int) -> None:
        self.require_writable()
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            _TABLE.save(db.cursor(), robot, placements, gone, through_id)
            db.execute("COMMIT")

    # -- reading ---------------------------------------------------------------------------

    def placements(self, robots: Sequence[str] | None = None, rays: bool = False
                   ) -> list[Placement]:
        with self._db() as db:
            return _TABLE.read(db.cursor(), robots, rays)

    def placed_through(self, robot: str) -> int:
        with self._db() as db:
            return _TABLE.placed_through(db.cursor(), robot)

    def get(self, ids: Sequence[int], thumbnails: bool = False) -> list[MemoryRow]:
        out: list[MemoryRow] = []
        wanted = sorted({int(i) for i in ids})
        with self._db() as db:
            for k in range(0, len(wanted), _MAX_PARAMS):
                chunk = wanted[k:k + _MAX_PARAMS]
                marks = ",".join("?" * len(chunk))
                if thumbnails:
                    rows = db.execute(
                        f"SELECT {F_COLUMNS}, t.jpeg FROM frames f "
                        f"LEFT JOIN thumbnails t ON t.frame_id=f.id WHERE f.id IN ({marks})",
                        chunk).fetchall()
                    out += [row_from_columns(r[:-1], r[-1]) for r in rows]
                else:
                    rows = db.execute(f"SELECT {COLUMNS} FROM frames WHERE id IN ({marks})",
                                      chunk).fetchall()
                    out += [row_from_columns(r) for r in rows]
        return sorted(out, key=lambda r: (r.stamp, r.id or 0))

    def latest(self, robot: str, n: int) -> list[MemoryRow]:
        with self._db() as db:
            rows = db.execute(f"SELECT {COLUMNS} FROM frames WHERE robot=? "
                              "ORDER BY stamp DESC LIMIT ?", (robot, max(n, 0))).fetchall()
        return [row_from_columns(r) for r in reversed(rows)]

    def stamps(self, robot: str, start: float, end: float) -> list[tuple[int, float]]:
        with self._db() as db:
            return [(int(i), float(s)) for i, s in db.execute(
                "SELECT id, stamp FROM frames WHERE robot=? AND stamp BETWEEN ? AND ? "
                "ORDER BY stamp", (robot, start, end))]

    def nearest(self, robot: str, stamp: float, n: int) -> list[tuple[int, float]]:
        with self._db() as db:
            before = db.execute("SELECT id, stamp FROM frames WHERE robot=? AND stamp<=? "
                                "ORDER BY stamp DESC LIMIT ?", (robot, stamp, n)).fetchall()
            after = db.execute("SELECT id, stamp FROM frames WHERE robot=? AND stamp>? "
                               "ORDER BY stamp LIMIT ?", (robot, stamp, n)).fetchall()
        both = sorted(before + after, key=lambda r: abs(r[1] - stamp))[:n]
        return sorted((int(i), float(s)) for i, s in both)

    def previous_ids(self, ids: Sequence[int]) -> dict[int, int | None]:
        wanted = sorted({int(i) for i in ids})
        out: dict[int, int | None] = {}
        with self._db() as db:
            for k in range(0, len(wanted), _MAX_PARAMS):
                chunk = wanted[k:k + _MAX_PARAMS]
                out.update(db.execute(
                    "SELECT f.id, (SELECT p.id FROM frames p WHERE p.robot=f.robot AND "
                    "p.camera=f.camera AND p.stamp<f.stamp ORDER BY p.stamp DESC LIMIT 1) "
                    f"FROM frames f WHERE f.id IN ({','.join('?' * len(chunk))})", chunk))
        return out

    def search_text(self, robot: str, terms: Sequence[str], limit: int,
                    start: float | None = None, end: float | None = None) -> list[TextHit]:
        words = search_terms(terms)
        if not words or limit <= 0:
            return []
        query = " OR ".join(f'"{w}"' for w in words)
        lo = -float("inf") if start is None else start
        hi = float("inf") if end is None else end
        with self._db() as db:
            # bm25 is computed for every match: bound the matches by rowid first, to the rows
            # of the time range, or to the newest _RANKED matches of a common word
            if start is not None or end is not None:
                first, last = db.execute("SELECT min(id), max(id) FROM frames WHERE robot=? "
                                         "AND stamp BETWEEN ? AND ?", (robot, lo, hi)).fetchone()
                if first is None:
                    return []
            else:
                cut = db.execute("SELECT rowid FROM frames_fts WHERE frames_fts MATCH ? ORDER BY "
                                 "rowid DESC LIMIT 1 OFFSET ?", (query, _RANKED - 1)).fetchone()
                first, last = (cut[0] if cut else 0), 2**62
            rows = db.execute(
                "SELECT f.id, f.stamp, bm25(frames_fts) FROM frames_fts JOIN frames f "
                "ON f.id = frames_fts.rowid WHERE frames_fts MATCH ? AND frames_fts.rowid "
                "BETWEEN ? AND ? AND f.robot=? AND f.stamp BETWEEN ? AND ? "
                "ORDER BY bm25(frames_fts) LIMIT ?",
                (query, first, last, robot, lo, hi, limit)).fetchall()
        return [TextHit(int(i), float(s), -float(score)) for i, s, score in rows]

    def vectors(self, robot: str, model: str, after_id: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with self._db() as db:
            # CROSS JOIN keeps vectors the outer loop: a range of its primary key, not a scan
            # of every row of the robot
            rows = db.execute("SELECT v.frame_id, f.stamp, v.vec FROM vectors v CROSS JOIN "
                              "frames f ON f.id = v.frame_id WHERE v.frame_id>? AND v.model=? "
                              "AND f.robot=? ORDER BY v.frame_id",
                              (after_id, model, robot)).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        stamps = np.array([r[1] for r in rows], dtype=np.float64)
        return ids, stamps, vectors_from_blobs([r[2] for r in rows])

    def span(self, robot: str) -> Span:
        check_name("robot", robot)
        with self._db() as db:
            count, first, last = db.execute("SELECT count(*), min(stamp), max(stamp) FROM "
                                            "frames WHERE robot=?", (robot,)).fetchone()
        return Span(int(count), first, last)

    def bounds(self, robot: str) -> tuple[float, float] | None:
        with self._db() as db:  # two index probes; min and max in one query scan the rows
            first = db.execute("SELECT stamp FROM frames WHERE robot=? ORDER BY stamp LIMIT 1",
                               (robot,)).fetchone()
            last = db.execute("SELECT stamp FROM frames WHERE robot=? ORDER BY stamp DESC "
                              "LIMIT 1", (robot,)).fetchone()
        return None if first is None or last is None else (float(first[0]), float(last[0]))

    def robots(self) -> list[str]:
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT DISTINCT robot FROM frames ORDER BY robot")]

    def thumbnail(self, row_id: int) -> bytes | None:
        with self._db() as db:
            hit = db.execute("SELECT jpeg FROM thumbnails WHERE frame_id=?",
                             (int(row_id),)).fetchone()
        return bytes(hit[0]) if hit else None

    def size_bytes(self) -> int:
        """Bytes of the file's pages in use (its size less the free pages)."""
        with self._db() as db:
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            free = db.execute("PRAGMA freelist_count").fetchone()[0]
            size = db.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def integrity_check(self) -> list[str]:
        """SQLite's own check of every page (reads the whole file): ``["ok"]`` when sound."""
        with self._db() as db:
            return [r[0] for r in db.execute("PRAGMA integrity_check")]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._conn.close()
            finally:
                self._release_writer_lock()

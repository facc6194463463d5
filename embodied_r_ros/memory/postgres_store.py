"""The fleet store: many robots writing their memories to one PostgreSQL server.

Rows are keyed by robot; each robot has one writer, held by a session advisory lock the server
drops when the writer's connection dies (a crashed robot's restart is never blocked). Full-text
search is PostgreSQL's own (a stored ``tsvector`` with a GIN index, English stemming, as FTS5's
porter stemmer on SQLite); embeddings are stored as float16 bytes and searched in memory
(:mod:`~embodied_r_ros.memory.vectors`), since pgvector is not packaged here.

The bound (``memory.max_mb``) is each robot's: its rows' stored bytes (text, an estimate of its
index entries, thumbnails, vectors), counted by the writer as it adds and prunes; its placements
(one small row per object, dropped with the rows they were placed from) are not counted. The
server's files are not shrunk: autovacuum makes the space of pruned rows reusable.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psycopg

from embodied_r_ros.memory.errors import (
    BAD_ROW,
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

#: first key of every advisory lock this layer takes (the second: 0 for the schema, else the
#: robot's name hashed)
_LOCK_SPACE = 7261
#: bytes a row costs besides its text, and an index entry besides its payload (estimates)
_ROW_OVERHEAD = 120
_ENTRY_OVERHEAD = 40
_PLACEMENTS = ddl("memory_placements", "double precision", "bigint", "boolean")  # schema 3, votes 4
_TABLE = PlacementTable("memory_placements", "memory_meta", "%s")
_SCHEMA = (
    "CREATE TABLE memory_meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE memory_frames (id bigserial PRIMARY KEY, robot text NOT NULL, "
    "camera text NOT NULL, stamp double precision NOT NULL, x double precision, "
    "y double precision, z double precision, yaw_deg double precision, "
    "pitch_deg double precision, pose_source text, action text, description text NOT NULL, "
    "objects text NOT NULL, seen text, nbytes integer NOT NULL, "
    "tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', description || ' ' || objects)) "
    "STORED, UNIQUE (robot, camera, stamp))",
    "CREATE INDEX memory_frames_robot_stamp ON memory_frames (robot, stamp)",
    "CREATE INDEX memory_frames_tsv ON memory_frames USING gin (tsv)",
    "CREATE TABLE memory_thumbnails (frame_id bigint PRIMARY KEY REFERENCES memory_frames (id) "
    "ON DELETE CASCADE, robot text NOT NULL, jpeg bytea NOT NULL)",
    "CREATE INDEX memory_thumbnails_robot ON memory_thumbnails (robot, frame_id)",
    "CREATE TABLE memory_vectors (frame_id bigint PRIMARY KEY REFERENCES memory_frames (id) "
    "ON DELETE CASCADE, robot text NOT NULL, model text NOT NULL, vec bytea NOT NULL)",
    "CREATE INDEX memory_vectors_robot ON memory_vectors (robot, model, frame_id)",
    *_PLACEMENTS,
)
_PRUNE_STEP = 64
_PRUNE_TO = 0.9


def _db_error(exc: psycopg.Error, where: str) -> SpatialMemoryError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, psycopg.errors.DataCorrupted | psycopg.errors.IndexCorrupted):
        return SpatialMemoryError(DB_CORRUPT, f"memory on {where} is damaged: {text}")
    return SpatialMemoryError(DB_UNAVAILABLE, f"memory server {where}: {text}")


def _row_bytes(row: MemoryRow) -> int:
    text = (len(row.description.encode()) + len(joined_objects(row.objects).encode())
            + len((seen_json(row) or "").encode()) // 2)
    return _ROW_OVERHEAD + 2 * text + len((row.action or "").encode())


class PostgresMemoryStore(MemoryStore):
    """A fleet's memory on a PostgreSQL server (see the module notes). ``robot`` is the robot
    this store writes for (``writable``); a reader reads any robot."""

    def __init__(self, dsn: str, *, robot: str = "robot", writable: bool = False,
                 max_mb: float = 1024.0, connect_timeout_s: float = 10.0) -> None:
        self.robot = check_name("robot", robot)
        self.writable = writable
        self.max_bytes = int(max_mb * 2**20)
        self._where = self._describe(dsn)
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._conn = psycopg.connect(dsn, autocommit=True,
                                         connect_timeout=max(1, round(connect_timeout_s)))
        except psycopg.Error as exc:
            raise _db_error(exc, self._where) from None
        try:
            self._prepare()
            self._bytes = self._count_bytes() if writable else 0
        except BaseException:
            self._conn.close()
            raise

    @staticmethod
    def _describe(dsn: str) -> str:
        try:
            info = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error:
            return "(a bad connection string)"
        return f"{info.get('host', 'localhost')}/{info.get('dbname', '')}"

    # -- opening ---------------------------------------------------------------------------

    def _prepare(self) -> None:
        with self._db() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_SPACE,))
            exists = conn.execute("SELECT to_regclass('memory_meta') IS NOT NULL").fetchone()
            if exists and exists[0]:
                version = conn.execute(
                    "SELECT value FROM memory_meta WHERE key='schema_version'").fetchone()
                found = int(version[0]) if version is not None else None
                if self.writable and found in UPGRADABLE:
                    # schema 1 to 2: the record of objects beside each description; 2 to 3:
                    # the placements (each robot's writer places its stored rows at start);
                    # 3 to 4: their label votes
                    if found == 1:
                        conn.execute("ALTER TABLE memory_frames ADD COLUMN seen text")
                    if found == 3:
                        conn.execute(add_votes("memory_placements"))
                    for statement in _PLACEMENTS:
                        conn.execute(statement)
                    conn.execute("UPDATE memory_meta SET value=%s WHERE key='schema_version'",
                                 (str(SCHEMA_VERSION),))
                    log.info("upgraded the memory on %s from schema %s to %d", self._where,
                             found, SCHEMA_VERSION)
                elif found != SCHEMA_VERSION:
                    hint = (": open it once for writing (a robot's memory writer) to upgrade it"
                            if found in UPGRADABLE else "")
                    raise SpatialMemoryError(SCHEMA_MISMATCH, f"memory on {self._where} has "
                                             f"schema {found if found is not None else 'unknown'}"
                                             f", this version reads {SCHEMA_VERSION}{hint}")
            elif self.writable:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("INSERT INTO memory_meta VALUES ('schema_version', %s)",
                             (str(SCHEMA_VERSION),))
                log.info("created the memory tables on %s", self._where)
            else:
                raise SpatialMemoryError(DB_MISSING, f"{self._where} holds no memory yet")
        if self.writable:
            with self._db() as conn:
                got = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))",
                                   (_LOCK_SPACE, self.robot)).fetchone()
            if not got or not got[0]:
                raise SpatialMemoryError(WRITER_BUSY, f"another process writes the memory of "
                                         f"{self.robot} on {self._where}; a robot has one "
                                         "writer (open it for reading)")

    @contextlib.contextmanager
    def _db(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._closed:
                raise SpatialMemoryError(DB_UNAVAILABLE, f"memory store {self._where} is closed")
            try:
                yield self._conn
            except psycopg.Error as exc:
                raise _db_error(exc, self._where) from None

    def _count_bytes(self) -> int:
        with self._db() as conn:
            got = conn.execute(
                "SELECT (SELECT coalesce(sum(nbytes), 0) FROM memory_frames WHERE robot=%(r)s) "
                f"+ (SELECT coalesce(sum(octet_length(jpeg) + {_ENTRY_OVERHEAD}), 0) FROM "
                "memory_thumbnails WHERE robot=%(r)s) "
                f"+ (SELECT coalesce(sum(octet_length(vec) + {_ENTRY_OVERHEAD}), 0) FROM "
                "memory_vectors WHERE robot=%(r)s)", {"r": self.robot}).fetchone()
        return int(got[0]) if got else 0

    # -- writing ---------------------------------------------------------------------------

    def _check_own(self, row: MemoryRow) -> None:
        if row.robot != self.robot:
            raise SpatialMemoryError(BAD_ROW, f"this store writes for {self.robot}, not "
                                     f"{row.robot}")

    def add(self, row: MemoryRow, vector: np.ndarray | None = None, model: str = "") -> int:
        self.require_writable()
        check_row(row)
        self._check_own(row)
        pose = row.pose
        nbytes = _row_bytes(row)
        values = (row.robot, row.camera, float(row.stamp),
                  *((pose.x, pose.y, pose.z, pose.yaw_deg, pose.pitch_deg) if pose
                    else (None,) * 5),
                  row.pose_source if pose else None, row.action, row.description,
                  joined_objects(row.objects), seen_json(row), nbytes)
        replaced = False
        with self._db() as conn, conn.transaction():
            gone = conn.execute("DELETE FROM memory_frames WHERE robot=%s AND camera=%s AND "
                                "stamp=%s RETURNING id", values[:3]).fetchall()
            replaced = bool(gone)
            got = conn.execute(
                f"INSERT INTO memory_frames ({COLUMNS.removeprefix('id, ')}, nbytes) VALUES "
                "(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id", values).fetchone()
            assert got is not None
            row_id = int(got[0])
            if row.thumbnail:
                conn.execute("INSERT INTO memory_thumbnails VALUES (%s, %s, %s)",
                             (row_id, row.robot, row.thumbnail))
                nbytes += len(row.thumbnail) + _ENTRY_OVERHEAD
            if vector is not None:
                blob = vector_blob(vector)
                conn.execute("INSERT INTO memory_vectors VALUES (%s, %s, %s, %s)",
                             (row_id, row.robot, model, blob))
                nbytes += len(blob) + _ENTRY_OVERHEAD
        self._bytes = self._count_bytes() if replaced else self._bytes + nbytes
        if self._bytes > self.max_bytes:
            self.prune()
        return row_id

    def add_vectors(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        self.require_writable()
        params = [(int(i), self.robot, model, vector_blob(v))
                  for i, v in zip(ids, vectors, strict=True)]
        with self._db() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_vectors SELECT id, %s, %s, %s FROM memory_frames "
                "WHERE id=%s AND robot=%s ON CONFLICT (frame_id) DO UPDATE SET "
                "model=excluded.model, vec=excluded.vec",
                [(r, m, b, i, r) for i, r, m, b in params])
        self._bytes = self._count_bytes()

    def missing_vectors(self, robot: str, model: str, limit: int) -> list[MemoryRow]:
        with self._db() as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM memory_frames f WHERE robot=%s AND NOT EXISTS "
                "(SELECT 1 FROM memory_vectors v WHERE v.frame_id=f.id AND v.model=%s) "
                "ORDER BY stamp DESC LIMIT %s", (robot, model, limit)).fetchall()
        return [row_from_columns(r) for r in rows]

    def prune(self) -> int:
        self.require_writable()
        if self._bytes <= self.max_bytes:
            return 0
        target = int(self.max_bytes * _PRUNE_TO)
        thumbs = deleted = 0
        with self._db() as conn:
            while self._bytes > target:
                gone = conn.execute(
                    f"DELETE FROM memory_thumbnails WHERE frame_id IN (SELECT frame_id FROM "
                    f"memory_thumbnails WHERE robot=%s ORDER BY frame_id LIMIT {_PRUNE_STEP}) "
                    f"RETURNING octet_length(jpeg) + {_ENTRY_OVERHEAD}",
                    (self.robot,)).fetchall()
                if not gone:
                    break
                thumbs += len(gone)
                self._bytes -= sum(int(g[0]) for g in gone)
            while self._bytes > target:
                gone = conn.execute(
                    f"DELETE FROM memory_frames WHERE id IN (SELECT id FROM memory_frames WHERE "
                    f"robot=%s ORDER BY stamp LIMIT {_PRUNE_STEP}) RETURNING id",
                    (self.robot,)).fetchall()
                if not gone:
                    break
                deleted += len(gone)
                self._bytes = self._count_bytes()
            with conn.cursor() as cur:
                _TABLE.prune(cur, "memory_frames", self.robot)
        log.info("memory of %s over %.1f MB: pruned %d thumbnails and %d oldest rows",
                 self.robot, self.max_bytes / 2**20, thumbs, deleted)
        return deleted

    def save_placements(self, robot: str, placements: Sequence[Placement],
                        gone: Sequence[int], through_id: int) -> None:
        self.require_writable()
        if robot != self.robot:
            raise SpatialMemoryError(BAD_ROW, f"this store writes for {self.robot}, not {robot}")
        with self._db() as conn, conn.transaction(), conn.cursor() as cur:
            _TABLE.save(cur, robot, placements, gone, through_id)

    def placements(self, robots: Sequence[str] | None = None, rays: bool = False
                   ) -> list[Placement]:
        with self._db() as conn, conn.cursor() as cur:
            return _TABLE.read(cur, robots, rays)

    def placed_through(self, robot: str) -> int:
        with self._db() as conn, conn.cursor() as cur:
            return _TABLE.placed_through(cur, robot)

    # -- reading ---------------------------------------------------------------------------

    def clear(self, robot: str, before: float | None = None) -> int:
        self.require_writable()
        if robot != self.robot:
            raise SpatialMemoryError(BAD_ROW, f"this store writes for {self.robot}, not "
                                     f"{robot}: each robot's rows are cleared by its writer")
        with self._db() as conn, conn.transaction():  # thumbnails and vectors cascade
            end = math.inf if before is None else float(before)
            n = conn.execute("DELETE FROM memory_frames WHERE robot=%s AND stamp<%s",
                             (robot, end)).rowcount
            with conn.cursor() as cur:
                _TABLE.forget(cur, "memory_frames", robot, end)
        self._bytes = self._count_bytes()
        log.info("memory of %s: cleared %d rows", robot, n)
        return int(n)

    def get(self, ids: Sequence[int], thumbnails: bool = False) -> list[MemoryRow]:
        wanted = sorted({int(i) for i in ids})
        with self._db() as conn:
            if thumbnails:
                rows = conn.execute(
                    f"SELECT {F_COLUMNS}"
                    ", t.jpeg FROM memory_frames f LEFT JOIN memory_thumbnails t ON "
                    "t.frame_id=f.id WHERE f.id = ANY(%s)", (wanted,)).fetchall()
                out = [row_from_columns(r[:-1], r[-1]) for r in rows]
            else:
                rows = conn.execute(f"SELECT {COLUMNS} FROM memory_frames WHERE id = ANY(%s)",
                                    (wanted,)).fetchall()
                out = [row_from_columns(r) for r in rows]
        return sorted(out, key=lambda r: (r.stamp, r.id or 0))

    def latest(self, robot: str, n: int) -> list[MemoryRow]:
        with self._db() as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM memory_frames WHERE robot=%s "
                                "ORDER BY stamp DESC LIMIT %s", (robot, max(n, 0))).fetchall()
        return [row_from_columns(r) for r in reversed(rows)]

    def stamps(self, robot: str, start: float, end: float) -> list[tuple[int, float]]:
        with self._db() as conn:
            return [(int(i), float(s)) for i, s in conn.execute(
                "SELECT id, stamp FROM memory_frames WHERE robot=%s AND stamp BETWEEN %s AND %s "
                "ORDER BY stamp", (robot, start, end))]

    def nearest(self, robot: str, stamp: float, n: int) -> list[tuple[int, float]]:
        with self._db() as conn:
            rows = conn.execute(
                "(SELECT id, stamp FROM memory_frames WHERE robot=%(r)s AND stamp<=%(s)s "
                "ORDER BY stamp DESC LIMIT %(n)s) UNION ALL (SELECT id, stamp FROM "
                "memory_frames WHERE robot=%(r)s AND stamp>%(s)s ORDER BY stamp LIMIT %(n)s)",
                {"r": robot, "s": stamp, "n": n}).fetchall()
        both = sorted(rows, key=lambda r: abs(r[1] - stamp))[:n]
        return sorted((int(i), float(s)) for i, s in both)

    def previous_ids(self, ids: Sequence[int]) -> dict[int, int | None]:
        with self._db() as conn:
            rows = conn.execute(
                "SELECT f.id, (SELECT p.id FROM memory_frames p WHERE p.robot=f.robot AND "
                "p.camera=f.camera AND p.stamp<f.stamp ORDER BY p.stamp DESC LIMIT 1) "
                "FROM memory_frames f WHERE f.id = ANY(%s)", (sorted({int(i) for i in ids}),))
            return {int(i): (int(p) if p is not None else None) for i, p in rows}

    def search_text(self, robot: str, terms: Sequence[str], limit: int,
                    start: float | None = None, end: float | None = None) -> list[TextHit]:
        words = search_terms(terms)
        if not words or limit <= 0:
            return []
        with self._db() as conn:
            rows = conn.execute(
                "SELECT f.id, f.stamp, ts_rank(f.tsv, q) AS rank FROM memory_frames f, "
                "to_tsquery('english', %s) q WHERE f.robot=%s AND f.tsv @@ q AND "
                "f.stamp BETWEEN %s AND %s ORDER BY rank DESC, f.stamp DESC LIMIT %s",
                (" | ".join(words), robot, -float("inf") if start is None else start,
                 float("inf") if end is None else end, limit)).fetchall()
        return [TextHit(int(i), float(s), float(r)) for i, s, r in rows]

    def vectors(self, robot: str, model: str, after_id: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with self._db() as conn:
            rows = conn.execute(
                "SELECT v.frame_id, f.stamp, v.vec FROM memory_vectors v JOIN memory_frames f "
                "ON f.id = v.frame_id WHERE v.robot=%s AND v.model=%s AND v.frame_id>%s "
                "ORDER BY v.frame_id", (robot, model, after_id)).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        stamps = np.array([r[1] for r in rows], dtype=np.float64)
        return ids, stamps, vectors_from_blobs([bytes(r[2]) for r in rows])

    def span(self, robot: str) -> Span:
        check_name("robot", robot)
        with self._db() as conn:
            got = conn.execute("SELECT count(*), min(stamp), max(stamp) FROM memory_frames "
                               "WHERE robot=%s", (robot,)).fetchone()
        assert got is not None
        return Span(int(got[0]), got[1], got[2])

    def bounds(self, robot: str) -> tuple[float, float] | None:
        with self._db() as conn:
            got = conn.execute("SELECT min(stamp), max(stamp) FROM memory_frames WHERE robot=%s",
                               (robot,)).fetchone()
        return None if got is None or got[0] is None else (float(got[0]), float(got[1]))

    def robots(self) -> list[str]:
        with self._db() as conn:
            return [r[0] for r in conn.execute(
                "SELECT DISTINCT robot FROM memory_frames ORDER BY robot")]

    def thumbnail(self, row_id: int) -> bytes | None:
        with self._db() as conn:
            hit = conn.execute("SELECT jpeg FROM memory_thumbnails WHERE frame_id=%s",
                               (int(row_id),)).fetchone()
        return bytes(hit[0]) if hit else None

    def size_bytes(self) -> int:
        """This robot's stored bytes: text (twice, for its search index), thumbnails and
        vectors, each with a fixed overhead (the writer's running count)."""
        return self._bytes if self.writable else self._count_bytes()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()  # the session's advisory lock goes with it

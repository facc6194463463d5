"""The memory store's contract, run on both stores: the embedded SQLite file and a real
PostgreSQL server (Debian's ``postgresql``, started in a temporary folder on a Unix socket).

Restart, crash (``kill -9`` of a writer process during writes), the bound, one writer with
concurrent readers, rows keyed by robot, and retrieval by object and by time.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory import (
    MemoryRecorder,
    MemoryRow,
    MemoryStore,
    Retriever,
    SpatialMemoryError,
)
from embodied_r_ros.memory.errors import (
    BAD_ROW,
    DB_MISSING,
    DB_UNAVAILABLE,
    READ_ONLY,
    WRITER_BUSY,
)
from embodied_r_ros.memory.sqlite_store import SqliteMemoryStore
from lab.pg_local import TemporaryPostgres

REPO = Path(__file__).resolve().parents[1]
#: opens a store: (writable, robot, max_mb) -> store
Opener = Callable[..., MemoryStore]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(kind, target): a fresh SQLite file path or a fresh database's connection string."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "memory.sqlite3")
    server: TemporaryPostgres = request.getfixturevalue("postgres")
    return "postgres", server.create_database(f"t_{uuid.uuid4().hex[:12]}")


def opener(kind: str, target: str) -> Opener:
    def open_(writable: bool = False, robot: str = "robot", max_mb: float = 64.0) -> MemoryStore:
        if kind == "sqlite":
            return SqliteMemoryStore(target, writable=writable, max_mb=max_mb)
        from embodied_r_ros.memory.postgres_store import PostgresMemoryStore

        return PostgresMemoryStore(target, robot=robot, writable=writable, max_mb=max_mb)
    return open_


@pytest.fixture
def open_store(backend: tuple[str, str]) -> Iterator[Opener]:
    opened: list[MemoryStore] = []

    def open_(*args: object, **kwargs: object) -> MemoryStore:
        store = opener(*backend)(*args, **kwargs)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def row(i: int, robot: str = "robot", thumb: int = 0, description: str | None = None
        ) -> MemoryRow:
    return MemoryRow(
        stamp=1000.0 + i, robot=robot,
        description=description or f"I see a small blue object ahead; frame number {i}.",
        pose=Pose(0.1 * i, 0.05 * i, 0.0, (3.0 * i) % 360 - 180, 0.0), pose_source="odometry",
        action="move forward", objects=("blue object",),
        thumbnail=bytes([i % 251]) * thumb if thumb else None)


def test_rows_survive_a_restart_exactly(open_store: Opener) -> None:
    writer = open_store(writable=True)
    written = [row(i, thumb=500) for i in range(50)]
    ids = [writer.add(r) for r in written]
    writer.close()
    reader = open_store()
    got = reader.get(ids, thumbnails=True)
    assert [(g.stamp, g.description, g.pose, g.pose_source, g.action, g.objects, g.thumbnail)
            for g in got] == [(w.stamp, w.description, w.pose, w.pose_source, w.action,
                               w.objects, w.thumbnail) for w in written]
    assert reader.span("robot").count == 50 and reader.robots() == ["robot"]
    again = open_store(writable=True)  # a restarted writer goes on where it stopped
    again.add(row(50))
    assert reader.span("robot").last == 1050.0


def _as_schema(version: int, kind: str, target: str) -> None:
    """Make a memory what an older version wrote: schema 3 kept no label votes; schema 2 had
    no placements; schema 1 not the ``seen`` column either."""
    statements = (["ALTER TABLE {placements} DROP COLUMN votes"] if version == 3 else
                  ["DROP TABLE {placements}", "DELETE FROM {meta} WHERE key LIKE 'placed%'"])
    statements.append(f"UPDATE {{meta}} SET value='{version}' WHERE key='schema_version'")
    if version < 2:
        statements.append("ALTER TABLE {frames} DROP COLUMN seen")
    names = ({"frames": "frames", "meta": "meta", "placements": "placements"}
             if kind == "sqlite" else {"frames": "memory_frames", "meta": "memory_meta",
                                       "placements": "memory_placements"})
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target) as conn:
            for sql in statements:
                conn.execute(sql.format(**names))
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql.format(**names))


def test_a_memory_of_the_schema_before_records_is_upgraded_by_its_writer(
        backend: tuple[str, str], open_store: Opener) -> None:
    """Rows stored before the memory kept records keep their text and are read from it; a
    reader of such a memory is told to let the writer upgrade it, and nothing is lost."""
    kind, target = backend
    writer = open_store(writable=True)
    ids = [writer.add(row(i, description="I see a small red object to the left (20 degrees "
                                         f"left); frame {i}.")) for i in range(3)]
    writer.close()
    _as_schema(1, kind, target)
    with pytest.raises(SpatialMemoryError) as err:
        open_store()
    assert err.value.code == "SCHEMA_MISMATCH" and "to upgrade it" in str(err.value)
    upgraded = open_store(writable=True)
    seen = (SeenObject("green object", "green", "small", "ahead", 1.0),)
    new_id = upgraded.add(replace(row(9), seen=seen, by_vlm=False))
    reader = open_store()
    old = reader.get(ids)
    assert [r.stamp for r in old] == [1000.0, 1001.0, 1002.0] and all(
        r.seen is None for r in old)
    assert [o.colour for o in old[0].frame_record().objects] == ["red"]
    (fresh,) = reader.get([new_id])
    assert fresh.seen == seen and not fresh.by_vlm


def test_a_memory_of_the_schema_before_placements_is_upgraded_and_placed_by_its_writer(
        backend: tuple[str, str], open_store: Opener) -> None:
    """Schema 2 to 3: a reader is told to let the writer upgrade; the writer adds the
    placements and its recorder places the rows stored before, as it would have placed them
    as they came; rows go on being placed after them."""
    kind, target = backend
    writer = open_store(writable=True)
    seen_from = [(0.0, 0.0), (0.0, -2.0), (1.0, -1.0), (1.0, -3.0)]  # a red object at (4, 2)
    for i, (x, y) in enumerate(seen_from[:3]):
        bearing = math.degrees(math.atan2(2.0 - y, 4.0 - x))
        writer.add(replace(row(i), pose=Pose(x, y, 0.0, 0.0),
                           seen=(SeenObject("red object", "red", bearing_deg=bearing),),
                           by_vlm=False))
    writer.close()
    _as_schema(2, kind, target)
    with pytest.raises(SpatialMemoryError) as err:
        open_store()
    assert err.value.code == "SCHEMA_MISMATCH" and "to upgrade it" in str(err.value)
    upgraded = open_store(writable=True)
    recorder = MemoryRecorder(upgraded, "robot")
    (red,) = upgraded.placements(["robot"])
    assert red.triangulated and red.position == pytest.approx((4.0, 2.0), abs=1e-6)
    assert upgraded.placed_through("robot") == max(r.id for r in upgraded.latest("robot", 9))
    x, y = seen_from[3]
    recorder.record_frame(FrameRecord(1003.0, objects=(SeenObject(
        "red object", "red", bearing_deg=math.degrees(math.atan2(2.0 - y, 4.0 - x))),)),
        pose=Pose(x, y, 0.0, 0.0), pose_source="odometry")
    (again,) = open_store().placements()
    assert again.id == red.id and again.sightings == 4
    assert again.uncertainty_m <= red.uncertainty_m  # a fourth view, wider apart


def test_a_memory_of_the_schema_before_votes_is_upgraded_and_votes_from_its_labels(
        backend: tuple[str, str], open_store: Opener) -> None:
    """Schema 3 to 4: a reader is told to let the writer upgrade; a placement stored before
    has no votes and counts its label once per sighting; the next sightings add votes."""
    kind, target = backend
    writer = open_store(writable=True)
    recorder = MemoryRecorder(writer, "robot")

    def look(stamp: float, x: float, y: float, name: str) -> None:
        bearing = math.degrees(math.atan2(2.0 - y, 4.0 - x))
        recorder.record_frame(FrameRecord(stamp, objects=(SeenObject(name, bearing_deg=bearing),)),
                              pose=Pose(x, y, 0.0, 0.0), pose_source="odometry")

    for i, (x, y) in enumerate([(0.0, 0.0), (0.0, -2.0), (1.0, -1.0)]):
        look(1000.0 + i, x, y, "chair")
    (chair,) = writer.placements()
    assert chair.votes == (("chair", 3),)
    writer.close()
    _as_schema(3, kind, target)
    with pytest.raises(SpatialMemoryError) as err:
        open_store()
    assert err.value.code == "SCHEMA_MISMATCH" and "to upgrade it" in str(err.value)
    upgraded = open_store(writable=True)
    (old,) = upgraded.placements()
    assert old.votes == () and old.label == "chair" and old.sightings == 3
    recorder = MemoryRecorder(upgraded, "robot")
    look(1003.0, 1.0, -3.0, "table")  # a wrong name through the chair: a vote
    look(1004.0, 2.0, -2.0, "chair")
    (again,) = open_store().placements()
    assert again.id == old.id and again.votes == (("chair", 4), ("table", 1))


def test_clearing_rows_drops_the_placements_they_alone_placed(open_store: Opener) -> None:
    """A blue object seen only before the cleared stamp goes with its rows; the red one, seen
    after it too, stays; a memory cleared of every row of a robot places its next rows again
    from the start."""
    writer = open_store(writable=True)
    recorder = MemoryRecorder(writer, "robot")
    for stamp, target, name, (x, y) in (
            (0.0, (4.0, 2.0), "red", (0.0, 0.0)), (1.0, (4.0, 5.0), "blue", (0.0, 1.0)),
            (1.5, (4.0, 5.0), "blue", (2.0, 1.0)), (2.0, (4.0, 5.0), "blue", (8.0, 1.0)),
            (2.8, (4.0, 2.0), "red", (2.0, -2.0)), (3.0, (4.0, 2.0), "red", (7.0, -1.0))):
        pose = Pose(x, y, 0.0, 0.0)  # three views each, crossing wide
        bearing = math.degrees(math.atan2(target[1] - pose.y, target[0] - pose.x))
        recorder.record_frame(FrameRecord(stamp, objects=(SeenObject(
            f"{name} object", name, bearing_deg=bearing),)), pose=pose, pose_source="odometry")
    assert sorted(p.colour for p in writer.placements()) == ["blue", "red"]
    writer.clear("robot", before=2.5)
    assert [p.colour for p in writer.placements()] == ["red"]
    assert writer.placed_through("robot") > 0
    writer.clear("robot")
    assert writer.placements() == [] and writer.placed_through("robot") == 0


def test_one_writer_and_readers_cannot_write(open_store: Opener) -> None:
    open_store(writable=True)
    with pytest.raises(SpatialMemoryError) as busy:
        open_store(writable=True)
    assert busy.value.code == WRITER_BUSY and "\n" not in str(busy.value)
    reader = open_store()
    with pytest.raises(SpatialMemoryError) as ro:
        reader.add(row(0))
    assert ro.value.code == READ_ONLY


def test_a_reader_of_a_memory_not_written_yet_gets_a_one_line_error(
        open_store: Opener) -> None:
    with pytest.raises(SpatialMemoryError) as err:
        open_store()
    assert err.value.code == DB_MISSING and "\n" not in str(err.value)
    open_store(writable=True)  # the writer creates it
    assert open_store().span("robot").count == 0


def test_an_unreachable_server_is_a_one_line_error(postgres: TemporaryPostgres) -> None:
    from embodied_r_ros.memory.postgres_store import PostgresMemoryStore

    with pytest.raises(SpatialMemoryError) as err:
        PostgresMemoryStore(postgres.dsn("no_such_database"), writable=True)
    assert err.value.code == DB_UNAVAILABLE and "\n" not in str(err.value)
    assert "no_such_database" in str(err.value)


def test_bad_rows_are_refused_and_nothing_is_lost(open_store: Opener) -> None:
    writer = open_store(writable=True)
    writer.add(row(0))
    for bad in (MemoryRow(stamp=float("nan"), description="x"),
                MemoryRow(stamp=1.0, description="x", robot=""),
                MemoryRow(stamp=1.0, description="x", pose=Pose(0, 0, 0), pose_source=None)):
        with pytest.raises(SpatialMemoryError) as err:
            writer.add(bad)
        assert err.value.code == BAD_ROW
    assert writer.span("robot").count == 1


def test_a_row_of_the_same_frame_replaces_the_stored_one(open_store: Opener) -> None:
    writer = open_store(writable=True)
    writer.add(row(1, description="I see a green plant."))
    new_id = writer.add(row(1, description="I see a yellow lamp."))
    assert writer.span("robot").count == 1
    assert [h.id for h in writer.search_text("robot", ["lamp"], 5)] == [new_id]
    assert writer.search_text("robot", ["plant"], 5) == []


def test_full_text_search_stems_and_keeps_robots_apart(backend: tuple[str, str],
                                                       open_store: Opener) -> None:
    kind, _ = backend
    alpha = open_store(writable=True, robot="alpha")
    beta = alpha if kind == "sqlite" else open_store(writable=True, robot="beta")
    alpha.add(row(1, "alpha", description="I see two red chairs by the window."))
    alpha.add(row(2, "alpha", description="I see a wooden table."))
    beta.add(row(1, "beta", description="I see a red chair in the corridor."))
    hits = alpha.search_text("alpha", ["chair"], 10)
    assert [h.stamp for h in hits] == [1001.0]  # "chairs" found by "chair", beta's not
    assert {h.stamp for h in alpha.search_text("alpha", ["chair", "table"], 10)} == {1001.0,
                                                                                     1002.0}
    assert alpha.search_text("alpha", ['chair" OR x:*', ")"], 10)[0].stamp == 1001.0
    assert alpha.search_text("alpha", ["chair"], 10, start=1001.5) == []
    assert sorted(open_store().robots()) == ["alpha", "beta"]


def test_the_bound_prunes_thumbnails_first_then_the_oldest_rows(open_store: Opener) -> None:
    max_mb = 0.25
    writer = open_store(writable=True, max_mb=max_mb)
    bound = int(max_mb * 2**20)
    first = writer.add(row(0, thumb=3000))
    i = 1
    while writer.thumbnail(first) is not None:
        writer.add(row(i, thumb=3000))
        i += 1
        assert writer.size_bytes() <= bound
        assert i < 2000, "the thumbnails were never pruned"
    # thumbnails went first: no row is gone yet, the newest still has its thumbnail
    assert writer.span("robot").count == i
    assert writer.thumbnail(writer.latest("robot", 1)[0].id or 0) is not None
    while writer.span("robot").count == i:
        writer.add(row(i))
        i += 1
        assert writer.size_bytes() <= bound
        assert i < 20000, "the rows were never pruned"
    kept = writer.stamps("robot", 0.0, 1e9)
    assert 0 < len(kept) < i
    # the oldest rows went, the newest stayed, and no thumbnail outlived the rows
    assert [s for _, s in kept] == [1000.0 + k for k in range(i - len(kept), i)]
    assert all(writer.thumbnail(r) is None for r, _ in kept)


def test_readers_run_while_the_writer_writes(open_store: Opener) -> None:
    writer = open_store(writable=True)
    readers = [open_store() for _ in range(2)]
    batches, per_batch = 8, 40
    barrier = threading.Barrier(1 + len(readers), timeout=60)
    errors: list[BaseException] = []
    seen: list[list[int]] = [[] for _ in readers]

    def write() -> None:
        for b in range(batches):
            for k in range(per_batch):
                writer.add(row(b * per_batch + k, thumb=200))
            barrier.wait()  # the batch is committed: readers may check it

    def read(n: int) -> None:
        try:
            for b in range(batches):
                barrier.wait()
                count = readers[n].span("robot").count
                assert count >= (b + 1) * per_batch  # everything committed is visible
                seen[n].append(count)
                hits = readers[n].search_text("robot", ["blue"], 10_000)
                rows = readers[n].get([h.id for h in hits])
                assert len(rows) >= count and all("blue" in r.description for r in rows)
                latest = readers[n].latest("robot", 5)
                assert [r.stamp for r in latest] == sorted(r.stamp for r in latest)
        except BaseException as exc:  # reported below, with the barrier broken for the rest
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=write)] + [
        threading.Thread(target=read, args=(n,)) for n in range(len(readers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert all(s == sorted(s) and len(s) == batches for s in seen)
    assert readers[0].span("robot").count == batches * per_batch


_WRITER = """
import sys
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import SeenObject
from embodied_r_ros.memory.store import MemoryRow
kind, target = sys.argv[1], sys.argv[2]
if kind == "sqlite":
    from embodied_r_ros.memory.sqlite_store import SqliteMemoryStore
    store = SqliteMemoryStore(target, writable=True)
else:
    from embodied_r_ros.memory.postgres_store import PostgresMemoryStore
    store = PostgresMemoryStore(target, writable=True)
i = 0
while True:
    store.add(MemoryRow(stamp=float(i), description=f"I see row {i} " + "x" * 400,
                        pose=Pose(float(i), 0.0, 0.0), pose_source="odometry",
                        thumbnail=bytes([i % 256]) * 4000))
    print(i, flush=True)
    i += 1
"""


def test_a_writer_killed_during_writes_loses_at_most_the_row_in_flight(
        backend: tuple[str, str], open_store: Opener) -> None:
    kind, target = backend
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, kind, target],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None
    last = -1
    try:
        for line in proc.stdout:
            last = int(line)
            if last >= 150:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    # the writer ran on until the kill landed: every row it printed was committed
    last = max([last, *(int(line) for line in proc.stdout.read().split())])
    assert last >= 150, "the writer died before it wrote"
    writer = open_store(writable=True)  # the dead writer's lock is gone
    count = writer.span("robot").count
    assert last + 1 <= count <= last + 2
    rows = writer.get([i for i, _ in writer.stamps("robot", 0.0, 1e9)], thumbnails=True)
    assert [r.stamp for r in rows] == [float(k) for k in range(count)]
    assert all(r.description.startswith(f"I see row {int(r.stamp)} ") and
               r.thumbnail == bytes([int(r.stamp) % 256]) * 4000 for r in rows)
    if isinstance(writer, SqliteMemoryStore):
        assert writer.integrity_check() == ["ok"]
    writer.add(row(10_000))
    assert writer.span("robot").count == count + 1


def _memory(writer: MemoryStore, n: int = 1200) -> None:
    """20 minutes at a key frame a second: blue things, a red chair seen twice (frames
    300-304 and 900-902), the robot walking a square."""
    for i in range(n):
        text = "I see a small blue object ahead."
        if 300 <= i < 305 or 900 <= i < 903:
            text = "I see a red chair next to a wooden table."
        writer.add(row(i, description=text))


def test_retrieval_by_object_keeps_the_budget_and_the_latest_frames(
        open_store: Opener) -> None:
    writer = open_store(writable=True)
    _memory(writer)
    sel = Retriever(open_store(), budget=32, latest=4).select(
        "robot", "Where is the red chair relative to me now?", ["A. front-left", "B. behind"])
    stamps = [r.stamp for r in sel.rows]
    assert len(sel.rows) <= 32 and stamps == sorted(stamps)
    assert {1000.0 + k for k in range(1196, 1200)} <= set(stamps)  # "now" is answerable
    chair = {s for s in stamps if "red chair" in sel.rows[stamps.index(s)].description}
    assert chair & {1000.0 + k for k in range(900, 903)}  # the newest visit
    assert chair & {1000.0 + k for k in range(300, 305)}  # and the earlier one
    assert "chair" in sel.terms and "relative" not in sel.terms


def test_retrieval_by_time_selects_from_the_named_range(open_store: Opener) -> None:
    writer = open_store(writable=True)
    _memory(writer)
    retriever = Retriever(open_store(), budget=32, latest=4)
    sel = retriever.select("robot", "What did I see 10 minutes ago?")
    now = 2199.0
    (r,) = sel.ranges
    assert (r.start, r.end) == (now - 720, now - 480)
    timed = [x for x in sel.rows if any(w.startswith("time:") for w in sel.reasons[x.id or 0])]
    assert len(timed) >= 20 and all(r.start <= x.stamp <= r.end for x in timed)
    assert max(x.stamp for x in timed) - min(x.stamp for x in timed) > 0.8 * (r.end - r.start)
    start = retriever.select("robot", "Which object did I see at the start?")
    assert min(x.stamp for x in start.rows) == 1000.0
    assert sum(x.stamp < 1060.0 + 0.05 * 1199 for x in start.rows) >= 20

"""The embedded store's own promises: WAL mode, a file that stays under its bound on disk, and
a clear one-line error, never a lost row, for a missing, foreign or damaged database file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.memory import MemoryRow, SpatialMemoryError, SqliteMemoryStore, open_store
from embodied_r_ros.memory.errors import DB_CORRUPT, DB_MISSING, SCHEMA_MISMATCH


def _rows(store: SqliteMemoryStore, n: int, thumb: int = 0) -> None:
    for i in range(n):
        store.add(MemoryRow(stamp=float(i), description=f"I see a green plant number {i}.",
                            thumbnail=b"\xff" * thumb if thumb else None))


def _error(path: Path, writable: bool) -> SpatialMemoryError:
    with pytest.raises(SpatialMemoryError) as err:
        SqliteMemoryStore(path, writable=writable)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    return err.value


def test_the_file_is_in_wal_mode_and_readers_open_it_after_the_writer_closed(
        tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    with SqliteMemoryStore(path, writable=True) as writer:
        _rows(writer, 3)
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with SqliteMemoryStore(path) as reader:
        assert reader.span("robot").count == 3


def test_a_missing_file_is_a_clear_error_for_a_reader_and_created_by_the_writer(
        tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.sqlite3"
    assert _error(path, writable=False).code == DB_MISSING
    assert not path.exists()  # a reader creates nothing
    with SqliteMemoryStore(path, writable=True):
        pass
    assert path.is_file()


@pytest.mark.parametrize("writable", [False, True])
def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(
        tmp_path: Path, writable: bool) -> None:
    path = tmp_path / "m.sqlite3"
    junk = bytes(range(256)) * 64
    path.write_bytes(junk)
    assert _error(path, writable).code == DB_CORRUPT
    assert path.read_bytes() == junk


def test_another_programs_database_is_refused_not_extended(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    assert _error(path, writable=True).code == DB_CORRUPT
    assert path.read_bytes() == before


def test_a_damaged_page_is_a_db_corrupt_error_and_the_file_is_not_rewritten(
        tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    with SqliteMemoryStore(path, writable=True) as writer:
        _rows(writer, 400)
        writer._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    data = bytearray(path.read_bytes())
    page = 4096
    for k in range(2, len(data) // page):  # every page after the schema: garbage
        data[k * page:(k + 1) * page] = b"\x5a" * page
    path.write_bytes(bytes(data))
    with pytest.raises(SpatialMemoryError) as err:
        with SqliteMemoryStore(path) as reader:
            reader.search_text("robot", ["plant"], 10)
            reader.latest("robot", 500)
    assert err.value.code == DB_CORRUPT and "\n" not in str(err.value)
    assert path.read_bytes() == bytes(data)


def test_a_database_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    with SqliteMemoryStore(path, writable=True) as writer:
        _rows(writer, 2)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    assert _error(path, writable=True).code == SCHEMA_MISMATCH
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM frames").fetchone()[0] == 2


def test_the_file_on_disk_stays_under_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    with SqliteMemoryStore(path, writable=True, max_mb=0.5) as writer:
        _rows(writer, 600, thumb=2500)
        assert writer.span("robot").count == 600  # thumbnails made room: every row is kept
        assert path.stat().st_size <= 0.5 * 2**20
        # the WAL beside it is cut back to its limit at each checkpoint
        assert path.with_name("m.sqlite3-wal").stat().st_size <= 4 * 2**20 + 64 * 1024
    assert path.stat().st_size <= 0.5 * 2**20


def test_the_config_opens_the_configured_file(tmp_path: Path) -> None:
    cfg = load_config("tiny", overrides={"memory": {"path": str(tmp_path / "c.sqlite3"),
                                                    "max_mb": 2}})
    with open_store(cfg.memory, writable=True) as store:
        assert isinstance(store, SqliteMemoryStore) and store.max_bytes == 2 * 2**20

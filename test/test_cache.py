"""The perception reply cache: a memory LRU in front of a bounded disk store."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from embodied_r_ros.backends.reply_cache import DiskStore, MemoryLRU, ReplyCache, write_atomic


def test_memory_lru_drops_the_least_recently_used() -> None:
    lru = MemoryLRU(max_bytes=30)
    for key in "abc":
        lru.put(key, key * 10, 10)
    assert lru.get("a") == "a" * 10  # a is now the most recent
    lru.put("d", "d" * 10, 10)
    assert lru.get("b") is None and lru.get("a") and lru.get("c") and lru.get("d")
    assert lru.size_bytes == 30 and len(lru) == 3
    lru.put("huge", "x", 31)  # larger than the whole bound: not kept, nothing evicted for it
    assert lru.get("huge") is None and len(lru) == 3


def test_disk_store_stays_under_its_bound_dropping_the_least_recently_used(tmp_path: Path
                                                                            ) -> None:
    store = DiskStore(tmp_path, max_bytes=300)
    text = json.dumps("x" * 28)  # 30 bytes a value, 95 on disk with its digest line
    for key in ("k1", "k2", "k3"):  # a store orders its own uses, whatever the file times
        store.put(key, text)
    assert store.get("k1") is not None  # used: k2 is now the oldest
    store.put("k4", text)
    assert "k2" not in store and all(k in store for k in ("k1", "k3", "k4"))
    assert store.size_bytes <= 300
    # a new process sees what is on disk, oldest use first (mtime), and keeps the bound
    old = tmp_path / "k3"[:2] / "k3.json"
    os.utime(old, (1, 1))
    again = DiskStore(tmp_path, max_bytes=300)
    again.put("k5", text)
    assert "k3" not in again and "k5" in again and again.size_bytes <= 300


def test_reply_cache_reads_through_disk_and_survives_a_torn_file(tmp_path: Path) -> None:
    first = ReplyCache(tmp_path, max_mb=1, memory_mb=1)
    first.put("abcd", "a reply")
    second = ReplyCache(tmp_path)  # a fresh process: memory empty, disk has it
    assert "abcd" in second and second.get("abcd") == "a reply"
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / "zzzz.json").write_text('{"torn')
    assert second.get("zzzz") is None  # ignored, not fatal
    memory_only = ReplyCache(None)
    memory_only.put("k", "v")
    assert memory_only.get("k") == "v" and not list(tmp_path.glob("k*"))


def test_an_edited_entry_is_refused_by_its_digest(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A cache file edited into other valid JSON is not served as the perception text."""
    ReplyCache(tmp_path).put("abcd", "the true reply")
    entry = tmp_path / "ab" / "abcd.json"
    check, _, text = entry.read_text().partition("\n")
    assert json.loads(text) == "the true reply" and len(check) == 64
    entry.write_text(f"{check}\n{json.dumps('an edited reply')}")
    with caplog.at_level(logging.WARNING, logger="embodied_r_ros.backends.reply_cache"):
        assert ReplyCache(tmp_path).get("abcd") is None
    assert "does not match its digest" in caplog.text
    entry.write_bytes(b"\xff\xfe not utf-8")  # foreign bytes: skipped the same way
    assert ReplyCache(tmp_path).get("abcd") is None


@pytest.mark.parametrize("how", ["read-only", "under-a-file"])
def test_an_unwritable_cache_warns_once_and_the_replies_still_come(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """A read-only cache directory does not raise PermissionError out of the query. (Root
    writes into read-only folders, so a cache folder under a plain file stands in there.)"""
    if how == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        root = tmp_path / "cache"
        root.mkdir()
        root.chmod(0o555)
    else:
        (tmp_path / "file").write_text("")
        root = tmp_path / "file" / "cache"
    try:
        cache = ReplyCache(root)
        with caplog.at_level(logging.WARNING, logger="embodied_r_ros.backends.reply_cache"):
            for i in range(3):
                cache.put(f"k{i}", f"reply {i}")
        assert [cache.get(f"k{i}") for i in range(3)] == ["reply 0", "reply 1", "reply 2"]
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "cannot be written" in warnings[0].getMessage()
        assert sorted(p.name for p in tmp_path.rglob("*")) in (["cache"], ["file"])
    finally:
        if how == "read-only":
            root.chmod(0o755)


def test_one_atomic_writer_for_the_whole_project() -> None:
    """Cache entries and dataset files are written by the same helper, not two of them."""
    repo = Path(__file__).resolve().parents[1]
    writers = [
        str(path.relative_to(repo))
        for folder in ("embodied_r_ros", "training")
        for path in (repo / folder).rglob("*.py")
        if "mkstemp(" in path.read_text()
    ]
    assert writers == ["embodied_r_ros/backends/reply_cache.py"]


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "table.jsonl"
    write_atomic(target, "one\n")
    write_atomic(target, "two\n")
    assert target.read_text() == "two\n" and sorted(p.name for p in target.parent.iterdir()) == [
        "table.jsonl"]

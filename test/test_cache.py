"""The perception reply cache: a memory LRU in front of a bounded disk store."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from embodied_r_ros.core.cache import DiskStore, MemoryLRU, ReplyCache


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
    store = DiskStore(tmp_path, max_bytes=100)
    text = json.dumps("x" * 28)  # 30 bytes a value
    for key in ("k1", "k2", "k3"):
        store.put(key, text)
        time.sleep(0.01)
    assert store.get("k1") is not None  # used: k2 is now the oldest
    store.put("k4", text)
    assert "k2" not in store and all(k in store for k in ("k1", "k3", "k4"))
    assert store.size_bytes <= 100
    # a new process sees what is on disk, oldest use first (mtime), and keeps the bound
    old = tmp_path / "k3"[:2] / "k3.json"
    os.utime(old, (1, 1))
    again = DiskStore(tmp_path, max_bytes=100)
    again.put("k5", text)
    assert "k3" not in again and "k5" in again and again.size_bytes <= 100


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

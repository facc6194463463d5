"""Bounded caches of VLM replies, keyed by a hash of everything that produced a reply.

Perception (VLM calls) is the expensive step everywhere: re-asking after the window slid by one
key frame, resuming a killed dataset build or rebuilding with the same settings must not call
the model again for a key frame (or key-frame pair) it already described. :class:`ReplyCache`
is an in-memory LRU in front of an on-disk store; both are bounded in bytes and drop the least
recently used entries first, and disk writes are atomic (safe to kill at any time).

Each file on disk holds the SHA-256 of its content on the first line, checked on read: a torn,
edited or foreign entry is skipped with a warning (and described again), never used as a reply.
A store that cannot be written (a read-only directory, a full disk) warns once and the caller
goes on with the fresh replies: a cache is an optimisation, never a reason to fail a query.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename, so a
    reader (or a process killed mid-write) never sees a half-written file. The one helper for
    every file the project writes whole (cache entries, dataset tables, manifests, reports)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _content_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class MemoryLRU:
    """JSON-able values by key, at most ``max_bytes`` of their serialised size; thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: str, value: Any, size: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)


class DiskStore:
    """One file per key under ``root/<k[:2]>/<k>.json`` (the digest line, then the JSON text),
    at most ``max_bytes`` in all.

    Reading a file marks it used (its mtime), so eviction drops the least recently used.
    """

    def __init__(self, root: str | Path, max_bytes: int) -> None:
        self.root = Path(root).expanduser()
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sizes: OrderedDict[str, int] | None = None  # key -> bytes, oldest first
        self._bytes = 0
        self._warned = False  # a store that cannot be written says so once

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def _index(self) -> OrderedDict[str, int]:
        """Sizes of what is on disk, oldest use first (read once, then kept up to date)."""
        if self._sizes is None:
            found = []
            for path in self.root.glob("*/*.json") if self.root.is_dir() else ():
                try:
                    st = path.stat()
                except OSError:
                    continue
                found.append((st.st_mtime, path.stem, st.st_size))
            found.sort()
            self._sizes = OrderedDict((key, size) for _, key, size in found)
            self._bytes = sum(self._sizes.values())
        return self._sizes

    def get(self, key: str) -> Any | None:
        path = self._path(key)
        try:
            check, _, text = path.read_text(encoding="utf-8").partition("\n")
            if check != _content_digest(text):
                raise ValueError("content does not match its digest")
            value = json.loads(text)
        except (FileNotFoundError, NotADirectoryError):  # not stored (or no store at all)
            return None
        except (OSError, ValueError) as exc:  # includes UnicodeDecodeError
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        with self._lock:
            if self._sizes is not None and key in self._sizes:
                self._sizes.move_to_end(key)
        return value

    def put(self, key: str, text: str) -> bool:
        """Store ``text`` (JSON) under ``key``; False (with one warning per store) if the
        store cannot be written."""
        entry = f"{_content_digest(text)}\n{text}"
        try:
            write_atomic(self._path(key), entry)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("the reply cache at %s cannot be written (%s); going on without "
                            "storing replies there", self.root, exc.strerror or exc)
            return False
        with self._lock:
            sizes = self._index()
            self._bytes -= sizes.pop(key, 0)
            sizes[key] = len(entry)
            self._bytes += len(entry)
            while self._bytes > self.max_bytes and len(sizes) > 1:
                old, size = sizes.popitem(last=False)
                self._bytes -= size
                try:
                    self._path(old).unlink(missing_ok=True)
                except OSError:
                    pass
        return True

    @property
    def size_bytes(self) -> int:
        with self._lock:
            self._index()
            return self._bytes

    def __contains__(self, key: str) -> bool:
        return self._path(key).is_file()


class ReplyCache:
    """A memory LRU in front of an optional :class:`DiskStore`; see the module docstring."""

    def __init__(
        self,
        root: str | Path | None,
        *,
        max_mb: float = 512.0,
        memory_mb: float = 32.0,
    ) -> None:
        self.memory = MemoryLRU(int(memory_mb * 2**20))
        self.disk = DiskStore(root, int(max_mb * 2**20)) if root is not None else None

    def get(self, key: str) -> Any | None:
        value = self.memory.get(key)
        if value is None and self.disk is not None:
            value = self.disk.get(key)
            if value is not None:
                self.memory.put(key, value, len(json.dumps(value)))
        return value

    def put(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        self.memory.put(key, value, len(text))
        if self.disk is not None:
            self.disk.put(key, text)

    def __contains__(self, key: str) -> bool:
        return self.memory.get(key) is not None or (self.disk is not None and key in self.disk)

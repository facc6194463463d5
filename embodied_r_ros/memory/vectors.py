"""An in-memory cosine index over one robot's description embeddings, grown as rows come.

Neither SQLite nor the PostgreSQL packaged here has a vector index, and none is needed at this
size: ten hours at one key frame a second is 36,000 vectors of 384 floats (55 MB as float32),
searched exhaustively with one matrix product in a few milliseconds. The index reads only the
rows added since its last refresh, and starts over when pruning has removed many of them.
"""

from __future__ import annotations

import numpy as np

from embodied_r_ros.memory.store import MemoryStore

#: start over when the index holds this many times the rows the store still has
_STALE_FACTOR = 1.5
#: refreshes between two such checks (counting a robot's rows reads its whole index)
_CHECK_EVERY = 256


class VectorIndex:
    """Embeddings of ``robot``'s rows from ``model``; :meth:`search` refreshes it first."""

    def __init__(self, store: MemoryStore, robot: str, model: str) -> None:
        self.store = store
        self.robot = robot
        self.model = model
        self._refreshes = 0
        self._reset()

    def _reset(self) -> None:
        self._ids = np.zeros(0, dtype=np.int64)
        self._stamps = np.zeros(0, dtype=np.float64)
        self._matrix: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self._ids.size)

    def refresh(self) -> None:
        self._refreshes += 1
        if self._refreshes % _CHECK_EVERY == 0 and self._ids.size > _STALE_FACTOR * max(
                self.store.span(self.robot).count, 1):
            self._reset()
        after = int(self._ids[-1]) if self._ids.size else 0
        ids, stamps, matrix = self.store.vectors(self.robot, self.model, after)
        if not ids.size:
            return
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.maximum(norms, 1e-12)
        self._ids = np.concatenate([self._ids, ids])
        self._stamps = np.concatenate([self._stamps, stamps])
        self._matrix = matrix if self._matrix is None else np.vstack([self._matrix, matrix])

    def search(self, vector: np.ndarray, limit: int, start: float | None = None,
               end: float | None = None) -> list[tuple[int, float, float]]:
        """``(id, stamp, cosine)`` of the ``limit`` rows most similar to ``vector``, best first,
        optionally within ``[start, end]``."""
        self.refresh()
        if self._matrix is None or limit <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).ravel()
        query = query / max(float(np.linalg.norm(query)), 1e-12)
        scores = self._matrix @ query
        if start is not None or end is not None:
            lo = -np.inf if start is None else start
            hi = np.inf if end is None else end
            scores = np.where((self._stamps >= lo) & (self._stamps <= hi), scores, -np.inf)
        k = min(limit, scores.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top])]
        return [(int(self._ids[i]), float(self._stamps[i]), float(scores[i])) for i in top
                if np.isfinite(scores[i])]

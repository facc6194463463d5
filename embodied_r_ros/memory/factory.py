"""The store, recorder and retriever a configuration asks for (``memory:`` of the config)."""

from __future__ import annotations

from embodied_r_ros.core.config import KEY_FRAME_BUDGET, Config, MemoryConfig
from embodied_r_ros.memory.embedder import TextEmbedder, load_embedder
from embodied_r_ros.memory.recorder import MemoryRecorder
from embodied_r_ros.memory.retrieval import Retriever
from embodied_r_ros.memory.sqlite_store import SqliteMemoryStore
from embodied_r_ros.memory.store import MemoryStore


def open_store(cfg: MemoryConfig, *, writable: bool = False) -> MemoryStore:
    """The configured store, for the one writer (``writable``) or a reader."""
    if cfg.backend == "postgres":
        from embodied_r_ros.memory.postgres_store import PostgresMemoryStore

        assert cfg.dsn is not None  # the schema requires it
        return PostgresMemoryStore(cfg.dsn, robot=cfg.robot, writable=writable,
                                   max_mb=cfg.max_mb)
    return SqliteMemoryStore(cfg.path, writable=writable, max_mb=cfg.max_mb)


def recorder_for(config: Config, store: MemoryStore,
                 embedder: TextEmbedder | None = None) -> MemoryRecorder:
    """A recorder of ``config.memory.robot``'s key frames into the writable ``store``."""
    m = config.memory
    return MemoryRecorder(store, m.robot, embedder=embedder, thumbnail_side=m.thumbnail_side,
                          thumbnail_quality=m.thumbnail_quality)


def retriever_for(config: Config, store: MemoryStore,
                  embedder: TextEmbedder | None = None) -> Retriever:
    """A retriever with the configured budget (``memory.budget``, else
    ``keyframes.max_frames``, else ``KEY_FRAME_BUDGET``), latest frames and placements shared or not
    (``memory.share_placements``)."""
    m = config.memory
    budget = m.budget or config.keyframes.max_frames or KEY_FRAME_BUDGET
    return Retriever(store, budget=budget, latest=min(m.latest, budget - 1), embedder=embedder,
                     share_placements=m.share_placements)


def embedder_for(config: Config) -> TextEmbedder | None:
    """The configured embedder (``memory.embedder``), None where it is off or not installed."""
    return load_embedder(config.memory.embedder)

"""Long-horizon spatial memory: every key frame the robot keeps, for hours, on disk.

A key frame becomes a :class:`MemoryRow` (stamp, pose and its source, the question-agnostic
perception's record: its objects and description, a thumbnail) in a :class:`MemoryStore`:
SQLite by default (:class:`SqliteMemoryStore`), PostgreSQL for a fleet writing to one server
(:class:`PostgresMemoryStore`). A question then selects at most the key-frame budget from the
whole memory (:class:`Retriever`) and :func:`memory_record` makes the perception record the
reasoner's text is rendered from, with every frame's age, the motion between the selected
frames from their poses, and where the objects the question names are now (:mod:`.places`),
from the objects the writer placed as it stored the frames (:mod:`.placements`: bearing rays
crossed from the stored poses, kept in the store); :func:`locate` answers where the objects
some words name were placed, with a pose to approach each from (:mod:`.locate`). The layer
stands on ``core`` alone and imports no ROS.
"""

from embodied_r_ros.memory.errors import SpatialMemoryError
from embodied_r_ros.memory.factory import open_store
from embodied_r_ros.memory.locate import Located, LocateRequest, locate
from embodied_r_ros.memory.placements import Placement, Placer
from embodied_r_ros.memory.recorder import MemoryRecorder
from embodied_r_ros.memory.retrieval import Retriever, Selection
from embodied_r_ros.memory.sqlite_store import SqliteMemoryStore
from embodied_r_ros.memory.store import MemoryRow, MemoryStore, Span, TextHit
from embodied_r_ros.memory.text import memory_record, records_from_rows
from embodied_r_ros.memory.time_phrases import TimeRange, TimeSpec, parse_time_phrases

__all__ = [
    "LocateRequest",
    "Located",
    "MemoryRecorder",
    "MemoryRow",
    "MemoryStore",
    "Placement",
    "Placer",
    "Retriever",
    "Selection",
    "Span",
    "SpatialMemoryError",
    "SqliteMemoryStore",
    "TextHit",
    "TimeRange",
    "TimeSpec",
    "locate",
    "memory_record",
    "open_store",
    "parse_time_phrases",
    "records_from_rows",
]

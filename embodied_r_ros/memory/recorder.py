"""Key frames into the memory, as they arrive: the writer's side of the memory.

The frame buffer selects a key frame, streaming perception describes it question-agnostically;
:meth:`MemoryRecorder.record` then stores one row with the pose the frame got, the objects the
description names and a small thumbnail. Embeddings (where an embedder is installed) are
computed in small batches, so a key frame a second costs a fraction of a core: the row and its
full-text entry are stored at once, its vector a few frames later; rows a crash left without a
vector are embedded when the recorder starts again.

Each stored row's objects are placed at once (:class:`~embodied_r_ros.memory.placements
.Placer`, from the row's pose and its objects' bearings) and the changed placements stored
beside it; a recorder starting on a memory places the rows stored after the last placed one
first (those a crash or an older version left unplaced).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from embodied_r_ros.core.images import encode_jpeg, resize_max_side
from embodied_r_ros.core.perception_text import observation
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.core.streaming import KeyFrameNote
from embodied_r_ros.memory.embedder import TextEmbedder
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.placements import PENDING_S, Placer
from embodied_r_ros.memory.query_terms import objects_in
from embodied_r_ros.memory.store import MemoryRow, MemoryStore, PoseSource, check_name

log = logging.getLogger(__name__)


def thumbnail(image: np.ndarray, side: int = 96, quality: int = 70) -> bytes:
    """A JPEG of ``image`` (RGB) no longer than ``side`` pixels on its longer side."""
    return encode_jpeg(resize_max_side(image, side), quality)


class MemoryRecorder:
    """Writes one robot's key frames to a writable store; not thread-safe (one ingest thread).

    ``thumbnail_side`` 0 keeps no thumbnails; ``embed_batch`` rows are embedded together.
    """

    def __init__(self, store: MemoryStore, robot: str = "robot", *,
                 embedder: TextEmbedder | None = None, thumbnail_side: int = 96,
                 thumbnail_quality: int = 70, embed_batch: int = 8,
                 backfill: int = 4096) -> None:
        store.require_writable()
        self.store = store
        self.robot = check_name("robot", robot)
        self.embedder = embedder
        self.thumbnail_side = thumbnail_side
        self.thumbnail_quality = thumbnail_quality
        self.embed_batch = max(1, embed_batch)
        self._pending: list[tuple[int, str]] = []
        self.recorded = 0
        self.labels = LabelMatcher(embedder)
        self.placer = Placer(self.robot, matcher=self.labels)
        self.reload_placements()
        if embedder is not None and backfill > 0:
            self._backfill(backfill)

    def reload_placements(self) -> None:
        """Read this robot's placements from the store again (after rows were cleared) and
        place the rows stored after the last placed one."""
        self.placer = Placer(self.robot, self.store.placements([self.robot], rays=True),
                             self.labels)
        through = self.store.placed_through(self.robot)
        stamps = self.store.stamps(self.robot, -math.inf, math.inf)
        placed = [(i, t) for i, t in stamps if i <= through]
        if placed:  # the rays that waited for others when the writer stopped wait again
            recent = [i for i, t in placed if t >= placed[-1][1] - PENDING_S]
            for row in self.store.get(recent):
                self.placer.wait(row.frame_record(), row.pose)
        ids = [i for i, _ in stamps if i > through]
        for k in range(0, len(ids), 256):
            for row in self.store.get(ids[k:k + 256]):
                if row.id is not None:
                    self._place(row)
        if ids:
            log.info("placed the objects of %d stored rows of %s", len(ids), self.robot)

    def _place(self, row: MemoryRow) -> None:
        """Place ``row``'s objects and store the placements they changed."""
        assert row.id is not None
        changed, gone = self.placer.add_frame(row.frame_record(), row.pose)
        if changed or gone:  # a row that changes nothing is placed again harmlessly
            self.store.save_placements(self.robot, changed, gone, row.id)

    def record(self, stamp: float, description: str, *, camera: str = "camera",
               pose: Pose | None = None, pose_source: PoseSource | None = None,
               action: str | None = None, objects: Sequence[str] | None = None,
               image: np.ndarray | None = None,
               seen: Sequence[SeenObject] | None = None, by_vlm: bool = True) -> int:
        """Store one key frame; returns its row id. ``objects`` (the names search finds)
        default to those ``seen`` names, else those the description names
        (:func:`~embodied_r_ros.memory.query_terms.objects_in`); ``image`` (RGB) becomes
        the thumbnail; ``seen`` and ``by_vlm``: the frame's record of objects and whether a VLM
        described it (None: read from the description, as a row stored before records)."""
        thumb = (thumbnail(image, self.thumbnail_side, self.thumbnail_quality)
                 if image is not None and self.thumbnail_side > 0 else None)
        row = MemoryRow(stamp=float(stamp), description=description, robot=self.robot,
                        camera=camera, pose=pose, pose_source=pose_source if pose else None,
                        action=action, thumbnail=thumb,
                        seen=tuple(seen) if seen is not None else None, by_vlm=by_vlm)
        if objects is None:
            rec = row.frame_record()
            objects = (objects_in(description) if rec.described_by_vlm
                       else [o.name for o in rec.objects])
        row = replace(row, objects=tuple(objects))
        row_id = self.store.add(row)
        self.recorded += 1
        self._place(replace(row, id=row_id))
        if self.embedder is not None:
            self._pending.append((row_id, description))
            if len(self._pending) >= self.embed_batch:
                self.flush()
        return row_id

    def record_note(self, note: KeyFrameNote, *, pose: Pose | None = None,
                    pose_source: PoseSource | None = None,
                    image: np.ndarray | None = None) -> int:
        """Store what streaming perception made of a key frame
        (:class:`~embodied_r_ros.core.streaming.KeyFrameNote`): its record, and its
        observation as text for search."""
        return self.record_frame(note.record, camera=note.camera, pose=pose,
                                 pose_source=pose_source, image=image)

    def record_frame(self, record: FrameRecord, *, camera: str = "camera",
                     pose: Pose | None = None, pose_source: PoseSource | None = None,
                     image: np.ndarray | None = None) -> int:
        """Store one key frame's perception record, its observation as text for search."""
        return self.record(record.stamp, observation(record), camera=camera, pose=pose,
                           pose_source=pose_source, action=record.vlm_action, image=image,
                           seen=record.objects, by_vlm=record.described_by_vlm)

    def flush(self) -> None:
        """Embed and store the vectors of the rows recorded since the last flush."""
        if not self._pending or self.embedder is None:
            return
        ids, texts = zip(*self._pending, strict=True)
        self._pending.clear()
        self.store.add_vectors(ids, self.embedder.embed(texts), self.embedder.model_id)

    def _backfill(self, limit: int) -> None:
        assert self.embedder is not None
        rows = self.store.missing_vectors(self.robot, self.embedder.model_id, limit)
        for k in range(0, len(rows), 64):
            chunk = rows[k:k + 64]
            self.store.add_vectors([r.id for r in chunk if r.id is not None],
                                   self.embedder.embed([r.description for r in chunk]),
                                   self.embedder.model_id)
        if rows:
            log.info("embedded %d stored rows of %s that had no vector", len(rows), self.robot)

    def close(self) -> None:
        """Flush pending embeddings (the store stays open: its owner closes it)."""
        self.flush()

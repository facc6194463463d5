"""A long world's tour played through what the robot runs, with its questions asked on the way.

The benchmark of memory questions and the training rows of the long world both need the same
replay: the bag's frames in time order through the frame buffer's store
(:class:`~embodied_r_ros.agent.frame_store.FrameStore`: key frames, odometry) and a profile's
perception, whose question-agnostic description of each key frame goes into a memory
(:class:`~embodied_r_ros.memory.MemoryRecorder`); each question is handed to the caller when the
tour reaches its ask time, with the robot as it is then. A VLM in ``streaming`` mode describes
each key frame as the robot's background describer does (:meth:`Perceiver.prefetch
<embodied_r_ros.core.perception.Perceiver.prefetch>`: alone and after the previous key frame,
grounded where grounding is on), so the memory gets the records the robot's would.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tqdm import tqdm

from embodied_r_ros.agent.frame_store import FrameStore
from embodied_r_ros.core.config import Config
from embodied_r_ros.core.odometry import pose_near
from embodied_r_ros.core.perception import PerceptionResult
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.request import Question
from embodied_r_ros.memory.factory import embedder_for
from embodied_r_ros.memory.recorder import MemoryRecorder
from embodied_r_ros.memory.store import MemoryStore
from embodied_r_ros.recordings.bags import BagReader

log = logging.getLogger(__name__)

T = TypeVar("T")


def world_frames(world: Path) -> tuple[Iterator[tuple[np.ndarray, float]],
                                       list[tuple[float, Pose]]]:
    """A generated world's camera frames (lazily, compressed where the bag has them) and its
    odometry track."""
    manifest = json.loads((world / "world.json").read_text())
    topics = manifest["topics"]
    reader = BagReader(world / "bag").open()
    track = reader.read_poses(topics["odom"])

    def images() -> Iterator[tuple[np.ndarray, float]]:
        try:
            yield from reader.iter_images(topics["compressed"] if topics.get("compressed")
                                          in reader.topics else topics["image"])
        finally:
            reader.close()

    return images(), track


def world_questions(world: Path) -> list[dict[str, Any]]:
    """The world's questions in the order they are asked."""
    rows = [json.loads(line) for line in (world / "questions.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["stamp_ns"], r["id"]))


class TourRobot:
    """The frame buffer (the frame-buffer node's default 300 s) and the memory writer, at the
    start of ``world``'s tour; :meth:`play` feeds it the tour in time order."""

    def __init__(self, world: Path, config: Config, pipeline: EmbodiedR,
                 store: MemoryStore) -> None:
        self.config = config
        self.pipeline = pipeline
        self.buffer = FrameStore(config.keyframes,
                                 odom_tolerance_sec=config.perception.odom_tolerance_sec)
        self.recorder = MemoryRecorder(store, config.memory.robot,
                                       embedder=embedder_for(config),
                                       thumbnail_side=config.memory.thumbnail_side)
        self._images, track = world_frames(world)
        self.track_t = [t for t, _ in track]
        self.track_p = [p for _, p in track]
        self.buffer.on_frame = self._on_frame
        self.ingest_sec = 0.0
        self.keyframes = 0
        self._previous: np.ndarray | None = None  # the last key frame, for streaming

    def play(self, rows: Sequence[dict[str, Any]],
             ask: Callable[[dict[str, Any], TourRobot], T]) -> list[T]:
        """``ask(row, self)`` for each of ``rows`` (in ask order) when the tour reaches its ask
        time, the frame of that time already in the buffer; the recorder is closed after."""
        done: list[T] = []
        pending = iter(rows)
        row = next(pending, None)
        bar = tqdm(total=len(rows), desc="questions", disable=None)
        for image, stamp in self._images:
            while row is not None and row["stamp_ns"] / 1e9 < stamp - 1e-6:
                done.append(ask(row, self))
                bar.update()
                row = next(pending, None)
            if row is None:
                break
            self.add(image, stamp)
        while row is not None:  # asked at the last frame
            done.append(ask(row, self))
            bar.update()
            row = next(pending, None)
        bar.close()
        self.recorder.close()
        log.info("%d key frames recorded, %.3f s of perception and writing each",
                 self.keyframes, self.ingest_sec / max(self.keyframes, 1))
        return done

    def pose(self, stamp: float) -> Pose | None:
        return pose_near(self.track_t, self.track_p, stamp,
                         self.config.perception.odom_tolerance_sec)

    def add(self, image: np.ndarray, stamp: float) -> None:
        pose = self.pose(stamp)
        if pose is not None:
            self.buffer.add_pose(stamp, pose)
        if self.buffer.wants(stamp):
            self.buffer.add(image, stamp)
        else:
            self.buffer.skip(stamp)

    def window(self, question: Question) -> tuple[PerceptionResult, list[float]]:
        """The query without memory: the key-frame budget of the whole buffer, perceived as
        the node does. Raises :class:`~embodied_r_ros.core.pipeline.QueryError`."""
        w = self.buffer.window(0.0)
        result = self.pipeline.perceive_window(w.decoded(), w.stamps, question, w.motions)
        return result, list(w.stamps)

    def _on_frame(self, stamp: float, image: np.ndarray, keyframe: bool) -> None:
        """A key frame: described question-agnostically by the profile's perception (the
        geometric one describes a frame alone; a streaming VLM as the robot's background
        describer does) and recorded with its odometry pose."""
        if not keyframe:
            return
        t0 = time.perf_counter()
        perceiver = self.pipeline.perceiver
        assert perceiver is not None
        if perceiver.streaming and perceiver.vlm is not None:
            record = perceiver.prefetch(self._previous, image, stamp=stamp)
            self._previous = image
        else:
            record = perceiver.describe([image], [stamp], "").frames[0]
        pose = self.pose(stamp)
        self.recorder.record_frame(record, pose=pose,
                                   pose_source="odometry" if pose else None, image=image)
        self.ingest_sec += time.perf_counter() - t0
        self.keyframes += 1

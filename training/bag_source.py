"""Question rows over a recorded bag: reading and checking them, and cutting each one's window of
frames (and odometry) out of the open bag."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.bags import CAMERA_INFO_TYPE, POSE_TYPES
from embodied_r_ros.core.pipeline import EmbodiedR

from .dataset_files import BuildError, read_jsonl
from .samples import KeyFrames, Sample, SkipSample, check_sample, keyframes_of


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise BuildError(f"questions file not found: {p}")
    rows = list(read_jsonl(p))
    if not rows:
        raise BuildError(f"questions file {p} has no rows")
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise BuildError(f"{p} row {n}: expected a JSON object, got {type(row).__name__}")
    return rows


def _window_ns(row: dict[str, Any], bag_start_ns: int) -> tuple[int, int]:
    if row.get("stamp_start_ns") is not None and row.get("stamp_end_ns") is not None:
        return int(row["stamp_start_ns"]), int(row["stamp_end_ns"])
    if row.get("t_start") is not None and row.get("t_end") is not None:
        return (
            bag_start_ns + round(float(row["t_start"]) * 1e9),
            bag_start_ns + round(float(row["t_end"]) * 1e9),
        )
    raise ValueError("needs stamp_start_ns/stamp_end_ns or t_start/t_end")


def bag_samples(
    rows: Sequence[dict[str, Any]], bag_path: Path, bag_start_ns: int
) -> list[Sample]:
    """Samples from question rows (``id, question, options, answer``, a time window)."""
    samples = []
    for n, row in enumerate(rows, 1):
        try:
            start, end = _window_ns(row, bag_start_ns)
            if end < start:
                raise ValueError("the window ends before it starts")
            scene = row.get("scene", row.get("scene_seed", bag_path.stem))
            sample = Sample(
                id=str(row["id"]),
                scene=str(scene),
                category=str(row.get("category", "unknown")),
                question=str(row["question"]).strip(),
                options=[str(o).strip() for o in row["options"]],
                solution=str(row["answer"]).strip().upper()[:1],
                source=f"{bag_path.resolve()}#{start}-{end}",
                extra={
                    "window_ns": [start, end],
                    **({"answer_text": row["answer_text"]} if "answer_text" in row else {}),
                },
            )
            check_sample(sample)
        except (KeyError, TypeError, ValueError) as exc:
            what = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise BuildError(f"question row {n} ({row.get('id', '?')}): {what}") from None
        samples.append(sample)
    return samples


class BagFrames:
    """The :data:`FramesFn` of one open bag: frames of a sample's window, key-framed.

    Compressed bag chunks are decompressed on every read, so when the whole image topic fits in
    ``preload_bytes`` it is decoded once and windows are cut from memory; otherwise each window
    is read from the bag. Frames and odometry are read on first use: a rebuild from the journal
    reads neither.
    """

    def __init__(
        self,
        bag: Any,
        pipeline: EmbodiedR,
        image_topic: str,
        odom_topic: str | None = None,
        camera: Any = None,
        *,
        preload_bytes: int = 2 * 1024**3,
    ) -> None:
        self.bag = bag
        self.pipeline = pipeline
        self.image_topic = image_topic
        self.odom_topic = odom_topic
        self.camera = camera or pipeline.config.perception.camera
        self.preload_bytes = preload_bytes
        if odom_topic:
            bag.require_topic(odom_topic, POSE_TYPES)  # fail before any work, read on first use
        self._poses: list[tuple[float, Any]] | None = None
        self._loaded: list[tuple[np.ndarray, int]] | None = None
        self._tried = False

    def _preload(self) -> None:
        self._tried = True
        count = self.bag.require_topic(self.image_topic).count
        first = next(iter(self.bag.iter_images_ns(self.image_topic)), None)
        if first is None or first[0].nbytes * count > self.preload_bytes:
            return
        frames = list(self.bag.iter_images_ns(self.image_topic))
        frames.sort(key=lambda f: f[1])
        self._loaded = frames
        self._stamps = [s for _, s in frames]

    def window(self, start_ns: int, end_ns: int) -> Iterator[tuple[np.ndarray, float]]:
        """``(image, stamp_seconds)`` of the frames with ``start_ns <= stamp <= end_ns``."""
        if not self._tried:
            self._preload()
        if self._loaded is None:
            yield from self.bag.iter_images(self.image_topic, start_ns, end_ns)
            return
        lo = bisect.bisect_left(self._stamps, start_ns)
        hi = bisect.bisect_right(self._stamps, end_ns)
        for image, stamp in self._loaded[lo:hi]:
            yield image, stamp / 1e9

    def __call__(self, sample: Sample) -> KeyFrames:
        start, end = sample.extra["window_ns"]
        if self.odom_topic and self._poses is None:
            self._poses = self.bag.read_poses(self.odom_topic)
        poses = None
        if self._poses:
            margin = 0.5  # seconds of odometry either side, for the nearest pose
            poses = [p for p in self._poses if start / 1e9 - margin <= p[0] <= end / 1e9 + margin]
        try:
            return keyframes_of(self.window(start, end), self.pipeline, self.camera, poses)
        except SkipSample:
            raise SkipSample("no frames in the window") from None


def camera_info_topic(bag: Any) -> str | None:
    found = [t.name for t in bag.topics.values() if t.msgtype == CAMERA_INFO_TYPE]
    return found[0] if len(found) == 1 else None

"""Question rows over a recorded bag: reading and checking them (a bad row is left out with one
line naming the row and the field; the rest builds), and cutting each one's window of frames
(and odometry) out of the open bag."""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.odometry import PoseTrack
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.recordings.bags import CAMERA_INFO_TYPE, POSE_TYPES, WINDOW_SLACK_NS
from embodied_r_ros.sim.question_basis import QuestionBasis
from embodied_r_training.data.dataset_files import BuildError
from embodied_r_training.data.samples import (
    KeyFrames,
    Sample,
    SkipSample,
    bag_keyframes,
    check_sample,
)


class RowError(ValueError):
    """A question row that cannot be used: the field at fault and why (one line)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field '{field}': {message}" if field else message)
        self.field = field


@dataclass(frozen=True)
class QuestionRow:
    """One line of a question file: its number, and the object on it (or why there is none)."""

    number: int
    row: Any
    error: str = ""


def read_questions(path: str | Path) -> list[QuestionRow]:
    """Every non-empty line of a question file; a line that is not JSON is kept as a bad row
    (``error``) so that the rest still builds."""
    p = Path(path)
    if not p.is_file():
        raise BuildError(f"questions file not found: {p}")
    rows: list[QuestionRow] = []
    with p.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(QuestionRow(n, json.loads(line)))
            except json.JSONDecodeError as exc:
                rows.append(QuestionRow(n, None, f"not valid JSON ({exc.msg})"))
    if not rows:
        raise BuildError(f"questions file {p} has no rows")
    return rows


def _text(row: dict[str, Any], key: str) -> str:
    if key not in row:
        raise RowError(key, "missing")
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise RowError(key, f"expected non-empty text, got {json.dumps(value)[:40]}")
    return str(value).strip()


def _stamp(row: dict[str, Any], key: str, seconds: bool) -> float | int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RowError(key, f"expected a number, got {json.dumps(value)[:40]}")
    if not seconds and not float(value).is_integer():
        raise RowError(key, f"expected integer nanoseconds, got {value}")
    return float(value) if seconds else int(value)


def _window_ns(row: dict[str, Any], start_ns: int, end_ns: int) -> tuple[int, int]:
    """The row's clip in bag nanoseconds: ``stamp_start_ns``/``stamp_end_ns`` (bag time), else
    ``t_start``/``t_end`` (seconds from the bag's start); it must overlap the bag."""
    if row.get("stamp_start_ns") is not None or row.get("stamp_end_ns") is not None:
        keys, seconds = ("stamp_start_ns", "stamp_end_ns"), False
    elif row.get("t_start") is not None or row.get("t_end") is not None:
        keys, seconds = ("t_start", "t_end"), True
    else:
        raise RowError("t_start", "missing: give t_start/t_end (seconds from the bag's start) "
                       "or stamp_start_ns/stamp_end_ns (bag time)")
    for key in keys:
        if row.get(key) is None:
            raise RowError(key, "missing")
    lo, hi = (_stamp(row, k, seconds) for k in keys)
    if seconds:
        lo, hi = start_ns + round(lo * 1e9), start_ns + round(hi * 1e9)
    if hi < lo:
        raise RowError(keys[1], "the window ends before it starts")
    if hi < start_ns - WINDOW_SLACK_NS or lo > end_ns + WINDOW_SLACK_NS:
        length = (end_ns - start_ns) / 1e9
        window = f"{(lo - start_ns) / 1e9:.3f}..{(hi - start_ns) / 1e9:.3f} s"
        raise RowError(keys[0], f"the window {window} is outside the bag (0..{length:.3f} s "
                       "from its start)")
    return int(lo), int(hi)


def _basis(row: dict[str, Any], n_options: int) -> dict[str, Any] | None:
    """The row's question basis as written (checked where it says what the question asks:
    a known kind, one entry per option); None without one."""
    basis = row.get("basis")
    if basis is None:
        return None
    if not isinstance(basis, dict):
        raise RowError("basis", "expected an object")
    if "kind" in basis:
        try:
            asks = QuestionBasis.from_dict(basis)
        except (ValueError, TypeError, KeyError) as exc:
            raise RowError("basis", str(exc)) from None
        if len(asks.options) != n_options:
            raise RowError("basis", f"{len(asks.options)} options for {n_options} choices")
    return basis


def row_sample(row: Any, bag_path: Path, start_ns: int, end_ns: int) -> Sample:
    """The sample of one question row; :class:`RowError` names the field at fault."""
    if not isinstance(row, dict):
        raise RowError("", f"expected a JSON object, got {type(row).__name__}")
    qid = _text(row, "id")
    question = row.get("question")
    if not isinstance(question, str):
        raise RowError("question", "missing" if question is None else "expected text")
    question = question.strip()
    options = row.get("options")
    if options is None:
        raise RowError("options", "missing")
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise RowError("options", 'expected a list of "A. text" strings')
    answer = _text(row, "answer").upper()
    start, end = _window_ns(row, start_ns, end_ns)
    category = row.get("category", "unknown")
    if not isinstance(category, str):
        raise RowError("category", "expected text")
    scene = row.get("scene", row.get("scene_seed", bag_path.stem))
    basis = _basis(row, len(options))
    sample = Sample(
        id=qid,
        scene=str(scene),
        category=category,
        question=question,
        options=[o.strip() for o in options],
        solution=answer[:1],
        source=f"{bag_path.resolve()}#{start}-{end}",
        extra={
            "window_ns": [start, end],
            **({"answer_text": row["answer_text"]} if "answer_text" in row else {}),
            **({"basis": basis} if basis is not None else {}),
        },
    )
    try:
        check_sample(sample)
    except ValueError as exc:
        text = str(exc)
        field = "answer" if text.startswith("answer") else (
            "question" if "QUESTION" in text else "options")
        raise RowError(field, text) from None
    if len(answer) > 1 and not answer[1:].startswith("."):
        raise RowError("answer", f"expected a letter such as 'B', got {row['answer']!r}")
    return sample


def question_samples(
    rows: Sequence[QuestionRow], bag_path: Path, start_ns: int, end_ns: int
) -> tuple[list[Sample], list[str]]:
    """Samples of the good rows, and one line per bad row naming the row and the field (a
    later row reusing an id is bad too): the rest builds."""
    samples: list[Sample] = []
    bad: list[str] = []
    seen: dict[str, int] = {}
    for item in rows:
        label = f"question row {item.number}"
        if isinstance(item.row, dict) and item.row.get("id") is not None:
            label += f" ({str(item.row['id'])[:40]})"
        try:
            if item.error:
                raise RowError("", item.error)
            sample = row_sample(item.row, bag_path, start_ns, end_ns)
            if sample.id in seen:
                raise RowError("id", f"duplicate of row {seen[sample.id]}")
        except RowError as exc:
            bad.append(f"{label}: {exc}")
            continue
        seen[sample.id] = item.number
        samples.append(sample)
    return samples, bad


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
        self._poses: PoseTrack | None = None
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
            self._poses = self.bag.pose_track(self.odom_topic, image_topic=self.image_topic,
                                              tf=self.pipeline.config.perception.tf)
        try:
            return bag_keyframes(self.window(start, end), self.pipeline,
                                 self._poses if self._poses is not None else [], self.camera)
        except SkipSample:
            raise SkipSample("no frames in the window") from None


def camera_info_topic(bag: Any) -> str | None:
    found = [t.name for t in bag.topics.values() if t.msgtype == CAMERA_INFO_TYPE]
    return found[0] if len(found) == 1 else None

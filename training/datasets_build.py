"""Turning questions over recorded frames into a training table, resumably.

A :class:`Sample` is one multiple-choice question about one stretch of video (a bag window or a
benchmark clip). For each sample the core picks key frames, measures the motion between them
(odometry when the bag has it, else visual ego-motion) and perceives them with the configured VLM
or geometrically; the row keeps the LM prompt and the pieces it was assembled from, so training
can shorten it (older frames first) without perceiving again.

Perception is the expensive step, so there are two caches: the core's per-(frames, question,
model, prompt version) VLM cache, and this module's journal ``OUT/.build/rows.jsonl``, one
finished row per line, keyed by (source window, question, perception settings). A killed build
resumes where it stopped and a rebuild with the same settings touches no frame and no model.
The table files are written atomically once every sample is done.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.bags import CAMERA_INFO_TYPE, POSE_TYPES, odometry_motions
from embodied_r_ros.core.cache import digest
from embodied_r_ros.core.config import Config
from embodied_r_ros.core.perception import MotionSource, description_dicts
from embodied_r_ros.core.pipeline import NO_FRAMES, EmbodiedR, QueryError, validate_query
from embodied_r_ros.core.reasoning import build_messages, format_question, parse_options

from .splits import SplitBy, Splits, feasible_folds, make_splits

log = logging.getLogger(__name__)

JOURNAL_DIR = ".build"
JOURNAL = "rows.jsonl"
TABLE = "data.jsonl"
SPLITS_FILE = "splits.json"
MANIFEST = "manifest.json"
DATASET_VERSION = 1


class BuildError(Exception):
    """A dataset that cannot be built; the message is one line."""


@dataclass(frozen=True)
class Sample:
    """One multiple-choice question about one stretch of video."""

    id: str
    scene: str
    category: str
    question: str  # without the options
    options: list[str]  # "A. text", in letter order
    solution: str  # the correct letter
    source: str  # what the frames come from: a video path, or "bag#start_ns-end_ns"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class KeyFrames:
    """What perception needs: key frames, their stamps and the motions between them."""

    images: list[np.ndarray]
    stamps: list[float]
    motions: list[Motion | None]
    indices: list[int] = field(default_factory=list)
    motion_source: MotionSource = "visual"


FramesFn = Callable[[Sample], KeyFrames]


class SkipSample(Exception):
    """This sample cannot be used (no frames in its window, unreadable video): count, go on."""


#: errors that are the row's own (skipped and listed); any other stops the build
ROW_ERRORS = frozenset({NO_FRAMES, "CORRUPT_FRAME", "UNSUPPORTED_ENCODING", "BAD_OPTIONS",
                        "EMPTY_QUESTION", "QUESTION_TOO_LONG"})


class BackendFailed(BuildError):
    """The perception model failed mid-build: nothing is written but the journal, and the
    same command resumes from it."""

    def __init__(self, error: QueryError, sample_id: str, done: int, total: int) -> None:
        super().__init__(
            f"{error.code} while perceiving {sample_id} ({error}); {done} of {total} rows are "
            "in the journal: fix the model and rerun the same command to resume"
        )


@dataclass
class BuildReport:
    rows: int = 0
    reused: int = 0
    perceived: int = 0
    cache_hits: int = 0  # perceived rows whose VLM replies all came from the perception cache
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_ids: list[tuple[str, str]] = field(default_factory=list)  # (id, reason)
    seconds: float = 0.0

    def skip(self, sample_id: str, reason: str) -> None:
        self.skipped[reason] += 1
        self.skipped_ids.append((sample_id, reason))
        log.warning("skipping %s: %s", sample_id, reason)

    def summary(self) -> str:
        skipped = sum(self.skipped.values())
        text = (
            f"{self.rows} rows ({self.perceived} perceived, {self.cache_hits} of them from the "
            f"perception cache, {self.reused} from the journal), "
            f"{skipped} skipped, {self.seconds:.1f} s"
        )
        if skipped:
            text += " [" + ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())) + "]"
            listed = ", ".join(i for i, _ in self.skipped_ids[:5])
            more = len(self.skipped_ids) - 5
            text += f"; skipped rows: {listed}" + (f" and {more} more" if more > 0 else "")
        return text


def check_sample(sample: Sample) -> None:
    """The question and options must pass what ``ask`` checks, and the solution must be one
    of the options' letters (ValueError, one line)."""
    try:
        question, options = validate_query(sample.question, sample.options)
    except QueryError as exc:
        raise ValueError(f"{exc.code}: {exc}") from None
    letters = [letter for letter, _ in parse_options(options)]
    if sample.solution not in letters:
        raise ValueError(f"answer {sample.solution!r} is not one of {''.join(letters)}")


def check_build(
    samples: Sequence[Sample],
    *,
    split_by: SplitBy = "scene",
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.75, 0.05, 0.20),
    folds: int = 5,
) -> int:
    """What a build can know before any model loads: rows present, ids unique, the splits
    possible. Returns the folds to make: ``folds``, or as many as the groups allow (with one
    warning), so a partial download still imports."""
    if not samples:
        raise BuildError("no questions to build a dataset from")
    counts = Counter(s.id for s in samples)
    dupes = sorted(i for i, n in counts.items() if n > 1)
    if dupes:
        raise BuildError(f"question ids are not unique: {', '.join(dupes[:5])}")
    rows = [{"id": s.id, "scene": s.scene} for s in samples]
    usable = feasible_folds(rows, split_by, folds)
    if usable != folds:
        groups = len({s.scene for s in samples}) if split_by == "scene" else len(samples)
        made = f"{usable} folds" if usable else "no k-fold split"
        log.warning("%d %s only: %s instead of %d", groups,
                    "scenes" if split_by == "scene" else "questions", made, folds)
    make_splits(rows, by=split_by, seed=seed, fractions=fractions, folds=usable)
    return usable


def settings_fingerprint(config: Config, model_id: str, extra: dict[str, Any]) -> str:
    """Everything that changes a row besides its sample: perception and key-frame settings."""
    return digest(
        json.dumps(
            {
                "version": DATASET_VERSION,
                "keyframes": config.keyframes.model_dump(),
                # how the calls are scheduled changes no row
                "perception": config.perception.model_dump(
                    exclude={"vlm", "concurrency", "streaming_queue"}
                ),
                "model": model_id,
                "extra": extra,
            },
            sort_keys=True,
            default=str,
        )
    )


def sample_key(sample: Sample, fingerprint: str) -> str:
    return digest(fingerprint, json.dumps(asdict(sample), sort_keys=True, default=str))


# -- the journal -------------------------------------------------------------------------------


def read_journal(path: Path) -> dict[str, dict[str, Any]]:
    """Finished rows by key; a torn last line (the build was killed mid-write) is ignored."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    with path.open() as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                log.warning("ignoring a torn line in %s", path)
                continue
            if isinstance(row, dict) and "_key" in row:
                rows[row["_key"]] = row
    return rows


class _Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None

    def append(self, row: dict[str, Any]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a torn last line must not glue onto the next row
            if self.path.is_file() and self.path.stat().st_size:
                with self.path.open("rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    torn = fh.read(1) != b"\n"
            else:
                torn = False
            self._fh = self.path.open("a")
            if torn:
                self._fh.write("\n")
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


# -- writing -------------------------------------------------------------------------------------


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and a rename (never a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def jsonl(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def perceive_sample(pipeline: EmbodiedR, sample: Sample, frames: KeyFrames) -> dict[str, Any]:
    """The table row of one sample (the journal adds its key; ``_cached`` marks a row whose
    perception came from the cache)."""
    result = pipeline.perceive(
        frames.images,
        frames.stamps,
        sample.question,
        sample.options,
        motions=frames.motions,
        motion_source=frames.motion_source,
    )
    return {
        "id": sample.id,
        "scene": sample.scene,
        "category": sample.category,
        "question": sample.question,
        "options": list(sample.options),
        "solution": sample.solution,
        "source": sample.source,
        "prompt": build_messages(result.text, pipeline.prompts),
        "question_block": format_question(sample.question, sample.options),
        "frames": description_dicts(result),
        "key_frame_stamps": [float(s) for s in frames.stamps],
        "key_frame_indices": [int(i) for i in frames.indices],
        "motion_source": frames.motion_source,
        "perception_model": pipeline.perceiver.model_id if pipeline.perceiver else "",
        "prompt_version": pipeline.prompts.version,
        **{k: v for k, v in sample.extra.items() if k not in ("prompt", "frames")},
        "_cached": result.from_cache,
    }


def _progress(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="q", dynamic_ncols=True, smoothing=0.1)


def build_dataset(
    samples: Sequence[Sample],
    frames_for: FramesFn,
    pipeline: EmbodiedR,
    out_dir: str | Path,
    *,
    fingerprint: str,
    split_by: SplitBy = "scene",
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.75, 0.05, 0.20),
    folds: int = 5,
    manifest: dict[str, Any] | None = None,
    progress: bool = True,
) -> BuildReport:
    """Perceive every sample not in the journal yet, then write the table, splits and manifest.

    Splits are computed before any perception (bad split settings fail at once). ``frames_for``
    may raise :class:`SkipSample` to skip a sample (counted in the report). If ``out_dir`` did
    not exist and the build fails, nothing is left behind.
    """
    start = time.perf_counter()
    out = Path(out_dir)
    created = not out.exists()
    report = BuildReport()
    folds = check_build(samples, split_by=split_by, seed=seed, fractions=fractions, folds=folds)
    journal_path = out / JOURNAL_DIR / JOURNAL
    done = read_journal(journal_path)
    journal = _Journal(journal_path)
    rows: list[dict[str, Any]] = []
    bar = _progress(len(samples), "perception") if progress else None
    try:
        for sample in samples:
            key = sample_key(sample, fingerprint)
            row = done.get(key)
            if row is not None:
                report.reused += 1
            else:
                try:
                    row = perceive_sample(pipeline, sample, frames_for(sample))
                except SkipSample as exc:
                    report.skip(sample.id, str(exc))
                    row = None
                except QueryError as exc:
                    if exc.code not in ROW_ERRORS:  # the model failed, not the row: stop
                        raise BackendFailed(exc, sample.id, report.reused + report.perceived,
                                            len(samples)) from None
                    report.skip(sample.id, exc.code)
                    row = None
                if row is not None:
                    report.cache_hits += bool(row.pop("_cached", False))
                    row["_key"] = key
                    journal.append(row)
                    report.perceived += 1
            if row is not None:
                rows.append(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reused=report.reused, skipped=sum(report.skipped.values()))
    except BaseException as exc:
        journal.close()
        # Ctrl-C and a failed model keep the journal to resume from; other errors clean up
        if not isinstance(exc, KeyboardInterrupt | BackendFailed):
            _remove_failed(out, created)
        raise
    finally:
        if bar is not None:
            bar.close()
        journal.close()
    if not rows:
        if created:
            _remove_failed(out, created)
        raise BuildError("no rows left to write: " + report.summary())
    table = [{k: v for k, v in r.items() if k != "_key"} for r in rows]
    splits = make_splits(table, by=split_by, seed=seed, fractions=fractions, folds=folds)
    write_table(out, table, splits, {**(manifest or {}), "report": _report_dict(report)})
    report.rows = len(table)
    report.seconds = time.perf_counter() - start
    return report


def _report_dict(report: BuildReport) -> dict[str, Any]:
    return {
        "perceived": report.perceived,
        "reused": report.reused,
        "cache_hits": report.cache_hits,
        "skipped": dict(report.skipped),
        "skipped_rows": [{"id": i, "reason": r} for i, r in report.skipped_ids],
    }


def _remove_failed(out: Path, created: bool) -> None:
    if created and out.exists():
        shutil.rmtree(out, ignore_errors=True)


def write_table(
    out: Path, rows: list[dict[str, Any]], splits: Splits, manifest: dict[str, Any]
) -> None:
    """``data.jsonl`` (every row), ``train/val/test.jsonl``, ``splits.json``, ``manifest.json``."""
    by_id = {r["id"]: r for r in rows}
    for split in ("train", "val", "test"):
        write_atomic(out / f"{split}.jsonl", jsonl(by_id[i] for i in splits.ids(split)))
    write_atomic(out / SPLITS_FILE, json.dumps(splits.to_dict(), indent=1))
    counts = Counter(r["category"] for r in rows)
    info = {
        **manifest,
        "version": DATASET_VERSION,
        "rows": len(rows),
        "categories": dict(sorted(counts.items())),
        "splits": {s: len(splits.ids(s)) for s in ("train", "val", "test")},
        "folds": [len(f) for f in splits.folds],
    }
    write_atomic(out / MANIFEST, json.dumps(info, indent=1, default=str))
    write_atomic(out / TABLE, jsonl(rows))  # last: its presence means the build finished


# -- reading -------------------------------------------------------------------------------------


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BuildError(f"{path}:{n}: not valid JSON ({exc.msg})") from None


def load_rows(data_dir: str | Path, split: str = "all", fold: int | None = None) -> list[dict]:
    """Rows of a built dataset: one split, or a k-fold split (``fold``)."""
    root = Path(data_dir)
    table = root / TABLE
    if not table.is_file():
        raise BuildError(f"{root} is not a built dataset (no {TABLE}; run 'build' or an importer)")
    rows = list(read_jsonl(table))
    if split == "all" and fold is None:
        return rows
    splits = Splits.from_dict(json.loads((root / SPLITS_FILE).read_text()))
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in splits.ids(split, fold) if i in by_id]


def load_manifest(data_dir: str | Path) -> dict[str, Any]:
    path = Path(data_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


# -- bags ----------------------------------------------------------------------------------------


def visual_motions(selection: Any, pipeline: EmbodiedR, camera: Any) -> list[Motion | None]:
    """Ego-motion between consecutive key frames from the images (no odometry)."""
    from embodied_r_ros.core.egomotion import keyframe_motions

    return list(keyframe_motions(selection, pipeline.config.keyframes, camera))


def keyframes_of(
    frames: Iterable[tuple[np.ndarray, float]],
    pipeline: EmbodiedR,
    camera: Any,
    poses: Sequence[tuple[float, Any]] | None = None,
) -> KeyFrames:
    """Key frames of a frame stream and the motions between them (odometry when given)."""
    selection = pipeline.select(frames)
    if not selection.images:
        raise SkipSample("no frames")
    if poses:
        motions: list[Motion | None] = list(odometry_motions(poses, selection.stamps))
        source = "odometry"
    else:
        motions, source = visual_motions(selection, pipeline, camera), "visual"
    return KeyFrames(
        images=list(selection.images),
        stamps=list(selection.stamps),
        motions=motions,
        indices=list(selection.indices),
        motion_source=source,
    )


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

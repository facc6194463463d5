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
The table files are written atomically once every sample is done (``dataset_files``); samples
and their key frames are ``samples``, the journal is ``journal``, bags are ``bag_source``.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.pipeline import NO_FRAMES, EmbodiedR, QueryError
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.request import Question
from embodied_r_training.data.dataset_files import BuildError, write_table
from embodied_r_training.data.journal import JOURNAL, JOURNAL_DIR, Journal, read_journal, sample_key
from embodied_r_training.data.samples import (
    FramesFn,
    KeyFrames,
    Sample,
    SkipSample,
    check_sample,
)
from embodied_r_training.data.splits import SplitBy, feasible_folds, make_splits

log = logging.getLogger(__name__)


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


def checked_questions(samples: Sequence[Sample]) -> dict[str, Question]:
    """Each sample's question as ``ask`` checks it (:func:`check_sample`), once, before any
    model loads; a sample that fails is a :class:`BuildError` naming it."""
    questions: dict[str, Question] = {}
    for sample in samples:
        try:
            questions[sample.id] = check_sample(sample)
        except ValueError as exc:
            raise BuildError(f"question {sample.id}: {exc}") from None
    return questions


def perceive_sample(pipeline: EmbodiedR, sample: Sample, question: Question,
                    frames: KeyFrames) -> dict[str, Any]:
    """The table row of one sample, perceived for its checked ``question`` (the journal adds
    its key; ``_cached`` marks a row whose perception came from the cache).
    ``sample.extra["question_block"]`` is the question as the benchmark words it (the
    official route); without it the block is formatted."""
    block = sample.extra.get("question_block") or format_question(sample.question,
                                                                   sample.options)
    if frames.robot:  # the robot's rule: the same call as the nodes make
        result = pipeline.perceive_window(frames.images, frames.stamps, question,
                                          frames.motions, camera=frames.camera)
    else:
        result = pipeline.perceive(frames.images, frames.stamps, question,
                                   motions=frames.motions, motion_source=frames.motion_source,
                                   question_block=block)
    return {
        "id": sample.id,
        "scene": sample.scene,
        "category": sample.category,
        "question": sample.question,
        "options": list(sample.options),
        "solution": sample.solution,
        "source": sample.source,
        "prompt": pipeline.reasoning_messages(result.text),
        "question_block": block,
        "records": result.record.to_dict(),
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
    questions = checked_questions(samples)
    journal_path = out / JOURNAL_DIR / JOURNAL
    done = read_journal(journal_path)
    journal = Journal(journal_path)
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
                    row = perceive_sample(pipeline, sample, questions[sample.id],
                                          frames_for(sample))
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
    write_table(out, table, splits, {**(manifest or {}), "fingerprint": fingerprint,
                                     "report": _report_dict(report)})
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

"""Samples from the public benchmarks Embodied-R trains on: UrbanVideo-Bench and VSI-Bench.

Both become :class:`~embodied_r_training.data.samples.Sample` lists with the paper's eight
categories (the tasks dataset/data_preprocess.py of Embodied-R.code keeps); ``all_categories``
keeps every multiple-choice category instead.
UrbanVideo-Bench puts the options inside the question text after a label that varies
("Choices:", "Choice:", "choose:", sometimes "Answer:" or none); :func:`split_question_text`
finds them by their letters in order, whatever the label. Rows whose video is missing are
counted and skipped, so a partial download still imports. With ``raw_question`` (the paper
route) the question block the VLM and the LM read is the benchmark's own text, as the official
preprocessing passes it on (:func:`official_question_block`), not the project's rewording.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.reasoning import LETTERS
from embodied_r_training.data.dataset_files import BuildError, read_jsonl
from embodied_r_training.data.samples import Sample, check_sample

log = logging.getLogger(__name__)

URBANVIDEO_CATEGORIES = (
    "Landmark Position",
    "Counterfactual",
    "Progress Evaluation",
    "Action Generation",
)
VSI_CATEGORIES = (
    "object_rel_distance",
    "object_rel_direction",
    "route_planning",
    "obj_appearance_order",
)
VSI_MERGED = {
    f"object_rel_direction_{level}": "object_rel_direction" for level in ("easy", "medium", "hard")
}
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm")

_LABEL_RE = re.compile(r"\b(?:choices?|choose|options?)\s*:", re.IGNORECASE)
_QUESTION_RE = re.compile(r"^\s*question\s*:\s*", re.IGNORECASE)
_QUOTES = " \t\r\n\"'`"


def _option_start(letter: str) -> re.Pattern[str]:
    # "A." / "A)" / "(A)" at a line start, after whitespace or after a label's colon
    return re.compile(rf"(?:^|(?<=[\s:]))\(?{letter}[.)]\s*(?=\S)", re.MULTILINE)


@dataclass
class ImportReport:
    rows_in: int = 0
    kept: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    categories: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        text = f"{self.kept} of {self.rows_in} rows kept"
        if self.skipped:
            text += "; skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items()))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "kept": self.kept,
            "skipped": dict(self.skipped),
            "categories": dict(self.categories),
        }


class BenchmarkError(BuildError):
    """A benchmark folder that cannot be imported."""


def split_question_text(text: str) -> tuple[str, list[str]]:
    """``"Question: q  \\nchoose:  \\nA. x\\nB. y"`` -> ``("q", ["A. x", "B. y"])``.

    Options are found as "A." then "B." ... in order, after the last options label when there
    is one. Raises ValueError when fewer than two options are found.
    """
    body = text.strip(_QUOTES)
    labels = list(_LABEL_RE.finditer(body))
    search_from = labels[-1].end() if labels else 0
    starts: list[tuple[int, int]] = []  # (start of "A.", start of its text)
    pos = search_from
    for letter in LETTERS:
        match = _option_start(letter).search(body, pos)
        if match is None:
            break
        starts.append((match.start(), match.end()))
        pos = match.end()
    if len(starts) < 2:
        raise ValueError("fewer than two options (A., B., ...) found in the question text")
    options = []
    for i, (_, text_start) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(body)
        option = re.sub(r"\s+", " ", body[text_start:end]).strip(_QUOTES)
        options.append(f"{LETTERS[i]}. {option}")
    question_end = labels[-1].start() if labels else starts[0][0]
    question = body[:question_end]
    # a stray "Answer:" between the label and option A belongs to neither
    question = _QUESTION_RE.sub("", question.strip(_QUOTES), count=1)
    return re.sub(r"\s+", " ", question).strip(), options


def official_question_block(text: str) -> str:
    """The question block as the official code writes it into the LM prompt: ``"Question: "``
    and the text after the first ``Question:`` stripped (``extract_qa`` in
    VLM_perception_*.py), the whole text when it has none."""
    index = text.find("Question:")
    return "Question: " + (text[index + len("Question:"):].strip() if index != -1 else text)


def vsibench_question_text(question: str, options: Iterable[str]) -> str:
    """A VSI-Bench row's question as dataset/data_preprocess.py formats it."""
    return f"Question: {question}\nChoices:\n" + "\n".join(options)


def _stable_id(*parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:12]


class OutsideRoot(ValueError):
    """A video name that leads out of the benchmark folder (``../../x.mp4``)."""


def _find_video(root: Path, names: Iterable[str]) -> Path | None:
    """The first existing ``root/name``; a name that resolves outside ``root`` is refused."""
    base = root.resolve()
    for name in names:
        candidate = (root / name).resolve()
        if not candidate.is_relative_to(base):
            raise OutsideRoot(f"video {name!r} is outside {root}")
        if candidate.is_file():
            return candidate
    return None


def read_table(root: Path, prefer: tuple[str, ...]) -> tuple[Path, list[dict[str, Any]]]:
    """The question table of a benchmark folder: a named file first, else the only
    parquet / jsonl / json file in it."""
    candidates = [root / name for name in prefer if (root / name).is_file()]
    if not candidates:
        found = sorted(
            p for p in root.iterdir() if p.suffix in (".parquet", ".jsonl", ".json")
        ) if root.is_dir() else []
        if len(found) != 1:
            raise BenchmarkError(
                f"{root}: expected one question table ({', '.join(prefer)} or a single "
                f".parquet/.jsonl file), found {len(found)}"
            )
        candidates = found
    path = candidates[0]
    try:
        if path.suffix == ".parquet":
            import pandas as pd

            frame = pd.read_parquet(path)
            rows = [{k: _plain(v) for k, v in r.items()}
                    for r in frame.to_dict(orient="records")]
        elif path.suffix == ".jsonl":
            rows = list(read_jsonl(path))
        else:
            data = json.loads(path.read_text())
            rows = data if isinstance(data, list) else data.get("data", [])
    except BuildError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow, json and OS errors alike: one line
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise BenchmarkError(f"cannot read {path}: {reason}") from None
    if not isinstance(rows, list):
        raise BenchmarkError(f"{path}: expected a list of question rows")
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise BenchmarkError(
                f"{path} row {n}: expected a table row (an object), got {type(row).__name__}"
            )
    return path, rows


def _plain(value: Any) -> Any:
    """numpy arrays / scalars from parquet -> lists / Python scalars."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


_FIRST_NUMBER_RE = re.compile(r"_(\d+)")


def _before_nth_underscore(text: str, n: int) -> str:
    return "_".join(text.split("_")[:n])


def urbanvideo_scene(video_id: str) -> str:
    """The scene of an UrbanVideo-Bench video as the official preprocessing groups them.

    ``EmbodiedCity...``: up to the second underscore (with one underscore: the name before the
    dot); ``AerialVLN...``: up to the third (with two: before the dot); ``RealWorld...`` with one
    underscore: before the dot, else ``RealWorld_<first number after an underscore>``. Where
    the official rules give no scene (another prefix, too few underscores) the video is its own
    scene, rather than the official code's one shared ``None`` scene for all of them.
    """
    underscores = video_id.count("_")
    stem = video_id.split(".")[0]
    scene: str | None = None
    if video_id.startswith("EmbodiedCity"):
        scene = _before_nth_underscore(video_id, 2) if underscores >= 2 else (
            stem if underscores == 1 else None)
    elif video_id.startswith("AerialVLN"):
        scene = _before_nth_underscore(video_id, 3) if underscores >= 3 else (
            stem if underscores == 2 else None)
    elif video_id.startswith("RealWorld"):
        if underscores == 1:
            scene = stem
        else:
            number = _FIRST_NUMBER_RE.search(video_id)
            scene = f"RealWorld_{number.group(1)}" if number else None
    return scene if scene is not None else Path(video_id).stem


def urbanvideo_samples(
    root: str | Path, *, all_categories: bool = False, report: ImportReport | None = None,
    raw_question: bool = False,
) -> list[Sample]:
    """UrbanVideo-Bench: ``root/MCQ.parquet`` (or a jsonl of its rows) and ``root/videos/``;
    ``raw_question``: the LM and VLM read the benchmark's question text as it is."""
    base = Path(root)
    if not base.is_dir():
        raise BenchmarkError(f"UrbanVideo-Bench folder not found: {base}")
    _, rows = read_table(base, ("MCQ.parquet", "MCQ.jsonl"))
    report = report if report is not None else ImportReport()
    samples = []
    for n, row in enumerate(rows, 1):
        report.rows_in += 1
        category = str(row.get("question_category", "")).strip()
        if not all_categories and category not in URBANVIDEO_CATEGORIES:
            report.skipped["other category"] += 1
            continue
        try:
            question, options = split_question_text(str(row["question"]))
            video_id = str(row["video_id"])
            block = {"question_block": official_question_block(str(row["question"]))}
            sample = Sample(
                id=f"uv-{row.get('Question_id', _stable_id(video_id, row['question']))}",
                scene=urbanvideo_scene(video_id),
                category=category,
                question=question,
                options=options,
                solution=str(row["answer"]).strip().upper()[:1],
                source=video_id,
                extra={"benchmark": "UrbanVideo-Bench", "video_id": video_id,
                       **(block if raw_question else {})},
            )
            check_sample(sample)
        except (KeyError, ValueError) as exc:
            report.skipped["unparsable"] += 1
            log.warning("UrbanVideo row %d: %s", n, exc)
            continue
        if _keep_with_video(sample, base, (f"videos/{video_id}", video_id), samples, report,
                            f"UrbanVideo row {n}"):
            report.categories[category] += 1
    report.kept = len(samples)
    return samples


def vsibench_samples(
    root: str | Path, *, all_categories: bool = False, report: ImportReport | None = None,
    raw_question: bool = False,
) -> list[Sample]:
    """VSI-Bench: a parquet or jsonl table and scene videos under ``root/<dataset>/<scene>.mp4``
    (the layout of its zips), ``root/videos/`` or ``root/``; ``raw_question``: the question
    block exactly as the official preprocessing formats it."""
    base = Path(root)
    if not base.is_dir():
        raise BenchmarkError(f"VSI-Bench folder not found: {base}")
    _, rows = read_table(base, ("test-00000-of-00001.parquet", "test.parquet", "test.jsonl"))
    report = report if report is not None else ImportReport()
    samples = []
    for n, row in enumerate(rows, 1):
        report.rows_in += 1
        raw_type = str(row.get("question_type", "")).strip()
        category = VSI_MERGED.get(raw_type, raw_type)
        if not all_categories and category not in VSI_CATEGORIES:
            report.skipped["other category"] += 1
            continue
        options = [str(o).strip() for o in (row.get("options") or [])]
        if not options:
            report.skipped["not multiple choice"] += 1
            continue
        try:
            scene, dataset = str(row["scene_name"]), str(row.get("dataset", ""))
            text = vsibench_question_text(str(row["question"]), options)
            block = {"question_block": official_question_block(text)} if raw_question else {}
            sample = Sample(
                id=f"vsi-{row['id']}" if row.get("id") is not None else
                f"vsi-{_stable_id(dataset, scene, row['question'], options)}",
                scene=scene,
                category=category,
                question=str(row["question"]).strip(),
                options=options,
                solution=str(row["ground_truth"]).strip().upper()[:1],
                source=f"{dataset}/{scene}",
                extra={"benchmark": "VSI-Bench", "dataset": dataset, "question_type": raw_type,
                       **block},
            )
            check_sample(sample)
        except (KeyError, ValueError) as exc:
            report.skipped["unparsable"] += 1
            log.warning("VSI-Bench row %d: %s", n, exc)
            continue
        names = [f"{d}/{scene}{s}" for d in (dataset, "videos", ".") for s in VIDEO_SUFFIXES]
        if _keep_with_video(sample, base, names, samples, report, f"VSI-Bench row {n}"):
            report.categories[category] += 1
    report.kept = len(samples)
    return samples


def _keep_with_video(sample: Sample, root: Path, names: Iterable[str], samples: list[Sample],
                     report: ImportReport, where: str) -> bool:
    """Append ``sample`` with its video found under ``root`` as its source; a video that is
    missing or outside the root is counted in the report and the row left out."""
    try:
        video = _find_video(root, names)
    except OutsideRoot as exc:
        report.skipped["video outside --root"] += 1
        log.warning("%s: %s", where, exc)
        return False
    if video is None:
        report.skipped["missing video"] += 1
        return False
    samples.append(Sample(**{**sample.__dict__, "source": str(video.resolve())}))
    return True


class VideoFrames:
    """The FramesFn of benchmark samples: key frames of the sample's video file."""

    def __init__(self, pipeline: Any, camera: Any = None) -> None:
        self.pipeline = pipeline
        self.camera = camera or pipeline.config.perception.camera

    def __call__(self, sample: Sample) -> Any:
        from embodied_r_ros.recordings.video import VideoError, iter_frames
        from embodied_r_training.data.samples import SkipSample, keyframes_of

        try:
            return keyframes_of(iter_frames(sample.source), self.pipeline, self.camera)
        except VideoError as exc:
            raise SkipSample("unreadable video") from exc


"""Question files for ``build``: made from a recording's own odometry, or written by hand.

``embodied-r-train questions --bag BAG --image-topic T --odom-topic O --out Q.jsonl`` asks what
the odometry alone decides (``O``: an odometry or pose topic, or ``/tf``: the camera's chain in
the tf tree) (``embodied_r_ros.sim.pose_questions``: the same rules, margins and
lettering as the synthetic world's questions), each question over a clip of camera frames;
``--template`` writes an example file to fill in by hand. Both give rows in the format
``build`` reads (:data:`FIELDS`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.config import Config, TfConfig
from embodied_r_ros.recordings.bags import POSE_TYPES, BagReader
from embodied_r_ros.sim.pose_questions import ODOMETRY_CATEGORIES, OdometryQuestions, Track
from embodied_r_ros.sim.question_rows import Draft, draft_rows, parse_counts
from embodied_r_training.data.dataset_files import BuildError, jsonl, write_atomic
from embodied_r_training.data.text_check import TextCheck

#: the question-file format: field -> what it holds (docs/own-robot.md)
FIELDS: dict[str, str] = {
    "id": "unique name of the question (text)",
    "question": "the question, without its options",
    "options": 'the choices, each "A. text", "B. text", ... in letter order (2 to 26)',
    "answer": 'the correct letter ("B")',
    "category": "free text; the paper's categories get their own columns in eval tables",
    "stamp_start_ns / stamp_end_ns": "the clip: bag time (the camera messages' header stamps) "
    "in integer nanoseconds, inclusive",
    "t_start / t_end": "or the clip in seconds from the bag's start (its first message); "
    "used when the stamp_* pair is absent",
    "scene": "optional: questions of one scene stay in one split (default: the bag's name)",
    "answer_text": "optional: the correct option's text",
}


#: why the odometry generator leaves a draft out
ODOMETRY_NEAR = "near a boundary in the odometry"


@dataclass
class QuestionReport:
    written: Counter[str] = field(default_factory=Counter)
    asked: dict[str, int] = field(default_factory=dict)
    #: drafts left out, by ``(category, reason)``
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)

    def summary(self) -> str:
        parts = [f"{c}: {self.written[c]}" + (f" of {n}" if self.written[c] < n else "")
                 for c, n in self.asked.items() if n]
        text = f"{sum(self.written.values())} questions ({', '.join(parts)})"
        if self.skipped:
            text += "; left out: " + ", ".join(
                f"{c} {n} ({why})" for (c, why), n in sorted(self.skipped.items()))
        return text


def read_track(bag: BagReader, image_topic: str, odom_topic: str, tolerance_sec: float,
               tf: TfConfig | None = None) -> tuple[Track, dict[float, int]]:
    """The recording's camera poses (odometry, or the tf tree's chain named by ``tf``) and
    frame stamps (seconds), and each frame's exact stamp in ns."""
    frames_ns = bag.image_stamps_ns(image_topic)
    bag.require_topic(odom_topic, POSE_TYPES)
    poses = bag.pose_track(odom_topic, image_topic=image_topic, tf=tf)
    if len(frames_ns) < 2:
        raise BuildError(f"bag {bag.path}: topic {image_topic} has {len(frames_ns)} frames; "
                         "questions need a clip")
    if not len(poses):
        raise BuildError(f"bag {bag.path}: topic {odom_topic} has no poses")
    exact = {ns / 1e9: ns for ns in frames_ns}
    return Track(poses, sorted(exact), tolerance_sec), exact


def odometry_questions(
    bag: BagReader, image_topic: str, odom_topic: str,
    counts: str | int | Mapping[str, int], *, seed: int = 0, tolerance_sec: float = 0.2,
    config: Config | None = None,
) -> tuple[list[dict[str, Any]], QuestionReport]:
    """Question rows about the recording (deterministic per ``seed``) and what was made.

    With ``config`` (the perception ``build`` will run) a question is kept only where the
    perception text of its clip decides its answer (:mod:`.text_check`)."""
    wanted = parse_counts(counts, ODOMETRY_CATEGORIES)
    track, exact = read_track(bag, image_topic, odom_topic, tolerance_sec,
                              config.perception.tf if config else None)
    gen = OdometryQuestions(track)
    scene = bag.path.stem
    check = TextCheck(bag, image_topic, odom_topic, config, exact) if config else None
    skipped: Counter[tuple[str, str]] = Counter()

    def decided(category: str, rng: Any) -> list[list[Draft]]:
        pools = getattr(gen, category)(rng)
        if check is None:
            return pools
        kept = []
        for pool in pools:
            kept.append([])
            for d in pool:
                why = check.reason_to_skip(d)
                if why is None:
                    kept[-1].append(d)
                else:
                    skipped[(category, why)] += 1
        return kept

    def row(d: Draft, fields: dict[str, Any], number: int) -> dict[str, Any]:
        start, end = exact[d.start], exact[d.end]
        basis = fields.pop("basis")
        return {
            "id": f"{scene}-q{number:03d}",
            "scene": scene,
            **fields,
            "t_start": round((start - bag.start_ns) / 1e9, 3),
            "t_end": round((end - bag.start_ns) / 1e9, 3),
            "stamp_start_ns": start,
            "stamp_end_ns": end,
            "basis": {k: _from_start(v, bag.start_ns) if k.endswith("_t") else v
                      for k, v in basis.items()},
        }

    rows = draft_rows(decided, ODOMETRY_CATEGORIES, wanted, seed, row)
    skipped.update({(c, ODOMETRY_NEAR): n for c, n in gen.skipped.items()})
    return rows, QuestionReport(Counter(r["category"] for r in rows), wanted, skipped)


def _from_start(t: float | list[float], start_ns: int) -> float | list[float]:
    """Recording-clock seconds as seconds from the bag's start (what t_start/t_end use)."""
    if isinstance(t, list):
        return [round(v - start_ns / 1e9, 3) for v in t]
    return round(t - start_ns / 1e9, 3)


def template_rows(bag: BagReader | None = None) -> list[dict[str, Any]]:
    """Example question rows to edit: both time bases, within ``bag`` when one is given."""
    length = (bag.end_ns - bag.start_ns) / 1e9 if bag is not None else 20.0
    mid = round(length / 2, 3)
    first = {
        "id": "my-robot-001",
        "question": "Where is the door relative to you now (at the last frame of the video)?",
        "options": ["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
        "answer": "C",
        "category": "relative_direction",
        "t_start": 0.0,
        "t_end": mid,
        "scene": "lab",
    }
    second = {
        "id": "my-robot-002",
        "question": "What did you do between the first frame and the last frame of the video?",
        "options": ["A. I move forward.", "B. I rotate left.", "C. I rotate right."],
        "answer": "B",
        "category": "action_generation",
        "scene": "lab",
    }
    if bag is not None:
        second.update(stamp_start_ns=bag.start_ns + round(mid * 1e9),
                      stamp_end_ns=bag.end_ns)
    else:
        second.update(stamp_start_ns=1_700_000_010_000_000_000,
                      stamp_end_ns=1_700_000_020_000_000_000)
    return [first, second]


def write_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    write_atomic(Path(path), jsonl(rows))


def fields_help() -> str:
    return "\n".join(f"  {name}: {text}" for name, text in FIELDS.items())


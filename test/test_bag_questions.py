"""``embodied-r-train questions``: questions from a recording's odometry get the answers the
world's own ground truth gives; the template; bad input is one line and exit 2."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from embodied_r_ros.core.poses import Pose, heading_deg, quadrant, wrap_deg
from embodied_r_ros.sim.generate import generate_world
from embodied_r_ros.sim.world import EPOCH_NS, World, WorldSpec, build_world
from embodied_r_training.cli import main

SPEC = WorldSpec(seed=31, frames=300, width=160, height=120)  # 30 s at 10 Hz
SPEC_START_NS = EPOCH_NS
TOPICS = ["--image-topic", "/camera/image_raw", "--odom-topic", "/odom"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[World, Path]:
    root = tmp_path_factory.mktemp("bagq")
    paths = generate_world(SPEC, root / "world", 0, video=False, decides=None)
    assert paths.bag is not None
    return build_world(SPEC), paths.bag


def _questions(bag: Path, out: Path, *extra: str) -> list[dict]:
    assert main(["questions", "--bag", str(bag), *TOPICS, "--out", str(out), *extra]) == 0
    return [json.loads(line) for line in out.open()]


def _pose(world: World, t: float) -> Pose:
    return world.poses[round(t * world.spec.rate_hz)]


def _bearing(cur: Pose, ref: Pose) -> float:
    return wrap_deg(heading_deg((cur.x, cur.y), (ref.x, ref.y)) - cur.yaw_deg)


def _truth(world: World, row: dict) -> str:
    """The answer text computed from the world's ground truth (poses and segments)."""
    t0, t1, basis = row["t_start"], row["t_end"], row["basis"]
    cur = _pose(world, t1)
    if row["category"] == "action_generation":
        acts: list[str] = []
        for seg in world.trajectory.segments:
            if seg.t0 < t1 and seg.t1 > t0 and (not acts or acts[-1] != seg.action):
                acts.append(seg.action)
        return f"I {acts[0]}." if len(acts) == 1 else f"I {acts[0]}, then I {acts[1]}."
    if row["category"] == "relative_direction":
        return quadrant(_bearing(cur, _pose(world, basis["place_t"])))
    if row["category"] == "route_planning":
        b = _bearing(cur, _pose(world, basis["place_t"]))
        if abs(b) <= 15:
            return "Go forward"
        return "Turn Back" if abs(b) >= 150 else ("Turn Left" if b > 0 else "Turn Right")
    if row["category"] == "relative_distance":
        def dist(t: float) -> float:
            p = _pose(world, t)
            return math.dist((cur.x, cur.y), (p.x, p.y))
        if "places_t" in basis:
            closer = min(basis["places_t"], key=dist)
            return "the point where I started" if closer == t0 else (
                f"where I was {round(t1 - closer)} seconds ago")
        d = dist(t0)
        return ("less than 1 m" if d < 1 else "between 1 and 2 m" if d < 2
                else "between 2 and 4 m" if d < 4 else "more than 4 m")
    assert row["category"] == "progress_evaluation"
    (seg,) = [s for s in world.trajectory.segments if s.t0 <= t1 < s.t1]
    return seg.action


def test_questions_from_odometry_match_the_worlds_ground_truth(
    world: tuple[World, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w, bag = world
    setting = ("--profile", "offline")  # the perception build runs: ages and whole motions
    rows = _questions(bag, tmp_path / "q.jsonl", "--count", "40", "--seed", "3", *setting)
    out = capsys.readouterr().out
    # what the odometry or the text leaves undecided is skipped and counted by its reason
    assert "(near a boundary in the odometry)" in out and "(near a boundary in the text)" in out
    cats = Counter(r["category"] for r in rows)
    assert set(cats) == {"action_generation", "relative_direction", "relative_distance",
                         "route_planning", "progress_evaluation"}
    assert sum(cats.values()) >= 35
    for row in rows:
        truth = _truth(w, row)
        if row["category"] == "progress_evaluation":
            assert f": {truth} about" in row["answer_text"], (row, truth)
        else:
            assert row["answer_text"] == truth, (row["question"], row, truth)
        letter = row["answer"]
        assert f"{letter}. {row['answer_text']}" in row["options"]
        # the window is the camera's frames: build cuts exactly these
        assert row["stamp_start_ns"] == w.stamp_ns(round(row["t_start"] * 10))
        assert row["stamp_end_ns"] == w.stamp_ns(round(row["t_end"] * 10))
    # letters balanced per category and option count (within one)
    for (cat, n), counts in _letter_counts(rows).items():
        assert max(counts) - min(counts) <= 1, (cat, n, counts)
    # deterministic per seed; another seed draws other questions
    again = _questions(bag, tmp_path / "again.jsonl", "--count", "40", "--seed", "3", *setting)
    assert again == rows
    other = _questions(bag, tmp_path / "other.jsonl", "--count", "40", "--seed", "4", *setting)
    assert other != rows


def _letter_counts(rows: list[dict]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for (cat, n), group in _group(rows).items():
        c = Counter(r["answer"] for r in group)
        out[(cat, n)] = [c["ABCDEFGH"[i]] for i in range(n)]
    return out


def _group(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["category"], len(r["options"])), []).append(r)
    return groups


def test_counts_per_category_and_bad_input(world: tuple[World, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, bag = world
    rows = _questions(bag, tmp_path / "q.jsonl", "--counts", "route_planning=3,"
                      "action_generation=2")
    assert Counter(r["category"] for r in rows) == {"route_planning": 3, "action_generation": 2}
    cases = [
        (["--bag", str(bag), *TOPICS, "--counts", "appearance_order=2"], "unknown question "
         "category 'appearance_order'"),
        (["--bag", str(bag), "--image-topic", "/camera/image_raw"], "need --odom-topic"),
        (["--bag", str(bag), "--image-topic", "/camera/image_raw", "--odom-topic", "/nope"],
         "no topic '/nope'"),
        (["--bag", str(tmp_path / "missing"), *TOPICS], "no such file"),
    ]
    for argv, words in cases:
        assert main(["questions", *argv, "--out", str(tmp_path / "bad.jsonl")]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (argv, err)
    assert not (tmp_path / "bad.jsonl").exists()


def test_the_template_is_a_question_file_build_reads(world: tuple[World, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _, bag = world
    out = tmp_path / "mine.jsonl"
    assert main(["questions", "--template", "--bag", str(bag), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "stamp_start_ns / stamp_end_ns" in printed and "t_start / t_end" in printed
    rows = [json.loads(line) for line in out.open()]
    assert {"t_start", "t_end"} <= set(rows[0]) and {"stamp_start_ns", "stamp_end_ns"} <= set(
        rows[1])
    data = tmp_path / "ds"
    assert main(["build", "--bag", str(bag), "--questions", str(out), *TOPICS, "--out",
                 str(data), "--split-by", "question", "--folds", "0", "--val-frac", "0",
                 "--test-frac", "0", "--no-progress"]) == 0
    built = [json.loads(line) for line in (data / "data.jsonl").open()]
    assert [r["id"] for r in built] == ["my-robot-001", "my-robot-002"]
    assert all(len(r["key_frame_stamps"]) >= 4 for r in built)


def test_build_leaves_out_bad_rows_naming_row_and_field_and_keeps_the_rest(
    world: tuple[World, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, bag = world
    good = {"question": "Which way did I turn?", "options": ["A. left", "B. right"],
            "answer": "A", "t_start": 0.0, "t_end": 6.0}
    lines = [
        json.dumps({"id": "ok1", **good}),
        "{not json",
        json.dumps({"id": "no-answer", **{k: v for k, v in good.items() if k != "answer"}}),
        json.dumps({"id": "bad-options", **good, "options": "A. left, B. right"}),
        json.dumps({"id": "bad-letter", **good, "answer": "C"}),
        json.dumps({"id": "outside", **good, "t_start": 100.0, "t_end": 110.0}),
        json.dumps({"id": "backwards", **good, "t_start": 5.0, "t_end": 1.0}),
        json.dumps({"id": "ok1", **good}),
        json.dumps(["a", "list"]),
        json.dumps({"id": "ok2", **good, "stamp_start_ns": SPEC_START_NS,
                    "stamp_end_ns": SPEC_START_NS + 8 * 10**9}),
    ]
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(lines) + "\n")
    data = tmp_path / "ds"
    assert main(["build", "--bag", str(bag), "--questions", str(questions), *TOPICS, "--out",
                 str(data), "--split-by", "question", "--folds", "0", "--val-frac", "0",
                 "--test-frac", "0", "--no-progress"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "skipping" in line]
    expected = [
        "question row 2: not valid JSON",
        "question row 3 (no-answer): field 'answer': missing",
        "question row 4 (bad-options): field 'options'",
        "question row 5 (bad-letter): field 'answer': answer 'C' is not one of AB",
        "question row 6 (outside): field 't_start': the window 100.000..110.000 s is outside",
        "question row 7 (backwards): field 't_end': the window ends before it starts",
        "question row 8 (ok1): field 'id': duplicate of row 1",
        "question row 9: expected a JSON object, got list",
    ]
    assert len(err) == len(expected), err
    for line, words in zip(err, expected, strict=True):
        assert words in line, (line, words)
    built = [json.loads(line) for line in (data / "data.jsonl").open()]
    assert [r["id"] for r in built] == ["ok1", "ok2"]
    manifest = json.loads((data / "manifest.json").read_text())
    assert len(manifest["rejected_rows"]) == len(expected)

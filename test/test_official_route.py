"""Benchmark data read as the official code reads it (VLM replies,
full-resolution key frames, the benchmark's question text) and one dataset pooled from several
imports with one split over the pooled scenes; robots keep the robust reading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from media import pan_frames, write_video
from scripted import ScriptedVLM

from embodied_r_ros.core.config import ModelConfig, PerceptionConfig
from embodied_r_ros.core.perception import Perceiver, parse_reply, parse_reply_official
from embodied_r_training.cli import main
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.importers import official_question_block, urbanvideo_samples
from embodied_r_training.data.splits import make_splits

# (reply, official action, official view) as split_points of VLM_perception_*.py gives them
OFFICIAL = [
    ("1. move forward\n2. A red door appears.\n3. The chair is visible.",
     "move forward", "A red door appears. The chair is visible."),
    ("### 1. **Action:** Move Forward.\n### 2. a tree\n\n### 3. none",
     "**Action:** Move Forward.", "a tree none"),  # verbatim, not the vocabulary's phrase
    ("1. rotate left 2. door 3. chair", None, "1. rotate left 2. door 3. chair"),  # no newlines
    ("I moved ahead and saw a door.", None, "I moved ahead and saw a door."),
    ("1. move left\n2. a tree, no third item", None, "1. move left\n2. a tree, no third item"),
    ("(1) move up\n(2) sky\n(3) none", None, "(1) move up\n(2) sky\n(3) none"),
    ("1. move forward 1.5 m\n2. wall\n  3. lamp", "move forward 1.5 m", "wall lamp"),
]


@pytest.mark.parametrize(("reply", "action", "view"), OFFICIAL)
def test_the_official_reading_of_a_vlm_reply(reply: str, action: str | None, view: str) -> None:
    got = parse_reply_official(reply)
    assert (got.action, got.observation) == (action, view)
    assert parse_reply_official(reply, first=True).observation == reply  # frame 0: all of it


def test_robots_keep_the_robust_reading() -> None:
    assert parse_reply(OFFICIAL[1][0]).action == "move forward"
    assert parse_reply("(1) move up\n(2) sky\n(3) none").action == "move up"  # "(1)" read


def _perceive(reading: str, second: str) -> str:
    vlm_cfg = ModelConfig(backend="openai", model="scripted", base_url="http://127.0.0.1:1/v1")
    cfg = PerceptionConfig(vlm=vlm_cfg, report_motion=False, reply_reading=reading)
    perceiver = Perceiver(cfg, vlm=ScriptedVLM(["a street\nwith a lamp", second]))
    images = [np.full((32, 32, 3), v, np.uint8) for v in (10, 200)]
    return perceiver.describe(images, [0.0, 1.0], "Question: where?\nChoices:\nA. x\nB. y").text


def test_the_reading_is_a_named_perception_option() -> None:
    text = _perceive("official", "1. **Rotate left**\n2. a door\n3. none")
    assert "Frame 0: Observe: a street\nwith a lamp" in text
    assert "Frame 1: After **Rotate left**, Observe: a door none" in text
    assert "After None, Observe: no numbers" in _perceive("official", "no numbers")
    robust = _perceive("robust", "1. **Rotate left**\n2. a door\n3. none")
    assert "Frame 1: After rotate left, Observe: a door none" in robust


def _urbanvideo(root: Path, first_id: int, videos: tuple[str, ...]) -> Path:
    rows = [
        {"Question_id": first_id + i, "video_id": video, "question_category": "Counterfactual",
         "question": f"Question: If you turn at {video}?\nChoice: A. yes\n   B. no",
         "answer": "B"}
        for i, video in enumerate(videos)
    ]
    (root / "videos").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "MCQ.parquet")
    for i, name in enumerate(videos):
        write_video(root / "videos" / name, pan_frames(10, 10, (160, 120), seed=first_id + i),
                    fps=4.0)
    return root


def _import(root: Path, out: Path, cache: Path, *extra: str) -> None:
    assert main(["import-urbanvideo", "--root", str(root), "--out", str(out), "--folds", "0",
                 "--split-by", "question", "--no-progress", "--cache-dir", str(cache),
                 *extra]) == 0


def test_benchmark_imports_take_the_official_route(tmp_path: Path) -> None:
    root = _urbanvideo(tmp_path / "uv", 1, ("EmbodiedCity_1.mp4", "RealWorld_2.mp4"))
    raw = "Question: If you turn at EmbodiedCity_1.mp4?\nChoice: A. yes\n   B. no"
    assert official_question_block(raw) == raw  # text after the first "Question:", re-prefixed
    assert official_question_block("no label? A. x B. y") == "Question: no label? A. x B. y"
    sample = urbanvideo_samples(root, raw_question=True)[0]
    assert sample.options == ["A. yes", "B. no"] and sample.extra["question_block"] == raw
    out = tmp_path / "official"
    _import(root, out, tmp_path / "c")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["keyframes"]["max_side"] == 0  # full resolution, as the official ORB
    assert manifest["reply_reading"] == "official" and manifest["question_text"] == "benchmark"
    row = load_rows(out)[0]
    assert row["question_block"] == raw
    assert row["prompt"][1]["content"].endswith("\n" + raw)  # the LM reads the raw text
    robust = tmp_path / "robust"
    _import(root, robust, tmp_path / "c", "--robust")
    manifest = json.loads((robust / "manifest.json").read_text())
    assert manifest["keyframes"]["max_side"] == 640 and manifest["reply_reading"] == "robust"
    row = load_rows(robust)[0]
    assert row["question_block"] == (
        "Question: If you turn at EmbodiedCity_1.mp4?\nChoices:\nA. yes\nB. no")


def test_pooled_imports_are_split_once_over_the_pooled_scenes(tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    _import(_urbanvideo(tmp_path / "uv1", 1, ("EmbodiedCity_1.mp4", "RealWorld_2.mp4")), a,
            tmp_path / "c")
    _import(_urbanvideo(tmp_path / "uv2", 10, ("EmbodiedCity_7.mp4", "RealWorld_8.mp4",
                                               "EmbodiedCity_9.mp4")), b, tmp_path / "c")
    out = tmp_path / "pooled"
    assert main(["pool", "--data", f"UV1={a}", "--data", f"UV2={b}", "--out", str(out),
                 "--seed", "3", "--folds", "2"]) == 0
    rows = load_rows(out)
    assert len(rows) == 5 and {r["pool_part"] for r in rows} == {"UV1", "UV2"}
    scenes = {r["scene"] for r in rows}
    assert scenes == {"EmbodiedCity_1", "RealWorld_2", "EmbodiedCity_7", "RealWorld_8",
                      "EmbodiedCity_9"}
    splits = json.loads((out / "splits.json").read_text())
    expected = make_splits(rows, by="scene", seed=3, folds=2)
    assert (splits["train"], splits["val"], splits["test"]) == (
        expected.train, expected.val, expected.test)
    # 5 scenes: floor(3.75) = 3 to train, floor(0.25) = 0 -> one from train to val, 1 to test
    assert (len(splits["train"]), len(splits["val"]), len(splits["test"])) == (2, 1, 2)
    scene_of = {r["id"]: r["scene"] for r in rows}
    parts = [{scene_of[i] for i in splits[s]} for s in ("train", "val", "test")]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "pool" and [p["rows"] for p in manifest["parts"]] == [2, 3]
    # datasets written with another perception-text layout do not pool; nothing is written
    c = tmp_path / "c-motion"
    _import(tmp_path / "uv1", c, tmp_path / "c", "--report-motion")
    assert main(["pool", "--data", str(a), "--data", str(c), "--out",
                 str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad" / "data.jsonl").exists()
    assert main(["pool", "--data", str(a), "--out", str(tmp_path / "one")]) == 2

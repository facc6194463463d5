"""Training sets from the benchmarks (UrbanVideo-Bench, VSI-Bench) and the seeded scene
splits: question parsing, imports, the official split arithmetic, broken tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from media import pan_frames, write_video

from embodied_r_training.cli import main
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.importers import (
    split_question_text,
    urbanvideo_samples,
    urbanvideo_scene,
    vsibench_samples,
)
from embodied_r_training.data.splits import SplitError, kfold_groups, make_splits, split_groups

FORMATS = Path(__file__).resolve().parents[2] / "shared" / "benchmark-formats"


@pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/benchmark-formats not present")
def test_real_urbanvideo_rows_parse_whatever_the_label() -> None:
    rows = [json.loads(x) for x in (FORMATS / "urbanvideo_bench_MCQ_sample.jsonl").open()]
    names = ("Choices:", "Choice:", "choose:")
    labels = {lab for r in rows for lab in names if lab in r["question"]}
    assert labels == {"Choices:", "Choice:", "choose:"}
    for row in rows:
        question, options = split_question_text(row["question"])
        assert question and not question.lower().startswith("question")
        assert len(options) >= 3 and row["answer"] in "".join(o[0] for o in options)
        assert not any(lab in options[-1] for lab in ("choose:", "Choices:"))
    inline = next(r for r in rows if "Choice: A. If I fly" in r["question"])
    assert split_question_text(inline["question"])[1][0].startswith("A. If I fly along")


def test_split_question_text_edge_cases() -> None:
    q, opts = split_question_text('"""\nQuestion: Where?\nchoose:\nAnswer: A. up\nB. down\n"""')
    assert (q, opts) == ("Where?", ["A. up", "B. down"])
    q, opts = split_question_text("Question: Pick one. A. red B. blue C. green")  # no label
    assert q == "Pick one." and opts == ["A. red", "B. blue", "C. green"]
    with pytest.raises(ValueError, match="fewer than two options"):
        split_question_text("Question: no options here")


def _urbanvideo_root(root: Path) -> Path:
    rows = [
        {"Question_id": 1, "video_id": "EmbodiedCity_1.mp4", "question_category":
         "Landmark Position", "question": "Question: Where is the tower?\nChoices:\nA. left\n"
         "B. right\nC. behind", "answer": "B"},
        {"Question_id": 2, "video_id": "EmbodiedCity_1.mp4", "question_category":
         "Action Generation", "question": "Question: Next move?  \nchoose:  \nA. I rise.  \n"
         "B. I descend.  ", "answer": "A"},
        {"Question_id": 3, "video_id": "RealWorld_2.mp4", "question_category": "Counterfactual",
         "question": "Question: If you turn?\nChoice: A. yes\n   B. no", "answer": "B"},
        {"Question_id": 4, "video_id": "Missing_9.mp4", "question_category": "Counterfactual",
         "question": "Question: x?\nChoices:\nA. a\nB. b", "answer": "A"},
        {"Question_id": 5, "video_id": "EmbodiedCity_1.mp4", "question_category": "Causal",
         "question": "Question: why?\nChoices:\nA. a\nB. b", "answer": "A"},
    ]
    (root / "videos").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "MCQ.parquet")
    for i, name in enumerate(("EmbodiedCity_1.mp4", "RealWorld_2.mp4")):
        write_video(root / "videos" / name, pan_frames(12, 10, (160, 120), seed=i), fps=4.0)
    return root


def test_import_urbanvideo_from_parquet(tmp_path: Path) -> None:
    root = _urbanvideo_root(tmp_path / "uv")
    samples = urbanvideo_samples(root)
    assert [s.id for s in samples] == ["uv-1", "uv-2", "uv-3"]
    assert samples[2].options == ["A. yes", "B. no"] and samples[2].scene == "RealWorld_2"
    assert len(urbanvideo_samples(root, all_categories=True)) == 4  # + Causal
    out = tmp_path / "ds"
    assert main(["import-urbanvideo", "--root", str(root), "--out", str(out), "--split-by",
                 "question", "--folds", "0", "--no-progress",
                 "--cache-dir", str(tmp_path / "c")]) == 0
    rows = load_rows(out)
    assert {r["category"] for r in rows} == {"Landmark Position", "Action Generation",
                                             "Counterfactual"}
    manifest = json.loads((out / "manifest.json").read_text())
    report = manifest["import_report"]
    assert report["skipped"] == {"missing video": 1, "other category": 1}
    assert rows[0]["motion_source"] == "visual"
    # benchmark videos: the paper's perception text, no measured-motion additions by default
    assert manifest["report_motion"] is False
    assert rows[0]["scene"] == "EmbodiedCity_1" and rows[2]["scene"] == "RealWorld_2"
    out2 = tmp_path / "ds-motion"
    assert main(["import-urbanvideo", "--root", str(root), "--out", str(out2), "--split-by",
                 "question", "--folds", "0", "--no-progress", "--report-motion",
                 "--cache-dir", str(tmp_path / "c")]) == 0
    assert json.loads((out2 / "manifest.json").read_text())["report_motion"] is True


def test_the_library_imports_as_the_cli_and_takes_the_route_it_is_given(
        tmp_path: Path) -> None:
    """``import-urbanvideo`` is :func:`import_benchmark` behind arguments; the official route
    reads the VLM's replies as the official code does at full resolution, the robust one
    keeps the profile's reading and resolution."""
    from embodied_r_ros.core.profiles import load_config
    from embodied_r_training.data.builders import benchmark_config, import_benchmark
    from embodied_r_training.data.splits import SplitOptions

    root = _urbanvideo_root(tmp_path / "uv")
    config = load_config("offline", overrides={"cache": {"dir": str(tmp_path / "c")}})
    official = benchmark_config(config)
    assert official.perception.reply_reading == "official"
    assert official.keyframes.max_side == 0 and not official.perception.report_motion
    robust = benchmark_config(config, robust=True, report_motion=True)
    assert robust.perception.reply_reading == config.perception.reply_reading
    assert robust.keyframes == config.keyframes and robust.perception.report_motion
    notices: list[str] = []
    report = import_benchmark("UrbanVideo-Bench", root, tmp_path / "lib", config=config,
                              splits=SplitOptions(by="question", folds=0), progress=False,
                              notice=notices.append)
    assert report.rows == 3
    assert notices == ["UrbanVideo-Bench: 3 of 5 rows kept; skipped: missing video 1, "
                       "other category 1"]
    assert main(["import-urbanvideo", "--root", str(root), "--out", str(tmp_path / "cli"),
                 "--split-by", "question", "--folds", "0", "--no-progress",
                 "--cache-dir", str(tmp_path / "c")]) == 0
    assert load_rows(tmp_path / "lib") == load_rows(tmp_path / "cli")


def test_import_vsibench_real_rows_merge_direction_levels(tmp_path: Path) -> None:
    src = FORMATS / "vsi_bench_sample.jsonl"
    if not src.is_file():
        pytest.skip("../shared/benchmark-formats not present")
    root = tmp_path / "vsi"
    (root / "scannet").mkdir(parents=True)
    shutil.copy(src, root / "test.jsonl")
    write_video(root / "scannet" / "scene0207_02.mp4", pan_frames(8, 10, (160, 120)), fps=4.0)
    samples = vsibench_samples(root)
    cats = {s.category for s in samples}
    assert cats == {"object_rel_distance", "object_rel_direction", "route_planning",
                    "obj_appearance_order"}
    assert all(s.options and s.solution in "ABCD" for s in samples)
    assert len({s.id for s in samples}) == len(samples)  # ids made up where the column lacks
    (root / "scannet" / "scene0207_02.mp4").unlink()
    out = tmp_path / "ds"
    assert main(["import-vsibench", "--root", str(root), "--out", str(out), "--no-progress"]) == 2
    assert not out.exists()


# -- splits -----------------------------------------------------------------------------------


def test_scene_splits_are_seeded_disjoint_and_cover_everything() -> None:
    rows = [{"id": f"r{i}", "scene": f"s{i % 10}"} for i in range(60)]
    a = make_splits(rows, seed=3)
    assert a == make_splits(list(reversed(rows)), seed=3)  # order does not matter
    assert a != make_splits(rows, seed=4)
    scene = {r["id"]: r["scene"] for r in rows}
    parts = [{scene[i] for i in a.ids(s)} for s in ("train", "val", "test")]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert sorted(a.ids("all")) == sorted(scene)
    assert len(a.folds) == 5
    for k in range(5):
        test, train = set(a.ids("test", k)), set(a.ids("train", k))
        assert not test & train and len(test | train) == 60
        assert not {scene[i] for i in test} & {scene[i] for i in train}
    assert sorted(i for f in a.folds for i in f) == sorted(scene)


@pytest.mark.parametrize(
    ("video_id", "scene"),
    [  # ids from the real MCQ table (../shared/benchmark-formats)
        ("EmbodiedCity_0_0.mp4", "EmbodiedCity_0"),
        ("EmbodiedCity_0.mp4", "EmbodiedCity_0"),  # the same scene as EmbodiedCity_0_0
        ("EmbodiedCity_13.mp4", "EmbodiedCity_13"),
        ("AerialVLN_0_35H6S234SJYE7JR0C76QLOU436G65H_0.mp4",
         "AerialVLN_0_35H6S234SJYE7JR0C76QLOU436G65H"),
        ("AerialVLN_3_X.mp4", "AerialVLN_3_X"),  # two underscores: the name before the dot
        ("RealWorld_0.mp4", "RealWorld_0"),
        ("RealWorld_GN_0_0.mp4", "RealWorld_0"),  # the first number after an underscore
        ("RealWorld_RN_12_0.mp4", "RealWorld_12"),
        ("EmbodiedCity.mp4", "EmbodiedCity"),  # no official rule: its own scene
        ("Other_1_2.mp4", "Other_1_2"),
    ],
)
def test_urbanvideo_scenes_group_as_the_official_preprocessing(video_id: str, scene: str) -> None:
    assert urbanvideo_scene(video_id) == scene


@pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/benchmark-formats not present")
def test_real_urbanvideo_rows_share_scenes_across_videos() -> None:
    rows = [json.loads(line) for line in (FORMATS / "urbanvideo_bench_MCQ_sample.jsonl")
            .read_text().splitlines() if line.strip()]
    videos = {r["video_id"] for r in rows}
    scenes = {urbanvideo_scene(v) for v in videos}
    assert len(scenes) < len(videos)  # videos of one scene never straddle train and test
    split = make_splits([{"id": str(i), "scene": urbanvideo_scene(r["video_id"])}
                         for i, r in enumerate(rows)], seed=0, folds=0)
    where = {i: s for s in ("train", "val", "test") for i in split.ids(s)}
    by_scene: dict[str, set[str]] = {}
    for i, r in enumerate(rows):
        by_scene.setdefault(urbanvideo_scene(r["video_id"]), set()).add(where[str(i)])
    assert all(len(parts) == 1 for parts in by_scene.values())


@pytest.mark.parametrize(("n", "counts"), [(100, (75, 5, 20)), (40, (30, 2, 8)),
                                           (21, (15, 1, 5)), (3, (1, 1, 1))])
def test_split_proportions_are_the_official_arithmetic(n: int, counts: tuple[int, ...]) -> None:
    assign = split_groups([f"s{i}" for i in range(n)], (0.75, 0.05, 0.20), seed=1)
    got = tuple(sum(v == s for v in assign.values()) for s in ("train", "val", "test"))
    assert got == counts


def test_split_errors_are_clear() -> None:
    with pytest.raises(SplitError, match="split by question"):
        split_groups(["only"], (0.75, 0.05, 0.2))
    with pytest.raises(SplitError, match="cannot make 5 folds"):
        kfold_groups(["a", "b"], 5)
    with pytest.raises(SplitError, match="sum to 1"):
        split_groups(["a", "b"], (0.5, 0.5, 0.5))
    splits = make_splits([{"id": str(i), "scene": "one"} for i in range(10)], by="question")
    # official floor arithmetic gives 7/0/3; below 20 groups val takes one from train
    assert (len(splits.train), len(splits.val), len(splits.test)) == (6, 1, 3)
    with pytest.raises(SplitError, match="fold 7 does not exist"):
        splits.ids("test", 7)


def test_broken_benchmark_tables_and_escaping_paths(tmp_path: Path) -> None:
    from embodied_r_training.data.importers import BenchmarkError

    root = tmp_path / "uv"
    root.mkdir()
    (root / "MCQ.jsonl").write_text('"just a string"\n"another"\n')
    with pytest.raises(BenchmarkError, match="row 1: expected a table row"):
        urbanvideo_samples(root)
    (root / "MCQ.jsonl").unlink()
    (root / "MCQ.parquet").write_bytes(b"PAR1 this is not parquet at all")
    with pytest.raises(BenchmarkError, match="cannot read .*MCQ.parquet") as err:
        urbanvideo_samples(root)
    assert "\n" not in str(err.value)
    (root / "MCQ.parquet").unlink()
    secret = tmp_path / "outside.mp4"
    write_video(secret, pan_frames(8, 10, (160, 120)), fps=4.0)
    rows = [
        {"Question_id": 1, "video_id": "../outside.mp4", "question_category":
         "Landmark Position", "question": "Question: Where?\nChoices:\nA. l\nB. r", "answer": "A"},
        {"Question_id": 2, "video_id": "EmbodiedCity_1.mp4", "question_category":
         "Landmark Position", "question": "Question:  \nChoices:\nA. l\nB. r", "answer": "A"},
    ]
    pd.DataFrame(rows).to_parquet(root / "MCQ.parquet")
    from embodied_r_training.data.importers import ImportReport

    report = ImportReport()
    assert urbanvideo_samples(root, report=report) == []
    assert report.skipped == {"video outside --root": 1, "unparsable": 1}


def test_imports_with_fewer_scenes_than_folds_make_fewer_folds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _urbanvideo_root(tmp_path / "uv")  # two videos: two scenes
    out = tmp_path / "ds"
    assert main(["import-urbanvideo", "--root", str(root), "--out", str(out), "--no-progress",
                 "--cache-dir", str(tmp_path / "c")]) == 0  # the default --folds 5
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "2 scenes only: 2 folds instead of 5" in warnings
    splits = json.loads((out / "splits.json").read_text())
    assert len(splits["folds"]) == 2

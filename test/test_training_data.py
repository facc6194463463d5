"""Training sets from bags and benchmarks: rows, resume, caches, bad bags, importers, splits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from bagdata import T0_NS, write_bag, write_questions
from embodied_r_training.cli import main
from embodied_r_training.data.bag_source import BagFrames, bag_samples
from embodied_r_training.data.build import build_dataset
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.importers import (
    split_question_text,
    urbanvideo_samples,
    urbanvideo_scene,
    vsibench_samples,
)
from embodied_r_training.data.journal import read_journal, settings_fingerprint
from embodied_r_training.data.splits import SplitError, kfold_groups, make_splits, split_groups
from media import pan_frames, write_video

from embodied_r_ros.core.config import load_config
from embodied_r_ros.core.pipeline import EmbodiedR

FORMATS = Path(__file__).resolve().parents[2] / "shared" / "benchmark-formats"


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bag(tmp_path_factory.mktemp("bag") / "bag", n_frames=28)


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_questions(tmp_path_factory.mktemp("q") / "questions.jsonl", n=6, scenes=3)


def _build(bag: Path, questions: Path, out: Path, cache: Path, *extra: str) -> int:
    return main([
        "build", "--bag", str(bag), "--questions", str(questions),
        "--image-topic", "/camera/image_raw", "--odom-topic", "/odom", "--out", str(out),
        "--cache-dir", str(cache), "--folds", "3", "--no-progress", *extra,
    ])


def test_build_from_a_bag_writes_a_table_and_reuses_it(
    bag: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ds"
    assert _build(bag, questions, out, tmp_path / "cache") == 0
    assert "6 rows (6 perceived" in capsys.readouterr().out
    rows = load_rows(out)
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(6)]
    row = rows[0]
    assert row["prompt"][0]["role"] == "system" and row["prompt"][1]["role"] == "user"
    user = row["prompt"][1]["content"]
    assert user.endswith(row["question_block"]) and "D. down" in row["question_block"]
    assert "After rotate left" in user  # odometry turns left 3 degrees a frame
    assert row["motion_source"] == "odometry" and row["solution"] == "A"
    stamps = row["key_frame_stamps"]
    assert len(stamps) >= 4 and stamps == sorted(stamps)
    assert T0_NS / 1e9 <= stamps[0] and stamps[-1] <= T0_NS / 1e9 + 4.0
    assert len(row["frames"]) == len(stamps)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["motion"] == "odometry" and manifest["rows"] == 6
    splits = json.loads((out / "splits.json").read_text())
    assert sorted(splits["train"] + splits["val"] + splits["test"]) == sorted(r["id"] for r in rows)
    assert len(splits["folds"]) == 3
    # the same settings again: every row comes from the journal, nothing is perceived
    assert _build(bag, questions, out, tmp_path / "cache") == 0
    assert "(0 perceived" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["report"]["reused"] == 6


class _Killed(KeyboardInterrupt):
    """Stands for the user stopping the build."""


def test_a_killed_build_resumes_where_it_stopped(bag: Path, questions: Path,
                                                 tmp_path: Path) -> None:
    config = load_config("offline", overrides={"cache": {"dir": str(tmp_path / "cache")}})
    pipeline = EmbodiedR(config, load_models=False)
    from embodied_r_ros.core.bags import BagReader

    out = tmp_path / "ds"
    fingerprint = settings_fingerprint(config, "geometric", {})
    with BagReader(bag) as reader:
        samples = bag_samples([json.loads(x) for x in questions.read_text().splitlines()],
                              bag, reader.start_ns)
        frames = BagFrames(reader, pipeline, "/camera/image_raw", "/odom")
        calls: list[str] = []

        def dying(sample):  # noqa: ANN001, ANN202
            if len(calls) == 2:
                raise _Killed()
            calls.append(sample.id)
            return frames(sample)

        with pytest.raises(_Killed):
            build_dataset(samples, dying, pipeline, out, fingerprint=fingerprint,
                          split_by="question", folds=0, progress=False)
        assert not (out / "data.jsonl").exists()  # no table until every sample is done
        assert len(read_journal(out / ".build" / "rows.jsonl")) == 2
        # a torn last line (killed mid-write) is ignored, not fatal
        with (out / ".build" / "rows.jsonl").open("a") as fh:
            fh.write('{"_key": "tor')
        seen: list[str] = []

        def counting(sample):  # noqa: ANN001, ANN202
            seen.append(sample.id)
            return frames(sample)

        report = build_dataset(samples, counting, pipeline, out, fingerprint=fingerprint,
                               split_by="question", folds=0, progress=False)
    assert seen == ["q2", "q3", "q4", "q5"]
    assert (report.reused, report.perceived, report.rows) == (2, 4, 6)
    assert len(load_rows(out)) == 6


def test_a_journal_line_that_is_not_utf8_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One non-UTF-8 line used to make every rerun fail with a UnicodeDecodeError."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"_key": "a", "id": "q0"}\n\xff\xfe\x00junk\n{"_key": "b", "id": "q1"}\n')
    with caplog.at_level("WARNING", logger="embodied_r_training.data.journal"):
        rows = read_journal(path)
    assert sorted(rows) == ["a", "b"]
    assert "ignoring unreadable line 2 of" in caplog.text


def test_the_fingerprint_covers_every_setting_that_changes_a_reply(tmp_path: Path) -> None:
    """A rerun after changing the VLM's max_new_tokens or temperature, or the prompts' wording,
    used to reuse every journal row."""
    from embodied_r_ros.core.config import CONFIG_DIR

    def fingerprint(**overrides: Any) -> str:
        return settings_fingerprint(load_config("tiny", overrides=overrides), "tiny-vlm", {})

    base = fingerprint()
    assert fingerprint() == base  # stable
    edited = tmp_path / "prompts.yaml"
    wording = (CONFIG_DIR / "prompts.yaml").read_text()
    edited.write_text(wording.replace("the answer.", "an answer.", 1))
    changed = [
        fingerprint(perception={"vlm": {"max_new_tokens": 77}}),
        fingerprint(perception={"vlm": {"temperature": 0.7}}),
        fingerprint(perception={"vlm": {"image_max_side": 123}}),
        fingerprint(prompts=str(edited)),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    # scheduling changes no reply
    assert fingerprint(perception={"concurrency": 3}) == base


def test_the_manifest_records_the_fingerprint(bag: Path, questions: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert _build(bag, questions, out, tmp_path / "cache", "--split-by", "question",
                  "--folds", "0") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["fingerprint"]) == 64
    settings = manifest["fingerprint_settings"]
    assert {"keyframes", "perception", "model", "vlm", "prompts"} <= set(settings)
    assert settings["prompts"] == manifest["prompt_version"]


def test_vlm_perception_is_cached_across_rebuilds(bag: Path, questions: Path, tmp_path: Path,
                                                  tiny_models_dir: Path) -> None:
    """With the tiny VLM: a rebuild without the journal gets every reply from the cache."""
    base = ["--profile", "tiny", "--split-by", "question", "--folds", "0"]
    short = tmp_path / "two.jsonl"
    short.write_text("".join(questions.read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "ds"
    assert _build(bag, short, out, tmp_path / "cache", *base) == 0
    first = json.loads((out / "manifest.json").read_text())["report"]
    assert first["perceived"] == 2 and first["cache_hits"] == 0
    shutil.rmtree(out)
    assert _build(bag, short, out, tmp_path / "cache", *base) == 0
    again = json.loads((out / "manifest.json").read_text())["report"]
    assert again["perceived"] == 2 and again["cache_hits"] == 2
    assert load_rows(out)[0]["perception_model"] == "tiny-qwen2.5-vl"


@pytest.mark.parametrize("damage", ["truncate", "missing"])
def test_a_bad_bag_is_one_clear_error_and_leaves_nothing(
    bag: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    copy = tmp_path / "bag"
    shutil.copytree(bag, copy)
    storage = next(copy.glob("*.mcap"))
    if damage == "truncate":
        storage.write_bytes(storage.read_bytes()[: storage.stat().st_size * 2 // 3])
    else:
        storage.unlink()
    out = tmp_path / "ds"
    assert _build(copy, questions, out, tmp_path / "cache") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("embodied-r-train: error: bag ") and "\n" not in err
    assert not out.exists()


def test_a_missing_topic_or_bad_question_fails_before_any_output(
    bag: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ds"
    assert main(["build", "--bag", str(bag), "--questions", str(questions), "--image-topic",
                 "/nope", "--out", str(out), "--no-progress"]) == 2
    assert "no topic '/nope'" in capsys.readouterr().err and not out.exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "question": "q", "options": ["A. a", "B. b"],
                               "answer": "C", "t_start": 0, "t_end": 1}) + "\n")
    assert _build(bag, bad, out, tmp_path / "cache") == 2
    assert "question row 1 (x): field 'answer': answer 'C' is not one of AB" in (
        capsys.readouterr().err)
    assert not out.exists()


# -- benchmarks -------------------------------------------------------------------------------


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


# -- data is never silently lost --------------------------------------------------------------


def test_a_model_dying_mid_build_stops_it_and_the_rerun_resumes(
    bag: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    tiny_vlm: Any,
) -> None:
    """The VLM behind HTTP dies after two rows: exit 2, one line saying to rerun, the journal
    kept; with the server back the same command finishes every row, perceiving only the rest."""
    from ros_helpers import ChatGate

    server = ChatGate(tiny_vlm)
    cfg = tmp_path / "http.yaml"
    cfg.write_text(f"""base: tiny
perception:
  vlm: {{backend: openai, model: tiny-qwen2.5-vl, base_url: "{server.url}", retries: 0,
        max_new_tokens: 4, timeout_s: 10}}
""")
    out = tmp_path / "ds"
    args = ["build", "--bag", str(bag), "--questions", str(questions), "--image-topic",
            "/camera/image_raw", "--odom-topic", "/odom", "--out", str(out), "--config",
            str(cfg), "--cache-dir", str(tmp_path / "cache"), "--split-by", "question",
            "--folds", "0", "--no-progress"]
    calls = {"n": 0}
    real_hook = server.server.request_hook

    def dies_after_two_rows(method: str, path: str, headers: Any) -> None:
        if method == "POST":
            calls["n"] += 1
            if calls["n"] > 2 * 4:  # 4 key frames a row: the server dies on row 3
                server.server.shutdown()
        real_hook(method, path, headers)

    server.server.request_hook = dies_after_two_rows
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "BACKEND_DOWN" in err[0] and "rerun the same command" in err[0]
    assert not (out / "data.jsonl").exists()  # no finished-looking table
    done = len(read_journal(out / ".build" / "rows.jsonl"))
    assert done >= 2
    server.close()
    back = ChatGate(tiny_vlm)
    cfg.write_text(cfg.read_text().replace(server.url, back.url))
    try:
        assert main(args) == 0
    finally:
        back.close()
    report = json.loads((out / "manifest.json").read_text())["report"]
    assert report["reused"] == done and report["perceived"] == 6 - done and report["skipped"] == {}
    assert len(load_rows(out)) == 6


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('["a", "list"]\n', "row 1: expected a JSON object, got list"),
        ('{"id": "x", "question": " ", "options": ["A. a", "B. b"], "answer": "A", '
         '"t_start": 0, "t_end": 1}\n', "EMPTY_QUESTION"),
    ],
)
def test_bad_question_rows_are_one_line_before_any_model(
    bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text(content)
    out = tmp_path / "ds"
    # a profile whose model cannot load: reaching it would be another error
    cfg = tmp_path / "nomodel.yaml"
    cfg.write_text("base: tiny\nperception: {vlm: {model: /nonexistent/model}}\n")
    assert main(["build", "--bag", str(bag), "--questions", str(q), "--image-topic",
                 "/camera/image_raw", "--out", str(out), "--config", str(cfg),
                 "--split-by", "question", "--folds", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_late_failures_come_early(bag: Path, questions: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "nomodel.yaml"
    cfg.write_text("base: tiny\nperception: {vlm: {model: /nonexistent/model}}\n")
    base = ["build", "--bag", str(bag), "--questions", str(questions), "--image-topic",
            "/camera/image_raw", "--out", str(tmp_path / "ds"), "--config", str(cfg),
            "--no-progress"]
    assert main([*base, "--odom-topic", "/no_odom"]) == 2
    assert "no topic '/no_odom'" in capsys.readouterr().err
    one = tmp_path / "one.jsonl"
    one.write_text(questions.read_text().splitlines(keepends=True)[0])
    assert main([*base[:4], str(one), *base[5:], "--split-by", "question", "--folds", "0"]) == 2
    err = capsys.readouterr().err
    assert "1 question(s) cannot make train/val/test" in err and "split by question" not in err
    assert not (tmp_path / "ds").exists()


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

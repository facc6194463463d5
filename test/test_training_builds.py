"""Training sets from a recorded bag: the table, resume, the fingerprint and the perception
cache, bad bags and bad question rows, and failures that stop a build without losing data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from bagdata import T0_NS, write_bag, write_questions

from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.profiles import load_config
from embodied_r_training.cli import main
from embodied_r_training.data.bag_source import BagFrames, question_samples, read_questions
from embodied_r_training.data.build import build_dataset
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.journal import read_journal, settings_fingerprint


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
    # odometry drives 0.1 m and turns left 3 degrees a frame: both parts of each motion written
    assert "After move forward about" in user and ", then rotate left about" in user
    assert row["motion_source"] == "odometry" and row["solution"] == "A"
    stamps = row["key_frame_stamps"]
    assert len(stamps) >= 4 and stamps == sorted(stamps)
    assert T0_NS / 1e9 <= stamps[0] and stamps[-1] <= T0_NS / 1e9 + 4.0
    assert [f["stamp"] for f in row["records"]["frames"]] == stamps
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["motion"] == "odometry" and manifest["rows"] == 6
    splits = json.loads((out / "splits.json").read_text())
    assert sorted(splits["train"] + splits["val"] + splits["test"]) == sorted(r["id"] for r in rows)
    assert len(splits["folds"]) == 3
    # the same settings again: every row comes from the journal, nothing is perceived
    assert _build(bag, questions, out, tmp_path / "cache") == 0
    assert "(0 perceived" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["report"]["reused"] == 6


def test_the_library_builds_the_table_the_cli_builds(
    bag: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``build`` is :func:`build_from_bag` behind arguments: the same rows from the same
    settings, a bad row left out with one notice, and no usable row a BuildError."""
    from embodied_r_training.data.builders import build_from_bag
    from embodied_r_training.data.dataset_files import BuildError
    from embodied_r_training.data.splits import SplitOptions

    cli = tmp_path / "cli"
    assert _build(bag, questions, cli, tmp_path / "cache") == 0
    capsys.readouterr()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("{not json\n" + questions.read_text())
    notices: list[str] = []
    config = load_config("offline", overrides={"cache": {"dir": str(tmp_path / "cache")}})
    lib = tmp_path / "lib"
    report = build_from_bag(bag, mixed, lib, image_topic="/camera/image_raw",
                            odom_topic="/odom", config=config, splits=SplitOptions(folds=3),
                            progress=False, notice=notices.append)
    assert report.rows == 6 and report.perceived == 6
    assert len(notices) == 1 and notices[0].startswith("skipping question row 1: not valid JSON")
    assert load_rows(lib) == load_rows(cli)
    assert json.loads((lib / "splits.json").read_text()) == json.loads(
        (cli / "splits.json").read_text())
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(BuildError, match="no usable question rows"):
        build_from_bag(bag, bad, tmp_path / "none", image_topic="/camera/image_raw",
                       config=config, progress=False, notice=notices.append)
    assert not (tmp_path / "none").exists()


class _Killed(KeyboardInterrupt):
    """Stands for the user stopping the build."""


def test_a_killed_build_resumes_where_it_stopped(bag: Path, questions: Path,
                                                 tmp_path: Path) -> None:
    config = load_config("offline", overrides={"cache": {"dir": str(tmp_path / "cache")}})
    pipeline = EmbodiedR(config)
    from embodied_r_ros.recordings.bags import BagReader

    out = tmp_path / "ds"
    fingerprint = settings_fingerprint(config, "geometric", {})
    with BagReader(bag) as reader:
        samples, bad = question_samples(read_questions(questions), bag, reader.start_ns,
                                        reader.end_ns)
        assert not bad
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
    """A non-UTF-8 line is left out with a warning; the rest of the journal is reused."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"_key": "a", "id": "q0"}\n\xff\xfe\x00junk\n{"_key": "b", "id": "q1"}\n')
    with caplog.at_level("WARNING", logger="embodied_r_training.data.journal"):
        rows = read_journal(path)
    assert sorted(rows) == ["a", "b"]
    assert "ignoring unreadable line 2 of" in caplog.text


def test_the_fingerprint_covers_every_setting_that_changes_a_reply(tmp_path: Path) -> None:
    """Changing the VLM's max_new_tokens or temperature, or the prompts' wording, changes the
    fingerprint, so a rerun perceives again instead of reusing the journal's rows."""
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


def test_each_question_is_checked_once_before_any_frame_is_read(tmp_path: Path) -> None:
    """The builder is an entry: a sample made in Python (no importer checked it) whose
    question fails ``ask``'s check is one BuildError naming it, before any frame is read."""
    from embodied_r_training.data.dataset_files import BuildError
    from embodied_r_training.data.samples import Sample

    config = load_config("offline", overrides={"cache": {"dir": str(tmp_path / "cache")}})
    good = Sample("q0", "s0", "c", "Which way?", ["A. left", "B. right"], "A", "x.mp4")
    bad = Sample("q1", "s1", "c", "   ", ["A. left", "B. right"], "A", "x.mp4")
    read: list[str] = []

    def frames_for(sample):  # noqa: ANN001, ANN202
        read.append(sample.id)
        raise AssertionError("no frame is read before every question passed")

    with pytest.raises(BuildError, match=r"^question q1: EMPTY_QUESTION: the question is empty$"):
        build_dataset([good, bad], frames_for, EmbodiedR(config), tmp_path / "ds",
                      fingerprint="f", split_by="question", folds=0, progress=False)
    assert read == [] and not (tmp_path / "ds").exists()

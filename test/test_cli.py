"""The ``embodied-r`` CLI end to end, in subprocesses, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from media import pan_frames, write_images, write_video


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embodied_r_ros.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 3 s at 10 fps panning 8 px/frame: 1-fps pre-sampling keeps frames 80 px apart.
    folder = tmp_path_factory.mktemp("video")
    return write_video(folder / "pan.mp4", pan_frames(30, 8), fps=10.0)


def test_keyframes_json_on_a_video(video: Path) -> None:
    proc = run_cli("keyframes", str(video), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"indices", "timestamps", "frames_in", "ms_per_frame"}
    assert out["frames_in"] == 30
    assert out["indices"][0] == 0 and out["indices"][-1] == 29  # first and last always kept
    assert len(out["indices"]) >= 4  # the clamp's lower bound
    assert out["timestamps"] == sorted(out["timestamps"])
    assert out["ms_per_frame"] > 0


def test_keyframes_on_an_image_folder_every_frame(tmp_path: Path) -> None:
    # 8 px/frame over 320 px: overlap drops below 0.5 after 20 frames (analytically 1 - d/w).
    folder = write_images(tmp_path / "imgs", pan_frames(45, 8))
    proc = run_cli("keyframes", str(folder), "--sample-fps", "0", "--input-fps", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["frames_in"] == 45
    idx = out["indices"]
    assert idx[0] == 0 and idx[-1] == 44
    # overlap after k frames is 1 - 8k/320: below 0.5 from k = 21 (k = 20 sits on the boundary)
    assert [b - a for a, b in zip(idx[:-2], idx[1:-1], strict=True)] in ([21, 21], [20, 21],
                                                                          [21, 20], [20, 20])
    assert out["timestamps"][1] == pytest.approx(out["indices"][1] / 5.0)


def test_ask_with_the_tiny_profile(video: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(f"base: tiny\ncache:\n  dir: {tmp_path / 'cache'}\n")
    proc = run_cli(
        "ask", str(video), "-q", "Which way did I move?", "-o", "A. left", "-o", "B. right",
        "--config", str(cfg), "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"answer", "reasoning", "perception", "key_frames", "timings"} <= set(out)
    # visual ego-motion is measured: the robot route's lines state their ages
    lines = re.findall(r"^Frame \d+ \(\d+ s before the last key frame\): ", out["perception"], re.M)
    assert len(lines) == len(out["key_frames"]) >= 4
    assert out["perception"].rstrip().endswith("A. left\nB. right")
    assert out["timings"]["total_sec"] >= out["timings"]["perception_sec"] > 0
    # the second ask hits the perception cache: the same perception text, no VLM time
    again = json.loads(run_cli(
        "ask", str(video), "-q", "Which way did I move?", "-o", "A. left", "-o", "B. right",
        "--config", str(cfg), "--json",
    ).stdout)
    assert again["perception"] == out["perception"]
    assert again["timings"]["perception_sec"] < out["timings"]["perception_sec"]


def test_ask_with_an_unwritable_cache_answers_with_one_warning(video: Path, tmp_path: Path
                                                                ) -> None:
    """A cache that cannot be written is one warning, not the end of the ask in a
    PermissionError traceback."""
    (tmp_path / "blocker").write_text("")  # a plain file where the cache folder would go
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(f"base: tiny\ncache:\n  dir: {tmp_path / 'blocker' / 'cache'}\n")
    proc = run_cli("ask", str(video), "-q", "Which way did I move?", "-o", "A. left", "-o",
                   "B. right", "--config", str(cfg), "--json")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^Frame 1 \(", json.loads(proc.stdout)["perception"], re.M)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot be written" in lines[0], proc.stderr


@pytest.fixture
def bad_inputs(video: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Bad files and configs under names that do not contain the words the errors must say."""
    (tmp_path / "a.mp4").write_bytes(b"")
    (tmp_path / "b.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(4000))
    data = video.read_bytes()
    (tmp_path / "c.mp4").write_bytes(data[: len(data) // 2])  # a download cut short
    (tmp_path / "d").mkdir()
    (tmp_path / "e.yaml").write_text('base: server\nperception:\n  vlm: {base_url: "not a url"}\n')
    closed = "http://127.0.0.1:9/v1"
    (tmp_path / "f.yaml").write_text(
        f"base: server\ncache: {{enabled: false}}\nperception:\n  vlm: {{base_url: \"{closed}\", "
        "api_key_env: ER_CLI_KEY, retries: 0}\nreasoning: {model: {model: tiny-qwen2, "
        "dtype: float32, device: cpu}}\n")
    return {"VIDEO": str(video), "EMPTY": str(tmp_path / "a.mp4"),
            "CORRUPT": str(tmp_path / "b.mp4"), "HALF": str(tmp_path / "c.mp4"),
            "NOIMAGES": str(tmp_path / "d"), "BADURL": str(tmp_path / "e.yaml"),
            "KEYED": str(tmp_path / "f.yaml")}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["keyframes", "/nonexistent.mp4"], "no such file"),
        (["ask", "VIDEO", "-q", "   "], "EMPTY_QUESTION"),
        (["ask", "VIDEO", "-q", "x?", "-o", "A left"], "BAD_OPTIONS"),
        (["ask", "VIDEO", "-q", "x?", "-p", "nope"], "unknown profile 'nope'"),
        (["ask", "VIDEO", "-q", "x?", "-p", "ros_params"], "unknown profile 'ros_params'"),
        (["ask", "EMPTY", "-q", "x?", "-p", "workstation"], "is empty (0 bytes)"),
        (["ask", "CORRUPT", "-q", "x?", "-p", "workstation"], "not a readable video"),
        (["ask", "HALF", "-q", "x?", "-p", "workstation"], "not a readable video"),
        (["ask", "NOIMAGES", "-q", "x?", "-p", "workstation"], "holds no images"),
        (["ask", "VIDEO", "-q", "x?", "--input-fps", "nan"], "--input-fps"),
        (["ask", "VIDEO", "-q", "x?", "--config", "BADURL"], "perception.vlm.base_url"),
        (["keyframes", "VIDEO", "--max-frames", "-3"], "--max-frames"),
        (["keyframes", "VIDEO", "--sample-fps", "inf"], "--sample-fps"),
        (["keyframes", "NOIMAGES"], "holds no images"),
        (["serve", "-p", "tiny", "--port", "70000"], "port 70000"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, bad_inputs: dict[str, str], tmp_path: Path
) -> None:
    cache = tmp_path / "models"  # an empty model cache: any model load would build one here
    proc = run_cli(*[bad_inputs.get(a, a) for a in args],
                   env={"EMBODIED_R_MODEL_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # no traceback, no usage, no library noise
    assert message.lower() in lines[0].lower(), lines[0]
    # found before any model loads: the cache is as empty as it was
    assert not cache.exists() or not any(cache.iterdir())


def test_api_keys_never_show_and_a_windows_line_ending_is_fine(
    bad_inputs: dict[str, str]
) -> None:
    secret = "sk-cli-0123456789abcdef"
    ask = ["ask", bad_inputs["VIDEO"], "-q", "Which way?", "--config", bad_inputs["KEYED"]]
    crlf = run_cli(*ask, env={"ER_CLI_KEY": secret + "\r\n"})  # stripped: the call is made
    assert crlf.returncode == 2 and crlf.stderr.count("\n") == 1, crlf.stderr
    assert "BACKEND_DOWN" in crlf.stderr and secret not in crlf.stderr + crlf.stdout
    inner = run_cli(*ask, env={"ER_CLI_KEY": "sk-cli\n0123456789abcdef"})
    assert inner.returncode == 2 and inner.stderr.count("\n") == 1, inner.stderr
    assert "ER_CLI_KEY" in inner.stderr and "0123456789" not in inner.stderr
    unset = run_cli(*ask, env={"ER_CLI_KEY": ""})
    assert unset.returncode == 2 and "ER_CLI_KEY" in unset.stderr and "not set" in unset.stderr

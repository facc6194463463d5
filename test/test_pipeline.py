"""The whole pipeline with real (tiny, random) transformers models and real OpenCV."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from media import pan_frames

from embodied_r_ros.core.config import load_config
from embodied_r_ros.core.pipeline import CANCELLED, NO_FRAMES, EmbodiedR, QueryError

OPTIONS = ["A. rotate left", "B. rotate right"]


@pytest.fixture(scope="module")
def frames() -> list[tuple]:
    return [(f, i / 10.0) for i, f in enumerate(pan_frames(41, 8))]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> EmbodiedR:
    cache = tmp_path_factory.mktemp("perception")
    pipeline = EmbodiedR(load_config("tiny", overrides={"cache": {"dir": str(cache)}}))
    yield pipeline
    pipeline.close()


def test_tiny_models_answer_end_to_end(tiny: EmbodiedR, frames: list[tuple]) -> None:
    answer = tiny.ask(frames, "Which way did I turn?", OPTIONS)
    n = len(answer.key_frame_stamps)
    assert 4 <= n <= 32 and answer.key_frame_stamps[0] == 0.0
    assert answer.key_frame_stamps[-1] == pytest.approx(4.0)
    assert len(answer.frames) == n and answer.frames[0].action is None
    assert len(re.findall(r"^Frame \d+: ", answer.perception, re.M)) == n
    assert answer.perception.endswith("Choices:\nA. rotate left\nB. rotate right")
    # visual ego-motion is reported beside the VLM's (random) action
    assert all(f.measured_motion for f in answer.frames[1:])
    assert answer.timings.total_s >= answer.timings.perception_s + answer.timings.reasoning_s
    assert answer.answer in ("A", "B", "")
    again = tiny.ask(frames, "Which way did I turn?", OPTIONS)
    assert again.perception_from_cache and again.perception == answer.perception


def test_geometric_perception_names_the_pan(tiny: EmbodiedR, frames: list[tuple]) -> None:
    cfg = load_config("tiny", overrides={"perception": {"backend": "geometric"},
                                         "cache": {"enabled": False}})
    geometric = EmbodiedR(cfg, lm=tiny.lm, load_models=False)
    answer = geometric.ask(frames, "Which way did I turn?", OPTIONS)
    actions = [f.action for f in answer.frames[1:]]
    # the view slides left over a flat texture: the camera turned (or slid) right
    assert all(a.startswith(("rotate right", "move right")) for a in actions), actions


def test_cancel_and_empty_input(tiny: EmbodiedR, frames: list[tuple]) -> None:
    with pytest.raises(QueryError) as err:
        tiny.ask(frames, "Where?", OPTIONS, cancelled=lambda: True)
    assert err.value.code == CANCELLED
    with pytest.raises(QueryError) as err:
        tiny.ask([], "Where?", OPTIONS)
    assert err.value.code == NO_FRAMES


def test_progress_is_reported_per_key_frame(tiny: EmbodiedR, frames: list[tuple]) -> None:
    seen: list[tuple[str, int, int]] = []
    tiny.ask(frames[:25], "Where is it?", [], on_progress=lambda s, d, t, _: seen.append((s, d, t)))
    stages = [s for s, _, _ in seen]
    assert stages[0] == "perception" and stages[-1] == "reasoning"


def test_a_backend_that_is_down_is_a_query_error(tmp_path: Path, frames: list[tuple]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = load_config(
        "server",
        overrides={
            "perception": {"vlm": {"base_url": f"http://127.0.0.1:{port}/v1", "retries": 0,
                                   "timeout_s": 2, "api_key_env": None}},
            "cache": {"enabled": False},
        },
    )
    from embodied_r_ros.core.backends.factory import create_backend

    pipeline = EmbodiedR(cfg, vlm=create_backend(cfg.perception.vlm), lm=None, load_models=False)
    with pytest.raises(QueryError) as err:
        pipeline.ask(frames, "Where?", OPTIONS)
    assert err.value.code == "BACKEND_DOWN"

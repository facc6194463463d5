"""The whole pipeline with real (tiny, random) transformers models and real OpenCV."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from media import pan_frames

from embodied_r_ros.core.cancel import CANCELLED, CancelToken
from embodied_r_ros.core.config import load_config
from embodied_r_ros.core.pipeline import NO_FRAMES, EmbodiedR, QueryError
from embodied_r_ros.core.reasoning import extract_answer, parse_options

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
    # the random LM says something; the answer is exactly what its reply names
    assert answer.raw.strip()
    assert answer.answer == extract_answer(answer.raw, OPTIONS)
    assert answer.answer_text == dict(parse_options(OPTIONS)).get(answer.answer, "")
    again = tiny.ask(frames, "Which way did I turn?", OPTIONS)
    assert again.perception_from_cache and again.perception == answer.perception
    assert again.raw == answer.raw  # greedy: the same text gives the same reply


def test_geometric_perception_names_the_pan(tiny: EmbodiedR, frames: list[tuple]) -> None:
    cfg = load_config("tiny", overrides={"perception": {"backend": "geometric"},
                                         "cache": {"enabled": False}})
    geometric = EmbodiedR(cfg, lm=tiny.lm, load_models=False)
    answer = geometric.ask(frames, "Which way did I turn?", OPTIONS)
    actions = [f.action for f in answer.frames[1:]]
    # the view slides left over a flat texture: the camera turned (or slid) right
    assert all(a.startswith(("rotate right", "move right")) for a in actions), actions


def test_cancel_and_empty_input(tiny: EmbodiedR, frames: list[tuple]) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(QueryError) as err:
        tiny.ask(frames, "Where is the door?", OPTIONS, cancel=token)
    assert err.value.code == CANCELLED
    with pytest.raises(QueryError) as err:  # a spent budget is a timeout, not a cancel
        tiny.ask(frames, "Where is the door?", OPTIONS, cancel=CancelToken(0.0))
    assert err.value.code == "BACKEND_TIMEOUT"
    with pytest.raises(QueryError) as err:
        tiny.ask([], "Where?", OPTIONS)
    assert err.value.code == NO_FRAMES


def test_progress_is_reported_per_key_frame(tiny: EmbodiedR, frames: list[tuple]) -> None:
    seen: list[tuple[str, int, int]] = []
    answer = tiny.ask(frames[:25], "Where is it now?", [],
                      on_progress=lambda s, d, t, _: seen.append((s, d, t)))
    n = len(answer.key_frame_stamps)
    assert n >= 4
    # one event per key frame as its reply arrives, in order, then reasoning begins and ends
    assert seen == [("perception", i, n) for i in range(1, n + 1)] + [
        ("reasoning", 0, 1), ("reasoning", 1, 1)]


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

"""The whole pipeline with real (tiny, random) transformers models and real OpenCV."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from media import pan_frames
from scripted import ScriptedVLM, prompt_of

from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.actions import primary_action
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import ChatBackend, Completion, Conversation
from embodied_r_ros.core.error_codes import BACKEND_FAILED, CANCELLED, NO_FRAMES
from embodied_r_ros.core.pipeline import MAX_PERCEPTION_CHARS, EmbodiedR, QueryError
from embodied_r_ros.core.profiles import config_from_dict, load_config
from embodied_r_ros.core.prompts import default_prompts
from embodied_r_ros.core.reasoning import extract_answer, parse_options
from embodied_r_ros.core.request import Question, validate_query

OPTIONS = ["A. rotate left", "B. rotate right"]


class Recorded(ChatBackend):
    """A real backend whose conversations and replies are recorded (calls may be concurrent)."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.supports_images = inner.supports_images
        self.concurrent = inner.concurrent
        self.max_batch = inner.max_batch
        self.seen: list[Conversation] = []
        self.replies: list[str] = []
        self._lock = threading.Lock()

    def complete(self, conversations: Sequence[Conversation], **settings: Any) -> list[Completion]:
        out = self.inner.complete(conversations, **settings)
        with self._lock:
            self.seen += list(conversations)
            self.replies += [c.text for c in out]
        return out


def _images(conversation: Conversation) -> int:
    content = conversation[-1]["content"]
    return 0 if isinstance(content, str) else sum(p.get("type") == "image" for p in content)


@pytest.fixture(scope="module")
def frames() -> list[tuple]:
    return [(f, i / 10.0) for i, f in enumerate(pan_frames(41, 8))]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> EmbodiedR:
    cache = tmp_path_factory.mktemp("perception")
    pipeline = load_pipeline(load_config("tiny", overrides={"cache": {"dir": str(cache)}}))
    yield pipeline
    pipeline.close()


def test_tiny_models_answer_end_to_end(tiny: EmbodiedR, frames: list[tuple],
                                       tmp_path: Path) -> None:
    cfg = load_config("tiny", overrides={"cache": {"dir": str(tmp_path / "cache")}})
    vlm, lm = Recorded(tiny.vlm), Recorded(tiny.lm)
    pipeline = load_pipeline(cfg, vlm=vlm, lm=lm)
    answer = pipeline.ask(frames, validate_query("Which way did I turn?", OPTIONS))
    n = len(answer.key_frame_stamps)
    # the VLM saw the first key frame alone, then each consecutive pair, once each
    assert sorted(_images(c) for c in vlm.seen) == [1] + [2] * (n - 1)
    # the LM got exactly the perception text (with the question) under the system prompt,
    # and the answer is its reply
    assert len(lm.seen) == 1
    assert lm.seen[0][0] == {"role": "system", "content": default_prompts().system}
    assert prompt_of(lm.seen[0]) == answer.perception and lm.replies == [answer.raw]
    assert 4 <= n <= 32 and answer.key_frame_stamps[0] == 0.0
    assert answer.key_frame_stamps[-1] == pytest.approx(4.0)
    assert len(answer.frames) == n and answer.frames[0].motion is None
    # visual ego-motion is measured: the robot route's lines state each frame's age
    ages = re.findall(r"^Frame \d+ \((\d+) s before the last key frame\): ", answer.perception,
                      re.M)
    assert len(ages) == n and ages[-1] == "0" and ages[0] == "4"
    assert answer.perception.endswith("Choices:\nA. rotate left\nB. rotate right")
    # visual ego-motion is reported beside the VLM's (random) action
    assert all(f.motion is not None for f in answer.frames[1:])
    assert answer.success and not answer.error_code
    assert answer.total_sec >= answer.perception_sec + answer.reasoning_sec + answer.keyframes_sec
    # the random LM says something; the answer is exactly what its reply names
    assert answer.raw.strip()
    assert answer.answer == extract_answer(answer.raw, OPTIONS)
    assert answer.answer_text == dict(parse_options(OPTIONS)).get(answer.answer, "")
    again = pipeline.ask(frames, validate_query("Which way did I turn?", OPTIONS))
    assert again.perception_from_cache and again.perception == answer.perception
    assert len(vlm.seen) == n  # every key frame's description came from the cache
    assert again.raw == answer.raw and len(lm.seen) == 2  # greedy: the same reply again


def test_the_reply_of_the_lm_becomes_the_answer(tiny: EmbodiedR, frames: list[tuple]) -> None:
    """The real tiny VLM's perception, an LM whose replies are known: what the caller gets."""
    cfg = load_config("tiny", overrides={"cache": {"enabled": False}})
    lm = ScriptedVLM(["<think>The view slid left in every frame: I turned right.</think>\n"
                      "<answer>B</answer>", "rotate left", "I cannot tell."])
    pipeline = load_pipeline(cfg, vlm=tiny.vlm, lm=lm)
    question = validate_query("Which way did I turn?", OPTIONS)
    answers = [pipeline.ask(frames, question) for _ in range(3)]
    first, by_text, none = answers
    assert (first.answer, first.answer_text, first.well_formed) == ("B", "rotate right", True)
    assert first.reasoning == "The view slid left in every frame: I turned right."
    assert (by_text.answer, by_text.answer_text, by_text.well_formed) == ("A", "rotate left",
                                                                            False)
    assert (none.answer, none.answer_text, none.reasoning) == ("", "", "")
    assert [prompt_of(c) for c in lm.seen] == [a.perception for a in answers]
    assert "Which way did I turn?" in first.perception


def test_geometric_perception_names_the_pan(tiny: EmbodiedR, frames: list[tuple]) -> None:
    cfg = load_config("tiny", overrides={"perception": {"backend": "geometric"},
                                         "cache": {"enabled": False}})
    geometric = load_pipeline(cfg, lm=tiny.lm, perception=False)
    answer = geometric.ask(frames, validate_query("Which way did I turn?", OPTIONS))
    actions = [primary_action(f.motion) or "" for f in answer.frames[1:] if f.motion]
    assert len(actions) == len(answer.frames) - 1
    # the view slides left over a flat texture: the camera turned (or slid) right
    assert all(a.startswith(("rotate right", "move right")) for a in actions), actions


def test_cancel_and_empty_input(tiny: EmbodiedR, frames: list[tuple]) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(QueryError) as err:
        tiny.ask(frames, validate_query("Where is the door?", OPTIONS), cancel=token)
    assert err.value.code == CANCELLED
    with pytest.raises(QueryError) as err:  # a spent budget is a timeout, not a cancel
        tiny.ask(frames, validate_query("Where is the door?", OPTIONS), cancel=CancelToken(0.0))
    assert err.value.code == "BACKEND_TIMEOUT"
    with pytest.raises(QueryError) as err:
        tiny.ask([], validate_query("Where?", OPTIONS))
    assert err.value.code == NO_FRAMES


def test_progress_is_reported_per_key_frame(tiny: EmbodiedR, frames: list[tuple]) -> None:
    seen: list[tuple[str, int, int]] = []
    answer = tiny.ask(frames[:25], validate_query("Where is it now?", []),
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
    from embodied_r_ros.backends.factory import create_backend

    pipeline = load_pipeline(cfg, vlm=create_backend(cfg.perception.vlm), reasoning=False)
    with pytest.raises(QueryError) as err:
        pipeline.ask(frames, validate_query("Where?", OPTIONS))
    assert err.value.code == "BACKEND_DOWN"


def test_an_oversize_perception_text_is_the_models_failure_not_a_bad_request() -> None:
    """VLM replies that add up past the perception text's bound are the model's failure
    (BACKEND_FAILED), not the asker's BAD_REQUEST."""

    class Verbose(ChatBackend):
        model_id = "verbose"
        supports_images = True

        def complete(self, conversations: Any, *, on_reply: Any = None,
                     **_: Any) -> list[Completion]:
            replies = [Completion("a chair. " * (MAX_PERCEPTION_CHARS // 16))] * len(
                conversations)
            for i, reply in enumerate(replies):
                if on_reply is not None:
                    on_reply(i, reply)
            return replies

    cfg = config_from_dict({"perception": {"backend": "vlm", "vlm": {"model": "verbose"}},
                            "reasoning": {"model": {"model": "x"}}, "cache": {"enabled": False}})
    pipeline = load_pipeline(cfg, vlm=Verbose(), reasoning=False)
    images = [np.full((32, 32, 3), v, np.uint8) for v in (10, 200, 90)]
    with pytest.raises(QueryError) as err:
        pipeline.perceive(images, [0.0, 1.0, 2.0], Question("Which way?"), motions=[None, None])
    assert err.value.code == BACKEND_FAILED and "perception model" in str(err.value)

"""One seed rule for every backend (``backends.base.call_seeds``): an explicit seed gives
conversation i the seed + i at any temperature; without one a greedy call sends none and a
sampling call takes the next seeds of the backend's own sequence, so a fresh backend replays,
and neither successive calls nor the conversations of one call share a seed."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.generation import resolve_generation
from embodied_r_ros.backends.vllm_backend import VLLMBackend
from embodied_r_ros.core.config import ModelConfig

CONVS = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]


class Capture:
    """An OpenAI-compatible endpoint on loopback that records every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        lock = threading.Lock()
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    bodies.append(body)
                reply = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "ok"}}],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def do_GET(self) -> None:  # noqa: N802
                reply = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def seeds(self) -> list[int | None]:
        # requests of one call arrive concurrently: order them by their prompt
        ordered = sorted(self.bodies, key=lambda b: b["messages"][-1]["content"])
        return [b.get("seed") for b in ordered]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def capture() -> Iterator[Capture]:
    server = Capture()
    yield server
    server.close()


def _openai(url: str, **kw: Any) -> Any:
    return create_backend(ModelConfig(backend="openai", model="m", base_url=url, retries=0,
                                      max_new_tokens=4, **kw))


def test_openai_sends_the_rule_s_seeds(capture: Capture) -> None:
    client = _openai(capture.url, temperature=1.0, seed=100)
    calls: list[list[int | None]] = []
    for settings in ({}, {}, {"seed": 7}, {"temperature": 0.0}, {"temperature": 0.0, "seed": 3}):
        capture.bodies.clear()
        client.complete(CONVS, **settings)
        calls.append(capture.seeds())
    client.close()
    assert calls[0] == [100, 101, 102]  # a group of one call: distinct seeds
    assert calls[1] == [103, 104, 105]  # the next call goes on with the sequence
    assert calls[2] == [7, 8, 9]  # explicit
    assert calls[3] == [None, None, None]  # greedy, no seed: none sent
    assert calls[4] == [3, 4, 5]  # explicit at temperature 0 is still sent
    fresh = _openai(capture.url, temperature=1.0, seed=100)
    capture.bodies.clear()
    fresh.complete(CONVS)
    fresh.close()
    assert capture.seeds() == [100, 101, 102]  # a fresh backend replays


def test_vllm_sampling_params_follow_the_rule() -> None:
    # vLLM itself needs a GPU; the parameters it would be given are plain keywords
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.cfg = ModelConfig(backend="vllm", model="m", temperature=1.0, seed=100)
    sampled = resolve_generation(backend.cfg, None)
    greedy = sampled.with_call(temperature=0.0)
    first = backend.sampling_kwargs(3, sampled, None, ())
    second = backend.sampling_kwargs(2, sampled, None, ())
    assert [k["seed"] for k in first] == [100, 101, 102]
    assert [k["seed"] for k in second] == [103, 104]
    assert [k["seed"] for k in backend.sampling_kwargs(2, greedy, 5, ())] == [5, 6]
    assert [k["seed"] for k in backend.sampling_kwargs(2, greedy, None, ())] == [None, None]


def test_transformers_follows_the_rule(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    cfg = tiny_config("tiny-qwen2", temperature=1.0, seed=100, max_new_tokens=8, batch_size=1)
    backend = create_backend(cfg, cache_dir=tiny_models_dir)
    same = [CONVS[0]] * 3
    group = backend.generate(same)  # seeds 100, 101, 102: one per conversation
    explicit = [backend.generate([CONVS[0]], seed=s)[0] for s in (100, 101, 102)]
    assert group == explicit
    assert len(set(group)) > 1  # one prompt, three seeds, different samples
    again = backend.generate(same)  # seeds 103..105: the sequence goes on
    fresh = create_backend(cfg, cache_dir=tiny_models_dir)
    assert fresh.generate(same) == group and again != group

"""The OpenAI-compatible server: endpoints and bad requests, the OpenAI fields it honours,
batching for in-process models, health, shutdown and start-up."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from http_helpers import (
    QUESTIONS,
    FlakyBackend,
    Recorder,
    free_port,
    http_json,
    openai_cfg,
    text_convs,
)

from embodied_r_ros.backends.openai_backend import OpenAIBackend
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend, Completion
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_DOWN, CANCELLED
from embodied_r_ros.serving import OpenAIServer, serve


def test_server_endpoints_and_bad_requests(vlm_server: tuple[OpenAIServer, Recorder]) -> None:
    server, _ = vlm_server
    root = server.url.removesuffix("/v1")
    assert http_json(root + "/health") == (200, {"status": "ok", "model": "tiny-qwen2.5-vl"})
    status, models = http_json(server.url + "/models")
    assert status == 200 and models["data"][0]["id"] == "tiny-qwen2.5-vl"
    status, err = http_json(server.url + "/chat/completions", b"{not json")
    assert status == 400 and "JSON" in err["error"]["message"]
    status, err = http_json(server.url + "/chat/completions", b'{"messages": []}')
    assert status == 400
    bad_image = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
                ],
            }
        ]
    }
    status, _ = http_json(server.url + "/chat/completions", json.dumps(bad_image).encode())
    assert status == 400
    status, _ = http_json(server.url + "/nowhere")
    assert status == 404
    with pytest.raises(BackendError, match="HTTP 404.*API root"):
        OpenAIBackend(openai_cfg(root)).generate(text_convs(1))  # base_url without /v1
    status, reply = http_json(
        server.url + "/chat/completions",
        json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode(),
    )
    assert status == 200 and reply["choices"][0]["message"]["role"] == "assistant"


def test_server_reports_length_usage_and_honours_stop_and_seed(tiny_lm: ChatBackend) -> None:
    with serve(tiny_lm) as server:
        def chat(**extra: Any) -> tuple[int, dict[str, Any]]:
            body = {"messages": [{"role": "user", "content": QUESTIONS[0]}], **extra}
            return http_json(server.url + "/chat/completions", json.dumps(body).encode())

        status, cut = chat(max_tokens=2)
        assert status == 200 and cut["choices"][0]["finish_reason"] == "length"
        assert cut["usage"]["completion_tokens"] == 2 and cut["usage"]["prompt_tokens"] > 5
        _, full = chat(max_tokens=12)
        text = full["choices"][0]["message"]["content"]
        stop = text[2:4]
        assert len(stop) == 2 and stop in text
        _, stopped = chat(max_tokens=12, stop=[stop])
        assert stopped["choices"][0]["message"]["content"] == text[: text.index(stop)]
        assert stopped["choices"][0]["finish_reason"] == "stop"
        sampled = [chat(max_tokens=12, temperature=1.0, seed=s)[1] for s in (5, 5, 6)]
        texts = [r["choices"][0]["message"]["content"] for r in sampled]
        assert texts[0] == texts[1] != texts[2]
        for bad in ({"stream": True}, {"logprobs": True}, {"n": 2}, {"stop": [1]},
                    {"top_p": 0.0}):
            status, err = chat(**bad)
            assert status == 400, bad
            assert err["error"]["type"] == "invalid_request_error"


def test_server_batches_concurrent_requests_for_in_process_models() -> None:
    backend = FlakyBackend(broken=False, delay_s=0.2)
    with serve(backend) as server:
        client = OpenAIBackend(openai_cfg(server.url, max_concurrency=6))
        replies = client.generate(text_convs(6))
    assert replies == [f"echo {c[-1]['content']}" for c in text_convs(6)]
    # the first request starts a batch alone, the five that arrive meanwhile share the next
    assert len(backend.batches) < 6 and max(backend.batches) > 1, backend.batches


def test_a_request_whose_client_left_is_dropped_and_the_batcher_serves_on() -> None:
    """A batch holding a request whose client has gone: that request fails with CANCELLED,
    the others of its batch are answered, and the worker serves later requests. Conversations
    carry images (arrays), which the worker must not compare to drop the request: a worker
    that died there would leave every later request hanging."""
    from embodied_r_ros.serving.batching import Batcher
    from embodied_r_ros.serving.requests import Settings

    def conv(text: str) -> Any:
        image = np.zeros((4, 4, 3), np.uint8)
        return [{"role": "user", "content": [{"type": "image", "image": image},
                                             {"type": "text", "text": text}]}]

    class Held(FlakyBackend):
        """Echoes; holds the first batch until ``release`` is set."""

        def __init__(self) -> None:
            super().__init__(broken=False)
            self.entered, self.release = threading.Event(), threading.Event()

        def complete(self, conversations: Any, **kwargs: Any) -> list[Completion]:
            self.entered.set()
            assert self.release.wait(10)
            return super().complete(conversations, **kwargs)

    backend = Held()
    batcher = Batcher(backend, max_batch=4)
    settings = Settings(32, None, None, None, ())
    left = CancelToken()
    left.cancel()
    results: dict[str, Any] = {}

    def ask(name: str, cancel: CancelToken | None = None) -> None:
        try:
            results[name] = batcher.submit(conv(name), settings, cancel)
        except BackendError as exc:
            results[name] = exc

    busy = threading.Thread(target=ask, args=("busy",))
    busy.start()
    assert backend.entered.wait(10)  # the worker is inside the first batch
    waiting = [threading.Thread(target=ask, args=("stays",)),
               threading.Thread(target=ask, args=("left", left))]
    for t in waiting:
        t.start()
    deadline = time.monotonic() + 10
    while batcher._queue.qsize() < 2:  # the next two queue behind it: the second batch
        assert time.monotonic() < deadline, "the two requests never queued"
        time.sleep(0.01)
    backend.release.set()
    for t in (busy, *waiting):
        t.join(timeout=10)
    later = threading.Thread(target=ask, args=("later",), daemon=True)
    later.start()
    later.join(timeout=10)
    assert not later.is_alive(), "the batch worker died: a later request hangs"
    batcher.close()
    assert isinstance(results["left"], BackendError) and results["left"].code == CANCELLED
    assert all(isinstance(results[n], Completion) for n in ("busy", "stays", "later")), results
    assert backend.batches == [1, 1, 1]


class EchoBackend(ChatBackend):
    """A one-at-a-time in-process model: the server queues its requests in the batcher."""

    model_id = "echo"
    concurrent = False

    def complete(self, conversations: Any, **_: Any) -> list[Completion]:
        return [Completion("ok")] * len(conversations)


def test_a_request_caught_by_shutdown_fails_at_once_as_down() -> None:
    """A request that reaches the model queue while the server shuts down is answered 503
    (BACKEND_DOWN at the client) at once, instead of waiting on a stopped queue until the
    client's timeout."""
    posts = {"n": 0}
    holder: dict[str, OpenAIServer] = {}

    def shuts_down_on_the_second(method: str, _path: str, _headers: Mapping[str, str]) -> None:
        if method == "POST":
            posts["n"] += 1
            if posts["n"] == 2:
                holder["server"].shutdown()

    with serve(EchoBackend(), request_hook=shuts_down_on_the_second) as server:
        holder["server"] = server
        client = OpenAIBackend(openai_cfg(server.url, timeout_s=20, retries=0))
        assert client.generate(text_convs(1)) == ["ok"]
        start = time.monotonic()
        with pytest.raises(BackendError) as err:
            client.generate(text_convs(1))
        elapsed = time.monotonic() - start
    assert err.value.code == BACKEND_DOWN and "shutting down" in str(err.value)
    assert elapsed < 5.0  # not the 20 s client timeout


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_run_server_serves_a_profile_model_until_signalled(tiny_models_dir: Path,
                                                          stop: signal.Signals) -> None:
    port = free_port()
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from embodied_r_ros.core.config import ModelConfig\n"
        "from embodied_r_ros.cli import serve_model\n"
        f"serve_model(ModelConfig(model='tiny-qwen2', max_new_tokens=4), '127.0.0.1', {port})\n"
    )
    env = {**os.environ, "EMBODIED_R_MODEL_CACHE": str(tiny_models_dir)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    try:
        client = OpenAIBackend(openai_cfg(f"http://127.0.0.1:{port}/v1"))
        deadline = time.monotonic() + 60
        while not client.healthy():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        assert len(client.generate(text_convs(2))) == 2
    finally:
        proc.send_signal(stop)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr.decode()
    assert f"serving tiny-qwen2 at http://127.0.0.1:{port}/v1" in stderr.decode()
    assert f"{stop.name}: shutting down" in stderr.decode()


def test_serve_binds_the_port_before_loading_the_model() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        from embodied_r_ros.cli import serve_model

        for bad_port in (port, 70000):
            with pytest.raises(BackendError, match=f"{bad_port}") as err:
                # the port's error, not the model's: loading it (no hub here) would fail first
                serve_model(ModelConfig(model="Qwen/never-loaded"), "127.0.0.1", bad_port)
            assert "\n" not in str(err.value) and "never-loaded" not in str(err.value)


def test_server_health_reflects_the_last_call(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="embodied_r_ros.serving")
    flaky = FlakyBackend(broken=True)
    with serve(flaky) as server:
        root = server.url.removesuffix("/v1")
        client = OpenAIBackend(openai_cfg(server.url))
        with pytest.raises(BackendError):
            client.generate(text_convs(1))
        status, body = http_json(root + "/health")
        assert status == 503 and "model exploded" in body["error"]
        assert not client.healthy() and "HTTP 500" in client.health().error
        flaky.broken = False
        client.generate(text_convs(1))
        assert http_json(root + "/health")[0] == 200 and client.healthy()

"""Backends with real parts: tiny transformers models in process, and the OpenAI-compatible
server + client over real HTTP on loopback."""

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
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embodied_r_ros.core.backends import (
    BACKEND_DOWN,
    BACKEND_FAILED,
    BACKEND_TIMEOUT,
    BackendError,
    ChatBackend,
    Conversation,
    create_backend,
)
from embodied_r_ros.core.backends.base import Completion
from embodied_r_ros.core.backends.images import from_data_url, resize_max_side, to_data_url
from embodied_r_ros.core.backends.openai_backend import OpenAIBackend
from embodied_r_ros.core.cancel import CANCELLED, CancelToken
from embodied_r_ros.core.config import ConfigError, ModelConfig
from embodied_r_ros.serving import OpenAIServer, serve

QUESTIONS = [
    "Which object is closest to the agent?",
    "How far is the chair from the table?",
    "Describe the scene.",
    "Frame 1: After move forward, Observe: a red building ahead.",
    "Is the door on the left or the right?",
]


def user(text: str, images: list[np.ndarray] = ()) -> Conversation:
    parts: list[dict[str, Any]] = [{"type": "image", "image": im} for im in images]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def text_convs(n: int) -> list[Conversation]:
    return [
        [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] * (1 + i // 5)}]
        for i in range(n)
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_json(url: str, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Recorder:
    """A server request hook that remembers what arrived."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def __call__(self, method: str, path: str, headers: Mapping[str, str]) -> None:
        with self._lock:
            self.requests.append((method, path, dict(headers)))

    def posts(self) -> int:
        return sum(1 for method, _, _ in self.requests if method == "POST")


class SlowBackend(ChatBackend):
    """Answers only after ``release`` is set (or 5 s): a server that outlives client timeouts.
    ``answered`` counts the batches it has replied to (a client that gave up in time saw none)."""

    model_id = "slow"
    concurrent = True

    def __init__(self) -> None:
        self.release = threading.Event()
        self.answered = 0

    def complete(self, conversations: Any, **_: Any) -> list[Completion]:
        self.release.wait(5.0)
        self.answered += 1
        return [Completion("late")] * len(conversations)


class FlakyBackend(ChatBackend):
    """Fails while ``broken`` is set (the server answers 500), else echoes; counts batches."""

    model_id = "flaky"
    max_batch = 8

    def __init__(self, broken: bool = True, delay_s: float = 0.0) -> None:
        self.broken = broken
        self.delay_s = delay_s
        self.batches: list[int] = []

    def complete(self, conversations: Any, **_: Any) -> list[Completion]:
        self.batches.append(len(conversations))
        time.sleep(self.delay_s)
        if self.broken:
            self._record("model exploded")
            raise RuntimeError("model exploded")
        self._record(None)
        return [Completion(f"echo {c[-1]['content']}", "stop", 3, 2) for c in conversations]


BrokenBackend = FlakyBackend


class RawHTTP:
    """A loopback socket server that answers every request with ``respond(conn, request)``:
    for misbehaving servers (trickled bytes, echoed secrets) no HTTP library would write."""

    def __init__(self, respond: Callable[[socket.socket, bytes], None]) -> None:
        self.respond = respond
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                self.requests += 1
                self.respond(conn, data)
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.sock.close()


def openai_cfg(url: str, **overrides: Any) -> ModelConfig:
    fields: dict[str, Any] = {
        "backend": "openai",
        "model": "served",
        "base_url": url,
        "max_new_tokens": 12,
        "timeout_s": 10.0,
        "retries": 0,
    }
    fields.update(overrides)
    return ModelConfig(**fields)


# -- transformers, in process ----------------------------------------------------------------


def test_greedy_is_deterministic(
    tiny_lm: ChatBackend, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    convs = text_convs(3)
    first = tiny_lm.generate(convs)
    assert tiny_lm.generate(convs) == first
    fresh = create_backend(tiny_config("tiny-qwen2"), cache_dir=tiny_models_dir)
    assert fresh.generate(convs) == first
    assert all(isinstance(r, str) for r in first) and any(first)


def test_batches_keep_order_and_match_unbatched(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    backend = create_backend(tiny_config("tiny-qwen2", batch_size=2), cache_dir=tiny_models_dir)
    convs = text_convs(5)  # 2 + 2 + 1, prompts of different lengths -> left padding
    batched = backend.generate(convs)
    single = [backend.generate([c])[0] for c in convs]
    assert len(batched) == 5
    assert batched == single
    assert len(set(batched)) > 1  # replies depend on the prompt, so order is checked


def test_max_new_tokens_is_respected(tiny_lm: Any) -> None:
    convs = text_convs(4)
    short = tiny_lm.generate_ids(convs, max_new_tokens=3)
    longer = tiny_lm.generate_ids(convs, max_new_tokens=10)
    assert all(len(ids) <= 3 for ids in short)
    assert max(len(ids) for ids in longer) > 3
    # a shorter budget is a prefix of the longer greedy completion
    for a, b in zip(short, longer, strict=True):
        assert b[: len(a)] == a
    assert tiny_lm.generate(convs, max_new_tokens=3) == tiny_lm.tokenizer.batch_decode(
        short, skip_special_tokens=True
    )


def test_sampling_is_seeded_and_leaves_global_rng_alone(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    import torch

    convs = text_convs(2)

    def sample(seed: int) -> list[list[str]]:
        cfg = tiny_config("tiny-qwen2", temperature=1.0, seed=seed, max_new_tokens=16)
        backend = create_backend(cfg, cache_dir=tiny_models_dir)
        return [backend.generate(convs), backend.generate(convs)]

    state = torch.get_rng_state()
    run_a, run_b, other = sample(0), sample(0), sample(1)
    assert torch.equal(torch.get_rng_state(), state)
    assert run_a == run_b  # a fresh backend with the same seed replays the same samples
    assert run_a[0] != run_a[1]  # successive calls draw differently
    assert run_a != other


def test_vlm_accepts_one_and_two_images(tiny_vlm: ChatBackend, rgb_frames: list[np.ndarray]):
    first, second = rgb_frames
    convs = [
        user("What is ahead?", [first]),
        user("What changed?", [first, second]),
        user("What is ahead?"),
    ]
    replies = tiny_vlm.generate(convs)
    assert len(replies) == 3 and all(isinstance(r, str) for r in replies)
    assert replies == [tiny_vlm.generate([c])[0] for c in convs]  # batching with images
    # the pixels reach the model: another image changes the greedy reply
    assert tiny_vlm.generate([user("What is ahead?", [second])])[0] != replies[0]


def test_image_processor_expands_one_placeholder_per_vision_token(
    tiny_vlm: Any, rgb_frames: list[np.ndarray]
) -> None:
    enc = tiny_vlm.encode([user("a", rgb_frames[:1]), user("b", rgb_frames)])
    grid = enc["image_grid_thw"]
    assert grid.shape == (3, 3)
    merge = tiny_vlm.processor.image_processor.merge_size**2
    image_id = tiny_vlm.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    per_row = (enc["input_ids"] == image_id).sum(dim=1).tolist()
    tokens = (grid.prod(-1) // merge).tolist()
    assert per_row == [tokens[0], tokens[1] + tokens[2]]
    assert enc["mm_token_type_ids"].sum().item() == sum(tokens)
    assert enc["attention_mask"][0, 0].item() == 0  # shorter row is left-padded


def test_text_model_refuses_images(tiny_lm: ChatBackend, rgb_frames: list[np.ndarray]) -> None:
    assert tiny_lm.supports_images is False
    with pytest.raises(BackendError) as err:
        tiny_lm.generate([user("what?", rgb_frames[:1])])
    assert err.value.code == BACKEND_FAILED and "does not accept images" in str(err.value)


def test_malformed_parts_are_refused_before_any_work(tiny_vlm: ChatBackend) -> None:
    offline_client = OpenAIBackend(openai_cfg("http://127.0.0.1:9/v1"))  # never contacted
    bad = [
        user("x", [np.zeros((8, 8), np.uint8)]),  # not H x W x 3
        [{"role": "user", "content": [{"type": "video", "video": "clip.mp4"}]}],
        [{"role": "user", "content": 42}],
    ]
    for backend in (tiny_vlm, offline_client):
        for conv in bad:
            with pytest.raises(BackendError) as err:
                backend.generate([conv])
            assert err.value.code == BACKEND_FAILED


def test_text_parts_reach_text_only_models(tiny_lm: ChatBackend) -> None:
    as_parts = [{"role": "user", "content": [{"type": "text", "text": QUESTIONS[0]}]}]
    as_string = [{"role": "user", "content": QUESTIONS[0]}]
    assert tiny_lm.generate([as_parts]) == tiny_lm.generate([as_string])


def test_unavailable_model_fails_in_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub.constants

    # equivalent of HF_HUB_OFFLINE=1 (read at import time): no 25 s of hub retries
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for name in ("Qwen/Qwen2.5-VL-3B-Instruct-not-cached", str(tmp_path / "missing")):
        with pytest.raises(BackendError) as err:
            create_backend(ModelConfig(model=name))
        assert err.value.code == BACKEND_FAILED
        assert f"'{name}'" in str(err.value) and "\n" not in str(err.value)


def test_vllm_missing_is_a_clear_error() -> None:
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed")
    with pytest.raises(BackendError) as err:
        create_backend(ModelConfig(backend="vllm", model="tiny-qwen2"))
    assert err.value.code == BACKEND_DOWN
    assert str(err.value) == "backend 'vllm' needs the optional extra: pip install -e .[vllm]"


def test_importing_backends_does_not_import_torch() -> None:
    code = (
        "import sys, embodied_r_ros.core.backends, embodied_r_ros.serving, "
        "embodied_r_ros.core.backends.openai_backend; "
        "assert not {'torch', 'transformers', 'vllm'} & set(sys.modules), 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- images ----------------------------------------------------------------------------------


def test_data_url_round_trip_keeps_rgb_order() -> None:
    image = np.zeros((60, 80, 3), np.uint8)
    image[..., 0] = 200  # pure red
    back = from_data_url(to_data_url(image))
    assert back.shape == image.shape
    assert back[..., 0].mean() > 190 and back[..., 2].mean() < 10
    small = from_data_url(to_data_url(np.zeros((480, 640, 3), np.uint8), max_side=64))
    assert small.shape == (48, 64, 3)
    assert resize_max_side(image, 0) is image
    with pytest.raises(ValueError):
        from_data_url("https://example.com/a.jpg")


# -- server + openai backend over loopback -----------------------------------------------------


@pytest.fixture
def vlm_server(tiny_vlm: ChatBackend) -> Iterator[tuple[OpenAIServer, Recorder]]:
    recorder = Recorder()
    with serve(tiny_vlm, request_hook=recorder) as server:
        yield server, recorder


def test_openai_backend_round_trip_text_and_images(
    vlm_server: tuple[OpenAIServer, Recorder],
    tiny_vlm: ChatBackend,
    rgb_frames: list[np.ndarray],
) -> None:
    server, recorder = vlm_server
    client = create_backend(openai_cfg(server.url, image_max_side=320))
    assert isinstance(client, OpenAIBackend) and client.healthy()
    text = user("Describe the scene.")
    assert client.generate([text]) == tiny_vlm.generate([text])
    # the server sees exactly what the wire carried: resized JPEGs
    sent = [from_data_url(to_data_url(im, max_side=320)) for im in rgb_frames]
    assert sent[0].shape == (240, 320, 3)
    two = user("What changed?", rgb_frames)
    assert client.generate([two]) == tiny_vlm.generate([user("What changed?", sent)])
    assert ("POST", "/v1/chat/completions") in [(m, p) for m, p, _ in recorder.requests]


def test_openai_backend_runs_a_batch_concurrently_in_order(tiny_vlm: ChatBackend) -> None:
    # every request waits at the server until all 8 have arrived: sequential sends would
    # break the barrier (timeout -> HTTP 500 -> BACKEND_FAILED)
    arrived = threading.Barrier(8, timeout=10)

    def all_in_flight(method: str, path: str, headers: Mapping[str, str]) -> None:
        if method == "POST":
            arrived.wait()

    convs = text_convs(8)
    with serve(tiny_vlm, request_hook=all_in_flight) as server:
        client = create_backend(openai_cfg(server.url, max_concurrency=8))
        replies = client.generate(convs)
    assert replies == tiny_vlm.generate(convs)
    assert len(set(replies)) > 1


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


def test_client_errors_are_not_retried(tiny_lm: ChatBackend, rgb_frames: list[np.ndarray]):
    recorder = Recorder()
    with serve(tiny_lm, request_hook=recorder) as server:
        client = OpenAIBackend(openai_cfg(server.url, retries=3))
        with pytest.raises(BackendError) as err:
            client.generate([user("what?", rgb_frames[:1])])
    assert err.value.code == BACKEND_FAILED and "HTTP 400" in str(err.value)
    assert recorder.posts() == 1


def test_api_key_goes_only_into_the_header(
    tiny_lm: ChatBackend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("EMBODIED_R_TEST_KEY", secret)
    caplog.set_level(logging.DEBUG)
    recorder = Recorder()
    keyed = {"api_key_env": "EMBODIED_R_TEST_KEY", "retries": 1}
    with serve(tiny_lm, api_key=secret, request_hook=recorder) as server:
        ok = OpenAIBackend(openai_cfg(server.url, **keyed))
        assert ok.generate(text_convs(1)) and ok.healthy()
    sent = {v for _, _, h in recorder.requests for k, v in h.items()
            if k.lower() == "authorization"}
    assert sent == {f"Bearer {secret}"} and len(recorder.requests) >= 2
    with serve(tiny_lm, api_key="another-key") as server:
        refused = OpenAIBackend(openai_cfg(server.url, **keyed))
        with pytest.raises(BackendError) as err:
            refused.generate(text_convs(1))
        assert not refused.healthy()
    assert "HTTP 401" in str(err.value)
    assert secret not in str(err.value) and secret not in caplog.text
    monkeypatch.delenv("EMBODIED_R_TEST_KEY")
    with pytest.raises(ConfigError, match="EMBODIED_R_TEST_KEY .*is not set"):
        OpenAIBackend(openai_cfg("http://127.0.0.1:9/v1", **keyed))  # at start, not mid-query


def test_backend_down_is_reported_quickly() -> None:
    port = free_port()  # nothing listens there any more: connection refused
    client = OpenAIBackend(openai_cfg(f"http://127.0.0.1:{port}/v1", retries=2))
    start = time.monotonic()
    with pytest.raises(BackendError) as err:
        client.generate(text_convs(1))
    assert err.value.code == BACKEND_DOWN
    assert time.monotonic() - start < 5.0  # two short back-offs, no hang
    assert not client.healthy()


def test_timeout_is_one_deadline_for_a_call_and_its_retries() -> None:
    """``timeout_s`` bounds the whole call: a server that never answers ends it after about
    ``timeout_s``, not ``timeout_s`` per attempt plus backoff (3 x 2 s here, as it used to)."""
    slow = SlowBackend()
    recorder = Recorder()
    with serve(slow, request_hook=recorder) as server:
        client = OpenAIBackend(openai_cfg(server.url, timeout_s=2.0, retries=2))
        start = time.monotonic()
        try:
            with pytest.raises(BackendError) as err:
                client.generate(text_convs(1))
            elapsed = time.monotonic() - start
        finally:
            slow.release.set()
    assert err.value.code == BACKEND_TIMEOUT and "within 2 s" in str(err.value)
    assert recorder.posts() == 1  # no time was left for another attempt
    assert elapsed < 2.0 + 1.5, elapsed  # the 2 s deadline, not 6 s plus backoff


def test_server_errors_are_retried_then_failed(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    caplog.set_level(logging.CRITICAL, logger="embodied_r_ros.serving")
    with serve(BrokenBackend(), request_hook=recorder) as server:
        client = OpenAIBackend(openai_cfg(server.url, retries=2))
        with pytest.raises(BackendError) as err:
            client.generate(text_convs(1))
    assert err.value.code == BACKEND_FAILED
    assert "HTTP 500" in str(err.value) and "model exploded" in str(err.value)
    assert recorder.posts() == 3


class EchoBackend(ChatBackend):
    """A one-at-a-time in-process model: the server queues its requests in the batcher."""

    model_id = "echo"
    concurrent = False

    def complete(self, conversations: Any, **_: Any) -> list[Completion]:
        return [Completion("ok")] * len(conversations)


def test_a_request_caught_by_shutdown_fails_at_once_as_down() -> None:
    """A request that reaches the model queue while the server shuts down is answered 503
    (BACKEND_DOWN at the client) at once: it used to wait on a stopped queue until the
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


# -- deadlines, cancel, honest server -------------------------------------------------------


TRICKLE_BODY = b'{"choices": [{"message": {"role": "assistant", "content": "hi"}}]}'
TRICKLE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(TRICKLE_BODY)) + TRICKLE_BODY


class Trickle:
    """A reply one byte every 0.2 s (about 30 s in all): each read is quick, the whole never
    arrives in time. ``sent`` counts the bytes written when the client's error came back."""

    def __init__(self) -> None:
        self.sent = 0

    def __call__(self, conn: socket.socket, _request: bytes) -> None:
        for byte in TRICKLE:
            conn.sendall(bytes([byte]))
            self.sent += 1
            time.sleep(0.2)


def test_timeout_is_a_deadline_for_the_whole_attempt() -> None:
    trickle = Trickle()
    raw = RawHTTP(trickle)
    try:
        client = OpenAIBackend(openai_cfg(raw.url, timeout_s=1.0, retries=0))
        with pytest.raises(BackendError) as err:
            client.generate(text_convs(1))
        sent = trickle.sent
    finally:
        raw.close()
    # a per-read timeout would have read all of it (every byte comes within 0.2 s) and answered
    assert err.value.code == BACKEND_TIMEOUT
    assert 0 < sent < len(TRICKLE) // 2, sent


def test_retries_never_outlast_the_question_budget() -> None:
    slow = SlowBackend()
    recorder = Recorder()
    with serve(slow, request_hook=recorder) as server:
        client = OpenAIBackend(openai_cfg(server.url, timeout_s=30.0, retries=5))
        try:
            with pytest.raises(BackendError) as err:
                client.complete(text_convs(1), cancel=CancelToken(0.8))
            answered = slow.answered
        finally:
            slow.release.set()
        assert client.healthy(), client.health()  # a spent budget says nothing against it
    # 6 attempts x 30 s were allowed per call; the question had 0.8 s left: it gave up before
    # the server's reply (5 s), after one request, not retrying into the spent budget
    assert err.value.code == BACKEND_TIMEOUT
    assert answered == 0 and recorder.posts() == 1


def test_cancel_aborts_requests_in_flight_and_drops_the_rest() -> None:
    slow = SlowBackend()
    recorder = Recorder()
    with serve(slow, request_hook=recorder) as server:
        client = OpenAIBackend(openai_cfg(server.url, max_concurrency=2, timeout_s=30.0))
        token = CancelToken()
        threading.Timer(0.5, token.cancel).start()
        try:
            with pytest.raises(BackendError) as err:
                client.complete(text_convs(6), cancel=token)
            answered = slow.answered
        finally:
            slow.release.set()
    assert err.value.code == CANCELLED
    assert answered == 0  # the two in flight were abandoned, not waited for (5 s)
    assert recorder.posts() == 2  # two were in flight; the four waiting were never sent


def test_the_key_never_leaks_on_any_error_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-leak-check-0123456789"
    monkeypatch.setenv("ER_LEAK_KEY", secret + "\r\n")  # a Windows line ending is stripped
    caplog.set_level(logging.DEBUG)

    def echo_headers(conn: socket.socket, request: bytes) -> None:  # a server echoing them
        body = json.dumps({"error": {"message": request.decode(errors="replace")}}).encode()
        conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)

    raw = RawHTTP(echo_headers)
    errors = []
    try:
        for url, kw in ((raw.url, {}), (f"http://127.0.0.1:{free_port()}/v1", {}),
                        (raw.url, {"timeout_s": 0.01})):
            client = OpenAIBackend(openai_cfg(url, api_key_env="ER_LEAK_KEY", retries=1, **kw))
            with pytest.raises(BackendError) as err:
                client.generate(text_convs(1))
            errors.append(str(err.value))
            errors.append(client.health().error)
            client.close()
    finally:
        raw.close()
    assert raw.requests >= 2 and "Bearer ***" in errors[0]  # the echo arrived, scrubbed
    assert all(secret not in e for e in errors) and secret not in caplog.text


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
    carry images (arrays): the worker once crashed comparing them to drop the request, and
    every later request then hung."""
    from embodied_r_ros.serving.batching import Batcher
    from embodied_r_ros.serving.requests import Settings

    def conv(text: str) -> Any:
        image = np.zeros((4, 4, 3), np.uint8)
        return [{"role": "user", "content": [{"type": "image", "image": image},
                                             {"type": "text", "text": text}]}]

    backend = FlakyBackend(broken=False, delay_s=0.3)
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
    time.sleep(0.1)  # the worker is inside the first batch; the next two queue behind it
    waiting = [threading.Thread(target=ask, args=("stays",)),
               threading.Thread(target=ask, args=("left", left))]
    for t in waiting:
        t.start()
        time.sleep(0.01)
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


def test_health_reflects_the_last_call(tiny_lm: ChatBackend, monkeypatch: pytest.MonkeyPatch,
                                       caplog: pytest.LogCaptureFixture) -> None:
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
    # in process: an OOM in generate makes the backend unhealthy until a call succeeds
    real = tiny_lm.model.generate

    def oom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(tiny_lm.model, "generate", oom)
    with pytest.raises(BackendError, match="out of memory"):
        tiny_lm.generate(text_convs(1))
    assert not tiny_lm.healthy() and "out of memory" in tiny_lm.health().error
    monkeypatch.setattr(tiny_lm.model, "generate", real)
    tiny_lm.generate(text_convs(1))
    assert tiny_lm.healthy()


def test_in_process_generation_stops_when_cancelled(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    backend = create_backend(tiny_config("tiny-qwen2", max_new_tokens=4000, batch_size=1),
                             cache_dir=tiny_models_dir)
    token = CancelToken()
    steps: list[bool] = []  # per forward pass (one a new token): was the token cancelled yet?
    hook = backend.model.register_forward_hook(lambda *_: steps.append(token.stopped))
    threading.Timer(0.3, token.cancel).start()
    try:
        with pytest.raises(BackendError) as err:
            backend.complete(text_convs(1), cancel=token)
    finally:
        hook.remove()
    assert err.value.code == CANCELLED
    # it was generating when the cancel came, and stopped within a step of it, far from 4000
    assert steps and not steps[0] and steps.count(True) <= 1, (len(steps), steps.count(True))
    assert backend.healthy()  # a cancel is not a failure


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


class CountingVLM(ChatBackend):
    """A VLM that is slow, serves concurrently, counts requests in flight, and replies by what
    it was shown (so the order of replies matters)."""

    model_id = "counting-vlm"
    supports_images = True
    concurrent = True

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()

    def complete(self, conversations: Any, **_: Any) -> list[Completion]:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(0.2)
        with self._lock:
            self.in_flight -= 1
        out = []
        for conv in conversations:
            images = [p["image"] for p in conv[-1]["content"] if p["type"] == "image"]
            tag = "-".join(str(int(im.mean())) for im in images)
            out.append(Completion(f"1. rotate left\n2. view {tag}\n3. none"))
        return out


@pytest.mark.parametrize(("n_frames", "max_concurrency"), [(12, 5), (3, 8)])
def test_perception_keeps_min_of_frames_and_concurrency_in_flight(
    n_frames: int, max_concurrency: int
) -> None:
    from embodied_r_ros.core.config import config_from_dict
    from embodied_r_ros.core.pipeline import EmbodiedR

    vlm = CountingVLM()
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(n_frames)]
    texts = []
    with serve(vlm) as server:
        for concurrency in (0, 1):
            vlm.peak = 0
            cfg = config_from_dict({
                "perception": {"backend": "vlm", "concurrency": concurrency, "vlm": {
                    "backend": "openai", "model": "counting-vlm", "base_url": server.url,
                    "max_concurrency": max_concurrency}},
                "reasoning": {"model": {"model": "x"}}, "cache": {"enabled": False}})
            p = EmbodiedR(cfg, vlm=create_backend(cfg.perception.vlm), load_models=False)
            result = p.perceive(images, list(range(n_frames)), "Which way?", [],
                                motions=[None] * (n_frames - 1))
            texts.append(result.text)
            expected_peak = min(n_frames, max_concurrency) if concurrency == 0 else 1
            assert vlm.peak == expected_peak
    assert texts[0] == texts[1]  # concurrent replies are put back in frame order
    assert texts[0].count("view ") == n_frames  # one reply per key frame


def _answer(status: int, payload: dict[str, Any]) -> Callable[[socket.socket, bytes], None]:
    body = json.dumps(payload).encode()

    def respond(conn: socket.socket, request: bytes) -> None:
        head, _, got = request.partition(b"\r\n\r\n")
        length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), b"0"))
        while len(got) < length:  # read it all: unread bytes make the close a reset
            got += conn.recv(65536)
        conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    return respond


def test_a_failed_batch_is_one_error_and_at_most_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Eight calls in flight all answered 429: one error, one retry warning per batch, and no
    asyncio 'Task exception was never retrieved' for the calls abandoned (there were 8
    warnings per batch and stray tracebacks)."""
    import gc

    gate = threading.Barrier(8, timeout=2)
    refuse = _answer(429, {"error": {"message": "slow down"}})

    def together(conn: socket.socket, request: bytes) -> None:
        try:
            gate.wait()
        except threading.BrokenBarrierError:
            pass
        refuse(conn, request)

    raw = RawHTTP(together)
    caplog.set_level(logging.WARNING)
    try:
        client = OpenAIBackend(openai_cfg(raw.url, max_concurrency=8, retries=1))
        for _ in range(4):
            gate.reset()
            with pytest.raises(BackendError, match="HTTP 429"):
                client.generate(text_convs(8))
        client.close()
    finally:
        raw.close()
    gc.collect()  # asyncio reports an unretrieved task exception when the task is collected
    ours = [r for r in caplog.records if r.name.endswith("openai_backend")]
    assert 1 <= len(ours) <= 4, [r.getMessage() for r in ours]
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_megabyte_reply_is_cut_at_max_new_tokens_worth_of_text() -> None:
    from embodied_r_ros.core.backends.base import MAX_CHARS_PER_TOKEN

    huge = {"choices": [{"message": {"role": "assistant", "content": "y" * (1 << 20)},
                         "finish_reason": "stop"}]}
    raw = RawHTTP(_answer(200, huge))
    try:
        client = OpenAIBackend(openai_cfg(raw.url))
        reply = client.complete(text_convs(1), max_new_tokens=12)[0]
    finally:
        raw.close()
    assert reply.text == "y" * (12 * MAX_CHARS_PER_TOKEN) and reply.finish_reason == "length"


def test_an_oversize_perception_text_is_the_models_failure_not_a_bad_request() -> None:
    """Replies that add up past the perception text's bound used to fail the query as the
    user's BAD_REQUEST."""
    from embodied_r_ros.core.config import config_from_dict
    from embodied_r_ros.core.pipeline import MAX_PERCEPTION_CHARS, EmbodiedR, QueryError

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
    pipeline = EmbodiedR(cfg, vlm=Verbose(), load_models=False)
    images = [np.full((32, 32, 3), v, np.uint8) for v in (10, 200, 90)]
    with pytest.raises(QueryError) as err:
        pipeline.perceive(images, [0.0, 1.0, 2.0], "Which way?", [], motions=[None, None])
    assert err.value.code == BACKEND_FAILED and "perception model" in str(err.value)


def test_health_probes_log_at_debug_not_info(
    vlm_server: tuple[OpenAIServer, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    """A node on the openai backend probes GET /v1/models once a second: that was an INFO
    line of the HTTP library each time."""
    server, recorder = vlm_server
    client = OpenAIBackend(openai_cfg(server.url))
    caplog.set_level(logging.INFO)
    assert all(client.healthy() for _ in range(3))
    probes = [p for m, p, _ in recorder.requests if m == "GET" and p == "/v1/models"]
    assert len(probes) == 3
    assert not [r for r in caplog.records if r.name == "httpx2"]
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    assert client.healthy()
    lines = [r for r in caplog.records if r.name == "httpx2"]
    assert [r.levelno for r in lines] == [logging.DEBUG] and "/v1/models" in lines[0].getMessage()
    client.close()


def test_a_deactivation_stop_is_not_recorded_as_the_models_failure(tiny_lm: ChatBackend) -> None:
    """A node deactivated mid-call stops it with BACKEND_DOWN for its client; the in-process
    model did nothing wrong and must not read unhealthy after reactivation."""
    token = CancelToken()
    token.cancel(BACKEND_DOWN, "the perception node was deactivated")
    with pytest.raises(BackendError) as err:
        tiny_lm.complete(text_convs(1), cancel=token)
    assert err.value.code == BACKEND_DOWN and "deactivated" in str(err.value)
    assert tiny_lm.healthy(), tiny_lm.health()


def test_counting_tokens_in_another_thread_does_not_unpad_a_batch(tiny_lm: Any) -> None:
    """A server counts each request's tokens in its handler thread while the batcher encodes a
    padded batch: the fast tokenizer's padding is shared state, and an unpadded count used to
    switch it off mid-encode (a ragged batch: 'Unable to create tensor'). Thread switches are
    made very frequent so that the interleaving, once seen under 50 concurrent requests, shows
    up within this test."""
    batch = [[{"role": "user", "content": "short"}],
             [{"role": "user", "content": "a much longer question " * 30}]]
    errors: list[str] = []

    def encode() -> None:
        for _ in range(300):
            try:
                tiny_lm.encode(batch)
            except ValueError as exc:
                errors.append(str(exc))

    def count() -> None:
        for _ in range(600):
            tiny_lm.count_prompt_tokens(batch[0])

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=encode), threading.Thread(target=count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []

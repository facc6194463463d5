"""The OpenAI-compatible client backend over real HTTP on loopback: what goes on the wire,
retries, one deadline per call, cancel, the API key, misbehaving servers, and perception's
concurrent requests."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from http_helpers import (
    FlakyBackend,
    RawHTTP,
    Recorder,
    SlowBackend,
    free_port,
    openai_cfg,
    reply_with,
    text_convs,
    user,
)

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.images import from_data_url, to_data_url
from embodied_r_ros.backends.openai_backend import OpenAIBackend
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend, Completion
from embodied_r_ros.core.config import ConfigError
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED, BACKEND_TIMEOUT, CANCELLED
from embodied_r_ros.core.request import Question
from embodied_r_ros.serving import OpenAIServer, serve


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
    ``timeout_s``, not ``timeout_s`` per attempt plus backoff (3 x 2 s here)."""
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
    with serve(FlakyBackend(), request_hook=recorder) as server:
        client = OpenAIBackend(openai_cfg(server.url, retries=2))
        with pytest.raises(BackendError) as err:
            client.generate(text_convs(1))
    assert err.value.code == BACKEND_FAILED
    assert "HTTP 500" in str(err.value) and "model exploded" in str(err.value)
    assert recorder.posts() == 3


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


def test_a_failed_batch_is_one_error_and_at_most_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Eight calls in flight all answered 429: one error, one retry warning per batch, and no
    asyncio 'Task exception was never retrieved' for the calls abandoned (not a warning per
    call and stray tracebacks)."""
    import gc

    gate = threading.Barrier(8, timeout=2)
    refuse = reply_with(429, {"error": {"message": "slow down"}})

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
    from embodied_r_ros.backends.base import MAX_CHARS_PER_TOKEN

    huge = {"choices": [{"message": {"role": "assistant", "content": "y" * (1 << 20)},
                         "finish_reason": "stop"}]}
    raw = RawHTTP(reply_with(200, huge))
    try:
        client = OpenAIBackend(openai_cfg(raw.url))
        reply = client.complete(text_convs(1), max_new_tokens=12)[0]
    finally:
        raw.close()
    assert reply.text == "y" * (12 * MAX_CHARS_PER_TOKEN) and reply.finish_reason == "length"


def test_health_probes_log_at_debug_not_info(
    vlm_server: tuple[OpenAIServer, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    """A node on the openai backend probes GET /v1/models once a second: the HTTP library's
    line for each probe is DEBUG, not INFO."""
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


class CountingVLM(ChatBackend):
    """A VLM that serves concurrently, counts requests in flight, and replies by what it was
    shown (so the order of replies matters). Each request is held until ``hold`` requests are
    in flight together (or 10 s pass): a client that sends fewer at once shows as a lower peak
    however slow the machine, one that sends more as a higher one."""

    model_id = "counting-vlm"
    supports_images = True
    concurrent = True

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.hold = 1
        self._cond = threading.Condition()

    def complete(self, conversations: Any, **_: Any) -> list[Completion]:
        with self._cond:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.peak >= self.hold, timeout=10.0)
            # one request more than ``hold`` at once would show meanwhile (and fail the test)
            self._cond.wait_for(lambda: self.in_flight > self.hold, timeout=0.2)
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
    from embodied_r_ros.backends.factory import load_pipeline
    from embodied_r_ros.core.profiles import config_from_dict

    vlm = CountingVLM()
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(n_frames)]
    texts = []
    with serve(vlm) as server:
        for concurrency in (0, 1):
            expected_peak = min(n_frames, max_concurrency) if concurrency == 0 else 1
            vlm.peak, vlm.hold = 0, expected_peak
            cfg = config_from_dict({
                "perception": {"backend": "vlm", "concurrency": concurrency, "vlm": {
                    "backend": "openai", "model": "counting-vlm", "base_url": server.url,
                    "max_concurrency": max_concurrency}},
                "reasoning": {"model": {"model": "x"}}, "cache": {"enabled": False}})
            p = load_pipeline(cfg, vlm=create_backend(cfg.perception.vlm), reasoning=False)
            result = p.perceive(images, list(range(n_frames)), Question("Which way?"),
                                motions=[None] * (n_frames - 1))
            texts.append(result.text)
            assert vlm.peak == expected_peak
    assert texts[0] == texts[1]  # concurrent replies are put back in frame order
    assert texts[0].count("view ") == n_frames  # one reply per key frame

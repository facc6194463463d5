"""``embodied-r serve`` against hostile and unlucky clients, over real sockets on loopback:
each request costs bounded memory, threads and model time."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from embodied_r_ros import cli
from embodied_r_ros.backends.images import decode_bounded, image_size, to_data_url
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend, Completion
from embodied_r_ros.serving import OpenAIServer, serve
from embodied_r_ros.serving.requests import Limits

CHAT = "/v1/chat/completions"


class Recording(ChatBackend):
    """Echoes, remembering the settings it was called with; a small known context."""

    model_id = "recording"
    supports_images = True
    context_tokens = 64

    def __init__(self, concurrent: bool = True) -> None:
        self.concurrent = concurrent
        self.calls: list[dict[str, Any]] = []
        self.counted = 0

    def count_prompt_tokens(self, conversation: Any) -> int:
        self.counted += 1
        return 10

    def complete(self, conversations: Any, **settings: Any) -> list[Completion]:
        self.calls.append(settings)
        return [Completion("ok")] * len(conversations)


class UntilCancelled(ChatBackend):
    """A generation that runs until its cancel token stops it (or 30 s)."""

    model_id = "endless"

    def __init__(self, concurrent: bool) -> None:
        self.concurrent = concurrent
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.calls = 0

    def complete(self, conversations: Any, *, cancel: CancelToken | None = None,
                 **_: Any) -> list[Completion]:
        self.calls += 1
        if self.calls > 1:  # the next client: answered at once
            return [Completion("next")] * len(conversations)
        self.started.set()
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if cancel is not None and cancel.stopped:
                self.stopped.set()
                raise BackendError(*cancel.reason())
            time.sleep(0.02)
        return [Completion("late")] * len(conversations)


def request(body: dict[str, Any] | bytes, headers: str = "") -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{headers}\r\n").encode() + data


def exchange(server: OpenAIServer, raw: bytes, timeout: float = 20.0) -> tuple[int, str]:
    """Send ``raw`` on a fresh connection; the status and body of the reply."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as sock:
        sock.sendall(raw)
        return read_reply(sock)


def read_reply(sock: socket.socket) -> tuple[int, str]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), body.decode()


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
def recording() -> Iterator[tuple[OpenAIServer, Recording]]:
    backend = Recording()
    with serve(backend) as server:
        yield server, backend


# -- 1.1 prompt length ------------------------------------------------------------------------


def test_a_prompt_far_over_the_context_is_refused_without_tokenising(recording) -> None:
    server, backend = recording
    status, body = exchange(server, request(chat("word " * 400)))  # 2000 chars > 16 x 64
    assert status == 400 and "prompt of 2000 characters" in body
    assert backend.counted == 0 and backend.calls == []


def test_a_prompt_that_does_not_fit_the_real_model_is_refused(tiny_lm: ChatBackend) -> None:
    """A prompt under the character bound but over the model's 4096 positions: 400 before
    generating, not minutes of generating over it."""
    assert tiny_lm.context_tokens == 4096
    text = "x " * 6000
    tokens = tiny_lm.count_prompt_tokens([{"role": "user", "content": text}])
    assert tokens is not None and tokens > 4096 and len(text) < 16 * 4096
    with serve(tiny_lm) as server:
        status, body = exchange(server, request(chat(text, max_tokens=2)))
        assert status == 400 and "does not fit the model's context of 4096" in body, body
        status, body = exchange(server, request(chat("Describe the scene.", max_tokens=2)))
    assert status == 200
    usage = json.loads(body)["usage"]  # the count the server checks is the model's own
    assert usage["prompt_tokens"] == tiny_lm.count_prompt_tokens(
        [{"role": "user", "content": "Describe the scene."}])


def test_a_configured_prompt_maximum_is_honoured() -> None:
    with serve(Recording(), limits=Limits(max_prompt_chars=100)) as server:
        assert exchange(server, request(chat("a" * 100)))[0] == 200
        status, body = exchange(server, request(chat("a" * 101)))
    assert status == 400 and "limit of 100" in body


# -- 1.2 images ---------------------------------------------------------------------------------


def png_bomb(width: int, height: int) -> bytes:
    """A real 1-bit PNG of ``width`` x ``height`` zeros: small on the wire, huge decoded."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = b"\x00" * (1 + (width + 7) // 8)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)
            + chunk(b"IEND", b""))


def image_request(urls: list[str]) -> dict[str, Any]:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "?"}]}]}


def test_an_image_of_huge_dimensions_is_refused_from_its_header(recording) -> None:
    import base64

    server, backend = recording
    for side, why in ((16000, "larger than 178956970 pixels"),  # beyond PIL's own bound too
                      (5000, "5000x5000 is larger than 16777216 pixels")):
        bomb = png_bomb(side, side)
        assert len(bomb) < 1 << 20
        url = "data:image/png;base64," + base64.b64encode(bomb).decode()
        status, body = exchange(server, request(image_request([url])))
        assert status == 400 and why in body, body
    assert backend.calls == [] and image_size(png_bomb(5000, 5000)) == (5000, 5000)
    with pytest.raises(ValueError, match="larger than 100 pixels"):
        decode_bounded(png_bomb(11, 10), max_pixels=100)
    assert decode_bounded(png_bomb(10, 10), max_pixels=100).shape == (10, 10, 3)


def test_images_per_request_are_bounded() -> None:
    frame = to_data_url(np.zeros((8, 8, 3), np.uint8))
    with serve(Recording(), limits=Limits(max_images=3, max_request_pixels=200)) as server:
        assert exchange(server, request(image_request([frame] * 3)))[0] == 200
        status, body = exchange(server, request(image_request([frame] * 4)))
        assert status == 400 and "4 images in one request; at most 3" in body
        big = to_data_url(np.zeros((10, 10, 3), np.uint8))  # 100 + 100 pixels fit, 3 do not
        assert exchange(server, request(image_request([big] * 2)))[0] == 200
        status, body = exchange(server, request(image_request([big] * 3)))
    assert status == 400 and "over 200 pixels in all" in body


# -- 1.3 max_tokens and clients that leave ------------------------------------------------------


def test_max_tokens_is_clamped_to_the_room_the_context_leaves(recording) -> None:
    server, backend = recording
    for asked in (1 << 20, 54, 7):
        assert exchange(server, request(chat("hi", max_tokens=asked)))[0] == 200
    # 64 positions, 10 of them the prompt: at most 54 new tokens
    assert [c["max_new_tokens"] for c in backend.calls] == [54, 54, 7]


@pytest.mark.parametrize("concurrent", [True, False], ids=["concurrent", "batched"])
def test_a_generation_stops_when_its_client_disconnects(concurrent: bool) -> None:
    backend = UntilCancelled(concurrent)
    with serve(backend) as server:
        sock = socket.create_connection((server.host, server.port), timeout=10)
        sock.sendall(request(chat("go on for ever")))
        assert backend.started.wait(10)
        sock.close()  # the client gives up
        assert backend.stopped.wait(10), "the generation went on after the client left"
        status, body = exchange(server, request(chat("next")))
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "next"


# -- 1.4 binding beyond loopback ------------------------------------------------------------------


def test_a_non_loopback_bind_needs_a_key_or_insecure(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(BackendError, match="refusing to serve on 0.0.0.0 .*--insecure"):
        OpenAIServer(None, "0.0.0.0", 0)
    keyed = OpenAIServer(None, "0.0.0.0", 0, api_key="k")
    keyed.shutdown()
    open_one = OpenAIServer(None, "0.0.0.0", 0, insecure=True)
    open_one.shutdown()
    assert "without an API key (--insecure)" in caplog.text
    OpenAIServer(None, "127.0.0.1", 0).shutdown()  # loopback: no key needed


def test_serve_refuses_0_0_0_0_without_a_key_in_one_line(capsys: pytest.CaptureFixture
                                                          ) -> None:
    code = cli.main(["serve", "--profile", "tiny", "--role", "lm", "--host", "0.0.0.0",
                     "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--insecure" in err, err


# -- 1.5 auth before the body, read timeout, connection bound -------------------------------


def test_auth_is_checked_before_the_body_is_read() -> None:
    with serve(Recording(), api_key="sesame") as server:
        sock = socket.create_connection((server.host, server.port), timeout=20)
        head = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: {60 << 20}\r\n\r\n")
        sock.sendall(head.encode() + b"{" * 1000)  # 60 MB announced, 1 kB sent
        status, body = read_reply(sock)  # answered without waiting for the other 60 MB
        sock.close()
        assert status == 401 and "API key" in body
        good = request(chat("hi"), headers="Authorization: Bearer sesame\r\n")
        assert exchange(server, good)[0] == 200


def test_half_sent_requests_time_out() -> None:
    with serve(Recording(), read_timeout_s=0.5) as server:
        with socket.create_connection((server.host, server.port), timeout=20) as sock:
            sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n".encode())  # headers unfinished
            assert sock.recv(1024) == b""  # closed by the server, not held for ever
        with socket.create_connection((server.host, server.port), timeout=20) as sock:
            sock.sendall(request(b"x" * 100)[:-90])  # the body stops after 10 bytes
            status, body = read_reply(sock)
        assert status == 408 and "not received within 0.5 s" in body


def test_connections_beyond_the_bound_get_503_at_once() -> None:
    with serve(Recording(), max_connections=2) as server:
        idle = [socket.create_connection((server.host, server.port), timeout=20)
                for _ in range(2)]
        status, body = exchange(server, request(chat("hi")))
        assert status == 503 and "too many connections" in body
        idle[0].close()
        deadline = time.monotonic() + 10
        while (status := exchange(server, request(chat("hi")))[0]) != 200:
            assert time.monotonic() < deadline, "the freed slot never came back"
            time.sleep(0.05)
        idle[1].close()


# -- 1.6 malformed bodies -------------------------------------------------------------------------


def test_deep_json_and_bad_lengths_are_4xx_not_500(recording) -> None:
    server, _ = recording
    status, body = exchange(server, request(b"[" * 100_000 + b"]" * 100_000))
    assert status == 400 and "nested too deeply" in body
    bad = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n".encode()
    status, body = exchange(server, bad)
    assert status == 400 and "non-negative" in body
    status, _ = exchange(server, f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 411

"""What the tests of the HTTP backend and server share: chats, a loopback port, a request
recorder, misbehaving models (slow, failing) and a raw socket server for replies no HTTP library
would write."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from embodied_r_ros.core.chat import ChatBackend, Completion, Conversation
from embodied_r_ros.core.config import ModelConfig

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


def reply_with(status: int, payload: dict[str, Any]) -> Callable[[socket.socket, bytes], None]:
    """A :class:`RawHTTP` responder answering every request ``status`` with ``payload``."""
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

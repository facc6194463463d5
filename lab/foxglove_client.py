"""A plain client of Foxglove's WebSocket protocol (subprotocol ``foxglove.sdk.v1``), written
from the protocol's specification with the ``websockets`` package: it subscribes to channels
by topic, keeps the JSON messages each delivers, and calls services."""

from __future__ import annotations

import json
import struct
import threading
import time
from collections import defaultdict
from typing import Any

from websockets.sync.client import ClientConnection, connect

SUBPROTOCOL = "foxglove.sdk.v1"
_MESSAGE_DATA, _SERVICE_RESPONSE = 0x01, 0x03
_SERVICE_CALL = 0x02


class FoxgloveClient:
    """Connected to ``url`` (retried while it refuses, up to ``timeout``: a server starting);
    a reader thread files what arrives."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.ws: ClientConnection = connect(url, subprotocols=[SUBPROTOCOL],
                                                    open_timeout=timeout, max_size=None)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.channels: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[Any]] = defaultdict(list)
        self._topic_of: dict[int, str] = {}
        self._replies: dict[int, tuple[bool, Any]] = {}
        self._cond = threading.Condition()
        self._next = 1
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for frame in self.ws:
                with self._cond:
                    self._file(frame)
                    self._cond.notify_all()
        except Exception:  # closed
            return

    def _file(self, frame: str | bytes) -> None:
        if isinstance(frame, str):
            msg = json.loads(frame)
            if msg["op"] == "advertise":
                self.channels.update({c["topic"]: c for c in msg["channels"]})
            elif msg["op"] == "advertiseServices":
                self.services.update({s["name"]: s for s in msg["services"]})
            elif msg["op"] == "serviceCallFailure":
                self._replies[msg["callId"]] = (False, msg["message"])
            return
        if frame[0] == _MESSAGE_DATA:
            sub, = struct.unpack_from("<I", frame, 1)
            self.messages[self._topic_of[sub]].append(json.loads(frame[13:]))
        elif frame[0] == _SERVICE_RESPONSE:
            _sid, call, n = struct.unpack_from("<III", frame, 1)
            self._replies[call] = (True, json.loads(frame[13 + n:]))

    def wait(self, predicate: Any, timeout: float, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(f"no {what} in {timeout:g} s")

    def subscribe(self, topics: list[str], timeout: float = 30.0) -> None:
        self.wait(lambda: all(t in self.channels for t in topics), timeout,
                  f"channels {topics} (advertised: {sorted(self.channels)})")
        subs = []
        with self._cond:
            for topic in topics:
                self._topic_of[self._next] = topic
                subs.append({"id": self._next, "channelId": self.channels[topic]["id"]})
                self._next += 1
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))

    def call(self, service: str, payload: bytes, timeout: float = 120.0) -> tuple[bool, Any]:
        """``(True, response JSON)`` or ``(False, the failure's message)``."""
        self.wait(lambda: service in self.services, 30.0, f"service {service}")
        with self._cond:
            call_id = self._next
            self._next += 1
        enc = b"json"
        self.ws.send(struct.pack("<BIII", _SERVICE_CALL, self.services[service]["id"], call_id,
                                 len(enc)) + enc + payload)
        self.wait(lambda: call_id in self._replies, timeout, f"reply to call {call_id}")
        return self._replies[call_id]

    def close(self) -> None:
        self.ws.close()

"""Faults, for real: a VLM behind an OpenAI-compatible server on loopback that is busy, slow,
cancelled mid-way or not there at all. Every request gets an answer or a specific error code,
and the node stays up.

The VLM server's requests wait at a gate the test opens, so "in flight" is a state the test
controls rather than a race.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from media import pan_frames
from ros_helpers import (
    DISCOVERY_SEC,
    AllInOne,
    ChatGate,
    require_ros,
    result_of,
    ros_context,
    wait_until,
)

require_ros()

from action_msgs.msg import GoalStatus  # noqa: E402

from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402

OPTIONS = ["A. left", "B. right"]
FRAMES = pan_frames(12, 30)
STAMPS = [50.0 + i for i in range(len(FRAMES))]


def config(vlm_url: str, lm_url: str, timeout_s: float = 60.0, concurrency: int = 8) -> str:
    """Both models over HTTP (the real openai backend), so no instance loads weights."""
    return f"""base: tiny
cache: {{enabled: false}}
perception:
  vlm: {{backend: openai, model: tiny-qwen2.5-vl, base_url: "{vlm_url}", timeout_s: {timeout_s},
        retries: 0, max_new_tokens: 6, max_concurrency: {concurrency}}}
reasoning:
  model: {{backend: openai, model: tiny-qwen2, base_url: "{lm_url}", retries: 0,
          max_new_tokens: 6}}
"""


@pytest.fixture(scope="module")
def servers(tiny_vlm: Any, tiny_lm: Any) -> Iterator[tuple[ChatGate, ChatGate]]:
    vlm, lm = ChatGate(tiny_vlm, open_=False), ChatGate(tiny_lm)
    yield vlm, lm
    vlm.close()
    lm.close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def start(ctx: Any, tmp: Path, name: str, cfg: str, *extra: str) -> AllInOne:
    """An all-in-one under /<name> with ``cfg``; parameters go in as node overrides."""
    from rclpy.parameter import Parameter

    path = tmp / f"{name}.yaml"
    path.write_text(cfg)
    values = {"profile": "tiny", "config_file": str(path), "max_concurrent_queries": 2}
    for item in extra:
        key, _, value = item.partition(":=")
        values[key] = float(value) if "." in value else int(value)
    ctx_args = [Parameter(k, value=v) for k, v in values.items()]
    world = AllInOne(ctx, f"/{name}", parameters=ctx_args)
    world.feed_frames(FRAMES, STAMPS)
    return world


def test_fifty_concurrent_requests_get_an_answer_or_busy(
    ctx: Any, servers: tuple[ChatGate, ChatGate], tmp_path: Path
) -> None:
    vlm, lm = servers
    world = start(ctx, tmp_path, "busy", config(vlm.url, lm.url))
    try:
        before = vlm.requests
        futures = [world.query.call_async(world.request("Where is the door?", OPTIONS))
                   for _ in range(50)]
        vlm.wait_requests(before + 2)  # two queries hold both slots, waiting for the VLM
        wait_until(lambda: sum(f.done() for f in futures) == 48, 30, "48 immediate answers")
        busy = [f.result() for f in futures if f.done()]
        assert all(r.error_code == "BUSY" and not r.success for r in busy)
        vlm.open()
        results = [result_of(f, 60) for f in futures]
        assert sum(r.success for r in results) == 2
        assert sum(r.error_code == "BUSY" for r in results) == 48
        assert world.runner.stats.in_flight == 0 and world.ask("Still there?", OPTIONS).success
    finally:
        world.stop()


def test_cancel_drops_pending_vlm_calls_and_abandons_those_in_flight(
    ctx: Any, servers: tuple[ChatGate, ChatGate], tmp_path: Path
) -> None:
    vlm, lm = servers
    world = start(ctx, tmp_path, "cancel", config(vlm.url, lm.url, concurrency=2))
    try:
        vlm.hold()
        assert world.action.wait_for_server(timeout_sec=DISCOVERY_SEC)
        before = vlm.requests
        goal = QueryAction.Goal(question="Which way did I turn?", options=OPTIONS)
        handle = result_of(world.action.send_goal_async(goal))
        vlm.wait_requests(before + 2)  # two key frames in flight, the others waiting to be sent
        cancel = result_of(handle.cancel_goal_async())
        assert len(cancel.goals_canceling) == 1
        # answered while the two requests still hang at the server: they were abandoned
        outcome = result_of(handle.get_result_async(), 5)
        assert outcome.status == GoalStatus.STATUS_CANCELED
        assert outcome.result.error_code == "CANCELLED" and not outcome.result.success
        assert world.runner.stats.in_flight == 0
        vlm.open()
        assert world.ask("And now?", OPTIONS).success
        key_frames = len(world.ask("And now?", OPTIONS).key_frame_stamps)
        # the cancelled goal sent 2 of its key frames; each later question all of its own
        assert vlm.requests == before + 2 + 2 * key_frames and key_frames > 2
    finally:
        world.stop()


def test_backend_down_is_reported(ctx: Any, servers: tuple[ChatGate, ChatGate],
                                  tmp_path: Path) -> None:
    _vlm, lm = servers
    world = start(ctx, tmp_path, "down", config(closed_port_url(), lm.url))
    try:
        r = world.ask("Where is the door?", OPTIONS)
        assert not r.success and r.error_code == "BACKEND_DOWN" and "\n" not in r.error
    finally:
        world.stop()


def test_slow_backend_times_out_at_the_configured_limit(
    ctx: Any, servers: tuple[ChatGate, ChatGate], tmp_path: Path
) -> None:
    slow = ChatGate(servers[0].server.backend, open_=False)  # never answers until closed
    lm = servers[1]
    backend_limit = start(ctx, tmp_path, "slow", config(slow.url, lm.url, timeout_s=0.3))
    server_limit = start(ctx, tmp_path, "stuck", config(slow.url, lm.url),
                         "query_timeout_sec:=0.5")
    try:
        r = backend_limit.ask("Where is the door?", OPTIONS)
        assert not r.success and r.error_code == "BACKEND_TIMEOUT" and "0.3 s" in r.error
        r = server_limit.ask("Where is the door?", OPTIONS)
        assert not r.success and r.error_code == "BACKEND_TIMEOUT"
        # the server's limit fired, before the backend's own 60 s timeout could
        assert "query_timeout_sec=0.5" in r.error and 0.5 <= r.total_sec < 60.0, r.total_sec
        # the timed-out question gave its slot back at once, though its requests still hang:
        # two more questions (max_concurrent_queries 2) are run, not refused as BUSY
        assert server_limit.runner.stats.in_flight == 0
        futures = [server_limit.query.call_async(server_limit.request("Where?", OPTIONS))
                   for _ in range(2)]
        codes = [result_of(f, 30).error_code for f in futures]
        assert codes == ["BACKEND_TIMEOUT", "BACKEND_TIMEOUT"]
    finally:
        backend_limit.stop()
        server_limit.stop()
        slow.close()

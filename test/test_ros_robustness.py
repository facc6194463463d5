"""No request takes a node down, waits end, managed nodes, and bursts of clients: the all-in-one
in-process over real DDS, every public and internal interface sent hostile requests."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
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
from builtin_interfaces.msg import Time  # noqa: E402
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import CompressedImage  # noqa: E402

from embodied_r_interfaces.action import Perceive, Reason  # noqa: E402
from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402
from embodied_r_interfaces.msg import EgoMotion  # noqa: E402
from embodied_r_interfaces.srv import GetWindow, MemoryClear, MemoryStats  # noqa: E402
from embodied_r_ros.client import SpatialQueryClient  # noqa: E402
from embodied_r_ros.core.images import encode_jpeg  # noqa: E402
from embodied_r_ros.core.request import MAX_SETTABLE_CHARS  # noqa: E402

NS = "/robust"
OPTIONS = ["A. left", "B. right"]
FRAMES = pan_frames(10, 30)
STAMPS = [10.0 + i for i in range(len(FRAMES))]
JPEG = encode_jpeg(FRAMES[0])


def config(tmp: Path, lm_url: str) -> str:
    path = tmp / "robust.yaml"
    path.write_text(f"""base: tiny
cache: {{enabled: false}}
perception: {{vlm: {{max_new_tokens: 4}}}}
reasoning:
  model: {{backend: openai, model: tiny-qwen2, base_url: "{lm_url}", retries: 0,
          max_new_tokens: 4}}
""")
    return str(path)


@pytest.fixture(scope="module")
def lm(tiny_lm: Any) -> Iterator[ChatGate]:
    gate = ChatGate(tiny_lm)
    yield gate
    gate.close()


@pytest.fixture(scope="module")
def world(tiny_models_dir: Path, lm: ChatGate,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[AllInOne]:
    cfg = config(tmp_path_factory.mktemp("cfg"), lm.url)
    params = [Parameter("profile", value="tiny"), Parameter("config_file", value=cfg),
              Parameter("max_concurrent_queries", value=2)]
    with ros_context(__name__) as ctx:
        w = AllInOne(ctx, NS, parameters=params)
        w.feed_frames(FRAMES, STAMPS)
        yield w
        w.stop()


def client(world: AllInOne, kind: Any, name: str) -> Any:
    c = world.tester.create_client(kind, f"{NS}/{name}")
    assert c.wait_for_service(timeout_sec=DISCOVERY_SEC)
    return c


def action(world: AllInOne, kind: Any, name: str) -> ActionClient:
    a = world.spinner.action_client(kind, f"{NS}/{name}")
    assert a.wait_for_server(timeout_sec=DISCOVERY_SEC)
    return a


def run_goal(a: ActionClient, goal: Any, timeout: float = 30.0) -> Any:
    handle = result_of(a.send_goal_async(goal), timeout)
    assert handle.accepted
    return result_of(handle.get_result_async(), timeout)


def motion(**kw: float) -> EgoMotion:
    return EgoMotion(valid=True, **kw)


def frame(data: bytes = JPEG, t: float = 1.0) -> CompressedImage:
    msg = CompressedImage(format="jpeg", data=data)
    msg.header.stamp.sec = int(t)
    return msg


def huge_jpeg_header() -> bytes:
    """A JPEG whose header claims 60000 x 60000 pixels (decoding would take 10 GB)."""
    import cv2

    ok, buf = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))
    data = bytearray(buf.tobytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5: sof + 9] = (60000).to_bytes(2, "big") * 2
    return bytes(data)


#: one request per error code, each of a hostile size or shape where one exists; the whole
#: matrix of bad requests is test_request_contract.py's, against the same query runner
QUERY_TABLE = [
    # (fields of SpatialQuery.Request, the error code)
    ({"question": " \t\n "}, "EMPTY_QUESTION"),
    ({"question": "x" * 300_000}, "QUESTION_TOO_LONG"),
    ({"options": ["A. " + "x" * 200_000]}, "BAD_OPTIONS"),
    ({"window_sec": math.nan}, "BAD_WINDOW"),
    ({"camera": "x" * 10_000}, "UNKNOWN_CAMERA"),
    ({"scope": "../memory"}, "UNKNOWN_SCOPE"),
    # this process keeps no memory (memory.enabled false): refused before any model
    ({"scope": "memory", "question": "Where was I 5 blorps ago?"}, "MEMORY_UNAVAILABLE"),
]


def test_hostile_queries_get_codes_and_the_node_keeps_serving(world: AllInOne,
                                                              lm: ChatGate) -> None:
    asked = lm.requests
    for fields, code in QUERY_TABLE:
        request = world.request("Where is the door?", OPTIONS)
        for key, value in fields.items():
            setattr(request, key, value)
        r = result_of(world.query.call_async(request), 30)
        assert (r.success, r.error_code) == (False, code), fields.keys()
        assert "\n" not in r.error and len(r.error) <= 500
    assert lm.requests == asked  # refused up front: no question reached a model
    # a bad request as an action goal: the same code, the goal aborted
    fields, code = QUERY_TABLE[1]
    outcome = run_goal(world.action, QueryAction.Goal(
        **{"question": "Where is the door?", "options": OPTIONS, **fields}))
    assert outcome.status == GoalStatus.STATUS_ABORTED
    assert outcome.result.error_code == code
    unicode = world.ask("Wohin habe ich mich gedreht? 我转向哪边？\x07", OPTIONS)
    assert unicode.success, unicode.error
    assert world.ask("Which way did I turn?", OPTIONS).success  # still serving


def test_hostile_internal_requests_get_codes(world: AllInOne) -> None:
    window = client(world, GetWindow, "frames/front/get_window")
    for value, code in ((-5.0, "BAD_WINDOW"), (1e30, "")):
        r = result_of(window.call_async(GetWindow.Request(window_sec=value)), 30)
        assert r.error_code == code and r.success == (code == "")
    perceive = action(world, Perceive, "perception/perceive")
    two = [frame(t=1.0), frame(t=2.0)]
    # one goal per code this interface adds; its question and options go through the same
    # checks as the query's (test_request_contract.py has every case of both)
    table = [
        (Perceive.Goal(question="q?", key_frames=[]), "NO_FRAMES"),
        (Perceive.Goal(question="q?", key_frames=[frame()] * 300, motions=[EgoMotion()] * 299),
         "BAD_REQUEST"),
        (Perceive.Goal(question="q?", key_frames=[frame(huge_jpeg_header())]), "CORRUPT_FRAME"),
        (Perceive.Goal(question="x" * (MAX_SETTABLE_CHARS + 1), key_frames=two,
                       motions=[EgoMotion()]),
         "QUESTION_TOO_LONG"),
    ]
    for goal, code in table:
        outcome = run_goal(perceive, goal)
        assert (outcome.result.success, outcome.result.error_code) == (False, code), code
    # non-finite motions are unknown motions (visual ego-motion fills in), not a crash
    nan = motion(yaw_deg=math.nan, forward=math.inf)
    ok = run_goal(perceive, Perceive.Goal(question="q?", options=OPTIONS, key_frames=two,
                                          motions=[nan]))
    assert ok.result.success and "nan" not in ok.result.perception.lower()
    reason = action(world, Reason, "reasoning/reason")
    for goal, code in (
        (Reason.Goal(perception="x" * 600_000, options=OPTIONS), "BAD_REQUEST"),
        (Reason.Goal(perception="Frame 0: Observe: wall", options=["A. " + "y" * 100_000]),
         "BAD_OPTIONS"),
    ):
        outcome = run_goal(reason, goal)
        assert (outcome.result.success, outcome.result.error_code) == (False, code), code
    assert run_goal(reason, Reason.Goal(perception="Frame 0: Observe: wall",
                                        options=OPTIONS)).result.success
    # the memory services of a process that keeps no memory: a code, not a crash
    stats = result_of(client(world, MemoryStats, "memory/stats").call_async(
        MemoryStats.Request()), 10)
    assert (stats.success, stats.error_code) == (False, "MEMORY_UNAVAILABLE")
    assert "memory.enabled" in stats.error and "\n" not in stats.error
    clear = result_of(client(world, MemoryClear, "memory/clear").call_async(
        MemoryClear.Request(before=Time(sec=-5))), 10)
    assert (clear.success, clear.error_code) == (False, "MEMORY_UNAVAILABLE")
    lifecycle = client(world, ChangeState, "perception/change_state")
    bogus = ChangeState.Request(transition=Transition(id=99))
    assert not result_of(lifecycle.call_async(bogus), 10).success
    assert world.ask("Which way did I turn?", OPTIONS).success  # the process is fine


def test_lifecycle_transitions_over_the_lifecycle_services(world: AllInOne) -> None:
    change = client(world, ChangeState, "perception/change_state")
    state = client(world, GetState, "perception/get_state")
    node = world.by_name["perception"]

    def go(transition: int) -> None:
        req = ChangeState.Request(transition=Transition(id=transition))
        assert result_of(change.call_async(req), 30).success

    def label() -> str:
        return result_of(state.call_async(GetState.Request()), 10).current_state.label

    assert label() == "active"
    go(Transition.TRANSITION_DEACTIVATE)
    r = world.ask("Which way did I turn?", OPTIONS)
    assert (r.success, r.error_code) == (False, "BACKEND_DOWN") and "inactive" in r.error
    go(Transition.TRANSITION_CLEANUP)
    assert label() == "unconfigured" and node.pipeline is None  # the VLM is freed
    r = world.ask("Which way did I turn?", OPTIONS)
    assert r.error_code == "BACKEND_DOWN" and "unconfigured" in r.error
    go(Transition.TRANSITION_CONFIGURE)
    go(Transition.TRANSITION_ACTIVATE)
    assert label() == "active" and world.ask("Which way did I turn?", OPTIONS).success


def test_cancel_during_reasoning_stops_it(world: AllInOne, lm: ChatGate) -> None:
    lm.hold()
    try:
        before = lm.requests
        handle = result_of(world.action.send_goal_async(
            QueryAction.Goal(question="Which way did I turn?", options=OPTIONS)), 30)
        lm.wait_requests(before + 1)  # the LM has the question
        result_of(handle.cancel_goal_async(), 10)
        # the result comes while the gate is still closed: the LM request still hangs
        outcome = result_of(handle.get_result_async(), 10)
        assert outcome.status == GoalStatus.STATUS_CANCELED
        assert outcome.result.error_code == "CANCELLED"
        assert world.runner.stats.in_flight == 0
    finally:
        lm.open()
    assert world.ask("Which way did I turn?", OPTIONS).success


def test_the_python_client_asks_over_the_action_with_progress_and_cancel(
    world: AllInOne, lm: ChatGate
) -> None:
    """``SpatialQueryClient.ask_action``: the feedback reaches ``on_progress``, the result is the
    service's answer as a QueryResult, and setting ``cancel`` ends the goal CANCELLED."""
    with SpatialQueryClient(f"{NS}/query", node_name="action_asker",
                            context=world.tester.context) as c:
        assert c.wait_for_server(10.0)
        stages: list[str] = []
        r = c.ask_action("Which way did I turn?", OPTIONS,
                         on_progress=lambda p: stages.append(p.stage), timeout=120.0)
        assert r.success and r.error_code == "", r.error
        assert {"perception", "reasoning"} <= set(stages) and stages[-1] == "done", stages
        assert r.key_frame_stamps and set(r.key_frame_stamps) <= set(STAMPS)
        served = c.ask("Which way did I turn?", OPTIONS, timeout=120.0)
        assert (served.key_frame_stamps, served.perception) == (r.key_frame_stamps,
                                                                 r.perception)
        cancel = threading.Event()
        before = lm.requests
        lm.hold()
        try:
            def on_progress(p: Any) -> None:
                if p.stage == "reasoning":
                    lm.wait_requests(before + 1)  # the LM has the question
                    cancel.set()

            stopped = c.ask_action("Which way did I turn?", OPTIONS, on_progress=on_progress,
                                   cancel=cancel, timeout=60.0)
        finally:
            lm.open()
        assert (stopped.success, stopped.error_code) == (False, "CANCELLED"), stopped.error


def test_a_burst_from_ten_clients_is_answered_in_full(world: AllInOne, lm: ChatGate) -> None:
    ctx = world.tester.context
    clients = [SpatialQueryClient(f"{NS}/query", node_name=f"burst_{i}", context=ctx)
               for i in range(10)]
    try:
        assert all(c.wait_for_server(10.0) for c in clients)
        answers: list[Any] = []
        lock = threading.Lock()

        def ask(c: SpatialQueryClient) -> None:
            a = c.ask("Which way did I turn?", OPTIONS, timeout=120.0)
            with lock:
                answers.append(a)

        threads = [threading.Thread(target=ask, args=(c,)) for c in clients for _ in range(10)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=150.0)
        elapsed = time.monotonic() - start
    finally:
        for c in clients:
            c.close()
    assert len(answers) == 100, f"{100 - len(answers)} calls got no reply"
    codes = {a.error_code for a in answers}
    assert codes <= {"", "BUSY"} and sum(a.success for a in answers) >= 1, codes
    assert elapsed < 120.0
    wait_until(lambda: world.runner.stats.in_flight == 0, 30, "the slots to free")

"""The all-in-one process, in-process: real rclpy nodes over Fast DDS on loopback, tiny models.

The tests run in file order against one process: an empty buffer first, then bad frames, then a
panning camera, then questions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from media import pan_frames
from ros_helpers import (
    AllInOne,
    feed,
    image_msg,
    require_ros,
    result_of,
    ros_context,
    wait_until,
)

require_ros()

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import CompressedImage, Image  # noqa: E402

from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402

OPTIONS = ["A. I turned left", "B. I turned right"]
# The tiny random models with short replies: every stage runs, fast.
TEST_CONFIG = """base: tiny
cache: {enabled: false}
perception: {vlm: {max_new_tokens: 8}}
reasoning: {model: {max_new_tokens: 8}}
"""
T0 = 1000.0
FRAMES = pan_frames(24, 24)  # 320x240, panning right
STAMPS = [T0 + 0.5 * i for i in range(len(FRAMES))]  # 12 s; 1 fps sampling keeps every other


def frame_lines(perception: str) -> int:
    return len(re.findall(r"^Frame \d+(?: \(\d+ s before the last key frame\))?: ", perception,
                          re.MULTILINE))


class World(AllInOne):
    """The all-in-one under /embodied_r, also listening to key frames and diagnostics."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.key_frames: list[Image] = []
        self.tester.create_subscription(Image, "/embodied_r/frame_buffer/key_frames",
                                        self.key_frames.append, 10)
        self.diagnostics: list[DiagnosticArray] = []
        self.tester.create_subscription(DiagnosticArray, "/diagnostics",
                                        self.diagnostics.append, 10)

    def ask(self, question: str = "Which way did I turn?", options: list[str] | None = None,
            window_sec: float = 0.0, camera: str = "") -> Any:
        return super().ask(question, OPTIONS if options is None else options, window_sec, camera)


@pytest.fixture(scope="module")
def world(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    cfg = tmp_path_factory.mktemp("cfg") / "tiny_nocache.yaml"
    cfg.write_text(TEST_CONFIG)
    args = ["--ros-args", "-p", "profile:=tiny", "-p", f"config_file:={cfg}",
            "-p", "diagnostics_period_sec:=0.2", "-p", "max_question_chars:=200"]
    with ros_context(__name__, args) as ctx:
        w = World(ctx)
        yield w
        w.stop()


def test_no_frames_yet(world: World) -> None:
    r = world.ask()
    assert not r.success and r.error_code == "NO_FRAMES" and "\n" not in r.error


def test_bad_frames_are_dropped_counted_and_reported(world: World) -> None:
    depth = Image(height=4, width=4, encoding="32FC1", step=16, data=bytes(64))
    depth.header.stamp.sec = int(T0 - 2)
    corrupt = CompressedImage(format="jpeg", data=b"\xff\xd8garbage")
    corrupt.header.stamp.sec = int(T0 - 1)
    feed(world.image.publish, [depth], lambda: world.store.stats.received)
    r = world.ask()
    assert not r.success and r.error_code == "UNSUPPORTED_ENCODING" and "32FC1" in r.error
    feed(world.compressed.publish, [corrupt], lambda: world.store.stats.received)
    r = world.ask()
    assert r.error_code == "CORRUPT_FRAME"
    assert dict(world.store.stats.dropped) == {"UNSUPPORTED_ENCODING": 1, "CORRUPT_FRAME": 1}


def test_camera_stream_fills_the_buffer_and_publishes_key_frames(world: World) -> None:
    world.feed_frames(FRAMES, STAMPS)
    st = world.store.stats
    assert st.stored == 12 and st.skipped == 12  # the stream continued after the bad frames
    wait_until(lambda: len(world.key_frames) == st.keyframes, what="key frames on ~/key_frames")
    assert st.keyframes >= 2
    first = world.key_frames[0]
    assert (first.encoding, first.width, first.height) == ("rgb8", 320, 240)
    assert stamp_to_sec(first.header.stamp) == STAMPS[0]


def test_service_answers_over_the_whole_buffer(world: World) -> None:
    r = world.ask()
    assert r.success, r.error
    stamps = [stamp_to_sec(s) for s in r.key_frame_stamps]
    assert 4 <= len(stamps) <= 32
    assert stamps[0] == STAMPS[0] and stamps[-1] == STAMPS[-2]  # first and last sampled
    assert frame_lines(r.perception) == len(stamps)
    # the answer is what the reasoning LM says of exactly the perception text returned
    again = world.by_name["reasoning"].serving().reason(r.perception, OPTIONS)
    assert (r.answer, r.answer_text, r.reasoning) == (again.answer, again.answer_text,
                                                      again.think)
    assert r.perception.rstrip().endswith(OPTIONS[-1])
    assert r.total_sec >= r.perception_sec + r.reasoning_sec > 0


def test_window_limits_the_key_frames(world: World) -> None:
    r = world.ask(window_sec=3.0)
    assert r.success, r.error
    stamps = [stamp_to_sec(s) for s in r.key_frame_stamps]
    assert stamps and all(STAMPS[-2] - 3.0 <= s <= STAMPS[-2] for s in stamps)
    assert len(stamps) == 4  # 4 sampled frames in 3 s: the clamp's lower bound keeps them all


def test_action_uses_the_same_path_with_feedback(world: World) -> None:
    assert world.action.wait_for_server(timeout_sec=10)
    feedback: list[Any] = []
    goal = QueryAction.Goal(question="Which way did I turn?", options=OPTIONS)
    handle = result_of(world.action.send_goal_async(goal, lambda m: feedback.append(m.feedback)))
    assert handle.accepted
    result = result_of(handle.get_result_async()).result
    service = world.ask()
    assert result.success and service.success
    assert (result.answer, result.perception) == (service.answer, service.perception)
    stages = [f.stage for f in feedback]
    assert stages[0] == "window" and stages[-1] == "done" and "reasoning" in stages
    perceived = [f for f in feedback if f.stage == "perception"]
    n = len(result.key_frame_stamps)
    assert [f.frames_done for f in perceived] == list(range(1, n + 1))
    assert all(f.frames_total == n for f in perceived)


@pytest.mark.parametrize(
    ("question", "options", "kwargs", "code"),
    [
        ("  ", OPTIONS, {}, "EMPTY_QUESTION"),
        ("why? " * 100, OPTIONS, {}, "QUESTION_TOO_LONG"),
        ("Which way?", ["left", "right"], {}, "BAD_OPTIONS"),
        ("Which way?", ["B. left", "A. right"], {}, "BAD_OPTIONS"),
        ("Which way?", OPTIONS, {"camera": "rear"}, "UNKNOWN_CAMERA"),
        ("Which way?", OPTIONS, {"window_sec": -1.0}, "BAD_WINDOW"),
    ],
)
def test_bad_requests_get_specific_codes(world: World, question: str, options: list[str],
                                         kwargs: dict[str, Any], code: str) -> None:
    r = world.ask(question, options, **kwargs)
    assert not r.success and r.error_code == code
    assert r.error and "\n" not in r.error and r.answer == ""


def test_open_question_and_named_default_camera(world: World) -> None:
    r = world.ask("What is ahead of me?", [], camera="front")
    assert r.success, r.error
    assert "Choices" not in r.perception


def test_diagnostics_report_camera_buffer_backends_and_latency(world: World) -> None:
    def names() -> dict[str, dict[str, str]]:
        return {s.name: {kv.key: kv.value for kv in s.values}
                for a in list(world.diagnostics) for s in a.status}

    wanted = {"embodied_r: camera front", "embodied_r: query server",
              "embodied_r: perception backend", "embodied_r: reasoning backend"}
    wait_until(lambda: wanted <= set(names()), what="diagnostics")
    d = names()
    camera = d["embodied_r: camera front"]
    assert float(camera["buffer_span_sec"]) == pytest.approx(STAMPS[-2] - STAMPS[0], abs=1e-3)
    assert float(camera["buffer_size_mb"]) > 0 and camera["frames_dropped"] == "2"
    assert "camera_rate_hz" in camera
    assert float(d["embodied_r: query server"]["last_query_latency_sec"]) > 0
    assert d["embodied_r: reasoning backend"]["model"] == "tiny-qwen2"
    assert d["embodied_r: perception backend"]["state"] == "active"


def test_diagnostics_follow_a_failing_backend(world: World, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """An in-process LM whose generate fails (an OOM) reports unhealthy, with the error, until
    a generate succeeds again."""
    lm = world.by_name["reasoning"].serving().lm

    def reasoning() -> dict[str, str]:
        world.diagnostics.clear()
        wait_until(lambda: any(s.name == "embodied_r: reasoning backend"
                               for a in list(world.diagnostics) for s in a.status),
                   what="reasoning diagnostics")
        return next({kv.key: kv.value for kv in s.values} for a in list(world.diagnostics)
                    for s in a.status if s.name == "embodied_r: reasoning backend")

    assert reasoning()["healthy"] == "True"

    def oom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")

    real = lm.model.generate
    monkeypatch.setattr(lm.model, "generate", oom)
    r = world.ask()
    assert (r.success, r.error_code) == (False, "BACKEND_FAILED") and "out of memory" in r.error
    state = reasoning()
    assert state["healthy"] == "False" and "out of memory" in state["error"]
    monkeypatch.setattr(lm.model, "generate", real)
    assert world.ask().success
    assert reasoning()["healthy"] == "True"


def test_parameters_are_described_with_ranges(world: World) -> None:
    for node in world.nodes:
        for name, param in node._parameters.items():  # noqa: SLF001 - no public list
            if name == "use_sim_time":
                continue
            desc = node.describe_parameter(name)
            assert desc.description, f"{node.get_name()}.{name} has no description"
            if param.type_ in (Parameter.Type.INTEGER, Parameter.Type.DOUBLE):
                assert desc.integer_range or desc.floating_point_range, f"{name} has no range"


def test_the_node_survives_everything(world: World) -> None:
    assert world.ask().success
    frame = np.zeros((240, 320, 3), np.uint8)
    world.image.publish(image_msg(frame, STAMPS[-1] + 1.0))  # a dark frame: no features
    wait_until(lambda: world.store.stats.stored == 13, what="the dark frame")
    assert world.ask(window_sec=1.0).success


def test_a_truncated_message_is_dropped_counted_and_the_stream_goes_on(world: World) -> None:
    from rclpy.serialization import serialize_message

    newest = world.store.newest_stamp
    frame = image_msg(FRAMES[0], newest + 1.0)  # a stamp the 1 fps sampler wants
    data = serialize_message(frame)
    before = world.store.stats.dropped["CORRUPT_FRAME"]
    received = world.store.stats.received
    world.image.publish(data[: len(data) // 2])  # the raw bytes, cut short
    wait_until(lambda: world.store.stats.received > received, what="the truncated message")
    assert world.store.stats.dropped["CORRUPT_FRAME"] == before + 1
    world.feed_frames([FRAMES[1]], [newest + 2.0])
    # feed_frames returns once the frame is counted (before it is decoded and stored)
    wait_until(lambda: world.store.newest_stamp == newest + 2.0, what="the next frame stored")
    assert world.ask().success

"""The all-in-one process, in-process: real rclpy nodes over Fast DDS on loopback, tiny models.

Each test starts its own all-in-one (under its own namespace) and feeds it what it needs, so the
tests pass alone and in any order.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from media import pan_frames
from ros_helpers import (
    DISCOVERY_SEC,
    AllInOne,
    feed,
    frame_handled,
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
from embodied_r_ros.core.request import MAX_OPTION_CHARS  # noqa: E402
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
REASONING = "embodied_r: reasoning backend"
_namespaces = itertools.count()


def frame_lines(perception: str) -> int:
    return len(re.findall(r"^Frame \d+(?: \(\d+ s before the last key frame\))?: ", perception,
                          re.MULTILINE))


class World(AllInOne):
    """An all-in-one, also listening to its key frames and to diagnostics."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx, namespace=f"/embodied_r_{next(_namespaces)}")
        self.key_frames: list[Image] = []
        self.tester.create_subscription(Image, f"{self.ns}/frame_buffer/key_frames",
                                        self.key_frames.append, 10)
        self.diagnostics: list[DiagnosticArray] = []
        self.tester.create_subscription(DiagnosticArray, "/diagnostics",
                                        self.diagnostics.append, 10)

    def ask(self, question: str = "Which way did I turn?", options: list[str] | None = None,
            window_sec: float = 0.0, camera: str = "") -> Any:
        return super().ask(question, OPTIONS if options is None else options, window_sec, camera)

    def stream(self) -> None:
        """The panning camera: 24 frames, 12 of them sampled."""
        self.feed_frames(FRAMES, STAMPS)

    def bad_frames(self) -> None:
        """A depth image (an unsupported encoding), then a JPEG that does not decode."""
        depth = Image(height=4, width=4, encoding="32FC1", step=16, data=bytes(64))
        depth.header.stamp.sec = int(T0 - 2)
        corrupt = CompressedImage(format="jpeg", data=b"\xff\xd8garbage")
        corrupt.header.stamp.sec = int(T0 - 1)
        feed(self.image.publish, [depth], frame_handled(self.store))
        feed(self.compressed.publish, [corrupt], frame_handled(self.store))

    def now(self) -> float:
        return self.tester.get_clock().now().nanoseconds * 1e-9

    def status(self, name: str, after: float,
               accept: Callable[[dict[str, str]], bool] = lambda _v: True) -> dict[str, str]:
        """The values of the first status ``name`` published after ``after`` (ROS time) that
        ``accept`` takes: a status computed after an event, not one read before it."""
        found: list[dict[str, str]] = []

        def seen() -> bool:
            for array in list(self.diagnostics):
                if stamp_to_sec(array.header.stamp) <= after:
                    continue
                for s in array.status:
                    values = {kv.key: kv.value for kv in s.values}
                    if s.name == name and accept(values):
                        found.append(values)
                        return True
            return False

        wait_until(seen, what=f"a '{name}' status after {after:.3f}")
        return found[0]


@pytest.fixture(scope="module")
def ctx(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cfg = tmp_path_factory.mktemp("cfg") / "tiny_nocache.yaml"
    cfg.write_text(TEST_CONFIG)
    args = ["--ros-args", "-p", "profile:=tiny", "-p", f"config_file:={cfg}",
            "-p", "diagnostics_period_sec:=0.2"]
    with ros_context(__name__, args) as context:
        yield context


@pytest.fixture
def world(ctx: Any) -> Iterator[World]:
    """A fresh all-in-one: an empty buffer, no query asked yet."""
    w = World(ctx)
    yield w
    w.stop()


@pytest.fixture
def streamed(world: World) -> World:
    """An all-in-one that has seen the panning camera."""
    world.stream()
    return world


def test_no_frames_yet(world: World) -> None:
    r = world.ask()
    assert not r.success and r.error_code == "NO_FRAMES" and "\n" not in r.error


def test_bad_frames_are_dropped_counted_and_reported(world: World) -> None:
    depth = Image(height=4, width=4, encoding="32FC1", step=16, data=bytes(64))
    depth.header.stamp.sec = int(T0 - 2)
    corrupt = CompressedImage(format="jpeg", data=b"\xff\xd8garbage")
    corrupt.header.stamp.sec = int(T0 - 1)
    feed(world.image.publish, [depth], frame_handled(world.store))
    r = world.ask()
    assert not r.success and r.error_code == "UNSUPPORTED_ENCODING" and "32FC1" in r.error
    feed(world.compressed.publish, [corrupt], frame_handled(world.store))
    r = world.ask()
    assert r.error_code == "CORRUPT_FRAME"
    assert dict(world.store.stats.dropped) == {"UNSUPPORTED_ENCODING": 1, "CORRUPT_FRAME": 1}


def test_camera_stream_fills_the_buffer_and_publishes_key_frames(world: World) -> None:
    world.bad_frames()
    world.stream()
    st = world.store.stats
    assert st.stored == 12 and st.skipped == 12  # the stream continued after the bad frames
    wait_until(lambda: len(world.key_frames) == st.keyframes, what="key frames on ~/key_frames")
    assert st.keyframes >= 2
    first = world.key_frames[0]
    assert (first.encoding, first.width, first.height) == ("rgb8", 320, 240)
    assert stamp_to_sec(first.header.stamp) == STAMPS[0]


def test_service_answers_over_the_whole_buffer(streamed: World) -> None:
    r = streamed.ask()
    assert r.success, r.error
    stamps = [stamp_to_sec(s) for s in r.key_frame_stamps]
    assert 4 <= len(stamps) <= 32
    assert stamps[0] == STAMPS[0] and stamps[-1] == STAMPS[-2]  # first and last sampled
    assert frame_lines(r.perception) == len(stamps)
    # the answer is what the reasoning LM says of exactly the perception text returned
    again = streamed.by_name["reasoning"].serving().reason(r.perception, OPTIONS)
    assert (r.answer, r.answer_text, r.reasoning) == (again.answer, again.answer_text,
                                                      again.think)
    assert r.perception.rstrip().endswith(OPTIONS[-1])
    assert r.total_sec >= r.perception_sec + r.reasoning_sec > 0


def test_window_limits_the_key_frames(streamed: World) -> None:
    r = streamed.ask(window_sec=3.0)
    assert r.success, r.error
    stamps = [stamp_to_sec(s) for s in r.key_frame_stamps]
    assert stamps and all(STAMPS[-2] - 3.0 <= s <= STAMPS[-2] for s in stamps)
    assert len(stamps) == 4  # 4 sampled frames in 3 s: the clamp's lower bound keeps them all


def test_action_uses_the_same_path_with_feedback(streamed: World) -> None:
    assert streamed.action.wait_for_server(timeout_sec=DISCOVERY_SEC)
    feedback: list[Any] = []
    goal = QueryAction.Goal(question="Which way did I turn?", options=OPTIONS)
    handle = result_of(streamed.action.send_goal_async(
        goal, lambda m: feedback.append(m.feedback)))
    assert handle.accepted
    result = result_of(handle.get_result_async()).result
    service = streamed.ask()
    assert result.success and service.success
    assert (result.answer, result.perception) == (service.answer, service.perception)
    stages = [f.stage for f in feedback]
    assert stages[0] == "window" and stages[-1] == "done" and "reasoning" in stages
    perceived = [f for f in feedback if f.stage == "perception"]
    n = len(result.key_frame_stamps)
    assert [f.frames_done for f in perceived] == list(range(1, n + 1))
    assert all(f.frames_total == n for f in perceived)


def test_a_server_set_to_longer_options_answers_them(streamed: World) -> None:
    """``max_option_chars`` set to 2,000 holds to the answer: the in-process perception and
    reasoning check the question no more."""
    long = "A. " + "I turned to the left " * 70
    assert MAX_OPTION_CHARS < len(long.strip()) <= 1500
    (done,) = streamed.by_name["query_server"].set_parameters(
        [Parameter("max_option_chars", value=2000)])
    assert done.successful, done.reason
    r = streamed.ask(options=[long, OPTIONS[1]], window_sec=3.0)
    assert r.success, r.error
    assert r.perception.endswith(f"Choices:\n{long.strip()}\n{OPTIONS[1]}")


def test_open_question_and_named_default_camera(streamed: World) -> None:
    r = streamed.ask("What is ahead of me?", [], camera="front")
    assert r.success, r.error
    assert "Choices" not in r.perception


def test_diagnostics_report_camera_buffer_backends_and_latency(world: World) -> None:
    world.bad_frames()
    world.stream()
    assert world.ask().success
    asked = world.now()
    camera = world.status("embodied_r: camera front", asked)
    assert float(camera["buffer_span_sec"]) == pytest.approx(STAMPS[-2] - STAMPS[0], abs=1e-3)
    assert float(camera["buffer_size_mb"]) > 0 and camera["frames_dropped"] == "2"
    assert "camera_rate_hz" in camera
    query = world.status("embodied_r: query server", asked)
    assert float(query["last_query_latency_sec"]) > 0
    assert world.status(REASONING, asked)["model"] == "tiny-qwen2"
    assert world.status("embodied_r: perception backend", asked)["state"] == "active"


def test_diagnostics_follow_a_failing_backend(streamed: World,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process LM whose generate fails (an OOM) reports unhealthy, with the error, until
    a generate succeeds again."""
    lm = streamed.by_name["reasoning"].serving().lm
    assert streamed.status(REASONING, 0.0)["healthy"] == "True"

    def oom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")

    real = lm.model.generate
    monkeypatch.setattr(lm.model, "generate", oom)
    r = streamed.ask()
    assert (r.success, r.error_code) == (False, "BACKEND_FAILED") and "out of memory" in r.error
    failed = streamed.now()
    state = streamed.status(REASONING, failed)
    assert state["healthy"] == "False" and "out of memory" in state["error"]
    monkeypatch.setattr(lm.model, "generate", real)
    assert streamed.ask().success
    assert streamed.status(REASONING, streamed.now())["healthy"] == "True"


def test_parameters_are_described_with_ranges(world: World) -> None:
    for node in world.nodes:
        for name, param in node._parameters.items():  # noqa: SLF001 - no public list
            if name == "use_sim_time":
                continue
            desc = node.describe_parameter(name)
            assert desc.description, f"{node.get_name()}.{name} has no description"
            if param.type_ in (Parameter.Type.INTEGER, Parameter.Type.DOUBLE):
                assert desc.integer_range or desc.floating_point_range, f"{name} has no range"


def test_the_node_survives_everything(streamed: World) -> None:
    assert streamed.ask().success
    dark = image_msg(np.zeros((240, 320, 3), np.uint8), STAMPS[-1] + 1.0)  # no features
    feed(streamed.image.publish, [dark], frame_handled(streamed.store))
    assert streamed.store.stats.stored == 13 and streamed.store.newest_stamp == STAMPS[-1] + 1.0
    assert streamed.ask(window_sec=1.0).success


def test_a_truncated_message_is_dropped_counted_and_the_stream_goes_on(streamed: World) -> None:
    from rclpy.serialization import serialize_message

    newest = streamed.store.newest_stamp
    data = serialize_message(image_msg(FRAMES[0], newest + 1.0))  # a stamp the sampler wants
    # the raw bytes, cut short: the stamp still reads, the image does not
    feed(streamed.image.publish, [data[: len(data) // 2]],
         lambda _m: streamed.store.stats.last_frame_stamp == newest + 1.0)
    assert streamed.store.stats.dropped == {"CORRUPT_FRAME": 1}
    streamed.feed_frames([FRAMES[1]], [newest + 2.0])
    assert streamed.store.newest_stamp == newest + 2.0  # stored: handled means done with
    assert streamed.ask().success

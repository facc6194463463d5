"""The spatial memory in the separate-process layout (the launch file's): the perception node
writes every key frame with the pose its frame buffer sent along, and serves the stats and clear
services; the stand-alone query server answers ``scope: memory`` questions from the same
database, all over ROS topics, services and actions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from media import pan_frames
from ros_helpers import (
    MEMORY_CONFIG,
    Spinner,
    call,
    feed,
    feed_with_odometry,
    odom_msg,
    pose_received,
    require_ros,
    ros_context,
    wait_matched,
    wait_until,
)

require_ros()

import rclpy  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_interfaces.srv import (  # noqa: E402
    GetWindow,
    MemoryClear,
    MemoryStats,
    SpatialQuery,
)
from embodied_r_ros.core.chat import Health  # noqa: E402
from embodied_r_ros.core.perception_text import PLACES_HEADING  # noqa: E402
from embodied_r_ros.memory import SqliteMemoryStore  # noqa: E402
from embodied_r_ros.nodes.conversions import msg_to_pose, stamp_to_sec  # noqa: E402
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402
from embodied_r_ros.nodes.model_node import model_status  # noqa: E402
from embodied_r_ros.nodes.perception_node import PerceptionNode  # noqa: E402
from embodied_r_ros.nodes.query_server import QueryServerNode  # noqa: E402
from embodied_r_ros.nodes.reasoning_node import ReasoningNode  # noqa: E402
from embodied_r_ros.nodes.runtime import start_nodes  # noqa: E402
from embodied_r_ros.nodes.transport import QUERY_QOS  # noqa: E402

NS = "/sepmem"
T0 = 3000.0
FRAMES = pan_frames(24, 24)
STAMPS = [T0 + 0.5 * i for i in range(len(FRAMES))]  # 12 s; 1 fps sampling keeps every other


class SeparateMemory:
    """The four nodes as separate nodes (only ROS between them) and a tester."""

    def __init__(self, ctx: Any, config: Path) -> None:
        # the camera stamp filter off: the test feeds single frames at made-up stamps
        params = [Parameter("profile", value="offline"),
                  Parameter("config_file", value=str(config)),
                  Parameter("stamp_filter", value=False)]
        kw = {"context": ctx, "namespace": NS, "parameter_overrides": params}
        self.buffer = FrameBufferNode(**kw)
        self.perception = PerceptionNode(**kw)
        self.reasoning = ReasoningNode(**kw)
        start_nodes([self.perception, self.reasoning])
        self.query = QueryServerNode(**kw)
        t = self.tester = rclpy.create_node("tester", context=ctx)
        self.spinner = Spinner(ctx, [self.buffer, self.perception, self.reasoning, self.query,
                                     t], threads=10)
        self.image = t.create_publisher(Image, f"{NS}/image", 10)
        self.odom = t.create_publisher(Odometry, f"{NS}/odom", 10)
        self.client = t.create_client(SpatialQuery, f"{NS}/query", qos_profile=QUERY_QOS)
        self.stats_client = t.create_client(MemoryStats, f"{NS}/memory/stats")
        self.clear_client = t.create_client(MemoryClear, f"{NS}/memory/clear")
        wait_matched(self.image, [self.buffer.camera_subscriptions[0]])
        wait_matched(self.odom, [self.buffer.odometry_subscription])

    @property
    def writer(self) -> Any:
        assert self.perception.memory is not None
        return self.perception.memory.writer

    def stats(self) -> Any:
        return call(self.stats_client, MemoryStats.Request())


@pytest.fixture(scope="module")
def separate(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[SeparateMemory, Path]]:
    """The layout after a panning stream with odometry (0.1 m forward and 2 degrees left a
    frame): every key frame stored by the perception node."""
    tmp = tmp_path_factory.mktemp("separate-memory")
    db = tmp / "memory.sqlite3"
    config = tmp / "memory.yaml"
    # a memory reader of its own (the tiny LM again): the reasoning node routes by the scope
    config.write_text(MEMORY_CONFIG.format(path=db).replace(
        "reasoning: {model:", "reasoning: {memory_model: tiny-qwen2, model:"))
    with ros_context(__name__) as ctx:
        s = SeparateMemory(ctx, config)
        store = s.buffer.store
        feed_with_odometry(s.odom.publish, s.image.publish, store, FRAMES, STAMPS)
        keyframes = store.stats.keyframes
        assert keyframes >= 3
        wait_until(lambda: s.writer.recorded == keyframes, 30, "every key frame stored")
        yield s, db
        s.spinner.stop()


def test_the_perception_node_writes_every_key_frame_with_the_pose_sent_along(
        separate: tuple[SeparateMemory, Path]) -> None:
    s, db = separate
    with SqliteMemoryStore(db) as store:
        rows = store.latest("robot", 100)
    assert len(rows) == s.buffer.store.stats.keyframes
    for row in rows:
        i = STAMPS.index(row.stamp)
        assert row.pose_source == "odometry" and row.pose is not None
        assert row.pose.x == pytest.approx(0.1 * i)
        assert row.pose.yaw_deg == pytest.approx(2.0 * i)
        assert row.description and row.camera == "front"


def test_the_stand_alone_query_server_answers_from_that_memory(
        separate: tuple[SeparateMemory, Path]) -> None:
    s, _ = separate
    r = call(s.client, SpatialQuery.Request(question="What did I see at the start?",
                                            options=["A. red", "B. blue"], scope="memory"))
    assert r.success, r.error
    stamps = [stamp_to_sec(f.stamp) for f in r.memory_frames]
    assert stamps and stamps[0] == STAMPS[0] and set(stamps) <= set(STAMPS)
    assert "latest" in r.memory_frames[-1].reasons
    bad = call(s.client, SpatialQuery.Request(question="Where was I 5 blorps ago?",
                                              scope="memory"))
    assert (bad.success, bad.error_code) == (False, "BAD_TIME_PHRASE")


def test_the_reasoning_node_gives_a_memory_text_to_its_memory_reader(
        separate: tuple[SeparateMemory, Path]) -> None:
    """The query server sends the reasoning node the text, the options and the question's
    scope; the scope, not the text's words, sends it to the memory reader, on the other node
    as in the all-in-one."""
    s, _ = separate
    pipeline = s.reasoning.pipeline
    assert pipeline is not None and pipeline.memory_lm is not None
    assert pipeline.memory_lm is not pipeline.lm
    read_by: list[str] = []
    for backend, name in ((pipeline.lm, "lm"), (pipeline.memory_lm, "memory")):
        complete = backend.complete
        backend.complete = (  # type: ignore[method-assign]
            lambda calls, *a, _c=complete, _n=name, **k: read_by.append(_n) or _c(calls, *a, **k))
    r = call(s.client, SpatialQuery.Request(
        question="Where is the red object you saw at the start relative to you now?",
        options=["A. front-left", "B. front-right", "C. back-left", "D. back-right"],
        scope="memory"))
    assert r.success, r.error
    # (a short pan from about one spot places nothing: no places block to look for)
    assert "Question: Where is the red object" in r.perception and read_by == ["memory"]
    window = call(s.client, SpatialQuery.Request(question="Which way did I turn?",
                                                 options=["A. left", "B. right"],
                                                 scope="window"))
    assert window.success, window.error
    assert PLACES_HEADING not in window.perception and read_by == ["memory", "lm"]
    model, healthy, error = s.reasoning.backend_status()
    assert (model, healthy, error) == (
        f"{pipeline.lm.model_id}, {pipeline.memory_lm.model_id}", True, "")


@dataclass
class Reporting:
    """A backend as far as a node's status reads one: its id and its last health."""

    model_id: str
    error: str = ""

    def health(self) -> Health:
        return Health(ok=not self.error, error=self.error)


def test_a_node_serving_two_models_is_unhealthy_when_either_is() -> None:
    lm, reader = Reporting("lm"), Reporting("reader", error="llama.cpp failed to load")
    assert model_status(lm) == ("lm", True, "")
    assert model_status(reader) == ("reader", False, "llama.cpp failed to load")
    assert model_status(lm, reader) == ("lm, reader", False, "reader: llama.cpp failed to load")
    assert model_status(lm, Reporting("reader")) == ("lm, reader", True, "")


def test_the_perception_node_serves_the_memory_stats(
        separate: tuple[SeparateMemory, Path]) -> None:
    s, db = separate
    st = s.stats()
    rows = s.buffer.store.stats.keyframes
    assert st.success, st.error
    assert (st.rows, st.recorded, st.failed, st.location) == (rows, rows, 0, str(db))
    assert stamp_to_sec(st.first_stamp) == STAMPS[0]
    status = s.perception.diagnostics()[0]
    values = {kv.key: kv.value for kv in status.values}
    assert values["memory_rows_recorded"] == str(rows)


def test_a_memory_question_counts_from_the_frame_buffers_pose_now(
        separate: tuple[SeparateMemory, Path]) -> None:
    """The robot turns after its last frame: the frame buffer answers its pose now over
    GetWindow (no frames shipped), and the stand-alone query server hands that pose, not the
    newest key frame's, to the memory it reads."""
    s, _ = separate
    turned = odom_msg(STAMPS[-1] + 2.0, 3.0, 1.0, 120.0)
    feed(s.odom.publish, [turned], pose_received(s.buffer.store))
    window = s.tester.create_client(GetWindow, f"{NS}/frames/front/get_window")
    r = call(window, GetWindow.Request(pose_only=True))
    assert r.success and r.has_pose_now and not r.key_frames
    assert stamp_to_sec(r.pose_now_stamp) == STAMPS[-1] + 2.0
    pose = msg_to_pose(r.pose_now)
    assert (pose.x, pose.y, pose.yaw_deg) == pytest.approx((3.0, 1.0, 120.0))
    runner = s.query.runner
    assert runner is not None and runner.memory is not None
    reader, handed = runner.memory, []

    class Recording:
        def perception(self, question: str, options: Any, live: Any = None) -> Any:
            handed.append(live)
            return reader.perception(question, options, live)

    runner.memory = Recording()
    try:
        q = call(s.client, SpatialQuery.Request(question="Where is the red object now?",
                                                options=["A. left", "B. right"],
                                                scope="memory"))
    finally:
        runner.memory = reader
    assert q.success, q.error
    (live,) = handed
    assert live is not None and live.stamp == STAMPS[-1] + 2.0
    assert (live.pose.x, live.pose.yaw_deg) == pytest.approx((3.0, 120.0))

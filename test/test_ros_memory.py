"""The spatial memory over ROS, in-process: the all-in-one with ``memory.enabled`` records every
key frame (its description, the odometry pose at its stamp, a thumbnail), answers ``scope:
memory`` questions from it with the frames it read, serves the stats and clear services, and
answers bad input and a damaged database with an error code and one line, never crashing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from media import pan_frames
from ros_helpers import (
    DISCOVERY_SEC,
    MEMORY_CONFIG,
    AllInOne,
    call,
    feed_with_odometry,
    require_ros,
    result_of,
    ros_context,
    stamp,
    wait_matched,
    wait_until,
)

require_ros()

from builtin_interfaces.msg import Time  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402
from embodied_r_interfaces.msg import KeyFrameDescription  # noqa: E402
from embodied_r_interfaces.srv import MemoryClear, MemoryStats, SpatialQuery  # noqa: E402
from embodied_r_ros.memory import SqliteMemoryStore  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402

T0 = 2000.0
FRAMES = pan_frames(24, 24)
STAMPS = [T0 + 0.5 * i for i in range(len(FRAMES))]  # 12 s; 1 fps sampling keeps every other


class Robot(AllInOne):
    """The all-in-one under ``namespace`` with its memory services and descriptions."""

    def __init__(self, ctx: Any, namespace: str, config: Path) -> None:
        super().__init__(ctx, namespace, parameters=[
            Parameter("profile", value="offline"), Parameter("config_file", value=str(config))])
        t = self.tester
        self.stats_client = t.create_client(MemoryStats, f"{namespace}/memory/stats")
        self.clear_client = t.create_client(MemoryClear, f"{namespace}/memory/clear")
        self.odom = t.create_publisher(Odometry, f"{namespace}/odom", 10)
        wait_matched(self.odom, [self.by_name["frame_buffer"].odometry_subscription])
        self.notes: list[KeyFrameDescription] = []
        t.create_subscription(KeyFrameDescription, f"{namespace}/perception/descriptions",
                              self.notes.append, 10)

    @property
    def writer(self) -> Any:
        return self.by_name["query_server"].memory_writer

    def ask_memory(self, question: str, options: list[str] | None = None,
                   scope: str = "memory") -> Any:
        return call(self.query, SpatialQuery.Request(question=question, options=options or [],
                                                     scope=scope))

    def stats(self) -> Any:
        return call(self.stats_client, MemoryStats.Request())

    def clear(self, before: float = 0.0) -> Any:
        return call(self.clear_client, MemoryClear.Request(before=stamp(before)))


def write_config(directory: Path, db: Path) -> Path:
    path = directory / f"{db.stem}.yaml"
    path.write_text(MEMORY_CONFIG.format(path=db))
    return path


class Fleet(NamedTuple):
    """Robots of one context, each with its own database, so that no test depends on what
    another did: ``recorded`` is fed once and only read; ``clearable`` is fed for the clear
    service; ``fresh`` is never fed; ``damaged`` has a corrupt database."""

    recorded: Robot
    clearable: Robot
    fresh: Robot
    damaged: Robot
    db: Path
    clearable_db: Path
    broken: Path


@pytest.fixture(scope="module")
def fleet(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("memory")
    db, clearable_db = tmp / "memory.sqlite3", tmp / "clearable.sqlite3"
    broken = tmp / "broken.sqlite3"
    broken.write_bytes(b"SQLite format 3\x00" + b"\x13" * 4080)  # a header, then garbage
    with ros_context(__name__) as ctx:
        robots = [Robot(ctx, f"/{name}", write_config(tmp, path)) for name, path in (
            ("embodied_r", db), ("clearable", clearable_db), ("fresh", tmp / "fresh.sqlite3"),
            ("damaged", broken))]
        yield Fleet(*robots, db, clearable_db, broken)
        for robot in reversed(robots):
            robot.stop()


def record(robot: Robot) -> Robot:
    """``robot`` after a panning stream with odometry: every key frame stored."""
    feed_with_odometry(robot.odom.publish, robot.image.publish, robot.store, FRAMES, STAMPS)
    keyframes = robot.store.stats.keyframes
    assert keyframes >= 3
    wait_until(lambda: robot.writer.recorded == keyframes, 30, "every key frame stored")
    return robot


@pytest.fixture(scope="module")
def recorded(fleet: Fleet) -> Robot:
    return record(fleet.recorded)


@pytest.fixture(scope="module")
def clearable(fleet: Fleet) -> Robot:
    return record(fleet.clearable)


def test_an_empty_memory_answers_no_frames(fleet: Fleet) -> None:
    r = fleet.fresh.ask_memory("What did I see at the start?")
    assert not r.success and r.error_code == "NO_FRAMES" and "\n" not in r.error


def test_every_key_frame_becomes_a_row_with_pose_description_and_thumbnail(
        recorded: Robot, fleet: Fleet) -> None:
    with SqliteMemoryStore(fleet.db) as store:
        rows = store.latest("robot", 100)
        assert [r.stamp for r in rows] == sorted(r.stamp for r in rows)
        assert len(rows) == recorded.store.stats.keyframes
        assert {r.stamp for r in rows} <= set(STAMPS)
        for row in rows:
            i = STAMPS.index(row.stamp)
            assert row.pose_source == "odometry" and row.pose is not None
            assert row.pose.x == pytest.approx(0.1 * i) and row.pose.yaw_deg == pytest.approx(
                2.0 * i)
            assert row.description and row.camera == "front"
            thumb = store.thumbnail(row.id)
            assert thumb is not None and thumb[:2] == b"\xff\xd8"
    wait_until(lambda: len(recorded.notes) == len(rows), what="the descriptions published")
    assert [stamp_to_sec(n.header.stamp) for n in recorded.notes] == [r.stamp for r in rows]
    assert {n.model for n in recorded.notes} == {"geometric"}


def test_scope_memory_answers_from_the_stored_frames(recorded: Robot) -> None:
    r = recorded.ask_memory("What did I see at the start?", ["A. red", "B. blue"])
    assert r.success, r.error
    used = r.memory_frames
    stamps = [stamp_to_sec(f.stamp) for f in used]
    assert stamps == sorted(stamps) and stamps[0] == STAMPS[0]
    assert [stamp_to_sec(s) for s in r.key_frame_stamps] == stamps
    newest = stamps[-1]
    assert [f.age_sec for f in used] == pytest.approx([newest - s for s in stamps])
    assert any(reason.startswith("time:at the start") for reason in used[0].reasons)
    assert "latest" in used[-1].reasons
    assert all(f.description and f.camera == "front" for f in used)
    assert r.perception.rstrip().endswith("B. blue")


def test_bad_scope_and_time_phrase_are_one_line_errors(recorded: Robot) -> None:
    r = recorded.ask_memory("What is ahead?", scope="forever")
    assert (r.success, r.error_code) == (False, "UNKNOWN_SCOPE") and "forever" in r.error
    r = recorded.ask_memory("Where was the chair 5 blorps ago?")
    assert (r.success, r.error_code) == (False, "BAD_TIME_PHRASE")
    assert "5 blorps ago" in r.error and "\n" not in r.error
    goal = QueryAction.Goal(question="Where was I 5 blorps ago?", scope="memory")
    assert recorded.action.wait_for_server(timeout_sec=DISCOVERY_SEC)
    handle = result_of(recorded.action.send_goal_async(goal))
    result = result_of(handle.get_result_async()).result
    assert (result.success, result.error_code) == (False, "BAD_TIME_PHRASE")
    # the node is still up and the window scope unchanged
    assert recorded.ask_memory("What is ahead?", scope="").success


def test_stats_and_clear_services(clearable: Robot, fleet: Fleet) -> None:
    s = clearable.stats()
    rows = clearable.store.stats.keyframes
    assert s.success, s.error
    status = clearable.by_name["query_server"].diagnostics()[0]
    values = {kv.key: kv.value for kv in status.values}
    assert (values["memory_rows_recorded"], values["memory_write_failures"]) == (str(rows), "0")
    assert (s.robot, list(s.robots), s.rows, s.failed) == ("robot", ["robot"], rows, 0)
    assert s.recorded == rows and s.location == str(fleet.clearable_db)
    assert stamp_to_sec(s.first_stamp) == STAMPS[0] and s.size_bytes > 0
    assert s.span_sec == pytest.approx(stamp_to_sec(s.last_stamp) - STAMPS[0])
    bad = call(clearable.clear_client, MemoryClear.Request(before=Time(sec=-5)))
    assert (bad.success, bad.error_code) == (False, "BAD_REQUEST")
    assert clearable.stats().rows == rows  # nothing deleted
    c = clearable.clear(before=STAMPS[6])
    assert c.success and c.deleted >= 1 and c.deleted + c.rows == rows
    assert stamp_to_sec(clearable.stats().first_stamp) >= STAMPS[6]
    c = clearable.clear()
    assert c.success and c.rows == 0
    r = clearable.ask_memory("What did I see at the start?")
    assert r.error_code == "NO_FRAMES"


def test_a_damaged_database_is_refused_untouched_and_the_node_serves_on(fleet: Fleet) -> None:
    damaged, broken = fleet.damaged, fleet.broken
    before = broken.read_bytes()
    s = damaged.stats()
    assert (s.success, s.error_code) == (False, "MEMORY_UNAVAILABLE") and "DB_CORRUPT" in s.error
    c = damaged.clear()
    assert (c.success, c.error_code) == (False, "MEMORY_UNAVAILABLE")
    r = damaged.ask_memory("What did I see at the start?")
    assert (r.success, r.error_code) == (False, "MEMORY_UNAVAILABLE") and "\n" not in r.error
    assert broken.read_bytes() == before
    assert damaged.ask_memory("What is ahead?", scope="window").error_code == "NO_FRAMES"


STREAMING = """base: tiny
cache: {{enabled: false}}
perception: {{mode: streaming, vlm: {{max_new_tokens: 8}}}}
reasoning: {{model: {{max_new_tokens: 8}}}}
memory: {{enabled: true, path: "{path}", embedder: "off"}}
"""


@pytest.fixture(scope="module")
def streaming(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[Robot, Path]]:
    """The all-in-one with a (tiny) VLM in streaming mode: the memory stores the streaming
    descriptions themselves."""
    tmp = tmp_path_factory.mktemp("streaming")
    db = tmp / "streamed.sqlite3"
    config = tmp / "streamed.yaml"
    config.write_text(STREAMING.format(path=db))
    with ros_context(f"{__name__}.streaming") as ctx:
        robot = Robot(ctx, "/streamed", config)
        yield robot, db
        robot.stop()


def test_streaming_descriptions_are_the_rows(streaming: tuple[Robot, Path]) -> None:
    robot, db = streaming
    robot.feed_frames(FRAMES[:12], STAMPS[:12])
    keyframes = robot.store.stats.keyframes
    assert keyframes >= 2
    wait_until(lambda: robot.writer.recorded == keyframes, 120, "every key frame stored")
    wait_until(lambda: len(robot.notes) == keyframes, 30, "the descriptions published")
    with SqliteMemoryStore(db) as store:
        rows = store.latest("robot", 100)
    assert [r.description for r in rows] == [n.description for n in robot.notes]
    assert [r.stamp for r in rows] == [stamp_to_sec(n.header.stamp) for n in robot.notes]
    assert {n.model for n in robot.notes} == {"tiny-qwen2.5-vl"}
    assert all(r.pose is None and r.pose_source is None for r in rows)  # no odometry here

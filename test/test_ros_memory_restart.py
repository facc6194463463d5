"""The memory outlives the process: a synthetic world's bag played into ``python -m
embodied_r_ros`` with ``memory.enabled``, the process stopped and started again, the rest of
the bag played, and a ``scope: memory`` question over the real service reads frames recorded
before the restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import (
    LOCALHOST_ENV,
    Spinner,
    call,
    domain_id,
    require_ros,
    ros_context,
    wait_until,
)

require_ros()

import rclpy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_interfaces.srv import MemoryStats, SpatialQuery  # noqa: E402
from embodied_r_ros.memory import SqliteMemoryStore  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402
from embodied_r_ros.nodes.transport import QUERY_QOS  # noqa: E402
from embodied_r_ros.ros_player import BagPlayer  # noqa: E402
from embodied_r_ros.sim.generate import generate_world  # noqa: E402
from embodied_r_ros.sim.world import WorldSpec  # noqa: E402

SECONDS = 30.0
SPLIT = 15.0  # seconds of the bag played before the restart
CONFIG = """base: offline
cache: {{enabled: false}}
reasoning: {{model: {{model: tiny-qwen2, max_new_tokens: 8}}}}
memory: {{enabled: true, path: "{path}", embedder: "off"}}
"""


class AllInOneProcess:
    """``python -m embodied_r_ros`` with the test's config, stopped with SIGINT."""

    def __init__(self, config: Path) -> None:
        env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__)),
               "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "embodied_r_ros", "--ros-args", "-p", "profile:=offline",
             "-p", f"config_file:={config}", "-p", "image_qos:=reliable"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out


class Robot:
    """Plays the bag and asks, from this process."""

    def __init__(self, ctx: Any, bag: Path) -> None:
        self.node = rclpy.create_node("memory_tester", context=ctx)
        self.keys: list[float] = []
        self.node.create_subscription(Image, "/embodied_r/frame_buffer/key_frames",
                                      lambda m: self.keys.append(stamp_to_sec(m.header.stamp)),
                                      10)
        self.query = self.node.create_client(SpatialQuery, "/embodied_r/query",
                                             qos_profile=QUERY_QOS)
        self.stats = self.node.create_client(MemoryStats, "/embodied_r/memory/stats")
        self.player = BagPlayer(self.node, bag, topics=["/camera/image_raw", "/odom"],
                                remap={"/camera/image_raw": "/embodied_r/image",
                                       "/odom": "/embodied_r/odom"}, rate=4.0)
        self.spinner = Spinner(ctx, [self.node])

    def play_into(self, process: AllInOneProcess, until: float | None) -> None:
        """Play to ``until`` into a started process, then wait until the memory stored
        every key frame the frame buffer published."""
        assert self.query.wait_for_service(timeout_sec=180), process.stop()[-3000:]
        assert self.player.wait_for_subscribers("/embodied_r/image", 30)
        assert self.player.wait_for_subscribers("/embodied_r/odom", 30)
        seen = len(self.keys)
        self.player.play(until)
        assert self.player.flush(10)
        try:
            wait_until(lambda: len(self.keys) > seen, 60, "key frames")
            wait_until(lambda: self.memory().recorded == len(self.keys) - seen, 60,
                       "every key frame in the memory")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the process said: {process.stop()[-3000:]}") from None

    def memory(self) -> Any:
        r = call(self.stats, MemoryStats.Request())
        assert r.success, r.error
        return r

    def stop(self) -> None:
        self.spinner.stop()
        self.player.close()


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("world")
    paths = generate_world(WorldSpec(seed=11, frames=int(SECONDS * 10), width=320, height=240),
                           root / "world", 0, video=False)
    assert paths.bag is not None
    return paths.bag


@pytest.fixture()
def tester(bag: Path) -> Iterator[Robot]:
    with ros_context(__name__) as ctx:
        t = Robot(ctx, bag)
        yield t
        t.stop()


def test_memory_questions_read_frames_from_before_a_restart(
        tester: Robot, tiny_models_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    config = tmp_path / "memory.yaml"
    config.write_text(CONFIG.format(path=db))
    first = AllInOneProcess(config)
    try:
        tester.play_into(first, SPLIT)
    finally:
        out = first.stop()
    assert first.proc.returncode == 0, out[-3000:]
    assert "recording the spatial memory of 'robot'" in out
    with SqliteMemoryStore(db) as store:
        before = {r.stamp for r in store.latest("robot", 1000)}
        assert all(r.pose_source == "odometry" for r in store.latest("robot", 1000))
    assert len(before) >= 2

    second = AllInOneProcess(config)
    try:
        tester.play_into(second, None)
        stats = tester.memory()
        assert stats.rows > len(before) and stamp_to_sec(stats.first_stamp) == min(before)
        r = call(tester.query, SpatialQuery.Request(
            question="What did I see at the start?", options=["A. a wall", "B. a door"],
            scope="memory"), timeout=120)
        assert r.success, r.error
        used = [stamp_to_sec(f.stamp) for f in r.memory_frames]
        assert set(used) & before, "no frame from before the restart was read"
        assert max(used) > max(before)  # and the newest, recorded after it
        assert min(used) == min(before)
        first_frame = r.memory_frames[0]
        assert first_frame.age_sec == pytest.approx(max(used) - min(before), abs=1e-3)
        assert any(reason.startswith("time:at the start") for reason in first_frame.reasons)
    finally:
        out = second.stop()
    assert second.proc.returncode == 0, out[-3000:]

"""The memory outlives the process: a synthetic world's bag played into ``python -m
embodied_r_ros`` with ``memory.enabled``, the process stopped and started again, the rest of
the bag played, and a ``scope: memory`` question over the real service reads frames recorded
before the restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ros_helpers import AllInOneProcess, BagRobot, call, require_ros, ros_context

require_ros()

from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.memory import SqliteMemoryStore  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402
from embodied_r_ros.sim.generate import generate_world  # noqa: E402
from embodied_r_ros.sim.world import WorldSpec  # noqa: E402

SECONDS = 30.0
SPLIT = 15.0  # seconds of the bag played before the restart
CONFIG = """base: offline
cache: {{enabled: false}}
reasoning: {{model: {{model: tiny-qwen2, max_new_tokens: 8}}}}
memory: {{enabled: true, path: "{path}", embedder: "off"}}
"""


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("world")
    paths = generate_world(WorldSpec(seed=11, frames=int(SECONDS * 10), width=320, height=240),
                           root / "world", 0, video=False,
                           decides=None)
    assert paths.bag is not None
    return paths.bag


@pytest.fixture()
def tester(bag: Path) -> Iterator[BagRobot]:
    with ros_context(__name__) as ctx:
        t = BagRobot(ctx, bag, ["/camera/image_raw", "/odom"])
        yield t
        t.stop()


def test_memory_questions_read_frames_from_before_a_restart(
        tester: BagRobot, tiny_models_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    config = tmp_path / "memory.yaml"
    config.write_text(CONFIG.format(path=db))
    first = AllInOneProcess(config, __name__)
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

    second = AllInOneProcess(config, __name__)
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

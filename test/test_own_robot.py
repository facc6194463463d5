"""Training on the robot's own recording: the LM sees the same prompt in training as on the robot.

One synthetic world's bag stands in for a recording (camera + ``/odom``), built once; a copy
with a 3 s odometry gap is played into the all-in-one (real rclpy over Fast DDS on loopback)
and the same window is built by ``embodied-r-train build``: the prompt the reasoning LM got
(``reasoning/prompts`` debug topic) is byte for byte the dataset row's ``prompt``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import AllInOne, require_ros, ros_context, wait_until

require_ros()

from embodied_r_training.cli import main  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from embodied_r_ros.ros_player import BagPlayer  # noqa: E402
from embodied_r_ros.sim.generate import generate_world  # noqa: E402
from embodied_r_ros.sim.world import EPOCH_NS, WorldSpec  # noqa: E402

SEED = 23
FRAMES = 220  # 22 s at 10 Hz
GAP = (8.05, 11.05)  # seconds from the bag start without odometry (3 s: under the stamp gate)
#: geometric perception (the offline profile's) and the tiny random LM: the prompt is the point
CONFIG = """base: offline
cache: {enabled: false}
reasoning: {model: {model: tiny-qwen2, max_new_tokens: 8}}
"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The world's bag (camera, camera info, odometry at every frame), rendered once."""
    root = tmp_path_factory.mktemp("robot")
    paths = generate_world(WorldSpec(seed=SEED, frames=FRAMES, width=320, height=240),
                           root / "world", 0, video=False)
    assert paths.bag is not None
    return paths.bag


def without_odometry(bag: Path, out: Path, gap: tuple[float, float]) -> Path:
    """A copy of ``bag`` whose ``/odom`` messages inside ``gap`` (seconds) are gone."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    lo, hi = (EPOCH_NS + round(t * 1e9) for t in gap)
    store = get_typestore(Stores.ROS2_JAZZY)
    with AnyReader([bag]) as reader, Writer(out, version=8) as writer:
        conns = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=store)
                 for c in reader.connections}
        for conn, stamp, raw in reader.messages():
            if conn.topic == "/odom" and lo <= stamp <= hi:
                continue
            writer.write(conns[conn.id], stamp, raw)
    return out


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "robot.yaml"
    path.write_text(CONFIG)
    return path


class Robot(AllInOne):
    """The all-in-one with reliable camera QoS, listening to the LM's prompts."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx, parameters=[Parameter("image_qos", value="reliable")])
        self.prompts: list[str] = []
        self.tester.create_subscription(String, f"{self.ns}/reasoning/prompts",
                                        lambda m: self.prompts.append(m.data), 10)
        wait_until(lambda: self.by_name["reasoning"]._prompts.get_subscription_count() > 0,
                   what="the prompt subscription")

    def play(self, bag: Path) -> None:
        """Play ``bag`` frame by frame, each frame awaited (nothing is lost, no sleeping)."""
        player = BagPlayer(self.tester, bag, topics=["/camera/image_raw", "/odom"],
                           remap={"/camera/image_raw": f"{self.ns}/image",
                                  "/odom": f"{self.ns}/odom"}, rate=1000.0)
        try:
            assert player.wait_for_subscribers(f"{self.ns}/image", 10)
            assert player.wait_for_subscribers(f"{self.ns}/odom", 10)
            odom = player.info.counts["/odom"]
            for i in range(FRAMES):
                player.play(until_sec=i / 10 + 0.05)
                wait_until(lambda i=i: self.store.stats.received >= i + 1, what=f"frame {i}")
            wait_until(lambda: self.store.stats.poses >= odom, what="the odometry")
        finally:
            player.close()


@pytest.fixture(scope="module")
def robot(config_file: Path, tiny_models_dir: Path) -> Iterator[Robot]:
    args = ["--ros-args", "-p", f"config_file:={config_file}"]
    with ros_context(__name__, args) as ctx:
        r = Robot(ctx)
        yield r
        r.stop()


def _ns(stamp: Any) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def test_the_robot_and_build_prompt_the_lm_byte_for_byte_across_an_odometry_gap(
    recording: Path, config_file: Path, robot: Robot, tmp_path: Path
) -> None:
    gappy = without_odometry(recording, tmp_path / "gappy", GAP)
    robot.play(gappy)
    question, options = "Which way did I turn?", ["A. left", "B. right", "C. neither"]
    res = robot.ask(question, options)
    assert res.success, res.error
    wait_until(lambda: len(robot.prompts) == 1, what="the LM's prompt")
    served = robot.prompts[0]

    stamps = [_ns(s) for s in res.key_frame_stamps]
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({
        "id": "q0", "question": question, "options": options, "answer": "A",
        "category": "action_generation", "stamp_start_ns": stamps[0],
        "stamp_end_ns": stamps[-1]}) + "\n")
    out = tmp_path / "ds"
    assert main(["build", "--bag", str(gappy), "--questions", str(questions), "--image-topic",
                 "/camera/image_raw", "--odom-topic", "/odom", "--config", str(config_file),
                 "--out", str(out), "--split-by", "question", "--folds", "0", "--val-frac",
                 "0", "--test-frac", "0", "--no-progress"]) == 0
    (row,) = [json.loads(line) for line in (out / "data.jsonl").open()]
    assert [round(s * 1e9) for s in row["key_frame_stamps"]] == stamps
    assert json.dumps(row["prompt"]) == served  # what the robot asked is what trains
    # the gap is bridged as the robot bridges it (visually), the rest is odometry in metres
    sources = [f.get("motion_source") for f in row["frames"][1:]]
    inside = [GAP[0] + 0.2 < (s - EPOCH_NS) / 1e9 < GAP[1] - 0.2 for s in stamps]
    gap_pairs = [i for i in range(len(stamps) - 1) if inside[i] or inside[i + 1]]
    assert gap_pairs and all(sources[i] == "visual" for i in gap_pairs), (sources, gap_pairs)
    assert "visual" in sources and "odometry" in sources, sources

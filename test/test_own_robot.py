"""Training on the robot's own recording: the LM sees the same prompt in training as on the robot.

One synthetic world's bag stands in for a recording (camera + ``/odom``), built once; a copy
with a 3 s odometry gap is played into the all-in-one (real rclpy over Fast DDS on loopback)
and the same window is built by ``embodied-r-train build``: the prompt the reasoning LM got
(``reasoning/prompts`` debug topic) is byte for byte the dataset row's ``prompt``. The README's
"train on your own bags" recipe runs on the same bag, and the robot answers with its export.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ros_helpers import DISCOVERY_SEC, AllInOne, require_ros, result_of, ros_context, wait_until

require_ros()

from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from embodied_r_ros.core.perception_text import written_age  # noqa: E402
from embodied_r_ros.ros_player import BagPlayer  # noqa: E402
from embodied_r_ros.sim.generate import generate_world  # noqa: E402
from embodied_r_ros.sim.world import EPOCH_NS, WorldSpec  # noqa: E402
from embodied_r_training.cli import main  # noqa: E402

pytestmark = pytest.mark.costly(45)  # seconds of one worker: started early

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
                           root / "world", 0, video=False,
                           decides=None)
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
        self.ctx = ctx
        self.prompts: list[str] = []
        self.tester.create_subscription(String, f"{self.ns}/reasoning/prompts",
                                        lambda m: self.prompts.append(m.data), 10)
        wait_until(lambda: self.by_name["reasoning"]._prompts.get_subscription_count() > 0,
                   what="the prompt subscription")

    def play(self, bag: Path) -> None:
        play(self, bag, FRAMES)


def play(into: AllInOne, bag: Path, frames: int) -> None:
    """Play the first ``frames`` frames of ``bag`` (and its odometry) into an all-in-one, each
    frame awaited (nothing is lost, no sleeping)."""
    player = BagPlayer(into.tester, bag, topics=["/camera/image_raw", "/odom"],
                       remap={"/camera/image_raw": f"{into.ns}/image",
                              "/odom": f"{into.ns}/odom"}, rate=1000.0)
    try:
        assert player.wait_for_subscribers(f"{into.ns}/image", 10)
        assert player.wait_for_subscribers(f"{into.ns}/odom", 10)
        poses = 0
        for i in range(frames):
            poses += player.play(until_sec=i / 10 + 0.05) - 1
            wait_until(lambda i=i: into.store.stats.received >= i + 1, what=f"frame {i}")
        wait_until(lambda: into.store.stats.poses >= poses, what="the odometry")
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
    # the frame ages are part of it: each line's age is its stamp's distance to the last one
    ages = [int(a) for a in re.findall(r"Frame \d+ \((\d+) s before the last key frame\)",
                                       row["prompt"][1]["content"])]
    assert ages == [written_age((stamps[-1] - s) / 1e9) for s in stamps]
    assert ages[0] >= 2 and ages[-1] == 0
    # the gap is bridged as the robot bridges it (visually), the rest is odometry in metres
    sources = [f.get("motion_source") for f in row["records"]["frames"][1:]]
    inside = [GAP[0] + 0.2 < (s - EPOCH_NS) / 1e9 < GAP[1] - 0.2 for s in stamps]
    gap_pairs = [i for i in range(len(stamps) - 1) if inside[i] or inside[i + 1]]
    assert gap_pairs and all(sources[i] == "visual" for i in gap_pairs), (sources, gap_pairs)
    assert "visual" in sources and "odometry" in sources, sources


def test_from_a_recording_to_a_trained_reasoner_answering_on_the_robot(
    recording: Path, config_file: Path, robot: Robot, tmp_path: Path, tiny_models_dir: Path,
) -> None:
    """The README's recipe, run as written: questions -> build -> sft -> grpo -> export on the
    world's bag with the tiny models; then the all-in-one (a second instance in this process,
    under /mine) answers with the export."""
    import torch
    from doc_recipes import recipes, run
    from safetensors.torch import load_file

    from embodied_r_interfaces.action import Reason
    from embodied_r_ros.core.reasoning import parse_reasoning
    from embodied_r_training.rl.policy import local_model

    train_config = tmp_path / "train.yaml"  # the tiny model, one step each, on four rows
    train_config.write_text("base: cpu-tiny\ndata: {max_rows: 4}\nsft: {max_steps: 1}\n"
                            "grpo: {max_steps: 1}\n")
    work, home = tmp_path / "work", tmp_path / "home"
    home.mkdir()
    output = run(recipes()["own-robot"], {
        "BAG": str(recording), "CAMERA_TOPIC": "/camera/image_raw", "ODOM_TOPIC": "/odom",
        "PROFILE": str(config_file), "TRAIN_CONFIG": str(train_config), "QUESTIONS": "10",
        "WORK": str(work), "NAME": "robot-r"}, home, timeout=240)
    assert "exported robot-r" in output
    exported = work / "robot-r.yaml"
    written = yaml.safe_load(exported.read_text())  # the robot's config with the new model
    assert written["base"] == str(config_file)
    assert written["reasoning"] == {"model": {"model": "robot-r"}}

    # the robot's config extends the printed one (no cache under ~/.cache, short replies; on
    # transformers, whose weights can be compared with the base model's below: the offline
    # profile's llama.cpp engine would serve a converted copy of the same export)
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"base: {exported}\ncache: {{enabled: false}}\n"
                    "reasoning: {model: {backend: transformers, max_new_tokens: 8}}\n")
    other = AllInOne(robot.ctx, namespace="/mine",
                     parameters=[Parameter("config_file", value=str(mine)),
                                 Parameter("image_qos", value="reliable")])
    try:
        lm = other.by_name["reasoning"].pipeline.lm
        assert lm.model_id == "robot-r"
        assert Path(lm.model.name_or_path) == tiny_models_dir / "robot-r"
        play(other, recording, 40)  # 4 s of camera are enough for a window
        res = other.ask("Which way did I turn?", ["A. left", "B. right"])
        assert res.success, res.error
        # the answer is the exported model's own, greedy, on the prompt the robot built
        pipeline = other.by_name["reasoning"].pipeline
        raw = lm.complete([pipeline.reasoning_messages(res.perception)])[0].text
        mine_says = parse_reasoning(raw, ["A. left", "B. right"], "tag")
        assert (res.answer, res.reasoning) == (mine_says.answer, mine_says.think)
        # and over ROS the reasoning node's raw reply is that model's, not the base model's
        client = other.spinner.action_client(Reason, "/mine/reasoning/reason")
        assert client.wait_for_server(timeout_sec=DISCOVERY_SEC)
        goal = Reason.Goal(perception=res.perception, options=["A. left", "B. right"])
        handle = result_of(client.send_goal_async(goal))
        result = result_of(handle.get_result_async()).result
        assert result.success and result.raw == raw
        # what it serves is the trained weights, not the base model's
        served = lm.model.state_dict()
        base = load_file(Path(local_model("tiny-qwen2")) / "model.safetensors")
        assert any(not torch.equal(served[k], base[k]) for k in base)
    finally:
        other.stop()

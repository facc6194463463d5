"""The project's bag player (no ``ros2 bag play`` on the pip route) and the demo driving it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bagdata import FPS, T0_NS, write_bag, write_questions
from media import pan_frames
from ros_helpers import LOCALHOST_ENV, Spinner, domain_id, require_ros, ros_context, wait_until

require_ros()

import rclpy  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_ros.nodes.conversions import image_to_rgb, stamp_to_sec  # noqa: E402
from embodied_r_ros.ros_player import BagPlayer  # noqa: E402

N = 12
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bag(tmp_path_factory.mktemp("bags") / "pan", n_frames=N)


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def env() -> dict[str, str]:
    return {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__))}


def test_plays_in_segments_at_the_requested_rate(ctx: Any, bag: Path) -> None:
    node = rclpy.create_node("listener", context=ctx)
    images: list[Image] = []
    odoms: list[Odometry] = []
    node.create_subscription(Image, "/p/image", images.append, RELIABLE)
    node.create_subscription(Odometry, "/odom", odoms.append, RELIABLE)
    player_node = rclpy.create_node("player", context=ctx)
    player = BagPlayer(player_node, bag, topics=["/camera/image_raw", "/odom"],
                       remap={"/camera/image_raw": "/p/image"}, rate=8.0)
    spinner = Spinner(ctx, [node, player_node])
    try:
        assert player.info.counts == {"/camera/image_raw": N, "/odom": N}
        assert player.wait_for_subscribers("/p/image", 10) and player.wait_for_subscribers(
            "/odom", 10)
        t0 = time.monotonic()
        assert player.play(until_sec=1.0) == 2 * 5  # frames at 0, .25, .5, .75, 1.0 s
        assert time.monotonic() - t0 >= 1.0 / 8.0  # paced: 1 s of bag at 8x
        wait_until(lambda: len(images) == 5, what="the first segment")
        assert player.play() == 2 * (N - 5)
        wait_until(lambda: len(images) == N and len(odoms) == N, what="the rest")
        stamps = [stamp_to_sec(m.header.stamp) for m in images]
        assert stamps == [T0_NS / 1e9 + i / FPS for i in range(N)]
        frames = pan_frames(N, 12, (160, 120))
        assert all(np.array_equal(image_to_rgb(m), f) for m, f in zip(images, frames,
                                                                        strict=True))
        assert player.play() == 0  # at the end
        player.seek(0.0)
        assert player.play(until_sec=0.0) == 2
    finally:
        player.close()
        spinner.stop()


def test_player_command_line(ctx: Any, bag: Path) -> None:
    node = rclpy.create_node("cli_listener", context=ctx)
    images: list[Image] = []
    node.create_subscription(Image, "/p2/image", images.append, RELIABLE)
    spinner = Spinner(ctx, [node])
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "embodied_r_ros.ros_player", str(bag), "--rate", "20",
             "--topics", "/camera/image_raw", "--remap", "/camera/image_raw:=/p2/image",
             "--start", "1.0"],
            env=env(), capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        wait_until(lambda: len(images) == N - 4, what="frames from 1 s on")
        bad = subprocess.run([sys.executable, "-m", "embodied_r_ros.ros_player", str(bag),
                              "--topics", "/nope"], env=env(), capture_output=True, text=True,
                             timeout=60)
        assert bad.returncode == 2 and "topics not in the bag: /nope" in bad.stderr
    finally:
        spinner.stop()


def test_demo_asks_the_questions_over_the_service(tiny_models_dir: Path, tmp_path: Path) -> None:
    world = tmp_path / "world"
    write_bag(world / "bag", n_frames=24)
    write_questions(world / "questions.jsonl", n=2)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("base: tiny\ncache: {enabled: false}\nperception: {vlm: {max_new_tokens: 4}}\n"
                   "reasoning: {model: {max_new_tokens: 4}}\n")
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_r_ros.demo", "--profile", "tiny", "--config", str(cfg),
         "--world", str(world), "--rate", "4", "--settle", "0.3", "--json", str(out)],
        env=env(), capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["id"] for r in rows] == ["q0", "q1"]
    assert all(r["error_code"] == "" and r["key_frames"] >= 4 for r in rows)
    assert all(r["truth"] == t for r, t in zip(rows, "AB", strict=True))
    assert "Accuracy: " in proc.stdout and "STAND-INS" in proc.stdout
    assert "perception" in proc.stdout and "reasoning" in proc.stdout

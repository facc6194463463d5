"""The perception node places grounded objects with the camera's own intrinsics: it subscribes
to ``camera_info`` where grounding is on and the config names none, and a Perceive goal over
DDS grounds with the field of view's guess before a CameraInfo arrives and with the CameraInfo
(scaled to the key frames) after; intrinsics in the config win, and no subscription is made."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros_helpers import (
    DISCOVERY_SEC,
    Spinner,
    require_ros,
    result_of,
    ros_context,
    wait_until,
    write_config,
)
from scripted import GroundingVLM

require_ros()

from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CameraInfo  # noqa: E402

from embodied_r_interfaces.action import Perceive  # noqa: E402
from embodied_r_interfaces.msg import EgoMotion  # noqa: E402
from embodied_r_ros.core.images import encode_jpeg  # noqa: E402
from embodied_r_ros.nodes.conversions import jpeg_to_compressed  # noqa: E402
from embodied_r_ros.nodes.perception_node import PerceptionNode  # noqa: E402

NS = "/grounding"


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def _node(ctx: Any, tmp_path: Path, name: str, camera: str = "") -> PerceptionNode:
    cfg = write_config(tmp_path / f"{name}.yaml", "base: tiny\ncache: {enabled: false}\n"
                       f"perception: {{grounding: {{mode: request}}{camera}}}\n")
    node = PerceptionNode(name, context=ctx, namespace=NS, parameter_overrides=[
        Parameter("config_file", value=cfg), Parameter("subscribe_frames", value=False)])
    node.start()  # configure (the tiny VLM loads) and activate
    return node


def _camera_info() -> CameraInfo:
    """A 60-degree camera calibrated at 1280 x 720."""
    fx = 640 / math.tan(math.radians(30))
    return CameraInfo(width=1280, height=720, k=[fx, 0.0, 639.5, 0.0, fx, 359.5, 0.0, 0.0, 1.0])


def test_the_node_grounds_with_the_camera_info_it_receives(
        ctx: Any, tiny_models_dir: Path, tmp_path: Path) -> None:
    node = _node(ctx, tmp_path, "perception_grounding")
    tester = Node("grounding_tester", context=ctx)
    spinner = Spinner(ctx, [node, tester])
    try:
        perceiver = node.pipeline.perceiver
        # a VLM that boxes the whole image, as the tiny profile sends it (64 px)
        perceiver.vlm = GroundingVLM([(0.0, 0.0, 1.0, 1.0, "wall")], max_side=64)
        results: list[Any] = []
        describe = perceiver.describe
        perceiver.describe = lambda *a, **k: results.append(describe(*a, **k)) or results[-1]
        client = spinner.action_client(Perceive, f"{NS}/perception_grounding/perceive")
        assert client.wait_for_server(timeout_sec=DISCOVERY_SEC)
        frames = [jpeg_to_compressed(encode_jpeg(np.full((72, 128, 3), v, np.uint8)), t)
                  for t, v in ((1.0, 40), (2.0, 200))]
        goal = Perceive.Goal(question="Where is the wall?", options=["A. left", "B. right"],
                             key_frames=frames, motions=[EgoMotion(valid=False)])

        def extents() -> list[float]:
            handle = result_of(client.send_goal_async(goal), 30)
            outcome = result_of(handle.get_result_async(), 60)
            assert outcome.result.success, outcome.result.error
            return [o.extent_deg for f in results[-1].frames for o in f.objects]

        assert extents() == pytest.approx([70.0, 70.0])  # the configured field of view
        publisher = tester.create_publisher(CameraInfo, f"{NS}/camera_info",
                                            qos_profile_sensor_data)
        info = _camera_info()

        def received() -> bool:
            publisher.publish(info)
            return perceiver.camera is not None

        wait_until(received, DISCOVERY_SEC, "the node to take the CameraInfo")
        assert (perceiver.camera.width, perceiver.camera.height) == (1280, 720)
        assert extents() == pytest.approx([60.0, 60.0])  # the camera's own, scaled
        assert tester.count_subscribers(f"{NS}/camera_info") == 1
    finally:
        spinner.stop()


def test_intrinsics_in_the_config_win_and_nothing_is_subscribed(
        ctx: Any, tiny_models_dir: Path, tmp_path: Path) -> None:
    node = _node(ctx, tmp_path, "perception_configured", ", camera: {fx: 300.0}")
    try:
        assert node.pipeline is not None
        assert node.count_subscribers(f"{NS}/camera_info") == 0
    finally:
        node.close()
        node.destroy_node()

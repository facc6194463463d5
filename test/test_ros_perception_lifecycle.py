"""Deactivating the perception node mid-goal: the client gets BACKEND_DOWN
(not its own CANCELLED), and the backend is not left looking unhealthy by the stop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros_helpers import (
    DISCOVERY_SEC,
    ChatGate,
    Spinner,
    require_ros,
    result_of,
    ros_context,
    write_config,
)

require_ros()

from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from embodied_r_interfaces.action import Perceive  # noqa: E402
from embodied_r_interfaces.msg import EgoMotion  # noqa: E402
from embodied_r_ros.core.images import encode_jpeg  # noqa: E402
from embodied_r_ros.nodes.conversions import jpeg_to_compressed  # noqa: E402
from embodied_r_ros.nodes.model_node import SUCCESS  # noqa: E402
from embodied_r_ros.nodes.perception_node import PerceptionNode  # noqa: E402


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def test_deactivating_the_perception_node_mid_goal_is_backend_down(
    ctx: Any, tiny_vlm: Any, tmp_path: Path
) -> None:
    gate = ChatGate(tiny_vlm, open_=False)
    cfg = write_config(tmp_path / "gate.yaml", f"""base: tiny
perception:
  vlm: {{backend: openai, model: tiny-qwen2.5-vl, base_url: "{gate.url}", retries: 0,
        max_new_tokens: 4}}
cache: {{enabled: false}}
""")
    node = PerceptionNode("perception_mid_goal", context=ctx, parameter_overrides=[
        Parameter("config_file", value=cfg), Parameter("autostart", value=False)])
    tester = Node("perception_deactivate_tester", context=ctx)
    spinner = Spinner(ctx, [node, tester])
    try:
        assert node.trigger_configure() == SUCCESS and node.trigger_activate() == SUCCESS
        client = spinner.action_client(Perceive, "/perception_mid_goal/perceive")
        assert client.wait_for_server(timeout_sec=DISCOVERY_SEC)
        frames = [jpeg_to_compressed(encode_jpeg(np.full((48, 64, 3), v, np.uint8)), t)
                  for t, v in ((1.0, 40), (2.0, 200))]
        goal = Perceive.Goal(question="Which way did I turn?", options=["A. left", "B. right"],
                             key_frames=frames, motions=[EgoMotion(valid=False)])
        handle = result_of(client.send_goal_async(goal), 30)
        gate.wait_requests(1)  # the VLM has the first call
        assert node.trigger_deactivate() == SUCCESS
        outcome = result_of(handle.get_result_async(), 30)
        assert outcome.status == GoalStatus.STATUS_ABORTED
        assert outcome.result.error_code == "BACKEND_DOWN", outcome.result.error
        assert "deactivated" in outcome.result.error
        # the stop was the node's, not the server's: reactivated, the backend reads healthy
        gate.open()
        assert node.trigger_activate() == SUCCESS
        model, healthy, error = node.backend_status()
        assert model == "tiny-qwen2.5-vl" and healthy, error
    finally:
        gate.close()
        spinner.stop()

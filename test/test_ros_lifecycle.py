"""Managed nodes that are managed: the profile is read on configure (a bad one fails that
transition, a changed one is picked up after cleanup), deactivation ends goals in flight with
BACKEND_DOWN, cleanup frees the model only once they have ended, a failing heartbeat is logged
and keeps beating, and a stopping query server answers BACKEND_DOWN."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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

from embodied_r_interfaces.action import Reason  # noqa: E402
from embodied_r_ros.agent.guard import Heartbeat  # noqa: E402
from embodied_r_ros.agent.query_runner import QueryRequest, QueryRunner  # noqa: E402
from embodied_r_ros.nodes.model_node import FAILURE, SUCCESS  # noqa: E402
from embodied_r_ros.nodes.reasoning_node import ReasoningNode  # noqa: E402


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def _node(ctx: Any, name: str, **params: str) -> ReasoningNode:
    overrides = [Parameter(k, value=v) for k, v in params.items()]
    overrides.append(Parameter("autostart", value=False))
    return ReasoningNode(name, context=ctx, parameter_overrides=overrides)


def test_a_bad_profile_fails_configure_and_a_fixed_one_loads(
    ctx: Any, tiny_models_dir: Path, tmp_path: Path
) -> None:
    node = _node(ctx, "bad_profile", profile="no-such-profile")  # constructing it is fine
    try:
        assert node.state_label == "unconfigured" and node.config is None
        assert node.trigger_configure() == FAILURE
        assert "no-such-profile" in node.load_error and node.pipeline is None
        node.set_parameters([Parameter("profile", value="tiny")])
        assert node.trigger_configure() == SUCCESS
        assert node.config is not None and node.config.name == "tiny"
        assert node.state_label == "inactive" and node.pipeline is not None
        # cleanup -> configure reads the parameters again
        assert node.trigger_cleanup() == SUCCESS and node.pipeline is None
        changed = write_config(tmp_path / "changed.yaml", "base: tiny\nname: changed\n")
        node.set_parameters([Parameter("profile", value=""),
                             Parameter("config_file", value=changed)])
        assert node.trigger_configure() == SUCCESS and node.config.name == "changed"
    finally:
        node.close()
        node.destroy_node()


def test_cleanup_frees_the_model_only_after_goals_in_flight_end(
    ctx: Any, tiny_models_dir: Path
) -> None:
    node = _node(ctx, "cleanup_waits", profile="tiny")
    try:
        assert node.trigger_configure() == SUCCESS
        goal = SimpleNamespace(goal_id=SimpleNamespace(uuid=bytes(16)))
        node.goals.open(goal)  # a goal whose work has not ended yet
        cleanup = threading.Thread(target=node.trigger_cleanup)
        cleanup.start()
        cleanup.join(timeout=0.5)
        assert cleanup.is_alive() and node.pipeline is not None  # still waiting for it
        node.goals.close(goal)
        cleanup.join(timeout=30)
        assert not cleanup.is_alive() and node.pipeline is None
    finally:
        node.close()
        node.destroy_node()


def test_deactivating_mid_goal_ends_it_with_backend_down(
    ctx: Any, tiny_lm: Any, tmp_path: Path
) -> None:
    gate = ChatGate(tiny_lm, open_=False)
    cfg = write_config(tmp_path / "gate.yaml", f"""base: tiny
reasoning:
  model: {{backend: openai, model: tiny-qwen2, base_url: "{gate.url}", retries: 0,
          max_new_tokens: 4}}
""")
    node = _node(ctx, "deactivate_mid_goal", config_file=cfg)
    tester = Node("deactivate_tester", context=ctx)
    spinner = Spinner(ctx, [node, tester])
    try:
        assert node.trigger_configure() == SUCCESS and node.trigger_activate() == SUCCESS
        client = spinner.action_client(Reason, "/deactivate_mid_goal/reason")
        assert client.wait_for_server(timeout_sec=DISCOVERY_SEC)
        handle = result_of(client.send_goal_async(
            Reason.Goal(perception="Question: where?\nChoices:\nA. left\nB. right",
                        options=["A. left", "B. right"])), 30)
        gate.wait_requests(1)  # the LM has it
        assert node.trigger_deactivate() == SUCCESS
        outcome = result_of(handle.get_result_async(), 30)
        assert outcome.status == GoalStatus.STATUS_ABORTED
        assert outcome.result.error_code == "BACKEND_DOWN"
        assert "deactivated" in outcome.result.error
    finally:
        gate.close()
        spinner.stop()


def test_a_failing_heartbeat_is_logged_and_keeps_beating(
    caplog: pytest.LogCaptureFixture,
) -> None:
    beats: list[int] = []
    done = threading.Event()

    def beat() -> None:
        beats.append(len(beats))
        if len(beats) <= 2:
            raise RuntimeError("publisher gone")
        if len(beats) >= 5:
            done.set()

    with caplog.at_level(logging.WARNING), Heartbeat(beat, period_sec=0.01) as hb:
        assert done.wait(10)
    assert hb.failures == 2
    assert sum("publisher gone" in r.getMessage() for r in caplog.records) == 2


def test_a_stopping_query_server_answers_backend_down() -> None:
    runner = QueryRunner(engine=None, cameras=["front"])  # type: ignore[arg-type]
    runner.close()
    outcome = runner.run(QueryRequest(question="Which way?"))
    assert (outcome.success, outcome.error_code) == (False, "BACKEND_DOWN")

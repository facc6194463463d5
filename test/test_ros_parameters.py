"""Parameters on running nodes: those safe to change take effect at once, set over ROS like
``ros2 param set`` does; the parameter callback refuses unsafe values with a reason, and
read-only parameters stay as they were. With several cameras every frame buffer of the
all-in-one starts from the presets' ``frame_buffer`` section."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ros_helpers import Spinner, call, require_ros, result_of, ros_context, wait_until

require_ros()

import rclpy  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.callback_groups import ReentrantCallbackGroup  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402

from embodied_r_interfaces.srv import GetWindow, SpatialQuery  # noqa: E402
from embodied_r_ros.core.error_codes import BUSY, NO_FRAMES, QUESTION_TOO_LONG  # noqa: E402
from embodied_r_ros.nodes.allinone import build_nodes  # noqa: E402
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402
from embodied_r_ros.nodes.query_server import QueryServerNode  # noqa: E402
from embodied_r_ros.nodes.transport import QUERY_QOS  # noqa: E402

NS = "/params"


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def set_param(client: AsyncParameterClient, name: str, value: Any) -> Any:
    """Set one parameter over ROS; the service's result (successful, reason)."""
    (result,) = result_of(client.set_parameters([Parameter(name, value=value)]), 30).results
    return result


def test_a_running_query_server_takes_new_limits_and_refuses_unsafe_ones(ctx: Any) -> None:
    server = QueryServerNode("limits_server", context=ctx, namespace=NS, parameter_overrides=[
        Parameter("backend_wait_sec", value=0.2), Parameter("window_timeout_sec", value=60.0)])
    tester = rclpy.create_node("limits_tester", context=ctx)
    gate, held = threading.Event(), threading.Event()

    def hold_window(_request: Any, response: Any) -> Any:  # a frame buffer that takes its time
        held.set()
        gate.wait(60)
        response.success, response.error_code, response.error = False, NO_FRAMES, "empty"
        return response

    tester.create_service(GetWindow, f"{NS}/frames/front/get_window", hold_window,
                          callback_group=ReentrantCallbackGroup())
    query = tester.create_client(SpatialQuery, f"{NS}/query", qos_profile=QUERY_QOS)
    params = AsyncParameterClient(tester, f"{NS}/limits_server")
    spinner = Spinner(ctx, [server, tester])
    try:
        assert params.wait_for_services(timeout_sec=30)
        above = set_param(params, "max_concurrent_queries", 3)
        assert not above.successful and "at most 2" in above.reason
        unknown = set_param(params, "default_camera", "rear")
        assert not unknown.successful and "not one of cameras" in unknown.reason
        assert not set_param(params, "cameras", ["front", "rear"]).successful  # read-only
        assert not set_param(params, "max_question_chars", 0).successful  # out of range
        assert server.get_parameter("cameras").value == ["front"]

        assert set_param(params, "max_concurrent_queries", 1).successful
        first = query.call_async(SpatialQuery.Request(question="Which way?"))
        assert held.wait(30), "the first query never asked for its window"
        busy = call(query, SpatialQuery.Request(question="Which way?"))
        assert busy.error_code == BUSY  # one slot now, and it is taken
        gate.set()
        assert result_of(first, 60).error_code == NO_FRAMES

        assert set_param(params, "max_question_chars", 10).successful
        long = call(query, SpatialQuery.Request(question="Which way did I turn?"))
        assert long.error_code == QUESTION_TOO_LONG and "at most 10 " in long.error
        assert server.params["max_question_chars"] == 10
    finally:
        gate.set()
        spinner.stop()


def test_diagnostics_period_and_window_anchor_change_on_a_running_frame_buffer(
    ctx: Any
) -> None:
    node = FrameBufferNode("anchor_buffer", context=ctx, namespace=NS, parameter_overrides=[
        Parameter("diagnostics_period_sec", value=60.0)])
    tester = rclpy.create_node("anchor_tester", context=ctx)
    mine: list[Any] = []
    name = node.get_fully_qualified_name()
    tester.create_subscription(DiagnosticArray, "/diagnostics", lambda m: mine.extend(
        s for s in m.status if s.hardware_id == name), 10)
    params = AsyncParameterClient(tester, name)
    spinner = Spinner(ctx, [node, tester])
    try:
        assert params.wait_for_services(timeout_sec=30)
        assert set_param(params, "diagnostics_period_sec", 0.1).successful
        wait_until(lambda: len(mine) >= 3, 10, "diagnostics at the new period, not in 60 s")

        assert set_param(params, "window_anchor", "clock").successful
        assert node.params["window_anchor"] == "clock"  # what the next window reads
        refused = set_param(params, "window_anchor", "sometimes")
        assert not refused.successful and "expected one of" in refused.reason
        assert node.params["window_anchor"] == "clock"
        assert not set_param(params, "buffer_sec", 10.0).successful  # sizes the store: read-only
    finally:
        spinner.stop()


def test_every_camera_of_the_allinone_starts_from_the_frame_buffer_presets(
    tiny_models_dir: Path, tmp_path: Path
) -> None:
    presets = tmp_path / "params.yaml"
    presets.write_text(
        "/**/query_server:\n  ros__parameters:\n    cameras: [front, rear]\n"
        "/**/frame_buffer:\n  ros__parameters:\n    buffer_sec: 111.0\n    jpeg_quality: 80\n"
        "/**/frame_buffer_rear:\n  ros__parameters:\n    buffer_sec: 222.0\n")
    args = ["--ros-args", "--params-file", str(presets), "-p", "profile:=tiny"]
    with ros_context(f"{__name__}.presets", args) as context:
        nodes = build_nodes(context, namespace=NS)
        try:
            buffers = {n.get_name(): n for n in nodes if isinstance(n, FrameBufferNode)}
            assert set(buffers) == {"frame_buffer_front", "frame_buffer_rear"}
            values = {name: {k: b.get_parameter(k).value for k in
                             ("camera_name", "buffer_sec", "jpeg_quality")}
                      for name, b in buffers.items()}
            assert values == {
                "frame_buffer_front": {"camera_name": "front", "buffer_sec": 111.0,
                                       "jpeg_quality": 80},
                "frame_buffer_rear": {"camera_name": "rear", "buffer_sec": 222.0,
                                      "jpeg_quality": 80},
            }
            assert buffers["frame_buffer_rear"].store.buffer_sec == 222.0  # in use
            assert context.ok()
            assert "frame_buffer" not in {n.get_name() for n in nodes}
        finally:
            for node in reversed(nodes):
                getattr(node, "close", lambda: None)()
                node.destroy_node()

"""Processes as users start them: ``python -m embodied_r_ros --ros-args ...``, the per-node
executables, the console scripts the launch file names, and the launch file itself."""

from __future__ import annotations

import ast
import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from media import pan_frames
from ros_helpers import (
    LOCALHOST_ENV,
    Spinner,
    call,
    domain_id,
    image_msg,
    require_ros,
    ros_context,
    wait_until,
)

require_ros()

import rclpy  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.exceptions import (  # noqa: E402
    InvalidParameterTypeException,
    InvalidParameterValueException,
)
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.nodes import frame_buffer, query_server  # noqa: E402
from embodied_r_ros.nodes.params import (  # noqa: E402
    AUTOSTART_SPEC,
    CONFIG_SPECS,
    DIAGNOSTICS_SPEC,
    Spec,
    declare,
)

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "launch" / "embodied_r.launch.py"


def env() -> dict[str, str]:
    return {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__))}


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def test_allinone_process_takes_ros_args_and_stops_cleanly(
    ctx: Any, tiny_models_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("base: tiny\ncache: {enabled: false}\nperception: {vlm: {max_new_tokens: 4}}\n"
                   "reasoning: {model: {max_new_tokens: 4}}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "embodied_r_ros", "--ros-args", "-p", "profile:=tiny",
         "-p", f"config_file:={cfg}", "-r", "image:=/camera/image_raw",
         "-p", "diagnostics_period_sec:=0.1"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    tester = rclpy.create_node("tester", context=ctx)
    key_frames: list[Image] = []
    tester.create_subscription(Image, "/embodied_r/frame_buffer/key_frames",
                               key_frames.append, 10)
    received = [0]

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == "embodied_r: camera front":
                values = {kv.key: kv.value for kv in status.values}
                received[0] = max(received[0], int(values["frames_received"]))

    tester.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
    pub = tester.create_publisher(Image, "/camera/image_raw", 10)
    client = tester.create_client(SpatialQuery, "/embodied_r/query")
    spinner = Spinner(ctx, [tester])
    try:
        assert client.wait_for_service(timeout_sec=120), "the all-in-one never came up"
        wait_until(lambda: pub.get_subscription_count() > 0, 30, "the remapped subscription")
        for i, frame in enumerate(pan_frames(8, 40)):  # each after the last has arrived
            pub.publish(image_msg(frame, 10.0 + i))
            wait_until(lambda i=i: received[0] > i, 30, f"frame {i} to arrive")
        wait_until(lambda: len(key_frames) >= 2, 30, "key frames from the remapped camera")
        r = call(client, SpatialQuery.Request(question="What is ahead?"))
        assert r.success, r.error
        assert 4 <= len(r.key_frame_stamps) <= 8
    finally:
        spinner.stop()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-2000:]
    assert "answering at /embodied_r/query" in out


BAD_CONFIGS = {
    "badurl.yaml": 'base: server\nperception: {vlm: {base_url: "not a url"}}\n',
    "keyed.yaml": "base: offline\nperception:\n  backend: vlm\n  vlm: {backend: openai, "
                  "model: m, base_url: 'http://127.0.0.1:9/v1', api_key_env: ER_NODE_KEY}\n",
    "nohub.yaml": "base: offline\nreasoning: {model: {model: Qwen/not-cached-anywhere}}\n",
}


@pytest.mark.parametrize(
    ("module", "args", "message"),
    [
        ("embodied_r_ros", ["-p", "profile:=no_such_profile"], "unknown profile"),
        ("embodied_r_ros.nodes.frame_buffer", ["-p", "buffer_sec:=-5.0"], "buffer_sec"),
        ("embodied_r_ros.nodes.query_server", ["-p", "cameras:=['']"], "cameras"),
        ("embodied_r_ros.nodes.reasoning_node", ["-p", "config_file:="], "invalid --ros-args"),
        ("embodied_r_ros", ["-p", "config_file:=CFG/badurl.yaml"], "perception.vlm.base_url"),
        ("embodied_r_ros", ["-p", "config_file:=CFG/keyed.yaml"], "ER_NODE_KEY"),
        ("embodied_r_ros.nodes.reasoning_node", ["-p", "config_file:=CFG/nohub.yaml"],
         "cannot load LM Qwen/not-cached-anywhere"),
    ],
)
def test_bad_configuration_exits_with_one_clear_line(module: str, args: list[str],
                                                     message: str, tmp_path: Path) -> None:
    for name, text in BAD_CONFIGS.items():
        (tmp_path / name).write_text(text)
    args = [a.replace("CFG", str(tmp_path)) for a in args]
    secret = "sk-node\n0123456789abcdef"
    proc = subprocess.run([sys.executable, "-m", module, "--ros-args", *args],
                          env={**env(), "ER_NODE_KEY": secret, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("embodied_r: ")]
    assert len(errors) == 1 and message in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "0123456789" not in proc.stderr


def test_frame_buffer_subscribes_to_what_the_launch_file_remaps(ctx: Any) -> None:
    from rclpy.parameter import Parameter
    from rclpy.qos import ReliabilityPolicy

    node = frame_buffer.FrameBufferNode(context=ctx, namespace="/lf")
    reliable = frame_buffer.FrameBufferNode(
        "reliable_buffer", context=ctx, namespace="/lf2",
        parameter_overrides=[Parameter("image_qos", value="reliable")],
    )
    try:
        subs = {s.topic_name: s.qos_profile.reliability for s in node.subscriptions}
        assert {"/lf/image", "/lf/image/compressed", "/lf/odom"} <= set(subs)
        assert subs["/lf/image"] == ReliabilityPolicy.BEST_EFFORT  # sensor-data QoS
        assert "/lf/frame_buffer/key_frames" in {p.topic_name for p in node.publishers}
        subs = {s.topic_name: s.qos_profile.reliability for s in reliable.subscriptions}
        assert subs["/lf2/image"] == ReliabilityPolicy.RELIABLE
    finally:
        node.destroy_node()
        reliable.destroy_node()


# -- the launch file, statically (launch/launch_ros are not on the package index) ------------


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]


def _console_scripts() -> dict[str, str]:
    tree = ast.parse((REPO / "setup.py").read_text())
    for call_ in _calls(tree, "setup"):
        for kw in call_.keywords:
            if kw.arg == "entry_points":
                scripts = ast.literal_eval(kw.value)["console_scripts"]
                return dict(s.replace(" ", "").split("=", 1) for s in scripts)
    raise AssertionError("setup.py has no console_scripts")


def test_launch_file_names_only_existing_executables_arguments_and_parameters() -> None:
    tree = ast.parse(LAUNCH.read_text())
    scripts = _console_scripts()
    executables = {c.args[0].value for c in (*_calls(tree, "node"), *_calls(tree, "managed"))}
    assert executables == {"embodied_r", "frame_buffer", "query_server", "perception_node",
                           "reasoning_node"}
    for exe in executables:
        assert exe in scripts, f"setup.py console_scripts lacks {exe!r}"
        module, func = scripts[exe].split(":")
        assert callable(getattr(importlib.import_module(module), func))
    declared = {c.args[0].value for c in _calls(tree, "DeclareLaunchArgument")}
    used = {c.args[0].value for c in _calls(tree, "LaunchConfiguration")}
    assert used <= declared and declared <= used, (used ^ declared)
    node_params = {s.name for s in (*frame_buffer.SPECS, *query_server.SPECS,
                                    *query_server.REMOTE_SPECS, *CONFIG_SPECS,
                                    DIAGNOSTICS_SPEC, AUTOSTART_SPEC)} | {"use_sim_time"}
    launch_params = {k.value for d in ast.walk(tree) if isinstance(d, ast.Dict)
                     for k in d.keys if isinstance(k, ast.Constant)}
    assert launch_params and launch_params <= node_params, launch_params - node_params


def _keywords(call_: ast.Call) -> dict[str, str]:
    return {k.arg: ast.unparse(k.value) for k in call_.keywords if k.arg}


def test_launch_file_drives_the_model_nodes_through_their_lifecycle() -> None:
    """Statically: separate mode starts the perception and reasoning nodes as launch_ros
    LifecycleNodes with autostart off, requests configure at once and activate when configure
    has succeeded (configuring -> inactive); the all-in-one and the other nodes stay plain."""
    from rclpy.lifecycle import LifecycleNode

    from embodied_r_ros.nodes.perception_node import PerceptionNode
    from embodied_r_ros.nodes.reasoning_node import ReasoningNode

    tree = ast.parse(LAUNCH.read_text())
    managed = {c.args[0].value: c.args[1].value for c in _calls(tree, "managed")}
    assert managed == {"perception_node": "perception", "reasoning_node": "reasoning"}
    assert issubclass(PerceptionNode, LifecycleNode) and issubclass(ReasoningNode, LifecycleNode)
    assert {c.args[0].value for c in _calls(tree, "node")} == {"embodied_r", "frame_buffer",
                                                              "query_server"}
    body = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and f.name == "managed")
    (lifecycle,) = _calls(body, "LifecycleNode")
    kw = _keywords(lifecycle)
    assert kw["name"] == "name" and kw["executable"] == "executable"
    assert kw["parameters"] == f"[*parameters, {{'{AUTOSTART_SPEC.name}': False}}]"
    (event,) = _calls(body, "ChangeState")
    assert _keywords(event)["lifecycle_node_matcher"] == "matches_action(lifecycle)"
    (handler,) = _calls(body, "OnStateTransition")
    kw = _keywords(handler)
    assert (kw["target_lifecycle_node"], kw["start_state"], kw["goal_state"]) == (
        "lifecycle", "'configuring'", "'inactive'")
    assert kw["entities"] == "[change(Transition.TRANSITION_ACTIVATE)]"
    returned = next(n for n in ast.walk(body) if isinstance(n, ast.Return))
    assert "change(Transition.TRANSITION_CONFIGURE)" in ast.unparse(returned)


def test_the_launch_files_transitions_bring_a_model_process_to_active(
    ctx: Any, tiny_models_dir: Path
) -> None:
    """What launch_ros does for the launch file, done by hand over ROS: a reasoning_node
    process with autostart off waits unconfigured; configure over its change_state service
    publishes configuring -> inactive on transition_event, and activate then makes it active."""
    from lifecycle_msgs.msg import State, Transition, TransitionEvent
    from lifecycle_msgs.srv import ChangeState, GetState

    ns = "/lifecycle_launch"
    proc = subprocess.Popen(
        [sys.executable, "-m", "embodied_r_ros.nodes.reasoning_node", "--ros-args",
         "-r", f"__ns:={ns}", "-p", "profile:=tiny", "-p", "autostart:=false"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    manager = rclpy.create_node("lifecycle_manager", context=ctx)
    events: list[TransitionEvent] = []
    manager.create_subscription(TransitionEvent, f"{ns}/reasoning/transition_event",
                                events.append, 10)
    change = manager.create_client(ChangeState, f"{ns}/reasoning/change_state")
    get_state = manager.create_client(GetState, f"{ns}/reasoning/get_state")
    spinner = Spinner(ctx, [manager])

    def state() -> int:
        return call(get_state, GetState.Request()).current_state.id

    def transition(tid: int) -> bool:
        return call(change, ChangeState.Request(transition=Transition(id=tid)), 300).success

    try:
        assert change.wait_for_service(timeout_sec=120), "the reasoning process never came up"
        assert state() == State.PRIMARY_STATE_UNCONFIGURED  # autostart off: it waits
        wait_until(lambda: manager.count_publishers(f"{ns}/reasoning/transition_event") > 0,
                   30, "the transition_event publisher")
        assert transition(Transition.TRANSITION_CONFIGURE)
        wait_until(lambda: any(e.start_state.label == "configuring"
                               and e.goal_state.label == "inactive" for e in list(events)),
                   30, "configuring -> inactive, the event the launch file activates on")
        assert transition(Transition.TRANSITION_ACTIVATE)
        assert state() == State.PRIMARY_STATE_ACTIVE
    finally:
        spinner.stop()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-2000:]


def test_ros_params_yaml_only_sets_declared_parameters() -> None:
    data = yaml.safe_load((REPO / "config" / "ros_params.yaml").read_text())
    specs = {
        "/**": {DIAGNOSTICS_SPEC.name},
        "/**/frame_buffer": {s.name for s in frame_buffer.SPECS},
        "/**/perception": {AUTOSTART_SPEC.name},
        "/**/reasoning": {AUTOSTART_SPEC.name},
        "/**/query_server": {s.name for s in (*query_server.SPECS, *query_server.REMOTE_SPECS)},
    }
    assert set(data) == set(specs)
    for section, names in specs.items():
        assert set(data[section]["ros__parameters"]) <= names, section


def test_the_presets_name_every_node_the_launch_file_and_the_allinone_create() -> None:
    """A section per node name: the launch file's (separate mode) and the all-in-one's (with
    one camera; with several, each frame_buffer_<camera> starts from the frame_buffer section:
    test_ros_parameters.py)."""
    import inspect

    from embodied_r_ros.nodes.allinone import frame_buffer_name
    from embodied_r_ros.nodes.perception_node import PerceptionNode
    from embodied_r_ros.nodes.reasoning_node import ReasoningNode

    tree = ast.parse(LAUNCH.read_text())
    launched = {c.args[1].value for c in (*_calls(tree, "node"), *_calls(tree, "managed"))
                if isinstance(c.args[1], ast.Constant) and c.args[1].value}
    allinone = {inspect.signature(cls).parameters["node_name"].default
                for cls in (query_server.QueryServerNode, PerceptionNode, ReasoningNode)}
    allinone.add(frame_buffer_name("front", ["front"]))
    sections = set(yaml.safe_load((REPO / "config" / "ros_params.yaml").read_text()))
    assert launched == allinone == {s.removeprefix("/**/") for s in sections - {"/**"}}


#: each node the params file has a section for, with the parameters it declares from the file
PARAM_NODES: dict[str, tuple[Spec, ...]] = {
    "frame_buffer": frame_buffer.SPECS,
    "perception": (DIAGNOSTICS_SPEC, AUTOSTART_SPEC),
    "reasoning": (DIAGNOSTICS_SPEC, AUTOSTART_SPEC),
    "query_server": (*query_server.SPECS, *query_server.REMOTE_SPECS),
}


def _declared_from(ctx: Any, params_file: Path, node_name: str) -> dict[str, Any]:
    """What a node named ``node_name`` reads for its parameters, given ``params_file`` as
    ``--params-file`` (rcl matches the sections, rclpy checks type and range on declare)."""
    node = rclpy.create_node(node_name, context=ctx, use_global_arguments=False,
                             cli_args=["--ros-args", "--params-file", str(params_file)])
    try:
        return declare(node, PARAM_NODES[node_name])
    finally:
        node.destroy_node()


@pytest.mark.parametrize("node_name", sorted(PARAM_NODES))
def test_ros_params_yaml_values_reach_the_nodes(ctx: Any, node_name: str) -> None:
    """Values, not only names: each node declares the file's value, of the declared type and
    in range (a wrong type or range would make the launch fail)."""
    path = REPO / "config" / "ros_params.yaml"
    data = yaml.safe_load(path.read_text())
    expected = {**data["/**"]["ros__parameters"], **data[f"/**/{node_name}"]["ros__parameters"]}
    got = _declared_from(ctx, path, node_name)
    assert {k: got[k] for k in expected} == expected
    assert all(type(got[k]) is type(v) for k, v in expected.items())
    # the file documents the defaults: a node started without it behaves the same
    defaults = {s.name: s.default for s in PARAM_NODES[node_name]}
    assert {k: defaults[k] for k in expected} == expected


@pytest.mark.parametrize(("line", "error"), [
    ("buffer_sec: 300", InvalidParameterTypeException),  # an integer for a double
    ("jpeg_quality: 101", InvalidParameterValueException),  # outside [10, 100]
    ("window_anchor: sometimes", ValueError),  # not one of the choices
])
def test_a_bad_params_file_value_is_refused(ctx: Any, tmp_path: Path, line: str,
                                            error: type[Exception]) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(f"/**/frame_buffer:\n  ros__parameters:\n    {line}\n")
    with pytest.raises(error):
        _declared_from(ctx, path, "frame_buffer")


@pytest.mark.parametrize("mode", ["allinone", "separate"])
def test_launch_file_runs_where_launch_is_installed(
    ctx: Any, tiny_models_dir: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The native route (launch_ros installed, package built with colcon): run it for real; in
    separate mode the launch's lifecycle events bring both model nodes to active."""
    pytest.importorskip("launch_ros", reason="launch_ros is not installed (pip route)")
    import threading

    import launch
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    from lifecycle_msgs.msg import State
    from lifecycle_msgs.srv import GetState

    for key, value in env().items():
        monkeypatch.setenv(key, value)  # the launched process joins this test's domain
    service = launch.LaunchService(argv=["profile:=tiny", "namespace:=launch_test",
                                         f"mode:={mode}"])
    service.include_launch_description(
        launch.actions.IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH)))
    )
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    node = rclpy.create_node("launch_probe", context=ctx)
    spinner = Spinner(ctx, [node])
    try:
        client = node.create_client(SpatialQuery, "/launch_test/query")
        assert client.wait_for_service(timeout_sec=120), "the launched nodes never came up"
        if mode == "separate":
            for name in ("perception", "reasoning"):
                get_state = node.create_client(GetState, f"/launch_test/{name}/get_state")
                wait_until(lambda c=get_state: call(c, GetState.Request()).current_state.id
                           == State.PRIMARY_STATE_ACTIVE, 300, f"{name} driven to active")
    finally:
        spinner.stop()  # destroys the probe node
        service.shutdown()
        runner.join(timeout=30)

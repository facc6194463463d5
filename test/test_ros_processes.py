"""Separate mode across processes: a perception node in its own process with a real (tiny)
VLM behind the Perceive action; cancel reaches it, its death is noticed by its silence, a pause
of either process is not taken for a death, and the query server recovers when the perception
process comes back. Each test starts the perception process it needs."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from media import pan_frames
from ros_helpers import (
    DISCOVERY_SEC,
    LOCALHOST_ENV,
    Spinner,
    call,
    domain_id,
    feed,
    frame_handled,
    image_msg,
    require_ros,
    result_of,
    ros_context,
    wait_matched,
    wait_until,
)

require_ros()

import rclpy  # noqa: E402
from action_msgs.msg import GoalStatus, GoalStatusArray  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_interfaces.action import Perceive  # noqa: E402
from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402
from embodied_r_interfaces.msg import EgoMotion  # noqa: E402
from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.core.images import encode_jpeg  # noqa: E402
from embodied_r_ros.nodes.conversions import jpeg_to_compressed  # noqa: E402
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402
from embodied_r_ros.nodes.query_server import QueryServerNode  # noqa: E402
from embodied_r_ros.nodes.reasoning_node import ReasoningNode  # noqa: E402
from embodied_r_ros.nodes.remote_engine import HEARTBEAT_TIMEOUT_SEC  # noqa: E402
from embodied_r_ros.nodes.runtime import start_nodes  # noqa: E402
from embodied_r_ros.nodes.transport import QUERY_QOS  # noqa: E402

pytestmark = pytest.mark.costly(60)  # seconds of one worker: started early

NS = "/proc"
PERCEIVE = f"{NS}/perception/perceive"
OPTIONS = ["A. left", "B. right"]
FRAMES = pan_frames(10, 30)
STAMPS = [300.0 + i for i in range(len(FRAMES))]


def vlm_config(path: Path, max_new_tokens: int) -> str:
    """The tiny VLM in the perception process; long replies one call at a time make a
    perception that lasts many seconds (time to cancel or to kill it)."""
    path.write_text(f"""base: tiny
cache: {{enabled: false}}
perception:
  concurrency: 1
  vlm: {{max_new_tokens: {max_new_tokens}, image_max_side: 64, batch_size: 1}}
reasoning: {{model: {{max_new_tokens: 4}}}}
""")
    return str(path)


class PerceptionProcess:
    """``python -m embodied_r_ros.nodes.perception_node``; with ``pause_sec``, one whose first
    goal holds the GIL that long before it starts (``paused_perception.py``)."""

    def __init__(self, cfg: str, models: Path, pause_sec: int = 0) -> None:
        env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__)),
               "EMBODIED_R_MODEL_CACHE": str(models), "OMP_NUM_THREADS": "1"}
        node = (["-m", "embodied_r_ros.nodes.perception_node"] if not pause_sec else
                [str(Path(__file__).with_name("paused_perception.py")), str(pause_sec)])
        self.proc = subprocess.Popen(
            [sys.executable, *node, "--ros-args",
             "-r", f"__ns:={NS}", "-p", "profile:=tiny", "-p", f"config_file:={cfg}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines: list[str] = []
        self.active = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "active: serving perception" in line:
                self.active.set()

    def wait_active(self, timeout: float = 90.0) -> None:
        """Until the node says it serves (the graph may still list a killed predecessor)."""
        assert self.active.wait(timeout), "".join(self.lines[-30:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class GoalWatch:
    """The Perceive goals as the perception process reports them on the action's status topic:
    the remote side of a query, seen from outside."""

    def __init__(self, node: Any) -> None:
        self._status: dict[bytes, int] = {}
        self._lock = threading.Lock()
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(GoalStatusArray, f"{PERCEIVE}/_action/status", self._on, qos)

    def _on(self, msg: GoalStatusArray) -> None:
        with self._lock:
            for s in msg.status_list:
                self._status[bytes(s.goal_info.goal_id.uuid)] = s.status

    def known(self) -> set[bytes]:
        with self._lock:
            return set(self._status)

    def new_goal(self, known: set[bytes], status: int) -> bytes:
        """The id of a goal not in ``known`` once it is reported with ``status``."""
        def found() -> bytes | None:
            with self._lock:
                return next((g for g, s in self._status.items()
                             if g not in known and s == status), None)

        wait_until(lambda: found() is not None, 60, f"a new goal in status {status}")
        goal = found()
        assert goal is not None
        return goal

    def wait(self, goal: bytes, status: int) -> None:
        wait_until(lambda: self._status.get(goal) == status, 10, f"the goal in status {status}")


class Cluster:
    """Frame buffer, reasoning node and a stand-alone query server here; perception there."""

    def __init__(self, ctx: Any, cfg: str) -> None:
        params = [Parameter("profile", value="tiny"), Parameter("config_file", value=cfg),
                  Parameter("backend_wait_sec", value=1.0)]
        kw = {"context": ctx, "namespace": NS, "parameter_overrides": params}
        self.buffer = FrameBufferNode(**kw)
        self.reasoning = ReasoningNode(**kw)
        self.query = QueryServerNode(**kw)
        start_nodes([self.reasoning])
        self.tester = rclpy.create_node("tester", context=ctx)
        self.goals = GoalWatch(self.tester)
        self.image = self.tester.create_publisher(Image, f"{NS}/image", 10)
        self.client = self.tester.create_client(SpatialQuery, f"{NS}/query",
                                                qos_profile=QUERY_QOS)
        # built before the tester spins (see Spinner.action_client)
        self.action = ActionClient(self.tester, QueryAction, f"{NS}/query")
        self.perceive = ActionClient(self.tester, Perceive, PERCEIVE)
        self.spinner = Spinner(ctx, [self.buffer, self.reasoning, self.query, self.tester],
                               threads=12)
        self.spinner.owned += [self.action, self.perceive]
        wait_matched(self.image, [self.buffer.camera_subscriptions[0]])
        feed(self.image.publish, [image_msg(f, t) for f, t in zip(FRAMES, STAMPS, strict=True)],
             frame_handled(self.buffer.store))

    def ask(self) -> Any:
        return call(self.client, SpatialQuery.Request(question="Which way did I turn?",
                                                      options=OPTIONS), timeout=120)

    def ask_in_background(self) -> tuple[threading.Thread, list[Any]]:
        answer: list[Any] = []
        asking = threading.Thread(target=lambda: answer.append(self.ask()))
        asking.start()
        return asking, answer

    def dying_query(self, process: PerceptionProcess) -> tuple[Any, float]:
        """A query whose perception process is killed while it perceives: (the answer, seconds
        from the kill to the answer)."""
        known = self.goals.known()
        asking, answer = self.ask_in_background()
        self.goals.new_goal(known, GoalStatus.STATUS_EXECUTING)  # perceiving over there
        killed = time.monotonic()
        process.kill()
        asking.join(timeout=120)
        assert answer, "no answer"
        return answer[0], time.monotonic() - killed


@pytest.fixture(scope="module")
def cluster(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Cluster, Path]]:
    tmp = tmp_path_factory.mktemp("proc")
    with ros_context(__name__) as ctx:
        c = Cluster(ctx, vlm_config(tmp / "fast.yaml", 4))
        yield c, tmp
        c.spinner.stop()


@pytest.fixture
def slow(cluster: tuple[Cluster, Path], tiny_models_dir: Path) -> Iterator[PerceptionProcess]:
    """A perception process whose every frame is a long reply: seconds to cancel or kill it."""
    process = PerceptionProcess(vlm_config(cluster[1] / "slow.yaml", 3000), tiny_models_dir)
    try:
        process.wait_active()
        yield process
    finally:
        process.stop()


def test_a_perceive_goal_cancelled_there_ends_canceled_at_once(
    cluster: tuple[Cluster, Path], slow: PerceptionProcess
) -> None:
    c, _ = cluster
    assert c.perceive.wait_for_server(timeout_sec=DISCOVERY_SEC)
    goal = Perceive.Goal(
        question="Which way did I turn?", options=OPTIONS,
        key_frames=[jpeg_to_compressed(encode_jpeg(f), t) for f, t in zip(FRAMES, STAMPS,
                                                                           strict=True)],
        motions=[EgoMotion(valid=False) for _ in FRAMES[1:]],
    )
    started = threading.Event()
    done: list[int] = []  # frames described, per feedback message

    def on_feedback(m: Any) -> None:
        done.append(m.feedback.frames_done)
        started.set()

    handle = result_of(c.perceive.send_goal_async(goal, feedback_callback=on_feedback), 30)
    assert started.wait(30)
    result_of(handle.cancel_goal_async(), 10)
    outcome = result_of(handle.get_result_async(), 10)
    assert outcome.status == GoalStatus.STATUS_CANCELED
    assert outcome.result.error_code == "CANCELLED"
    # ended mid-perception (each frame is a long reply), not after describing every frame
    assert max(done) < len(goal.key_frames), (done, len(goal.key_frames))


def test_a_query_cancelled_mid_perception_cancels_the_remote_goal(
    cluster: tuple[Cluster, Path], slow: PerceptionProcess
) -> None:
    c, _ = cluster
    assert c.action.wait_for_server(timeout_sec=DISCOVERY_SEC)
    known = c.goals.known()
    qhandle = result_of(c.action.send_goal_async(
        QueryAction.Goal(question="Which way did I turn?", options=OPTIONS)), 30)
    remote = c.goals.new_goal(known, GoalStatus.STATUS_EXECUTING)  # perceiving over there
    result_of(qhandle.cancel_goal_async(), 10)
    qout = result_of(qhandle.get_result_async(), 10)
    assert qout.status == GoalStatus.STATUS_CANCELED
    assert c.query.runner.stats.in_flight == 0
    c.goals.wait(remote, GoalStatus.STATUS_CANCELED)  # and the perception there stopped


def test_a_perception_process_dying_mid_query_is_backend_down(
    cluster: tuple[Cluster, Path], slow: PerceptionProcess
) -> None:
    c, _ = cluster
    answer, noticed = c.dying_query(slow)
    assert answer.error_code == "BACKEND_DOWN", answer
    assert "perception node" in answer.error
    # noticed by its silence (a killed process stays in the graph for a while), long before
    # the query's own limit (300 s, BACKEND_TIMEOUT); the margin is for a loaded machine
    assert noticed < HEARTBEAT_TIMEOUT_SEC + 10.0, noticed


def test_a_perception_process_paused_on_its_first_goal_is_waited_for(
    cluster: tuple[Cluster, Path], tiny_models_dir: Path
) -> None:
    """A fresh perception process that sends no heartbeat for 4 s (its Python paused, as by a
    full garbage collection on a loaded machine) is alive: the query is answered, not ended
    with BACKEND_DOWN after 2 s of silence."""
    c, tmp = cluster
    paused = PerceptionProcess(str(tmp / "fast.yaml"), tiny_models_dir,
                               pause_sec=round(2 * HEARTBEAT_TIMEOUT_SEC))
    try:
        paused.wait_active()
        r = c.ask()
        assert r.success, r.error
        assert r.perception_sec >= 2 * HEARTBEAT_TIMEOUT_SEC  # the pause was in the goal
    finally:
        paused.stop()


def test_a_pause_of_the_query_servers_own_process_is_not_a_dead_peer(
    cluster: tuple[Cluster, Path], tiny_models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process stops for 3 s while the perception process works on a query's goal, in the
    thread that watches the peer, as when an allocation of its own starts a full garbage
    collection: the heartbeats that came meanwhile wait unread, which is no silence of the
    peer's."""
    from embodied_r_ros.nodes import remote_engine

    c, tmp = cluster
    pause = threading.Event()
    check = remote_engine._Presence.check

    def check_then_pause(presence: Any) -> None:
        check(presence)
        if pause.is_set():
            pause.clear()
            ctypes.PyDLL(None).sleep(round(1.5 * HEARTBEAT_TIMEOUT_SEC))  # the GIL held

    monkeypatch.setattr(remote_engine._Presence, "check", check_then_pause)
    steady = PerceptionProcess(vlm_config(tmp / "steady.yaml", 400), tiny_models_dir)
    try:
        steady.wait_active()
        known = c.goals.known()
        asking, answer = c.ask_in_background()
        c.goals.new_goal(known, GoalStatus.STATUS_EXECUTING)  # long replies: seconds to go
        pause.set()
        asking.join(timeout=120)
        assert not pause.is_set()  # the pause happened
        assert answer and answer[0].success, answer
    finally:
        steady.stop()


def test_the_query_server_answers_again_when_perception_comes_back(
    cluster: tuple[Cluster, Path], slow: PerceptionProcess, tiny_models_dir: Path
) -> None:
    c, tmp = cluster
    answer, _ = c.dying_query(slow)
    assert answer.error_code == "BACKEND_DOWN", answer
    fast = PerceptionProcess(str(tmp / "fast.yaml"), tiny_models_dir)
    try:
        fast.wait_active()
        r = c.ask()
        assert r.success, r.error
        assert len(r.key_frame_stamps) >= 4 and r.perception.count("Frame ") >= 4
    finally:
        fast.stop()

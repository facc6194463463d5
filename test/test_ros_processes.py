"""Separate mode across processes: a perception node in its own process with a real (tiny)
VLM behind the Perceive action; cancel reaches it, its death is noticed within 3 s, and the
query server recovers when it comes back."""

from __future__ import annotations

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
    LOCALHOST_ENV,
    Spinner,
    call,
    domain_id,
    feed,
    image_msg,
    require_ros,
    result_of,
    ros_context,
    wait_until,
)

require_ros()

import rclpy  # noqa: E402
from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_interfaces.action import Perceive  # noqa: E402
from embodied_r_interfaces.action import SpatialQuery as QueryAction  # noqa: E402
from embodied_r_interfaces.msg import EgoMotion  # noqa: E402
from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.nodes.conversions import jpeg_to_compressed  # noqa: E402
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402
from embodied_r_ros.nodes.query_server import QueryServerNode  # noqa: E402
from embodied_r_ros.nodes.reasoning_node import ReasoningNode  # noqa: E402
from embodied_r_ros.nodes.runtime import start_nodes  # noqa: E402
from embodied_r_ros.nodes.transport import QUERY_QOS  # noqa: E402

NS = "/proc"
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
    def __init__(self, cfg: str, models: Path) -> None:
        env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__)),
               "EMBODIED_R_MODEL_CACHE": str(models), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "embodied_r_ros.nodes.perception_node", "--ros-args",
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
        self.spinner = Spinner(ctx, [self.buffer, self.reasoning, self.query, self.tester],
                               threads=12)
        self.image = self.tester.create_publisher(Image, f"{NS}/image", 10)
        self.client = self.tester.create_client(SpatialQuery, f"{NS}/query",
                                                qos_profile=QUERY_QOS)
        self.action = ActionClient(self.tester, QueryAction, f"{NS}/query")
        self.perceive = ActionClient(self.tester, Perceive, f"{NS}/perception/perceive")
        self.spinner.owned += [self.action, self.perceive]
        wait_until(lambda: self.image.get_subscription_count() > 0, what="the frame buffer")
        feed(self.image.publish, [image_msg(f, t) for f, t in zip(FRAMES, STAMPS, strict=True)],
             lambda: self.buffer.store.stats.received)

    def ask(self) -> Any:
        return call(self.client, SpatialQuery.Request(question="Which way did I turn?",
                                                      options=OPTIONS), timeout=120)


@pytest.fixture(scope="module")
def cluster(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Cluster, Path]]:
    tmp = tmp_path_factory.mktemp("proc")
    with ros_context(__name__) as ctx:
        c = Cluster(ctx, vlm_config(tmp / "fast.yaml", 4))
        yield c, tmp
        c.spinner.stop()


def test_cancel_and_death_of_a_perception_process_and_recovery(
    cluster: tuple[Cluster, Path], tiny_models_dir: Path
) -> None:
    c, tmp = cluster
    slow = PerceptionProcess(vlm_config(tmp / "slow.yaml", 3000), tiny_models_dir)
    try:
        slow.wait_active()
        assert c.perceive.wait_for_server(timeout_sec=30)
        # 1. a Perceive goal cancelled on the perception process ends CANCELED there at once
        window = c.buffer.window(0.0)
        goal = Perceive.Goal(
            question="Which way did I turn?", options=OPTIONS,
            key_frames=[jpeg_to_compressed(j, s) for j, s in zip(window.jpegs, window.stamps,
                                                                 strict=True)],
            motions=[EgoMotion(valid=False) for _ in window.motions],
        )
        started = threading.Event()
        done: list[int] = []  # frames described, per feedback message

        def on_feedback(m: Any) -> None:
            done.append(m.feedback.frames_done)
            started.set()

        handle = result_of(c.perceive.send_goal_async(goal, feedback_callback=on_feedback), 30)
        assert started.wait(10)
        result_of(handle.cancel_goal_async(), 10)
        outcome = result_of(handle.get_result_async(), 10)
        assert outcome.status == GoalStatus.STATUS_CANCELED
        assert outcome.result.error_code == "CANCELLED"
        # ended mid-perception (each frame is a long reply), not after describing every frame
        assert max(done) < len(goal.key_frames), (done, len(goal.key_frames))
        # 2. a query cancelled mid-perception: CANCELED, the remote goal cancelled too
        assert c.action.wait_for_server(timeout_sec=10)
        progress = threading.Event()
        qhandle = result_of(c.action.send_goal_async(
            QueryAction.Goal(question="Which way did I turn?", options=OPTIONS),
            feedback_callback=lambda m: m.feedback.stage == "perception" and progress.set(),
        ), 30)
        wait_until(lambda: progress.is_set() or qhandle.status == GoalStatus.STATUS_EXECUTING,
                   10, "the query to run")
        time.sleep(0.5)
        result_of(qhandle.cancel_goal_async(), 10)
        qout = result_of(qhandle.get_result_async(), 10)
        assert qout.status == GoalStatus.STATUS_CANCELED
        assert c.query.runner.stats.in_flight == 0
        # 3. the perception process dies mid-query: BACKEND_DOWN within 3 s of its death
        answer: list[Any] = []
        asking = threading.Thread(target=lambda: answer.append(c.ask()))
        asking.start()
        wait_until(lambda: c.query.runner.stats.in_flight == 1, 10, "the query to start")
        time.sleep(1.0)  # perception is under way in the other process
        killed = time.monotonic()
        slow.kill()
        asking.join(timeout=30)
        noticed = time.monotonic() - killed
        assert answer and answer[0].error_code == "BACKEND_DOWN", answer
        assert noticed < 3.0, noticed  # 2 s of silence, and no wait for a dead peer
        assert "perception node" in answer[0].error
    finally:
        slow.stop()
    # 4. the process comes back: the same query server answers again, by itself
    fast = PerceptionProcess(str(tmp / "fast.yaml"), tiny_models_dir)
    try:
        fast.wait_active()
        r = c.ask()
        assert r.success, r.error
        assert len(r.key_frame_stamps) >= 4 and r.perception.count("Frame ") >= 4
    finally:
        fast.stop()

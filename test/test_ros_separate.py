"""Separate nodes talking over ROS (the VLM-on-another-machine layout), odometry-aware
perception, and peers that are missing."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from media import pan_frames
from ros_helpers import (
    ChatGate,
    Spinner,
    call,
    feed,
    frame_handled,
    image_msg,
    odom_msg,
    pose_received,
    require_ros,
    ros_context,
    wait_matched,
)

require_ros()

import rclpy  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.core.request import MAX_OPTION_CHARS  # noqa: E402
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402
from embodied_r_ros.nodes.perception_node import PerceptionNode  # noqa: E402
from embodied_r_ros.nodes.query_server import QueryServerNode  # noqa: E402
from embodied_r_ros.nodes.reasoning_node import ReasoningNode  # noqa: E402
from embodied_r_ros.nodes.runtime import start_nodes  # noqa: E402
from embodied_r_ros.nodes.transport import QUERY_QOS  # noqa: E402

NS = "/sep"
OPTIONS = ["A. I turned left", "B. I turned right"]
FRAMES = pan_frames(12, 30)  # the picture pans: vision alone says "right"
STAMPS = [200.0 + i for i in range(len(FRAMES))]
ODOM_FROM = 6  # odometry (turning LEFT 15 deg/s) exists for the last frames only


class Separate:
    """The four nodes in namespace ``ns``, and a tester node that feeds and asks them."""

    def __init__(self, ctx: Any, cfg: str, ns: str = NS) -> None:
        params = [Parameter("profile", value="offline"), Parameter("config_file", value=cfg),
                  Parameter("cameras", value=["front", "rear"]),
                  Parameter("backend_wait_sec", value=0.5)]
        kw = {"context": ctx, "namespace": ns, "parameter_overrides": params}
        self.buffer = FrameBufferNode(**kw)
        self.perception = PerceptionNode(**kw)
        self.reasoning = ReasoningNode(**kw)
        self.query = QueryServerNode(**kw)
        start_nodes([self.perception, self.reasoning])
        self.tester = rclpy.create_node("tester", context=ctx)
        self.spinner = Spinner(ctx, [self.buffer, self.perception, self.reasoning, self.query,
                                     self.tester], threads=10)
        self.image = self.tester.create_publisher(Image, f"{ns}/image", 10)
        self.odom = self.tester.create_publisher(Odometry, f"{ns}/odom", 10)
        self.client = self.tester.create_client(SpatialQuery, f"{ns}/query",
                                                qos_profile=QUERY_QOS)
        wait_matched(self.image, [self.buffer.camera_subscriptions[0]])
        wait_matched(self.odom, [self.buffer.odometry_subscription])

    def ask(self, window_sec: float = 0.0, camera: str = "",
            options: Sequence[str] = OPTIONS) -> Any:
        return call(self.client, SpatialQuery.Request(
            question="Which way did I turn?", options=list(options), window_sec=window_sec,
            camera=camera))


@pytest.fixture(scope="module")
def config(tiny_lm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The offline profile with the tiny LM behind an OpenAI-compatible endpoint."""
    lm = ChatGate(tiny_lm)
    cfg = tmp_path_factory.mktemp("cfg") / "geometric.yaml"
    cfg.write_text(f"""base: offline
cache: {{enabled: false}}
reasoning:
  model: {{backend: openai, model: tiny-qwen2, base_url: "{lm.url}", max_new_tokens: 6}}
""")
    yield str(cfg)
    lm.close()


def feed_images(s: Separate, count: int) -> None:
    """The first ``count`` frames, each waited on in the frame buffer's store."""
    feed(s.image.publish, [image_msg(f, t) for f, t in zip(FRAMES[:count], STAMPS, strict=False)],
         frame_handled(s.buffer.store))


@pytest.fixture(scope="module")
def sep(config: str) -> Iterator[Separate]:
    """All four nodes up, fed the panning frames and, for the last of them, odometry."""
    with ros_context(__name__) as ctx:
        s = Separate(ctx, config)
        odoms = [odom_msg(t, 0.0, 0.0, 15.0 * (t - STAMPS[0])) for t in STAMPS[ODOM_FROM:]]
        feed(s.odom.publish, odoms, pose_received(s.buffer.store))
        feed_images(s, len(FRAMES))
        yield s
        s.spinner.stop()


@pytest.fixture
def losing_peers(config: str) -> Iterator[Separate]:
    """Nodes of their own, in their own namespace, for a test that takes peers away."""
    with ros_context(f"{__name__}.peers") as ctx:
        s = Separate(ctx, config, ns="/sep_peers")
        feed_images(s, 4)
        yield s
        s.spinner.stop()


def actions(perception: str) -> list[str]:
    return re.findall(r"^Frame \d+(?: \(\d+ s before the last key frame\))?: After (.+?), Observe:",
                      perception, re.MULTILINE)


def test_odometry_gives_the_action_between_key_frames(sep: Separate) -> None:
    r = sep.ask(window_sec=STAMPS[-1] - STAMPS[ODOM_FROM])
    assert r.success, r.error
    found = actions(r.perception)
    assert len(found) == len(r.key_frame_stamps) - 1 >= 3
    # metric odometry: "rotate left about N degrees", N = 15 deg/s x the key frames' gap
    for action, a, b in zip(found, r.key_frame_stamps, r.key_frame_stamps[1:], strict=False):
        gap = b.sec - a.sec
        assert action == f"rotate left about {15 * gap:.0f} degrees", action


def test_visual_ego_motion_fills_in_without_odometry(sep: Separate) -> None:
    r = sep.ask()
    assert r.success, r.error
    found = actions(r.perception)
    early = [a for a, s in zip(found, r.key_frame_stamps[1:], strict=True)
             if s.sec <= STAMPS[ODOM_FROM - 1]]
    late = [a for a, s in zip(found, r.key_frame_stamps, strict=False)
            if s.sec >= STAMPS[ODOM_FROM]]
    assert early and all(a.startswith(("rotate right", "move right")) for a in early), found
    assert late and all(a.startswith("rotate left") for a in late), found


def test_a_limit_set_on_the_query_server_holds_at_its_peers(sep: Separate) -> None:
    """A server set to 2,000-character options answers one of 1,500 over DDS: the perception
    and reasoning nodes take what any query server may be set to take."""
    long = "A. " + "I turned to the left " * 70
    assert MAX_OPTION_CHARS < len(long.strip()) <= 1500
    options = [long, OPTIONS[1]]
    assert sep.ask(options=options).error_code == "BAD_OPTIONS"  # the default limit
    (done,) = sep.query.set_parameters([Parameter("max_option_chars", value=2000)])
    assert done.successful, done.reason
    try:
        r = sep.ask(options=options)
    finally:
        sep.query.set_parameters([Parameter("max_option_chars", value=MAX_OPTION_CHARS)])
    assert r.success, r.error
    assert r.perception.endswith(f"Choices:\n{long.strip()}\n{OPTIONS[1]}")


def test_camera_without_a_buffer_and_missing_peers(losing_peers: Separate) -> None:
    s = losing_peers
    r = s.ask(camera="rear")  # no frame buffer serves it: a peer that is not there
    assert not r.success and r.error_code == "BACKEND_DOWN" and "rear" in r.error
    s.spinner.remove(s.reasoning)
    r = s.ask()
    assert not r.success and r.error_code == "BACKEND_DOWN" and "reasoning" in r.error
    s.spinner.remove(s.perception)
    r = s.ask()
    assert not r.success and r.error_code == "BACKEND_DOWN" and "perception" in r.error

"""Over real DDS: a ROS 1 bag with only tf poses played by the project's player into a frame
buffer reading the tf tree gives the camera's motions the bag gives ``build``, also where the
bag records no durability for ``/tf_static``; ``/tf_static`` reaches a subscriber that joins
late; a frame buffer that gets no frame says so once, and one whose camera chain never
completes names the frames the tree lacks, once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ros1data import rewrite_as_ros1
from ros_helpers import LOCALHOST_ENV, Spinner, domain_id, require_ros, ros_context, wait_until

require_ros()

import rclpy  # noqa: E402
from rcl_interfaces.msg import Log  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402

from embodied_r_ros.core.odometry import odometry_motions, poses_at  # noqa: E402
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402
from embodied_r_ros.recordings.bags import BagReader  # noqa: E402
from embodied_r_ros.ros_player import BagPlayer  # noqa: E402
from embodied_r_ros.sim.generate import generate_world  # noqa: E402
from embodied_r_ros.sim.world import WorldSpec  # noqa: E402

SPEC = WorldSpec(seed=31, frames=120, width=128, height=96)  # 12 s at 10 Hz


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic world's rosbag2."""
    paths = generate_world(SPEC, tmp_path_factory.mktemp("tfworld"), 0, video=False, decides=None)
    assert paths.bag is not None
    return paths.bag


@pytest.fixture(scope="module")
def bag(world: Path) -> Path:
    """The synthetic world as a ROS 1 bag: mono8 images, poses only on /tf and /tf_static
    (latched)."""
    return rewrite_as_ros1(world, world.parent / "robot.bag", mono=True)


@pytest.fixture(scope="module")
def unrecorded_bag(world: Path) -> Path:
    """The same with a /tf_static connection that records no durability (no latching field)."""
    return rewrite_as_ros1(world, world.parent / "other-tool.bag", mono=True,
                           static_latching=None)


def _env() -> dict[str, str]:
    return {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__))}


@pytest.mark.parametrize("recorded", ["latched", "no durability"])
def test_the_player_feeds_a_frame_buffer_that_reads_the_camera_from_tf(
        ctx: Any, recorded: str, request: pytest.FixtureRequest) -> None:
    bag: Path = request.getfixturevalue("bag" if recorded == "latched" else "unrecorded_bag")
    with BagReader(bag) as reader:
        (static,) = [c for c in reader.reader.connections if c.topic == "/tf_static"]
        assert reader.latched(static) is (True if recorded == "latched" else None)
    node = FrameBufferNode(context=ctx, namespace="/tfw", parameter_overrides=[
        Parameter("profile", value="offline"), Parameter("pose_source", value="tf")])
    spinner = Spinner(ctx, [node])
    with BagReader(bag) as reader:
        stamps = reader.image_stamps_ns("/camera/image_raw")
        track = reader.pose_track("/tf", image_topic="/camera/image_raw")
    try:
        assert node.poses is not None and node.poses.backend == "embodied_r tf reader"
        proc = subprocess.run(
            [sys.executable, "-m", "embodied_r_ros.ros_player", str(bag), "--rate", "8",
             "--topics", "/camera/image_raw", "/tf", "/tf_static",
             "--remap", "/camera/image_raw:=/tfw/image"],
            env=_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        wait_until(lambda: (node.store.stats.last_frame_stamp or 0) >= stamps[-1] / 1e9 - 1.0,
                   timeout=30, what="the bag's last frames")
        window = node.window(0.0)
    finally:
        spinner.stop()
    assert node.poses.camera_frame == "camera_optical_frame"  # from the images' headers
    assert "wheel_left" not in node.poses.buffer.frames()  # only the camera's chain is kept
    assert len(window.stamps) >= 4 and all(m is not None for m in window.motions)
    want = odometry_motions(poses_at(track, window.stamps, 0.2))
    for got, expected in zip(window.motions, want, strict=True):
        assert got is not None and expected is not None
        assert (got.forward, got.left, got.up, got.yaw_deg, got.pitch_deg) == pytest.approx(
            (expected.forward, expected.left, expected.up, expected.yaw_deg,
             expected.pitch_deg), abs=1e-6)
    grey = window.decoded()[0].astype(int)  # mono8 frames: three equal channels
    assert np.abs(grey[..., 0] - grey[..., 2]).max() <= 3


def test_tf_static_reaches_a_subscriber_that_joins_after_it_was_played(ctx: Any, bag: Path
                                                                       ) -> None:
    from tf2_msgs.msg import TFMessage

    player_node = rclpy.create_node("static_player", context=ctx)
    player = BagPlayer(player_node, bag, topics=["/tf_static"], remap={"/tf_static": "/late"})
    listener = rclpy.create_node("late_listener", context=ctx)
    got: list[Any] = []
    spinner = Spinner(ctx, [player_node, listener])
    try:
        assert player.play() == 1
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        listener.create_subscription(TFMessage, "/late", got.append, latched)
        wait_until(lambda: got, timeout=20, what="the mount, published before we listened")
    finally:
        player.close()
        spinner.stop()
    (mount,) = got
    assert [t.child_frame_id for t in mount.transforms] == ["/camera_link",
                                                            "camera_optical_frame"]
    assert mount.transforms[1].transform.rotation.w == pytest.approx(0.5)


def test_a_frame_buffer_that_gets_no_frame_says_once_where_it_listens(ctx: Any) -> None:
    quiet = FrameBufferNode(context=ctx, namespace="/unmapped", parameter_overrides=[
        Parameter("profile", value="offline"), Parameter("no_frame_warning_sec", value=0.5)])
    listener = rclpy.create_node("rosout_listener", context=ctx)
    records: list[Log] = []
    listener.create_subscription(Log, "/rosout", records.append, 100)
    spinner = Spinner(ctx, [quiet, listener])

    def warnings() -> list[str]:
        return [r.msg for r in records if r.name == "unmapped.frame_buffer"
                and r.level == Log.WARN]
    try:
        wait_until(warnings, timeout=20, what="the no-frame warning")
        time.sleep(1.5)  # three more periods: still the one warning
    finally:
        spinner.stop()
    (line,) = warnings()
    assert line.startswith("no camera frame in 0.5 s on /unmapped/image or "
                           "/unmapped/image/compressed")
    assert "-r image:=" in line


def test_a_camera_chain_that_never_completes_is_one_warning_naming_what_the_tree_lacks(
        ctx: Any) -> None:
    from tf2_msgs.msg import TFMessage

    from embodied_r_ros.core.profiles import load_config

    config = load_config(profile="offline", overrides={
        "perception": {"tf": {"camera_frame": "camera_optical_frame"}}})
    publisher = rclpy.create_node("tf_publisher", context=ctx)
    moving = publisher.create_publisher(TFMessage, "/tf", 10)
    static = publisher.create_publisher(TFMessage, "/tf_static", QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL))

    def edge(parent: str, child: str) -> Any:
        from geometry_msgs.msg import TransformStamped

        ts = TransformStamped()
        ts.header.frame_id, ts.child_frame_id = parent, child
        ts.header.stamp = publisher.get_clock().now().to_msg()
        ts.transform.rotation.w = 1.0
        return ts

    # the optical frame's own edge, but never the mount (base_link -> camera_link)
    static.publish(TFMessage(transforms=[edge("camera_link", "camera_optical_frame")]))
    publisher.create_timer(0.05, lambda: moving.publish(
        TFMessage(transforms=[edge("odom", "base_link")])))
    listener = rclpy.create_node("tf_rosout_listener", context=ctx)
    records: list[Log] = []
    listener.create_subscription(Log, "/rosout", records.append, 100)
    node = FrameBufferNode(context=ctx, namespace="/mountless", config=config,
                           parameter_overrides=[Parameter("pose_source", value="tf"),
                                                Parameter("no_tf_warning_sec", value=2.0)])
    spinner = Spinner(ctx, [publisher, listener, node])

    def warnings() -> list[str]:
        return [r.msg for r in records if r.name == "mountless.frame_buffer"
                and r.level == Log.WARN and "tf" in r.msg]
    try:
        wait_until(warnings, timeout=20, what="the missing-chain warning")
        time.sleep(2.5)  # past another period: still the one warning
    finally:
        spinner.stop()
    (line,) = warnings()
    assert "no transform chain from 'odom' to 'camera_optical_frame'" in line
    assert "no transform joins 'camera_link' (above 'camera_optical_frame') to 'odom'" in line
    assert "(frames: base_link, camera_link, camera_optical_frame, odom)" in line
    assert "\n" not in line

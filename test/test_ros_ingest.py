"""Lean ingestion over real DDS: once the sampling grid is known, a content filter on the stamp
lets only frames near the grid times reach the frame buffer, and sampling goes on unchanged."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from ros_helpers import (
    Spinner,
    feed,
    frame_handled,
    image_msg,
    require_ros,
    ros_context,
    wait_matched,
    wait_until,
)

require_ros()

import rclpy  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from embodied_r_ros.nodes.frame_buffer import FrameBufferNode  # noqa: E402


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def test_the_stamp_filter_cuts_delivery_not_sampling(ctx: Any) -> None:
    from rclpy.parameter import Parameter

    node = FrameBufferNode(context=ctx, namespace="/ingest",
                           parameter_overrides=[Parameter("profile", value="offline")])
    tester = rclpy.create_node("camera", context=ctx)
    pub = tester.create_publisher(Image, "/ingest/image", qos_profile_sensor_data)
    spinner = Spinner(ctx, [node, tester])
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (120, 160, 3), dtype=np.uint8) for _ in range(4)]
    try:
        wait_until(lambda: pub.get_subscription_count() > 0, what="the camera subscription")
        start, sent = time.monotonic(), 0
        t0 = 500.0
        phases = []
        while time.monotonic() - start < 6.0:  # a 30 Hz camera for 6 s
            pub.publish(image_msg(frames[sent % 4], t0 + sent / 30))
            sent += 1
            if sent % 30 == 0:
                phases.append((node.filtering, node.store.stats.received,
                               node.store.stats.stored))
            time.sleep(max(0.0, start + sent / 30 - time.monotonic()))
    finally:
        spinner.stop()
    assert node.filtering  # the content filter is on (Fast DDS supports it)
    on = [i for i, (filtered, _, _) in enumerate(phases) if filtered]
    assert on and on[0] <= 3
    first = on[0]
    received = phases[-1][1] - phases[first][1]
    stored = phases[-1][2] - phases[first][2]
    seconds = len(phases) - 1 - first
    assert received <= 6 * seconds  # about 3 a second reach the node, not 30
    assert abs(stored - seconds) <= 1  # and one a second is still sampled


def test_filter_changes_under_a_streaming_camera_keep_frames_coming(ctx: Any) -> None:
    """500 stamp-filter changes while a camera streams: the executor keeps spinning and the
    filter set last is the one in force.

    Changing the filter by destroying and re-creating the camera subscriptions raced the
    executor: a subscription destroyed while another executor thread built its wait set made
    rclpy raise InvalidHandle out of ``spin``, which stopped the node. Thread switches every
    10 us (Python's default is 5 ms) made that show within a few dozen changes.
    """
    from rclpy.parameter import Parameter

    from embodied_r_ros.agent.frame_store import stamp_filter

    node = FrameBufferNode(context=ctx, namespace="/churn",
                           parameter_overrides=[Parameter("profile", value="offline")])
    node._tuner.cancel()  # the test drives the filter itself, from the same callback group
    tester = rclpy.create_node("churn_camera", context=ctx)
    pub = tester.create_publisher(Image, "/churn/image", qos_profile_sensor_data)
    spinner = Spinner(ctx, [node, tester])
    grid = stamp_filter(0.0, 1.0, 0.1)  # passes nanosec in [0, 0.3 s)
    assert grid is not None
    frame = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    changes, done, streaming = [0], threading.Event(), threading.Event()

    def change() -> None:
        if changes[0] == 500:
            done.set()
            return
        node._set_filter(grid if changes[0] % 2 == 0 else None)
        changes[0] += 1

    def camera() -> None:
        sent = 0
        while streaming.is_set():
            pub.publish(image_msg(frame, 700.0 + sent / 30))
            sent += 1
            time.sleep(0.002)

    switch = sys.getswitchinterval()
    streamer = threading.Thread(target=camera, daemon=True)
    try:
        wait_matched(pub, [node.camera_subscriptions[0]])
        streaming.set()
        streamer.start()
        wait_until(lambda: node.store.stats.received > 0, what="the stream")
        sys.setswitchinterval(1e-5)
        timer = node.create_timer(0.001, change, callback_group=node._ingest_group)
        wait_until(lambda: done.is_set() or spinner.error is not None, 120,
                   "500 filter changes")
        sys.setswitchinterval(switch)
        node.destroy_timer(timer)
        assert spinner.error is None, f"after {changes[0]} changes: {spinner.error!r}"
        streaming.clear()
        streamer.join()
        # the filter set last is in force: a frame off the grid is filtered out, one on it
        # (after it, from the same publisher) arrives
        node._set_filter(grid)
        last = math.ceil(node.store.stats.last_frame_stamp or 700.0) + 1.0  # on the grid
        feed(pub.publish, [image_msg(frame, last)], frame_handled(node.store))
        received = node.store.stats.received
        pub.publish(image_msg(frame, last + 1.5))  # nanosec 0.5 s: off the grid
        feed(pub.publish, [image_msg(frame, last + 2.1)], frame_handled(node.store))
        assert node.store.stats.received == received + 1 and node.filtering
        node._set_filter(None)
        pub.publish(image_msg(frame, last + 2.5))  # every frame passes again
        wait_until(lambda: node.store.stats.last_frame_stamp == last + 2.5, what="the frame")
    finally:
        sys.setswitchinterval(switch)
        streaming.clear()
        spinner.stop()

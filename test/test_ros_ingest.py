"""Lean ingestion over real DDS: once the sampling grid is known, a content filter on the stamp
lets only frames near the grid times reach the frame buffer, and sampling goes on unchanged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from ros_helpers import Spinner, image_msg, require_ros, ros_context, wait_until

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
        time.sleep(0.5)
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

"""Python logging of the core and the backends reaches ROS logging in a node process: /rosout
(rqt_console, bags) and the console, once, at the level ``--ros-args --log-level`` sets."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from ros_helpers import LOCALHOST_ENV, Spinner, domain_id, require_ros, ros_context, wait_until

require_ros()

import rclpy  # noqa: E402
from rcl_interfaces.msg import Log  # noqa: E402

from embodied_r_ros.nodes.runtime import FORWARDED_LOGGERS, RosLogHandler  # noqa: E402

#: a node process built by the runtime whose timer logs through Python logging, as the core
#: does while it serves
PROBE = """
import logging, sys
from rclpy.node import Node
from embodied_r_ros.nodes.runtime import run_nodes

def build(context):
    node = Node("log_probe", context=context, namespace="/logtest")
    core = logging.getLogger("embodied_r_ros.core.probe")

    def tick():
        core.warning("core warning %d", 7)
        core.debug("core detail")

    node.create_timer(0.2, tick)
    return [node]

sys.exit(run_nodes(build, sys.argv))
"""
SOURCE = "logtest.log_probe.embodied_r_ros.core.probe"


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def test_core_records_reach_rosout_from_a_node_process(ctx: Any) -> None:
    env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__))}
    listener = rclpy.create_node("rosout_listener", context=ctx)
    records: list[Log] = []
    listener.create_subscription(Log, "/rosout", records.append, 100)
    spinner = Spinner(ctx, [listener])
    proc = subprocess.Popen([sys.executable, "-c", PROBE, "--ros-args", "--log-level", "debug"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def levels() -> set[int]:
            return {int(r.level) for r in list(records) if r.name == SOURCE}

        wait_until(lambda: {Log.WARN, Log.DEBUG} <= levels(), 60,
                   "the probe's Python records on /rosout")
        warning = next(r for r in list(records) if r.name == SOURCE and r.level == Log.WARN)
        assert warning.msg == "core warning 7"
    finally:
        spinner.stop()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-2000:]
    lines = [ln for ln in out.splitlines() if "core warning 7" in ln]
    # the console shows each record once, in ROS's format (no second Python handler)
    assert lines and all(ln.startswith("[WARN] [") and f"[{SOURCE}]: " in ln for ln in lines)


def test_tracebacks_travel_with_the_record(ctx: Any) -> None:
    node = rclpy.create_node("traceback_probe", context=ctx, namespace="/logtest")
    listener = rclpy.create_node("traceback_listener", context=ctx)
    records: list[Log] = []
    listener.create_subscription(Log, "/rosout", records.append, 100)
    spinner = Spinner(ctx, [listener])
    handler = RosLogHandler()
    handler.install()
    try:
        handler.attach(node)
        wait_until(lambda: node.count_subscribers("/rosout") > 0, 30, "the listener")
        try:
            raise ValueError("the model went away")
        except ValueError:
            logging.getLogger("embodied_r_ros.agent.probe").exception("query failed")
        wait_until(lambda: any(r.name.endswith("embodied_r_ros.agent.probe")
                               for r in list(records)), 30, "the error record")
        error = next(r for r in records if r.name.endswith("embodied_r_ros.agent.probe"))
        assert error.level == Log.ERROR and error.name == "logtest.traceback_probe." \
            "embodied_r_ros.agent.probe"
        assert error.msg.startswith("query failed\nTraceback")
        assert "ValueError: the model went away" in error.msg
    finally:
        handler.remove()
        spinner.stop()
        node.destroy_node()


def test_removing_the_handler_restores_the_loggers() -> None:
    before = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate,
                     list(logging.getLogger(name).handlers)) for name in FORWARDED_LOGGERS}
    handler = RosLogHandler()
    handler.install()
    assert all(handler in logging.getLogger(n).handlers and not logging.getLogger(n).propagate
               for n in FORWARDED_LOGGERS)
    handler.remove()
    after = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate,
                    list(logging.getLogger(name).handlers)) for name in FORWARDED_LOGGERS}
    assert after == before

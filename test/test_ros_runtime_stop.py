"""A stop signal may shut the ROS context down while the executor builds its next wait set;
rcl then raises "the given context is not valid". That is a stop, not a failure: the nodes
close and the process exits 0. The same error with the context still up is a real one.
rclpy's signal thread wakes the executor before it shuts the context down: the nodes are
closed and destroyed only once that shutdown is over, never while it runs."""

from __future__ import annotations

import threading

import pytest
import rclpy
from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor

from embodied_r_ros.nodes.runtime import spin_nodes

RCL_MESSAGE = "failed to initialize wait set: the given context is not valid"


def _node(context: Context, name: str, closed: list[str]) -> rclpy.node.Node:
    node = rclpy.create_node(name, context=context)
    node.close = lambda: closed.append(name)  # type: ignore[attr-defined]
    return node


def test_a_shutdown_racing_the_executor_closes_the_nodes_without_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    context = Context()
    rclpy.init(context=context)
    closed: list[str] = []

    def spin(self: MultiThreadedExecutor) -> None:
        rclpy.shutdown(context=context)  # the signal handler, just after the ok() check
        raise RuntimeError(RCL_MESSAGE)

    monkeypatch.setattr(MultiThreadedExecutor, "spin", spin)
    spin_nodes([_node(context, "first", closed), _node(context, "second", closed)], context)
    assert closed == ["second", "first"]


def test_the_same_error_with_the_context_up_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    context = Context()
    rclpy.init(context=context)
    closed: list[str] = []

    def spin(self: MultiThreadedExecutor) -> None:
        raise RuntimeError(RCL_MESSAGE)

    monkeypatch.setattr(MultiThreadedExecutor, "spin", spin)
    try:
        with pytest.raises(RuntimeError, match="context is not valid"):
            spin_nodes([_node(context, "only", closed)], context)
        assert closed == ["only"]  # closed on the way out all the same
    finally:
        rclpy.try_shutdown(context=context)


def test_nodes_are_destroyed_only_after_the_signal_shutdown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    context = Context()
    rclpy.init(context=context)
    seen: list[tuple[str, bool]] = []  # (what, was the context up)
    node = rclpy.create_node("stopping", context=context)
    node.close = lambda: seen.append(("close", context.ok()))  # type: ignore[attr-defined]
    destroy = node.destroy_node

    def destroy_node() -> None:
        seen.append(("destroy", context.ok()))
        destroy()

    node.destroy_node = destroy_node  # type: ignore[method-assign]

    def spin(self: MultiThreadedExecutor) -> None:
        # rclpy's signal thread: the executor is woken (here: interrupted) first, rcl shuts
        # the context down a moment later (rcl_shutdown only, as that thread does: no Python
        # clean-up that would destroy the nodes first)
        threading.Timer(0.3, context.handle.shutdown).start()
        raise KeyboardInterrupt

    monkeypatch.setattr(MultiThreadedExecutor, "spin", spin)
    spin_nodes([node], context)
    assert seen == [("close", False), ("destroy", False)]

"""Process entry points shared by every node: init, a multi-threaded executor, clean shutdown.

Queries block their callback thread for seconds while frames keep arriving, so every process
spins a :class:`MultiThreadedExecutor` with enough threads for its nodes' declared needs.
Configuration mistakes end the process with one clear line and exit code 2, not a traceback.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence

import rclpy
from rclpy.context import Context
from rclpy.exceptions import NameValidationException, ParameterException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from embodied_r_ros.agent.guard import one_line
from embodied_r_ros.core.config import ConfigError
from embodied_r_ros.nodes.model_node import StartError
from embodied_r_ros.nodes.transport import return_large_buffers_to_the_os

log = logging.getLogger(__name__)


def threads_for(nodes: Sequence[Node]) -> int:
    """Executor threads: each node says how many it may block at once (``threads_needed``)."""
    return max(2, sum(int(getattr(n, "threads_needed", 1)) for n in nodes) + 1)


def spin_nodes(nodes: Sequence[Node], context: Context, num_threads: int | None = None) -> None:
    executor = MultiThreadedExecutor(num_threads=num_threads or threads_for(nodes),
                                     context=context)
    for node in nodes:
        executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        start = time.monotonic()
        # the reverse of the start order: queries stop (their models' work cancelled) before
        # the executor waits for callbacks, and before the models they use are freed
        for node in reversed(nodes):
            close = getattr(node, "close", None)
            if callable(close):
                close()
        executor.shutdown(timeout_sec=5.0)
        for node in nodes:
            node.destroy_node()
        log.info("stopped in %.1f s", time.monotonic() - start)


def run_nodes(build: Callable[[Context], Sequence[Node]], args: Sequence[str] | None = None) -> int:
    """``rclpy.init`` with ``args`` (``--ros-args`` ...), build the nodes, spin until shutdown."""
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] [%(name)s]: %(message)s")
    return_large_buffers_to_the_os()  # frame-sized buffers must not pile up in the heap
    # The default context: rclpy installs its SIGINT/SIGTERM handlers only for that one.
    try:
        rclpy.init(args=list(sys.argv if args is None else args))
    except RuntimeError as exc:  # rcl's RCLError: malformed --ros-args
        reason = str(exc).splitlines()[0].split(", at ")[0]
        print(f"embodied_r: configuration error: invalid --ros-args: {reason}", file=sys.stderr)
        return 2
    context = rclpy.get_default_context()
    try:
        try:
            nodes = start_nodes(build(context))
        except (ConfigError, ValueError, ParameterException, NameValidationException) as exc:
            print(f"embodied_r: configuration error: {one_line(exc)}", file=sys.stderr)
            return 2
        except StartError as exc:
            print(f"embodied_r: cannot start: {one_line(exc)}", file=sys.stderr)
            return 2
        spin_nodes(nodes, context)
        return 0
    finally:
        rclpy.try_shutdown(context=context)


def start_nodes(nodes: Sequence[Node], *, destroy: bool = True) -> list[Node]:
    """Drive managed nodes to active (``autostart``; nodes already started stay as they are);
    on a failure destroy them all (unless ``destroy`` is false: the caller does)."""
    nodes = list(nodes)
    try:
        for node in nodes:
            start = getattr(node, "start", None)
            if callable(start):
                start()
    except BaseException:
        if not destroy:
            raise
        for node in nodes:
            close = getattr(node, "close", None)
            if callable(close):
                close()
            node.destroy_node()
        raise
    return nodes

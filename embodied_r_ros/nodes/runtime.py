"""Process entry points shared by every node: init, a multi-threaded executor, clean shutdown.

Queries block their callback thread for seconds while frames keep arriving, so every process
spins a :class:`MultiThreadedExecutor` with enough threads for its nodes' declared needs.
Configuration mistakes end the process with one clear line and exit code 2, not a traceback.
Python logging of the package (the core, the backends, the query runner) is forwarded into ROS
logging by :class:`RosLogHandler`, so its warnings reach ``/rosout`` and rqt_console like the
nodes' own messages.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence

import rclpy
import rclpy.logging
from rclpy.context import Context
from rclpy.exceptions import NameValidationException, ParameterException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.logging import LoggingSeverity
from rclpy.node import Node

from embodied_r_ros.agent.guard import one_line
from embodied_r_ros.core.config import ConfigError
from embodied_r_ros.nodes.model_node import StartError
from embodied_r_ros.nodes.signal_stop import await_signal_shutdown
from embodied_r_ros.nodes.transport import return_large_buffers_to_the_os

log = logging.getLogger(__name__)

#: the Python loggers a node process forwards into ROS logging
FORWARDED_LOGGERS = ("embodied_r_ros",)


def ros_severity(levelno: int) -> LoggingSeverity:
    """The ROS severity of a Python level (the numbers agree: DEBUG 10 ... FATAL 50)."""
    for severity in (LoggingSeverity.FATAL, LoggingSeverity.ERROR, LoggingSeverity.WARN,
                     LoggingSeverity.INFO):
        if levelno >= severity:
            return severity
    return LoggingSeverity.DEBUG


class RosLogHandler(logging.Handler):
    """Python log records into ROS logging: the console, and ``/rosout`` once a node is attached.

    A record goes to a child of the attached node's logger named after its Python logger
    (``embodied_r.query_server.embodied_r_ros.agent.query_runner``), which rclpy registers with
    the node's ``/rosout`` publisher; before a node is attached it goes to a ROS logger of its
    own name (console only). :meth:`install` hooks it on :data:`FORWARDED_LOGGERS` with the ROS
    log level (``--ros-args --log-level``), instead of a second console handler.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))  # a traceback is appended
        self._parent: RcutilsLogger | None = None
        self._loggers: dict[str, RcutilsLogger] = {}
        self._saved: dict[str, tuple[int, bool]] = {}

    def install(self) -> None:
        """Forward :data:`FORWARDED_LOGGERS` here only (no propagation to the root logger)."""
        level = rclpy.logging.get_logger_effective_level(FORWARDED_LOGGERS[0])
        for name in FORWARDED_LOGGERS:
            logger = logging.getLogger(name)
            self._saved[name] = (logger.level, logger.propagate)
            logger.addHandler(self)
            logger.propagate = False
            logger.setLevel(int(level))

    def remove(self) -> None:
        """Undo :meth:`install` and forget the node (call before the node is destroyed)."""
        for name, (level, propagate) in self._saved.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved.clear()
        self.attach(None)

    def attach(self, node: Node | None) -> None:
        """Send records to ``node``'s logger (its /rosout) from now on, at its log level."""
        self.acquire()
        try:
            self._parent = node.get_logger() if node is not None else None
            self._loggers = {}
        finally:
            self.release()
        if self._parent is not None:
            for name in self._saved:
                logging.getLogger(name).setLevel(int(self._parent.get_effective_level()))

    def _logger(self, name: str) -> RcutilsLogger:
        logger = self._loggers.get(name)
        if logger is None:
            parent = self._parent
            logger = parent.get_child(name) if parent else rclpy.logging.get_logger(name)
            self._loggers[name] = logger
        return logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            logger = self._logger(record.name)
            severity = ros_severity(record.levelno)
            # one call site per severity: rclpy keeps state per call site and refuses a
            # severity other than the first one a site logged with
            if severity == LoggingSeverity.FATAL:
                logger.fatal(message)
            elif severity == LoggingSeverity.ERROR:
                logger.error(message)
            elif severity == LoggingSeverity.WARN:
                logger.warning(message)
            elif severity == LoggingSeverity.INFO:
                logger.info(message)
            else:
                logger.debug(message)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


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
        await_signal_shutdown(context)  # before any node is closed or destroyed
    except RuntimeError:  # rcl's RCLError
        # a signal shut the context down between the executor's ok() check and its building
        # the next wait set ("the given context is not valid"): a stop like any other
        if context.ok():
            raise
    finally:
        start = time.monotonic()
        # the reverse of the start order: queries stop (their models' work cancelled) before
        # the executor waits for callbacks, and before the models they use are freed
        for node in reversed(nodes):
            close = getattr(node, "close", None)
            if callable(close):
                close()
        executor.shutdown(timeout_sec=5.0)
        log.info("stopped in %.1f s", time.monotonic() - start)
        for node in nodes:
            node.destroy_node()


def run_nodes(build: Callable[[Context], Sequence[Node]], args: Sequence[str] | None = None) -> int:
    """``rclpy.init`` with ``args`` (``--ros-args`` ...), build the nodes, spin until shutdown;
    Python logging goes to ROS logging throughout, to the first node's ``/rosout`` once the
    nodes are built."""
    return_large_buffers_to_the_os()  # frame-sized buffers must not pile up in the heap
    # The default context: rclpy installs its SIGINT/SIGTERM handlers only for that one.
    try:
        rclpy.init(args=list(sys.argv if args is None else args))
    except RuntimeError as exc:  # rcl's RCLError: malformed --ros-args
        reason = str(exc).splitlines()[0].split(", at ")[0]
        print(f"embodied_r: configuration error: invalid --ros-args: {reason}", file=sys.stderr)
        return 2
    context = rclpy.get_default_context()
    forward = RosLogHandler()
    forward.install()
    try:
        try:
            built = build(context)
            forward.attach(built[0] if built else None)
            nodes = start_nodes(built)
        except (ConfigError, ValueError, ParameterException, NameValidationException) as exc:
            print(f"embodied_r: configuration error: {one_line(exc)}", file=sys.stderr)
            return 2
        except StartError as exc:
            print(f"embodied_r: cannot start: {one_line(exc)}", file=sys.stderr)
            return 2
        spin_nodes(nodes, context)
        return 0
    finally:
        forward.remove()
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

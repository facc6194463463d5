"""The end of a stop signal's shutdown, awaited before the nodes are destroyed.

rclpy handles SIGINT and SIGTERM on a thread of its own that first wakes every executor and only
then shuts the contexts down (``rcl_shutdown``, the middleware included). The main thread, woken
(or interrupted by ``KeyboardInterrupt``) at once, would destroy its nodes while that shutdown
is still running; the two race inside the middleware and Fast DDS can crash the process on it
(a segmentation fault in ``rcl_node_fini``). A process that stops on a signal therefore waits
for the context to be down first: rcl marks it invalid only once the middleware has shut down.
"""

from __future__ import annotations

import logging
import time

from rclpy.context import Context

log = logging.getLogger(__name__)

#: how long a stop waits for rclpy's signal thread; a ``KeyboardInterrupt`` raised where rclpy
#: handles no signal leaves the context up, and the stop goes on after this
SIGNAL_SHUTDOWN_WAIT_S = 2.0


def await_signal_shutdown(context: Context, timeout_s: float = SIGNAL_SHUTDOWN_WAIT_S) -> bool:
    """Wait until ``context`` is shut down (True), or ``timeout_s`` passed with it up (False).

    rclpy offers no event for a shutdown made by its signal thread, so this polls the context's
    validity, a flag rcl sets after the middleware's shutdown returned.
    """
    deadline = time.monotonic() + timeout_s
    while context.ok():
        if time.monotonic() >= deadline:
            log.debug("the context is still up %.1f s after the stop", timeout_s)
            return False
        time.sleep(0.005)
    return True

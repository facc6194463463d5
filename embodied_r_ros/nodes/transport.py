"""Transport settings: the QoS of the query interfaces, and Fast DDS for large raw frames.

``QUERY_QOS``: reliable with a 256-deep history on both sides of ``/embodied_r/query``. With
the default depth 10, a burst of 100 calls from 10 clients loses replies on the client side;
with 256 every call is answered or refused with BUSY (the burst test of
``test/test_ros_robustness.py``). Clients in other languages should use the same depth.

Large frames: only processes that *publish* big frames need this (the bag player, the
benchmarks, a camera driver): with Fast DDS the sender's shared-memory segment decides whether a
frame travels through shared memory or through fragmented UDP, where best-effort frames get
lost (see the XML's comment).

Memory for large frames (a 4K ``rgb8`` camera, 23.7 MiB a frame): the image subscriptions keep
a history of ``IMAGE_HISTORY`` frames (sensor-data QoS keeps 5, which DDS holds as 5 full-size
payloads), and :func:`return_large_buffers_to_the_os` stops glibc's heap from keeping freed
frame-sized buffers: its mmap threshold otherwise rises to the frame size after the first free,
so later frames come from per-thread arenas that never shrink. With both, the 4K stream's RSS
stays at 299 MiB (idle 172); without them it stood at 647 MiB a minute after a 10 s stream
(``results/bench/ros_ingest_4k.md``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from pathlib import Path

from rclpy.duration import Duration
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    LivelinessPolicy,
    QoSProfile,
    ReliabilityPolicy,
)

from embodied_r_ros.core.config import CONFIG_DIR

QUERY_QOS = QoSProfile(depth=256, reliability=ReliabilityPolicy.RELIABLE)

#: a goal server's process stays alive this long without asserting its liveliness. Fast DDS
#: asserts it from its own threads, so a process whose Python is paused (a full garbage
#: collection, a lazy import of a C extension, a starved CPU) stays alive, and a killed one is
#: lost this long after its last assertion
ALIVE_LEASE_SEC = 2.0
#: the QoS of a goal server's ``<action>/alive`` topic: nothing is published on it, its DDS
#: liveliness is the message
ALIVE_QOS = QoSProfile(depth=1, liveliness=LivelinessPolicy.AUTOMATIC,
                       liveliness_lease_duration=Duration(seconds=ALIVE_LEASE_SEC))

#: frames a camera subscription holds before its callback takes them; the frame buffer keeps
#: about one a second, so two leave slack while bounding DDS's payload pool to two frames
IMAGE_HISTORY = 2
#: sensor-data QoS (best effort, volatile) with that history
IMAGE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=IMAGE_HISTORY,
                       reliability=ReliabilityPolicy.BEST_EFFORT,
                       durability=DurabilityPolicy.VOLATILE)
#: allocations at least this large are mapped (and unmapped on free) rather than kept in a
#: heap: a 720p RGB frame (2.6 MiB) and larger. Not 1 MiB: the reasoning engine's per-token
#: buffers (1-2 MiB for the 135M reasoner on CTranslate2) would be mapped and faulted in anew
#: on every token, 1.69x the reply time in a node process against 1.05x at 2 MiB
#: (``results/records/bench/node_malloc_threshold.md``)
MMAP_THRESHOLD = 2 << 20
#: heaps (arenas) the executor's threads share: each one more keeps its own freed fragments
MALLOC_ARENAS = 2
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8  # glibc's mallopt parameter numbers

log = logging.getLogger(__name__)


def return_large_buffers_to_the_os(threshold: int = MMAP_THRESHOLD,
                                   arenas: int = MALLOC_ARENAS) -> bool:
    """Fix glibc's mmap threshold and cap its arenas (``mallopt``), so frame-sized buffers go
    back to the OS when freed; False where the C library is not glibc (nothing changes)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is None or os.uname().sysname != "Linux":
        return False
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(mallopt(_M_ARENA_MAX, arenas))
    if not done:
        log.debug("mallopt was refused")
    return done


#: the (namespace-relative) internal actions of the perception and reasoning nodes (each node's
#: ``~/perceive`` and ``~/reason`` under its default name)
PERCEPTION_ACTION = "perception/perceive"
REASONING_ACTION = "reasoning/reason"


def window_service_name(camera: str) -> str:
    """The (namespace-relative) GetWindow service of camera ``camera``'s frame buffer."""
    return f"frames/{camera}/get_window"


def alive_topic(action: str) -> str:
    """The topic whose liveliness (:data:`ALIVE_QOS`) says the server of ``action`` is alive."""
    return f"{action}/alive"


def stored_frames_topic(camera: str) -> str:
    """The (namespace-relative) topic of a frame buffer's stored frames (``StoredFrame``)."""
    return f"frames/{camera}/stored"

LARGE_FRAMES_PROFILE = CONFIG_DIR / "fastdds_large_frames.xml"
_PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")


def large_frame_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the large-frame profile, unless the user already
    chose a Fast DDS profile or another RMW. Call before ``rclpy.init``."""
    out = dict(os.environ if env is None else env)
    rmw = out.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    if rmw.startswith("rmw_fastrtps") and not any(out.get(v) for v in _PROFILE_VARS):
        if Path(LARGE_FRAMES_PROFILE).is_file():
            out["FASTDDS_DEFAULT_PROFILES_FILE"] = str(LARGE_FRAMES_PROFILE)
    return out


def use_large_frame_transport() -> None:
    """Apply :func:`large_frame_env` to this process (before its first node is created)."""
    os.environ.update(large_frame_env())

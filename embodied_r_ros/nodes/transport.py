"""Transport settings: the QoS of the query interfaces, and Fast DDS for large raw frames.

``QUERY_QOS``: reliable with a 256-deep history on both sides of ``/embodied_r/query``. With
the default depth 10, a burst of 100 calls from 10 clients lost 28-35 replies on the client
side; with 256 every call was answered (or refused with BUSY) in 2.5 s. Clients in other
languages should use the same depth.

Large frames: only processes that *publish* big frames need this (the bag player, the
benchmarks, a camera driver): with Fast DDS the sender's shared-memory segment decides whether a
frame travels through shared memory or through fragmented UDP, where best-effort frames get
lost (see the XML's comment).
"""

from __future__ import annotations

import os
from pathlib import Path

from rclpy.qos import QoSProfile, ReliabilityPolicy

from embodied_r_ros.core.config import CONFIG_DIR

QUERY_QOS = QoSProfile(depth=256, reliability=ReliabilityPolicy.RELIABLE)


def window_service_name(camera: str) -> str:
    """The (namespace-relative) GetWindow service of camera ``camera``'s frame buffer."""
    return f"frames/{camera}/get_window"


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

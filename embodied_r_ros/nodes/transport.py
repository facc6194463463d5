"""Fast DDS settings for publishing large raw frames on one host (see the XML's comment).

Only processes that *publish* big frames need this (the bag player, the benchmarks, a camera
driver): with Fast DDS the sender's shared-memory segment decides whether a frame travels
through shared memory or through fragmented UDP, where best-effort frames get lost.
"""

from __future__ import annotations

import os
from pathlib import Path

from embodied_r_ros.core.config import CONFIG_DIR

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

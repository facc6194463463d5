"""Frame-sized buffers go back to the OS: a 4K camera's freed frames must not stay in glibc's
heaps, growing the RSS by hundreds of MiB within a minute. Checked in fresh processes (malloc
state is per process); the full figures at 4K are in ``results/bench/ros_ingest_4k.md``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ros_helpers import require_ros

require_ros()

PROBE = """
import sys, threading
from pathlib import Path
if sys.argv[1] == "tuned":
    from embodied_r_ros.nodes.transport import return_large_buffers_to_the_os
    assert return_large_buffers_to_the_os()

def rss_mib():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

base = rss_mib()

def frames():  # what ingestion does per kept 4K frame: raw bytes, then a copy of them
    for _ in range(6):
        raw = bytearray(24 << 20)
        copy = bytes(raw)
        del raw, copy

threads = [threading.Thread(target=frames) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(rss_mib() - base)
"""


def _kept_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, timeout=120,
                         capture_output=True, text=True)
    return float(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tunables")
def test_freed_frame_buffers_are_returned_to_the_os() -> None:
    untuned, tuned = _kept_mib("default"), _kept_mib("tuned")
    assert untuned > 48  # glibc's default keeps at least two freed 24 MiB buffers
    assert tuned < 8, (untuned, tuned)

"""A perception node process whose first goal holds the GIL for a few seconds before its work
starts, as a fresh process's first full garbage collection or a lazy import of a C extension
does on a loaded machine: nothing in the process runs Python meanwhile, its heartbeat included.

Run: ``python test/paused_perception.py SECONDS --ros-args ...`` (the perception node's
arguments).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from embodied_r_ros.nodes import perception_node


def main() -> int:
    seconds = int(sys.argv.pop(1))
    images = perception_node.PerceptionNode._images
    paused: list[bool] = []

    def paused_images(self: Any, goal: Any) -> Any:
        if not paused:
            paused.append(True)
            ctypes.PyDLL(None).sleep(seconds)  # libc's sleep, called with the GIL held
        return images(self, goal)

    perception_node.PerceptionNode._images = paused_images  # type: ignore[method-assign]
    return perception_node.main()


if __name__ == "__main__":
    raise SystemExit(main())

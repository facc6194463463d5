"""``python -m embodied_r_ros [--ros-args ...]``: every node in one process (see nodes.allinone)."""

from __future__ import annotations

import sys


def main() -> int:
    from embodied_r_ros.nodes.allinone import main as allinone

    return allinone(sys.argv)


if __name__ == "__main__":
    sys.exit(main())

"""Shared by the benchmarks: where their figures go, and what a figures file records.

A figures file says what was run (the command line, every setting) and on what (CPUs, load
average, Python), so a reader can rerun it and judge how comparable two files are.
``make bench`` writes each benchmark's file to ``results/bench/<name>.json``
(``bench/run_all.py``); a benchmark run by hand writes one only when given ``--json``.

Importing this module puts the checkout's root and ``training/`` on the path: the lab (``lab/``:
the long world, benchmark replays) is never installed, and the benchmarks that use it import it
from there; where the project is not installed either (a lent GPU machine, ``bench/gpu_check.sh``)
its packages are found there too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "bench"
for _path in (str(ROOT), str(ROOT / "training")):
    if _path not in sys.path:
        sys.path.append(_path)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json PATH``: also write the figures there."""
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the figures there (make bench: results/bench/)")


def machine() -> dict[str, Any]:
    """What the figures depend on besides the code: the CPUs and how busy they were."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("model name")), "")
    return {"cpus": os.cpu_count(), "cpu_model": model or platform.processor(),
            "load_average_1min": round(os.getloadavg()[0], 2),
            "python": platform.python_version(), "platform": platform.platform()}


def without_json(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--json PATH`` (where the figures went is not how they were made)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip or arg.startswith("--json="):
            skip = False
            continue
        skip = arg == "--json"
        if not skip:
            out.append(arg)
    return out


def write_figures(path: Path | None, bench: str, argv: Sequence[str] | None,
                  args: argparse.Namespace, figures: dict[str, Any],
                  headline: dict[str, Any] | None = None) -> None:
    """Writes ``figures`` with the command (``argv``: the benchmark's arguments, None for
    ``sys.argv``), the settings and the machine to ``path``; ``headline``: the figures a
    benchmark's targets are stated in, at the top level beside them."""
    if path is None:
        return
    argv = sys.argv[1:] if argv is None else argv
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k != "json"}
    record = {"bench": bench, "command": shlex.join([f"bench/{bench}.py", *without_json(argv)]),
              **(headline or {}), "settings": settings, "machine": machine(),
              "figures": figures}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

"""The reasoning engine inside a ROS node process: what does the node's malloc setting cost it?

Node processes fix glibc's mmap threshold (``nodes/transport.py``) so that freed frame buffers
go back to the OS. Any allocation at or over the threshold is mapped on malloc and unmapped on
free, so its pages are faulted in (and zeroed) on every use. This times the shipped reasoner on
CTranslate2 (the ``offline`` profile's backend) over the demo's first ``--questions`` prompts
in fresh processes with glibc's defaults, with a 1 MiB threshold (until this change) and with
the threshold the nodes use now, in rounds (A B C A B C ...) so that a change in machine load
falls on every setting; per setting: the median reply time, the page faults and the system
time per reply. The replies must be identical.

Run: ``.venv/bin/python bench/lm_node_malloc.py [--data DIR] [--questions 8] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lm_engines import DEFAULT_DATA, demo_rows

from embodied_r_ros.nodes.transport import MMAP_THRESHOLD

SETTINGS = {"glibc default": 0, "1 MiB (before)": 1 << 20,
            f"{MMAP_THRESHOLD >> 20} MiB (nodes now)": MMAP_THRESHOLD}


def child(threshold: int, rows_file: Path, questions: int) -> dict:
    """Replies in this process after setting ``threshold`` as a node does (0: untouched)."""
    if threshold:
        from embodied_r_ros.nodes.transport import return_large_buffers_to_the_os

        if not return_large_buffers_to_the_os(threshold=threshold):
            raise SystemExit("mallopt refused (not glibc?)")
    from embodied_r_ros.core.backends.ctranslate2_backend import CTranslate2Backend
    from embodied_r_ros.core.config import load_config

    rows = [json.loads(line) for line in rows_file.read_text().splitlines()][:questions]
    backend = CTranslate2Backend(load_config(profile="offline").reasoning.model)
    backend.complete([r["prompt"] for r in rows[:2]], max_new_tokens=4, cancel=None,
                     on_reply=lambda i, c: None)  # warm: load, the shared prefix seen twice
    before = resource.getrusage(resource.RUSAGE_SELF)
    times, texts = [], []
    for row in rows:
        t = time.perf_counter()
        texts.append(backend.complete([row["prompt"]], stop=["</answer>"])[0].text)
        times.append(time.perf_counter() - t)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"times": times, "texts": texts, "faults": after.ru_minflt - before.ru_minflt,
            "system_s": after.ru_stime - before.ru_stime}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows_file = args.data / "demo" / "data.jsonl"
    if args.child is not None:
        print(json.dumps(child(args.child, rows_file, args.questions)))
        return 0
    demo_rows(args.data)  # built once
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, threshold in SETTINGS.items():
            out = subprocess.run([sys.executable, __file__, "--child", str(threshold),
                                  "--data", str(args.data), "--questions", str(args.questions)],
                                 check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
    replies = args.questions * args.rounds
    base = sum(sum(r["times"]) for r in runs["glibc default"])
    texts = {name: [t for r in rs for t in r["texts"]] for name, rs in runs.items()}
    for name, rs in runs.items():
        times = [t for r in rs for t in r["times"]]
        print(f"{name:>18}: p50 {statistics.median(times):.2f} s a reply, "
              f"{sum(r['faults'] for r in rs) / replies:,.0f} page faults and "
              f"{sum(r['system_s'] for r in rs) / replies:.2f} s system time a reply, "
              f"{sum(times) / base:.2f}x the default's total time")
    same = all(t == texts["glibc default"] for t in texts.values())
    print(f"identical replies under every setting: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

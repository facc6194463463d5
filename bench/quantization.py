"""The reasoner's GGUF quantisations side by side: what does 4-bit cost a robot's answers?

The shipped reasoner (``smollm2-135m-embodied-r``) is converted by the ``llamacpp`` backend's
own path (``gguf_export``: float16, Q8_0, and the 4-bit Q4_K_M and Q4_0 made by llama.cpp's
quantiser) and every build answers the demo's 30 questions (``embodied_r_ros/demo.py``'s sample
world, seed 7, as ``bench/lm_engines.py`` builds them) greedily with the ``offline`` profile's
settings: 320 new tokens, two threads a reply. All builds are loaded at once and take turns
question by question, so a change in the machine's load falls on all of them alike.

Per build: the GGUF file's size, p50 and p95 seconds a question and their ratios to float16,
and how many of the 30 answers equal float16's. Bound (exit 1 when missed): a build that loses
more than ``--max-lost`` (2) of the 30 answers against float16 is reported as not fit to be a
default; the script fails when the build named by ``--default`` (the one the ``jetson`` and
``offline`` profiles ship, float16) is such a build.

Run: ``.venv/bin/python bench/quantization.py [--threads 2] [--json PATH --md PATH]``;
``--from-json FILE --md PATH`` writes the report of a figures file again. With ``--json`` the
figures of the questions answered so far are written after each question (``complete``: false
until the last), so a run stopped early keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _figures import add_json_option, write_figures
from lm_engines import DEFAULT_DATA, REASONER, demo_rows, percentile

BUILDS = ("float16", "int8", "q4_k_m", "q4_0")
LABELS = {"float16": "F16", "int8": "Q8_0", "q4_k_m": "Q4_K_M", "q4_0": "Q4_0"}
MAX_NEW = 320  # the offline profile's


def measure(args: argparse.Namespace,
            checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every build answers the demo's questions in turn; ``checkpoint`` gets the figures of
    the questions answered so far after each one."""
    from embodied_r_ros.backends import llamacpp_backend
    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.backends.offline import ensure_offline_model
    from embodied_r_ros.core.config import ModelConfig
    from embodied_r_ros.core.reasoning import parse_reasoning

    rows = demo_rows(args.data)[: args.questions]
    model_dir = ensure_offline_model(REASONER, args.model_cache)
    builds = args.builds.split(",")
    out: dict[str, dict[str, Any]] = {}
    backends = {}
    with tempfile.TemporaryDirectory(prefix="quantization-") as cache:
        for build in builds:
            t0 = time.perf_counter()
            path = llamacpp_backend.ensure_converted(str(model_dir), build, cache)
            out[build] = {"gguf": LABELS[build], "convert_s": time.perf_counter() - t0,
                          "file_mb": (path / llamacpp_backend.MODEL_FILE).stat().st_size / 2**20,
                          "latency_s": [], "answers": [], "new_tokens": []}
            cfg = ModelConfig(backend="llamacpp", model=str(model_dir), quantization=build,
                              device="cpu", max_new_tokens=MAX_NEW,
                              threads_per_reply=args.threads)
            backends[build] = create_backend(cfg, cache_dir=cache, text_only=True)
            backends[build].complete([rows[0]["prompt"]], max_new_tokens=8)  # warm-up
        for i, row in enumerate(rows):
            for build in builds:  # question by question, every build in turn
                t0 = time.perf_counter()
                reply = backends[build].complete([row["prompt"]])[0]
                out[build]["latency_s"].append(time.perf_counter() - t0)
                out[build]["new_tokens"].append(reply.completion_tokens or 0)
                out[build]["answers"].append(parse_reasoning(reply.text, row["options"]).answer)
            print(f"question {i + 1}/{len(rows)}", flush=True)
            if checkpoint is not None and i + 1 < len(rows):
                checkpoint(summarise(out, builds, rows[: i + 1], args))
        for backend in backends.values():
            backend.close()
    return summarise(out, builds, rows, args)


def summarise(out: dict[str, dict[str, Any]], builds: list[str], rows: list[dict[str, Any]],
              args: argparse.Namespace) -> dict[str, Any]:
    """The figures of ``rows`` (the questions answered so far), added to each build's."""
    truth = [row["solution"] for row in rows]
    base = out[builds[0]]
    for r in out.values():
        r["p50_s"] = statistics.median(r["latency_s"])
        r["p95_s"] = percentile(r["latency_s"], 95)
        r["p50_ratio"] = r["p50_s"] / base["p50_s"]
        r["p95_ratio"] = r["p95_s"] / base["p95_s"]
        r["same_answers"] = sum(a == b for a, b in zip(r["answers"], base["answers"],
                                                       strict=True))
        r["lost"] = len(rows) - r["same_answers"]
        r["correct"] = sum(a == t for a, t in zip(r["answers"], truth, strict=True))
        r["fit_for_default"] = r["lost"] <= args.max_lost
    return {"builds": out, "questions": len(rows), "reference": builds[0],
            "max_lost": args.max_lost, "default": args.default, "threads": args.threads}


def table(figures: dict[str, Any]) -> str:
    n = figures["questions"]
    lines = [
        f"| GGUF | file MiB | p50 s | p95 s | p50 / F16 | p95 / F16 | same answers as F16 "
        f"| correct | fit for a default (lost <= {figures['max_lost']}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in figures["builds"].values():
        lines.append(
            f"| {r['gguf']} | {r['file_mb']:.0f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} | "
            f"{r['p50_ratio']:.2f} | {r['p95_ratio']:.2f} | {r['same_answers']}/{n} | "
            f"{r['correct']}/{n} | {'yes' if r['fit_for_default'] else 'no'} |")
    return "\n".join(lines)


def markdown(record: dict[str, Any]) -> str:
    """The short report of a figures file: what was run, the table, the verdict."""
    figures, machine = record["figures"], record["machine"]
    n = figures["questions"]
    reference = LABELS[figures["reference"]]
    fit = [r["gguf"] for r in figures["builds"].values()
           if r["fit_for_default"] and r["gguf"] != reference]
    tokens = ", ".join(f"{r['gguf']} {sum(r['new_tokens']) / n:.0f}"
                       for r in figures["builds"].values())
    verdict = (f"{', '.join(fit)} may." if fit else
               "none does, so no profile ships a quantised reasoner as its default: `offline` "
               "and `jetson` run F16, and the other types are options.")
    return "\n\n".join([
        "# The shipped reasoner's GGUF types side by side",
        f"`{record['command']}`: `{REASONER}` on the `llamacpp` backend, each GGUF type "
        f"converted by the backend's own path, greedy, {MAX_NEW} new tokens at most, "
        f"{figures['threads']} thread(s) a reply, the demo's {n} questions, every build in "
        f"turn question by question; {machine['cpus']} CPUs ({machine['cpu_model']}), load "
        f"average {machine['load_average_1min']} (other work shared the cores, so the seconds "
        "are slow; the ratios, measured side by side, are the figures to read).",
        table(figures),
        f"Mean new tokens a reply: {tokens}.",
        f"A type may lose at most {figures['max_lost']} of the {n} answers against {reference} "
        f"to be a default; {verdict}",
    ]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", default=",".join(BUILDS),
                        help="quantisations, the reference first (default: %(default)s)")
    parser.add_argument("--questions", type=int, default=30, help="demo questions (30: all)")
    parser.add_argument("--max-lost", type=int, default=2,
                        help="answers a default build may lose against the reference")
    parser.add_argument("--default", default="float16",
                        help="the build a profile ships as its default (checked against the bound)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads a reply (the offline profile's: 2)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model-cache", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None, help="also write the table here")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="write the report (--md) of a figures file instead of measuring")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.from_json:
        text = markdown(json.loads(args.from_json.read_text()))
        print(text)
        if args.md:
            args.md.write_text(text)
        return 0
    args.data.mkdir(parents=True, exist_ok=True)
    def checkpoint(partial: dict[str, Any]) -> None:
        write_figures(args.json, "quantization", argv, args, {**partial, "complete": False})

    figures = measure(args, checkpoint)
    figures["complete"] = True
    text = table(figures)
    print(f"\n{figures['questions']} demo questions, greedy, {MAX_NEW} new tokens max, "
          f"{args.threads} threads a reply\n{text}")
    chosen = figures["builds"].get(args.default)
    missed = chosen is not None and not chosen["fit_for_default"]
    if chosen is not None:
        print(f"default {args.default}: loses {chosen['lost']} of {figures['questions']} "
              f"answers against {figures['reference']} "
              f"({'MISSED' if missed else 'ok'}, at most {args.max_lost})")
    figures["missed"] = missed
    write_figures(args.json, "quantization", argv, args, figures)
    if args.md and args.json:
        args.md.write_text(markdown(json.loads(args.json.read_text())))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The reasoning LM on CPU engines, side by side: is a 135M reasoner fast enough for a robot?

Every engine runs the shipped reasoner (``smollm2-135m-embodied-r``, the LoRA-merged offline
model) greedily with the ``offline`` profile's settings (256 new tokens) in its own process, so
peak RSS is its own. Per engine:

  set-up     converting the checkpoint into the engine's format (cold, into a fresh directory);
             ``--measure-install`` also times ``pip install`` of the engine's package
  load       building the backend from the converted files
  prefill    prompt tokens/s (one new token per demo prompt; prefix caches on, as in use)
  decode     new tokens/s over the demo questions (reply time minus that prompt's prefill)
  p50/p99    reasoning seconds per question on the demo's 30 questions
  agreement  the same answer letter as transformers fp32 on the in-distribution test questions,
             and each engine's accuracy with its 95 % bootstrap interval

Engines: ``transformers`` (fp32, the reference), ``llamacpp-float16`` / ``llamacpp-int8`` /
``llamacpp-float32`` (the ``llamacpp`` backend, the offline profile's: its own GGUF conversion,
``--threads`` threads a reply, 2 by default) and ``ct2-int8`` / ``ct2-float32`` (the
``ctranslate2`` backend, the fallback without llama-cpp-python). Engines whose package is not
installed are listed as such.

Prompts: the demo's sample world (seed 7, 30 questions) and the ID test split (seeds 3000+,
30 a category; ``--id-per-category`` takes the first N of each), built as ``embodied-r-train
build --profile offline`` builds them, into ``--data`` once (the perception code the demo's
pipeline runs).
transformers' ID replies, the agreement reference, are generated in batches and cached in
``--data`` keyed by the model's files and the prompts (``--id-only`` builds just them,
resumably), since they take the longest.

Targets (the chosen engine, ``--target``): p50 <= 3 s, p99 <= 6 s, agreement >= 95 %.
Run: ``.venv/bin/python bench/lm_engines.py [--engines transformers,llamacpp-float16,ct2-int8]
[--id-per-category 30] [--measure-install] [--json PATH]``; ``--from-json FILE [--run LABEL]``
prints the table of a figures file again (``results/records/bench/lm_engines_*.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _figures import add_json_option, write_figures

REASONER = "smollm2-135m-embodied-r"
MAX_NEW = 256
DEMO_SEED = 7
TARGET_P50_S, TARGET_P99_S, TARGET_AGREEMENT = 3.0, 6.0, 0.95
PACKAGES = {"transformers": "transformers", "ct2": "ctranslate2", "llamacpp": "llama-cpp-python"}
MODULES = {"transformers": "transformers", "ct2": "ctranslate2", "llamacpp": "llama_cpp"}
DEMO_TRUTH = "demo_truth"
DEFAULT_DATA = Path("~/.cache/embodied_r/bench-lm").expanduser()


# -- data ------------------------------------------------------------------------------------

def demo_rows(data: Path) -> list[dict]:
    """The demo's 30 rows, built once into ``data/demo`` by the offline pipeline."""
    from embodied_r_ros.reading.text_decides import TextDecides
    from embodied_r_ros.sim.generate import ensure_sample
    from embodied_r_training.data.builders import build_from_bag, perception_config
    from embodied_r_training.data.splits import SplitOptions

    demo = data / "demo"
    if not (demo / "data.jsonl").is_file():
        paths = ensure_sample(data / "sample-world", decides=TextDecides)
        build_from_bag(paths.bag, paths.questions, demo, image_topic="/camera/image_raw",
                       odom_topic="/odom", config=perception_config("offline"),
                       splits=SplitOptions(by="question", folds=0), progress=False)
    return _rows(demo / "data.jsonl")


def build_data(data: Path, id_per_category: int) -> tuple[list[dict], list[dict]]:
    """The demo's 30 rows and the ID test rows (built once into ``data``)."""
    from embodied_r_training.data.synthetic_worlds import build_synthetic, default_plan

    demo = demo_rows(data)
    test = next(s for s in default_plan(n_test_per_category=id_per_category) if s.name == "test")
    synth = data / "synthetic"
    if not (synth / "id" / "test.jsonl").is_file():
        build_synthetic(synth, [test])
    return demo, _rows(synth / "id" / "test.jsonl")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prompts_digest(rows: Sequence[dict]) -> str:
    return hashlib.sha256(json.dumps([r["prompt"] for r in rows]).encode()).hexdigest()[:16]


# -- one engine (runs in a child process) ----------------------------------------------------

def make_backend(engine: str, model_dir: Path, cache: Path, threads: int) -> Any:
    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.core.config import ModelConfig

    if engine == "transformers":
        cfg = ModelConfig(backend="transformers", model=str(model_dir), dtype="float32",
                          device="cpu", max_new_tokens=MAX_NEW, batch_size=1)
        return create_backend(cfg, text_only=True)
    if engine.startswith("ct2-"):
        cfg = ModelConfig(backend="ctranslate2", model=str(model_dir), device="cpu",
                          quantization=engine[4:], max_new_tokens=MAX_NEW)
        return create_backend(cfg, cache_dir=cache, text_only=True)
    if engine.startswith("llamacpp-"):  # the project's backend, as the offline profile runs it
        cfg = ModelConfig(backend="llamacpp", model=str(model_dir), device="cpu",
                          quantization=engine[9:], max_new_tokens=MAX_NEW,
                          threads_per_reply=threads or 2)
        return create_backend(cfg, cache_dir=cache, text_only=True)
    raise ValueError(engine)


def run_engine(args: argparse.Namespace) -> dict[str, Any]:
    """Set-up, load, prefill, latency and ID answers of one engine (child process)."""
    from embodied_r_ros.backends.offline import ensure_offline_model
    from embodied_r_ros.core.reasoning import parse_reasoning

    engine = args.worker
    demo, id_rows = (_rows(Path(p)) for p in (args.demo_rows, args.id_rows))
    id_rows = id_rows[: args.id_limit or None]
    model_dir = ensure_offline_model(REASONER, args.model_cache)
    result: dict[str, Any] = {"engine": engine}
    with tempfile.TemporaryDirectory(prefix="lm-engine-") as tmp:
        t0 = time.perf_counter()
        if engine.startswith("ct2-"):
            from embodied_r_ros.backends.ctranslate2_backend import ensure_converted

            ensure_converted(str(model_dir), engine[4:], tmp)
            result["convert_s"] = time.perf_counter() - t0
        elif engine.startswith("llamacpp-"):
            from embodied_r_ros.backends import llamacpp_backend

            llamacpp_backend.ensure_converted(str(model_dir), engine[9:], tmp)
            result["convert_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        backend = make_backend(engine, model_dir, Path(tmp), args.threads)
        result["load_s"] = time.perf_counter() - t0
        if args.id_only:  # the transformers reference alone (resumable, batched)
            backend.close()
            reference_texts(Path(args.reference), id_rows, model_dir, args.ref_batch,
                            generate=True)
            return result
        demo = demo[: args.demo_questions]
        if engine == "transformers":  # the slow baseline: timed on the first N questions
            demo = demo[: args.baseline_questions]
        convs = [r["prompt"] for r in demo]
        backend.complete(convs[:1], max_new_tokens=MAX_NEW)  # warm-up (not timed)
        prefill_s, prompt_tokens = [], 0
        for conv in convs[: args.prefill_prompts]:
            t0 = time.perf_counter()
            c = backend.complete([conv], max_new_tokens=1)[0]
            prefill_s.append(time.perf_counter() - t0)
            prompt_tokens += c.prompt_tokens or 0
        per_token_prefill = sum(prefill_s) / max(1, prompt_tokens)
        latency, new_tokens, replies, prefill_est = [], [], [], []
        for conv in convs:
            t0 = time.perf_counter()
            c = backend.complete([conv], max_new_tokens=MAX_NEW)[0]
            latency.append(time.perf_counter() - t0)
            new_tokens.append(c.completion_tokens or 0)
            replies.append(c.text)
            prefill_est.append((c.prompt_tokens or 0) * per_token_prefill)
        # decode time: the reply's time minus its prompt's prefill at the measured rate
        decode_s = sum(max(1e-6, t - p) for t, p in zip(latency, prefill_est, strict=True))
        result.update(
            prompt_tokens_mean=prompt_tokens / len(prefill_s),
            prefill_tok_s=prompt_tokens / sum(prefill_s),
            decode_tok_s=sum(max(0, n - 1) for n in new_tokens) / decode_s,
            new_tokens_mean=statistics.mean(new_tokens),
            p50_s=statistics.median(latency), p99_s=percentile(latency, 99),
            max_s=max(latency), latency_s=latency,
            demo_answers=[parse_reasoning(t, r["options"]).answer for t, r in zip(replies, demo,
                                                                                  strict=True)],
            **{DEMO_TRUTH: [r["solution"] for r in demo]},
        )
        if engine == "transformers":
            # what the reference run (--id-only) has made so far: agreement is over those
            texts = reference_texts(Path(args.reference), id_rows, model_dir, args.ref_batch,
                                    generate=False)
            result["id_from_cache"] = True
        elif engine in args.skip_id.split(","):
            texts = []
        else:
            t0 = time.perf_counter()
            # one call: the backend replies to each prompt alone, one per worker
            texts = [c.text for c in backend.complete([row["prompt"] for row in id_rows],
                                                      max_new_tokens=MAX_NEW)]
            result["id_s"] = time.perf_counter() - t0
        result["id_answers"] = [parse_reasoning(t, r["options"]).answer
                                for t, r in zip(texts, id_rows, strict=False)]
        backend.close()
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def reference_texts(path: Path, rows: Sequence[dict], model_dir: Path, batch: int, *,
                    generate: bool) -> list[str]:
    """transformers fp32 greedy replies to the ID rows, the agreement reference: generated
    (``generate``) ``batch`` rows at a time (left-padded; the slowest part of the benchmark)
    and saved after every batch, so an interrupted run resumes and later runs reuse them;
    without ``generate``, the replies saved so far."""
    import fcntl

    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.core.config import ModelConfig

    lock = path.with_suffix(".lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others then read its file
    texts: list[str] = json.loads(path.read_text())["texts"] if path.is_file() else []
    if len(texts) >= len(rows) or not generate:
        lock.close()
        return texts[: len(rows)]
    cfg = ModelConfig(backend="transformers", model=str(model_dir), dtype="float32",
                      device="cpu", max_new_tokens=MAX_NEW, batch_size=batch)
    backend = create_backend(cfg, text_only=True)
    for start in range(len(texts), len(rows), batch):
        part = rows[start : start + batch]
        texts += backend.generate([r["prompt"] for r in part], max_new_tokens=MAX_NEW)
        path.write_text(json.dumps({"texts": texts, "batch": batch}))
        print(f"transformers reference: {len(texts)}/{len(rows)}", flush=True)
    backend.close()
    lock.close()
    return texts


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), without numpy."""
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# -- the parent: one child per engine, the table ---------------------------------------------

def _family(engine: str) -> str:
    return engine.partition("-")[0]


def package_of(engine: str) -> str:
    return PACKAGES[_family(engine)]


def installed(engine: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(MODULES[_family(engine)]) is not None


def measure_install(package: str) -> float | None:
    """Seconds for ``pip install --no-deps`` of ``package`` into a throw-away target."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                               "--no-cache-dir", "--target", tmp, package],
                              capture_output=True, text=True)
        return time.perf_counter() - t0 if proc.returncode == 0 else None


def reference_path(data: Path, model_dir: Path, rows: Sequence[dict]) -> Path:
    from embodied_r_ros.backends.local_engine import source_digest

    key = f"{source_digest(model_dir)[:16]}-{prompts_digest(rows)}"
    return data / f"transformers-id-{key}.json"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="transformers,llamacpp-float16,llamacpp-int8,ct2-int8")
    parser.add_argument("--target", default="llamacpp-float16",
                        help="the engine the targets apply to")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model-cache", type=Path, default=None,
                        help="offline model cache (default: $EMBODIED_R_MODEL_CACHE)")
    parser.add_argument("--id-per-category", type=int, default=30,
                        help="ID test questions per category (30: all 180)")
    parser.add_argument("--id-limit", type=int, default=0,
                        help="only the first N of those (0: all)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--ref-batch", type=int, default=8,
                        help="rows per transformers call for the ID reference")
    parser.add_argument("--prefill-prompts", type=int, default=30,
                        help="demo prompts timed for prefill (one new token each)")
    parser.add_argument("--demo-questions", type=int, default=30,
                        help="demo questions timed on every engine (30: all)")
    parser.add_argument("--baseline-questions", type=int, default=10,
                        help="demo questions timed on transformers (the slow baseline)")
    parser.add_argument("--skip-id", default="",
                        help="engines (comma-separated) whose ID agreement is not measured")
    parser.add_argument("--id-only", action="store_true",
                        help="only build the transformers ID reference (resumable)")
    parser.add_argument("--measure-install", action="store_true")
    add_json_option(parser)
    parser.add_argument("--from-json", type=Path, default=None,
                        help="print the table of a figures file (of the run --run names)")
    parser.add_argument("--run", default=None,
                        help="with --from-json: the run of a file that holds several")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--demo-rows", help=argparse.SUPPRESS)
    parser.add_argument("--id-rows", help=argparse.SUPPRESS)
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        Path(args.out).write_text(json.dumps(run_engine(args)))
        return 0

    from embodied_r_ros.backends.offline import ensure_offline_model
    from embodied_r_ros.intervals import bootstrap_ci
    from embodied_r_training.data.dataset_files import first_per_category

    if args.from_json:
        results = engines_of(json.loads(args.from_json.read_text()), args.run)
        _, id_rows = build_data(args.data, id_per_category=30)
        args.json = None
        id_rows = first_per_category(id_rows, args.id_per_category)[: args.id_limit or None]
        return report(results, args, argv, id_rows, bootstrap_ci)
    args.data.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    demo, id_rows = build_data(args.data, id_per_category=30)
    id_rows = first_per_category(id_rows, args.id_per_category)
    model_dir = ensure_offline_model(REASONER, args.model_cache)
    ref = reference_path(args.data, model_dir, id_rows)  # keyed by the whole balanced set
    print(f"data ready in {time.perf_counter() - t0:.0f} s: {len(demo)} demo questions, "
          f"{len(id_rows)} ID test questions; model {model_dir}", flush=True)
    rows_file = args.data / "id-rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in id_rows))
    id_rows = id_rows[: args.id_limit or None]
    results: dict[str, dict[str, Any]] = {}
    for engine in args.engines.split(","):
        if not installed(engine):
            why = f"{package_of(engine)} not installed"
            print(f"{engine}: skipped ({why})", flush=True)
            results[engine] = {"engine": engine, "skipped": why}
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, __file__, "--worker", engine, "--demo-rows",
                   str(args.data / "demo" / "data.jsonl"), "--id-rows", str(rows_file),
                   "--out", out.name, "--prefill-prompts", str(args.prefill_prompts),
                   "--skip-id", args.skip_id,
                   "--demo-questions", str(args.demo_questions),
                   "--baseline-questions", str(args.baseline_questions),
                   "--id-limit", str(args.id_limit),
                   "--threads", str(args.threads)]
            if args.model_cache:
                cmd += ["--model-cache", str(args.model_cache)]
            if engine == "transformers":
                cmd += ["--reference", str(ref), "--ref-batch", str(args.ref_batch)]
                if args.id_only:
                    cmd += ["--id-only"]
            t0 = time.perf_counter()
            print(f"{engine}: running ...", flush=True)
            proc = subprocess.run(cmd)
            if proc.returncode != 0:
                results[engine] = {"engine": engine, "skipped": f"failed ({proc.returncode})"}
                continue
            results[engine] = json.loads(Path(out.name).read_text())
            print(f"{engine}: done in {time.perf_counter() - t0:.0f} s", flush=True)
        if args.id_only:
            return 0
        if args.measure_install:
            results[engine]["install_s"] = measure_install(package_of(engine))
    return report(results, args, argv, id_rows, bootstrap_ci)


def engines_of(record: dict[str, Any], run: str | None) -> dict[str, dict[str, Any]]:
    """The per-engine figures of a figures file: one this script wrote (``figures.engines``),
    or one run (``run``) of a file that holds several (``runs.<label>.engines``)."""
    if "runs" in record:
        runs = record["runs"]
        if run not in runs:
            raise SystemExit(f"--run: one of {', '.join(runs)}")
        return runs[run]["engines"]
    return record["figures"]["engines"]


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace,
           argv: Sequence[str] | None, id_rows: list[dict], bootstrap_ci: Any) -> int:
    truth = [r["solution"] for r in id_rows]
    ref = results.get("transformers", {}).get("id_answers")
    timed = {e: len(r[DEMO_TRUTH]) for e, r in results.items() if DEMO_TRUTH in r}
    where = (f"figures of {args.from_json}" if args.from_json else
             f"{MAX_NEW} new tokens max, greedy, {os.cpu_count()} CPUs, load average "
             f"{os.getloadavg()[0]:.1f}")
    print(f"\ndemo questions timed {timed}, {len(id_rows)} ID test questions "
          f"(agreement with transformers fp32), {where}")
    head = (f"{'engine':<16}{'install s':>10}{'convert s':>10}{'load s':>8}{'prefill t/s':>12}"
            f"{'decode t/s':>11}{'p50 s':>7}{'p99 s':>7}{'RSS MB':>8}{'agree % (n)':>13}"
            f"{'ID acc % [95% CI]':>20}{'demo acc':>9}")
    print(head)
    print("-" * len(head))
    failed = False
    for engine, r in results.items():
        if "skipped" in r:
            print(f"{engine:<16}skipped: {r['skipped']}")
            continue
        answers = r["id_answers"]
        n = min(len(answers), len(ref or []))
        agree = sum(a == b for a, b in zip(answers, ref or [], strict=False)) / n if n else None
        r["agreement_n"] = n
        correct = [float(a == t) for a, t in zip(answers, truth, strict=False)]
        low, high = bootstrap_ci(correct) if correct else (0.0, 0.0)
        demo_ok = sum(a == t for a, t in zip(r["demo_answers"], r[DEMO_TRUTH], strict=True))
        accuracy = statistics.mean(correct) if correct else None
        r.update(agreement=agree, id_accuracy=accuracy, id_ci=[low, high],
                 demo_correct=demo_ok)
        acc_text = "-" if accuracy is None else f"{100 * accuracy:.1f} [{100 * low:.0f}, " \
                                                 f"{100 * high:.0f}]"

        def f(key: str, fmt: str, r: dict = r) -> str:
            value = r.get(key)
            return format(value, fmt) if value is not None else "-".rjust(int(fmt[:-3] or 0))

        print(f"{engine:<16}{f('install_s', '10.1f')}{f('convert_s', '10.1f')}"
              f"{f('load_s', '8.2f')}{f('prefill_tok_s', '12.0f')}{f('decode_tok_s', '11.1f')}"
              f"{f('p50_s', '7.2f')}{f('p99_s', '7.2f')}{f('peak_rss_mb', '8.0f')}"
              f"{'-' if agree is None else f'{100 * agree:.1f} ({n})':>13}"
              f"{acc_text:>20}"
              f"{f'{demo_ok}/{len(r[DEMO_TRUTH])}':>9}")
    base = results.get("transformers", {})
    target = results.get(args.target, {})
    if "p50_s" in base and "p50_s" in target:
        print(f"\n{args.target} vs transformers: p50 {base['p50_s'] / target['p50_s']:.1f}x "
              f"faster, decode {target['decode_tok_s'] / base['decode_tok_s']:.1f}x, prefill "
              f"{target['prefill_tok_s'] / base['prefill_tok_s']:.1f}x")
    if "p50_s" in target:
        checks = [("p50", target["p50_s"], TARGET_P50_S, "<="),
                  ("p99", target["p99_s"], TARGET_P99_S, "<=")]
        if target.get("agreement") is not None:
            checks.append(("agreement", target["agreement"], TARGET_AGREEMENT, ">="))
        for name, value, bound, op in checks:
            ok = value <= bound if op == "<=" else value >= bound
            failed |= not ok
            print(f"target {args.target} {name} {value:.3f} {op} {bound}: "
                  f"{'ok' if ok else 'MISSED'}")
    else:
        print(f"target engine {args.target} was not measured")
        failed = True
    write_figures(args.json, "lm_engines", argv, args,
                  {"engines": results, "target": args.target, "missed": failed})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

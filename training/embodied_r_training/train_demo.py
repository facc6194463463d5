"""``make train-demo``: the CPU recipe ``smollm2-embodied-r`` from scratch, ending in its table.

It trains an adapter of the kind the ``offline`` profile reasons with (the shipped
``smollm2-135m-embodied-r`` is the adapter of one such run; ``--install`` replaces it with this
run's):

1. synthetic data by seed (:mod:`embodied_r_training.data.synthetic_worlds`): train / val /
   test worlds of the default kind (ID) and test worlds with more objects and longer
   trajectories (OOD), each built from its bag as a robot's recording is, with the ``offline``
   perception profile;
2. a cold start: LoRA SFT of SmolLM2-135M-Instruct on rationales that walk through the frames
   (``sft.targets: rationale``);
3. GRPO from that adapter with the paper's three rewards, staged format -> accuracy ->
   consistency (``policy.adapter``);
4. the adapter exported as the offline model's artefact (float16 safetensors, about 10 MB);
5. one evaluation on the ID and OOD test sets: chance, first option, the perception-text oracle,
   the untrained model, SFT and SFT -> GRPO, with 95 % bootstrap intervals (``eval/eval.md``,
   ``eval/eval.png``) and the training curves (``sft/loss.png``, ``grpo/curves.png``).

Every phase reuses what a previous run finished (worlds, trained adapters), so a stopped demo
resumes. Run: ``python -m embodied_r_training.train_demo [--out runs/train-demo]``; ``--install``
copies the exported adapter over the shipped one (the model card is then yours to update).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState

from embodied_r_ros.core.config import ConfigError
from embodied_r_ros.core.profiles import deep_merge
from embodied_r_training.evaluation.evaluate import Evaluation, evaluate_models
from embodied_r_training.evaluation.scoring import BASELINES
from embodied_r_training.recipe import load_train_config, parse_overrides
from embodied_r_training.rl.prompt_pool import POOL_FILE
from embodied_r_training.rl.runs import TrainResult, checkpoint_step, recorded_minutes

log = logging.getLogger(__name__)

RECIPE = "smollm2-embodied-r"
# the table's labels (no "/": a label with one reads as a model path, LABEL=MODEL does not split)
SHIPPED = "SFT->GRPO (shipped)"
ABLATION = "SFT->GRPO without consistency"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}"


def _minutes(start: float) -> float:
    return round((time.perf_counter() - start) / 60.0, 2)


def export_adapter(adapter: Path, dest: Path) -> Path:
    """The trained PEFT adapter in float16 safetensors (half the float32 size), with its
    config; the merged model of :mod:`~embodied_r_ros.backends.offline` adds it back to
    float32 weights."""
    import torch
    from safetensors.torch import load_file, save_file

    dest.mkdir(parents=True, exist_ok=True)
    weights = load_file(str(adapter / "adapter_model.safetensors"))
    save_file({k: v.to(torch.float16).contiguous() for k, v in weights.items()},
              str(dest / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "smollm2-135m"  # the offline name, not a local path
    (dest / "adapter_config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    return dest


def trained(run: Callable[[], TrainResult], output_dir: Path) -> tuple[TrainResult, float]:
    """A training phase and its minutes: a phase that a stopped demo had finished resumes
    with nothing left to train, and keeps the minutes it took then."""
    before = recorded_minutes(output_dir)
    start = time.perf_counter()
    result = run()
    if before is not None and result.resumed_from and before[0] == result.global_step \
            and checkpoint_step(result.resumed_from) == result.global_step:
        return result, round(before[1], 2)
    return result, _minutes(start)


def reference_overrides(sft_final: Path) -> dict[str, Any]:
    """The consistency reference of the recipe: the run's own frozen SFT checkpoint."""
    return {"rewards": {"reference": {"backend": "transformers", "model": str(sft_final),
                                      "dtype": "float32", "device": "cpu", "batch_size": 16}}}


def without_consistency(stages: Sequence[Any]) -> list[dict[str, Any]]:
    """The recipe's reward stages with the consistency weight set to 0 (the ablation)."""
    return [{**s.model_dump(), "consistency": 0.0} for s in stages]


def consistency_start_epoch(stages: Sequence[Any]) -> int:
    """The epoch at which the first stage with a consistency weight begins: before it the
    recipe and its ablation train alike."""
    start = 0
    for stage in stages:
        if stage.consistency > 0:
            return start
        start += stage.epochs
    return start


class KeepCheckpoint(TrainerCallback):
    """Saves the checkpoint of the step that completes ``epochs`` epochs and copies it to
    ``dest`` (later saves may rotate it away): the ablation resumes there. A run resumed past
    that step keeps nothing."""

    def __init__(self, epochs: int, dest: Path) -> None:
        self.epochs = epochs
        self.dest = dest
        self.step: int | None = None

    def on_step_end(self, args: Any, state: TrainerState, control: TrainerControl,
                    **kw: Any) -> None:
        if self.step is None and abs((state.epoch or 0.0) - self.epochs) < 1e-6:
            self.step = state.global_step
            control.should_save = True

    def on_save(self, args: Any, state: TrainerState, control: TrainerControl,
                **kw: Any) -> None:
        if self.step is not None and state.global_step == self.step:
            src = Path(args.output_dir) / f"checkpoint-{self.step}"
            shutil.copytree(src, self.dest / src.name, dirs_exist_ok=True)


def check_reference(cfg: Any, data_dir: Path, out: Path, split: str = "val") -> dict[str, Any]:
    """The reference on the gold rationales of ``split`` (rows it never trained on), as the
    consistency reward asks it; written to ``out``."""
    from embodied_r_training.data.dataset_files import load_rows
    from embodied_r_training.data.prompt_budget import dataset_layout
    from embodied_r_training.rl.reference import gold_rationale_check, reference_backend

    reference = reference_backend(cfg, "cpu")
    try:
        check = gold_rationale_check(cfg, reference, load_rows(data_dir, split),
                                     dataset_layout(data_dir))
    finally:
        reference.close()
    result = {"split": split, "reference": cfg.rewards.reference.model, **check.to_dict()}
    out.write_text(json.dumps(result, indent=1))
    log.info("consistency reference on %d gold rationales (%s): %.1f %%", check.rows, split,
             100.0 * check.rate)
    return result


def run_demo(out: Path, *, config: str = RECIPE, worlds: dict[str, int] | None = None,
             eval_split: str = "test", ablation: bool = True,
             eval_per_category: int | None = None, sft_row: bool = True,
             overrides: Sequence[str] = ()) -> dict[str, Any]:
    """``overrides``: ``KEY=VALUE`` settings over ``config`` for every phase, evaluation
    included (a variant of the recipe, e.g. ``sft.reference_share=0.25``). ``ablation``:
    also train GRPO without the consistency reward on the same budget (the
    table's comparison row; timed apart from the recipe's SFT + GRPO): it branches from the
    recipe's run where the consistency weight first becomes non-zero, so the two differ only
    in that reward. ``eval_per_category``: evaluate the first N questions of each category of
    each test set (``eval.per_category``) instead of all of them. ``sft_row``: evaluate the
    SFT checkpoint too (the row and the paired GRPO - SFT difference); without it the table
    has the rules, the untrained and the trained model (an LM row fewer: about a third less
    evaluation time)."""
    from embodied_r_training.data.dataset_files import load_manifest
    from embodied_r_training.data.synthetic_worlds import build_synthetic, default_plan, scaled_plan
    from embodied_r_training.plots import loss_curve
    from embodied_r_training.rl.grpo import run_grpo
    from embodied_r_training.rl.sft import run_sft

    # the recipe (and a bad setting's ConfigError) before the data build, not after it
    settings = parse_overrides(list(overrides))
    cfg = load_train_config(config, settings)
    minutes: dict[str, float] = {}
    t = time.perf_counter()
    plan = scaled_plan(default_plan(), **worlds) if worlds else default_plan()
    # a world at a time per core (each world renders and is perceived on one core)
    summary_data = build_synthetic(out / "synthetic", plan, workers=len(os.sched_getaffinity(0)))
    minutes["synthetic data"] = _minutes(t)
    data_id, data_ood = out / "synthetic" / "id", out / "synthetic" / "ood"
    summary_data["plan"] = load_manifest(data_id)["plan"]

    sft, minutes["SFT"] = trained(lambda: run_sft(cfg, data_id, output_dir=out / "sft"),
                                  out / "sft")
    history = json.loads((out / "sft" / "log_history.json").read_text())
    loss_curve(history, out / "sft" / "loss.png", title=f"SFT ({cfg.name})")

    sft_adapter = out / "sft" / "final-adapter"
    trained_from = deep_merge(deep_merge(settings, {"policy": {"adapter": str(sft_adapter)}}),
                              reference_overrides(sft.final_model))
    grpo_cfg = load_train_config(config, trained_from)
    t = time.perf_counter()
    reference_check = check_reference(grpo_cfg, data_id, out / "reference_check.json")
    minutes["reference check"] = _minutes(t)
    branch = consistency_start_epoch(cfg.rewards.stages)
    kept = out / "grpo-branch"
    keep = [KeepCheckpoint(branch, kept)] if ablation and branch else []
    grpo, minutes["GRPO"] = trained(
        lambda: run_grpo(grpo_cfg, data_id, output_dir=out / "grpo", callbacks=keep),
        out / "grpo")
    exported = export_adapter(out / "grpo" / "final-adapter", out / "adapter")
    reference_adapter = export_adapter(sft_adapter, out / "reference-adapter")
    models = {"untrained": cfg.policy.model,
              **({"SFT": str(sft.final_model)} if sft_row else {}),
              SHIPPED: str(grpo.final_model)}
    ablated = None
    if ablation:
        # the same run up to the first stage with a consistency weight (its checkpoint, with
        # optimizer and RNG state), then the remaining stages without that reward
        ablation_dir = out / "grpo-no-consistency"
        if branch and not ablation_dir.exists():
            shutil.copytree(kept, ablation_dir)
        pool = out / "grpo" / POOL_FILE  # the same prompts, not a second sampling
        if pool.is_file() and not (ablation_dir / POOL_FILE).exists():
            ablation_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pool, ablation_dir / POOL_FILE)
        plain = load_train_config(config, deep_merge(trained_from, {
            "rewards": {"stages": without_consistency(cfg.rewards.stages)}}))
        ablated, minutes["GRPO without consistency"] = trained(
            lambda: run_grpo(plain, data_id, output_dir=ablation_dir), ablation_dir)
        models[ABLATION] = str(ablated.final_model)

    t = time.perf_counter()
    evaluate_demo(config, eval_split, reference=str(sft.final_model),
                  data={"ID": data_id, "OOD": data_ood}, models=models, out=out / "eval",
                  per_category=eval_per_category, overrides=overrides)
    minutes["evaluation"] = _minutes(t)
    summary = {
        "config": cfg.name,
        "overrides": list(overrides),
        "data": summary_data,
        "minutes": minutes,
        "training_minutes": round(minutes["SFT"] + minutes["GRPO"], 2),
        "reference_check": reference_check,
        "sft": {"steps": sft.global_step, "rows": sft.rows, **sft.metrics},
        "grpo": {"steps": grpo.global_step, "rows": grpo.rows, **grpo.metrics},
        "grpo_without_consistency": ({"steps": ablated.global_step, **ablated.metrics}
                                     if ablated else None),
        "adapter": str(exported),
        "reference_adapter": str(reference_adapter),
        "adapter_mb": round((exported / "adapter_model.safetensors").stat().st_size / 1e6, 2),
        "eval": json.loads((out / "eval" / "eval.json").read_text()),
    }
    (out / "demo.json").write_text(json.dumps(summary, indent=1, default=str))
    (exported / "README.md").write_text(model_card(summary, _summary_tables(out / "eval")))
    (reference_adapter / "README.md").write_text(reference_card(summary))
    return summary


def evaluate_demo(config: str, split: str, *, reference: str, data: Mapping[str, Path],
                  models: Mapping[str, str], out: Path, per_category: int | None = None,
                  overrides: Sequence[str] = ()) -> Evaluation:
    """The demo's table: the rule rows and the run's models by label on every dataset, with
    the paired differences of the trained model against SFT and, when the ablation ran,
    against the ablation; ``reference`` is the consistency judge."""
    settings = deep_merge(parse_overrides(list(overrides)),
                          {"rewards": {"reference": {"model": reference}}})
    if per_category:
        settings = deep_merge(settings, {"eval": {"per_category": per_category}})
    pairs = ([(SHIPPED, "SFT")] if "SFT" in models else []) + (
        [(SHIPPED, ABLATION)] if ABLATION in models else [])
    rules = [(name, name) for name in BASELINES]
    return evaluate_models([*rules, *models.items()], [(k, v) for k, v in data.items()],
                           load_train_config(config, settings), out, split=split, pairs=pairs)


def _summary_tables(eval_dir: Path) -> str:
    """The per-dataset summary tables at the top of ``eval.md``."""
    text = (eval_dir / "eval.md").read_text()
    return text.split("### Beside the paper")[0].split("\n## ")[0].strip() + "\n"


def model_card(summary: dict[str, Any], tables: str) -> str:
    """The adapter's model card, from a run's summary and its ``eval`` summary tables."""
    cfg = load_train_config(summary["config"], parse_overrides(summary.get("overrides")))
    sft, grpo = summary["sft"], summary["grpo"]
    lora = cfg.policy.lora
    plan = summary["data"].get("plan") or {}
    seeds = "; ".join(
        f"{name} {v['seeds'][0]}-{v['seeds'][-1]} ({len(v['seeds'])} worlds"
        + (f", {v['spec']}" if v.get("spec") else "") + ")"
        for name, v in plan.items() if v.get("seeds"))
    rows = summary["data"].get("rows", {})
    stages = ", ".join(f"{s.format:g}/{s.accuracy:g}/{s.consistency:g}"
                       for s in cfg.rewards.stages)
    check = summary.get("reference_check") or {}
    zero = (f"{int(grpo['zero_variance_groups/last'])} of {int(grpo['groups_seen/last'])}"
            if "groups_seen/last" in grpo else "-")
    ablated = summary["minutes"].get("GRPO without consistency")
    ablation = (
        '- The ablation "without consistency": the same run up to the first stage with a '
        "consistency weight\n  (its checkpoint), then the rest with that weight at 0: another "
        f"{ablated} minutes." if ablated is not None
        else "- No ablation without the consistency reward was run (`--no-ablation`).")
    return f"""# smollm2-135m-embodied-r

A LoRA adapter (r {lora.r if lora else '-'}, alpha {lora.alpha if lora else '-'}, every linear
layer; float16 safetensors, {summary['adapter_mb']} MB) for SmolLM2-135M-Instruct, trained by
this project's own pipeline (`make train-demo`, config `{summary['config']}`) to answer the
synthetic world's spatial questions from the `offline` profile's perception text. The offline
model `smollm2-135m-embodied-r` is the base with this adapter merged in; the `offline` profile
reasons with it.

**What it is for**: showing whether the project's training (rationale SFT as a cold start,
then GRPO with the paper's format, accuracy and consistency rewards) moves a small LM above the
untrained one on rooms it has never seen; the table below says how far. **What it does not
show**: anything about Embodied-R on real video. The training and test questions come from the
same procedural generator (the OOD rows: more objects, longer trajectories), the perception text
is geometric (odometry motions, colour regions), not a VLM's, and the LM has 135M parameters,
not 3B.

## Training data (synthetic, by seed; seed 7, the demo's world, is never used)
Seeds: {seeds}. Rows: {json.dumps(rows)}. Perception: the `offline` profile (odometry
motions, colour regions), built by `embodied-r-train build` from each world's rosbag.

## Recipe (2 CPU cores)
- SFT: {sft['rows']} rows: rationales (`sft.supported_only`: the text supports the answer;
  answers `B. option text`) and reference rows (`sft.reference_share`
  {cfg.sft.reference_share:g}: the question and a gold think text -> the letter),
  {sft['steps']} steps of {cfg.sft.gradient_accumulation_steps} rows, learning rate
  {cfg.sft.learning_rate:g}, cosine; completion-only loss; {cfg.policy.dtype} autocast over fp32
  weights. SFT took {summary['minutes']['SFT']} minutes.
- The consistency reference: that SFT checkpoint, frozen (`reference-adapter/` beside this
  one). On the {check.get('rows', '-')} gold rationales of the
  validation worlds, asked as the reward asks it, it re-derives the stated answer of
  {_pct(check.get('rate'))} % (the untrained SmolLM2-135M: 23 % of 48, about chance).
- GRPO from that adapter: {grpo['steps']} steps, group size {cfg.grpo.num_generations}
  ({cfg.grpo.completions_per_step} completions a step), {grpo['rows']} prompts,
  temperature {cfg.grpo.temperature:g}, top-k {cfg.grpo.top_k}, top-p {cfg.grpo.top_p:g},
  beta {cfg.grpo.beta:g}, learning rate {cfg.grpo.learning_rate:g}, at most
  {cfg.grpo.max_completion_length} new tokens; reward stages (format/accuracy/consistency)
  {stages}, one epoch each; answers read as the official code reads them
  (`rewards.answer_mode: {cfg.rewards.answer_mode}`). Groups whose rewards were all equal
  (no advantage, no gradient; their forward and backward pass skipped):
  {zero}. GRPO took {summary['minutes']['GRPO']} minutes.
- Training time (SFT + GRPO): {summary['training_minutes']} minutes.
{ablation}

## Evaluation (greedy, {cfg.eval.max_new_tokens} new tokens, {cfg.eval.backend}
{cfg.eval.quantization if cfg.eval.backend != 'transformers' else ''}; 95 % bootstrap intervals)
"untrained" is SmolLM2-135M-Instruct itself; "oracle" answers from the same perception text by
rules (the ceiling the text allows); "chance" is the expected accuracy of a uniform guess. The
headline accuracy is read as the official evaluation does (the first letter in the answer
tag); the per-category tables in EVAL.md give both readings.

{tables}
"""


def reference_card(summary: dict[str, Any]) -> str:
    """The model card of the run's consistency reference (its frozen SFT checkpoint)."""
    cfg = load_train_config(summary["config"], parse_overrides(summary.get("overrides")))
    check = summary.get("reference_check") or {}
    return f"""# smollm2-135m-embodied-r-reference

The consistency reference of the recipe `{summary['config']}`: the run's SFT checkpoint (a LoRA
adapter for SmolLM2-135M-Instruct, float16), frozen. It was taught the reference's task by the
reference rows mixed into SFT (`sft.reference_share` {cfg.sft.reference_share:g}: the reference
prompt with a question and a gold think text -> the letter alone) and answers the reward's
prompt ("Reply with one letter") with the letter of the option the think text concludes.

Checked as the consistency reward asks it, on the gold rationales of the validation worlds
(rows it never trained on): it re-derives the stated answer of {check.get('consistent', '-')}
of {check.get('rows', '-')} ({_pct(check.get('rate'))} %); the untrained SmolLM2-135M answers
"A." to nearly every such prompt (about chance).

Use it as the reference of a GRPO run on this project's data (`rewards.reference: {{backend:
transformers, model: smollm2-135m-embodied-r-reference}}`). It reads think texts written as
this project's rationales are (the options as `text = letter`, a walk through the frames, then
`So: text = letter.`); it is no judge of free-form reasoning.
"""


def install_adapter(exported: Path, name: str = "smollm2-135m-embodied-r") -> Path:
    """Copy an exported adapter over the shipped one of offline model ``name``."""
    from embodied_r_ros.backends.offline import ADAPTER_ROOT, ADAPTERS

    dest = ADAPTER_ROOT / ADAPTERS[name][1]
    dest.mkdir(parents=True, exist_ok=True)
    for file in ("adapter_config.json", "adapter_model.safetensors", "README.md"):
        if (exported / file).is_file():
            shutil.copy(exported / file, dest / file)
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m embodied_r_training.train_demo",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/train-demo"))
    p.add_argument("--config", default=RECIPE, help="training config (the recipe)")
    p.add_argument("--no-ablation", action="store_true",
                   help="skip the GRPO run without the consistency reward")
    p.add_argument("--eval-per-category", type=int, metavar="N",
                   help="evaluate the first N questions of each category (default: all)")
    p.add_argument("--no-sft-row", action="store_true",
                   help="leave the SFT checkpoint out of the evaluation")
    p.add_argument("--install", action="store_true",
                   help="copy the exported adapter over the shipped one")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   dest="overrides", help="a config setting over the recipe's (repeatable)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        summary = run_demo(args.out, config=args.config, ablation=not args.no_ablation,
                           eval_per_category=args.eval_per_category,
                           sft_row=not args.no_sft_row, overrides=args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print((args.out / "eval" / "eval.md").read_text())
    print(f"training: {summary['training_minutes']} min (SFT {summary['minutes']['SFT']}, "
          f"GRPO {summary['minutes']['GRPO']}); adapter {summary['adapter_mb']} MB at "
          f"{summary['adapter']}")
    print(json.dumps(summary["minutes"]))
    if args.install:
        print(f"installed: {install_adapter(Path(summary['adapter']))}")
        print("installed: " + str(install_adapter(Path(summary["reference_adapter"]),
                                                  "smollm2-135m-embodied-r-reference")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

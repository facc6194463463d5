"""The shipped recipe end to end on the tiny models: rationale SFT with LoRA -> GRPO training
that same adapter -> the exported float16 adapter; the table with the rule-based rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from embodied_r_ros.core.config import ConfigError
from embodied_r_ros.core.reasoning import extract_think
from embodied_r_training.cli import main
from embodied_r_training.evaluation.evaluate import EvalError, evaluate_models
from embodied_r_training.recipe import load_train_config
from embodied_r_training.rewards import completion_text
from embodied_r_training.rl.grpo import NamedReward, run_grpo
from embodied_r_training.rl.sft import run_sft
from embodied_r_training.train_demo import ABLATION, SHIPPED, evaluate_demo, export_adapter

#: the shipped recipe's shape at test size (the consistency reward inside a GRPO step, with a
#: policy that writes the format, is tested from the shipped reasoner: test_shipped_reasoner.py)
TINY_RECIPE: dict[str, Any] = {
    "data": {"split": "all", "max_prompt_tokens": 192},  # the question and the last frames
    "sft": {"targets": "rationale", "answer_letter": True, "learning_rate": 3.0e-3,
            "max_steps": 2, "per_device_batch": 4},
    "grpo": {"max_steps": 1, "num_generations": 4, "completions_per_step": 4,
             "per_device_batch": 4, "max_completion_length": 16, "learning_rate": 1.0e-3},
    "rewards": {"stages": [{"epochs": 1, "format": 0.1, "accuracy": 0.7, "consistency": 0.2}]},
}
LORA = {"r": 8, "alpha": 16, "dropout": 0.0}


def test_grpo_continues_a_lora_sft_adapter_and_exports_it(dataset: Path, tmp_path: Path,
                                                          tiny_models_dir: Path) -> None:
    """The shipped recipe's path: LoRA SFT, GRPO training that same adapter (policy.adapter),
    the result exported in float16."""
    from safetensors.torch import load_file

    recipe = {**TINY_RECIPE, "policy": {"lora": LORA}}
    run_sft(load_train_config("cpu-tiny", recipe), dataset, output_dir=tmp_path / "sft")
    adapter = tmp_path / "sft" / "final-adapter"
    assert (adapter / "adapter_model.safetensors").is_file()
    grpo_cfg = load_train_config("cpu-tiny", {**recipe, "policy": {"adapter": str(adapter),
                                                                   "lora": LORA}})
    dense = [NamedReward("format", _length), NamedReward("accuracy", _length),
             NamedReward("consistency", _length)]
    result = run_grpo(grpo_cfg, dataset, output_dir=tmp_path / "grpo", reward_funcs=dense)
    assert result.global_step == 1
    trained = tmp_path / "grpo" / "final-adapter"
    before = load_file(str(adapter / "adapter_model.safetensors"))
    after = load_file(str(trained / "adapter_model.safetensors"))
    assert before.keys() == after.keys()  # the same adapter, not a new one on top
    assert any(not torch.equal(before[k], after[k]) for k in before)
    exported = export_adapter(trained, tmp_path / "export")
    size = (exported / "adapter_model.safetensors").stat().st_size
    assert size < (trained / "adapter_model.safetensors").stat().st_size * 0.6  # float16
    assert json.loads((exported / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == "smollm2-135m"


def _length(completions: list[Any], **_: Any) -> list[float]:
    """A reward random models can earn: the reply's length (so the group's rewards differ)."""
    return [len(completion_text(c)) / 10.0 for c in completions]


def test_the_table_has_the_rule_rows_with_intervals(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    assert main(["eval", "--config", "cpu-tiny", "--split", "all", "--data", f"A={dataset}",
                 "--data", f"B={dataset}", "--model", "chance", "--model", "first-option",
                 "--model", "oracle", "--out", str(out), "--json"]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert set(report) == {"A", "B"} and set(report["A"]) == {"chance", "first-option",
                                                             "oracle"}
    rows = [json.loads(x) for x in (out / "predictions-A-first-option.jsonl").read_text()
            .splitlines()]
    first = report["A"]["first-option"]
    assert first["accuracy"] == pytest.approx(
        sum(r["solution"].startswith("A") for r in rows) / len(rows))
    low, high = first["accuracy_ci"]
    assert low <= first["accuracy"] <= high and high - low > 0
    chance = report["A"]["chance"]
    assert chance["accuracy"] == pytest.approx(0.25) and chance["format_rate"] is None
    table = (out / "eval.md").read_text()
    assert "### A: accuracy % [95 % bootstrap interval]" in table and "| oracle |" in table
    assert (out / "eval.png").stat().st_size > 1000


def test_eval_per_category_scores_the_first_rows_of_each_category(dataset: Path,
                                                                   tmp_path: Path) -> None:
    """``eval.per_category``: every model of the run is scored on the same balanced subset,
    the first N rows of each category in file order."""
    from embodied_r_training.data.dataset_files import load_rows

    out = tmp_path / "eval"
    assert main(["eval", "--config", "cpu-tiny", "--split", "all", "--data", str(dataset),
                 "--set", "eval.per_category=1", "--model", "first-option", "--model", "oracle",
                 "--out", str(out), "--json"]) == 0
    rows = load_rows(dataset, "all", None)
    firsts = {}
    for row in rows:
        firsts.setdefault(row["category"], row["id"])
    assert len(rows) > len(firsts) >= 2
    for model in ("first-option", "oracle"):
        scored = [json.loads(x)["id"] for x in
                  (out / f"predictions-{model}.jsonl").read_text().splitlines()]
        assert scored == list(firsts.values())


def test_a_finished_sft_resumes_with_nothing_left_to_train(dataset: Path, tmp_path: Path) -> None:
    """A restarted demo calls SFT again: a run whose last checkpoint is at max_steps must not
    train on (the Trainer ran one step past max_steps on every such resume)."""
    sft = {**TINY_RECIPE["sft"], "per_device_batch": 1, "gradient_accumulation_steps": 2}
    cfg = load_train_config("cpu-tiny", {**TINY_RECIPE, "sft": sft, "policy": {"lora": LORA}})
    first = run_sft(cfg, dataset, output_dir=tmp_path / "sft")
    history = (tmp_path / "sft" / "log_history.json").read_text()
    again = run_sft(cfg, dataset, output_dir=tmp_path / "sft")
    assert first.global_step == again.global_step == 2
    assert again.resumed_from is not None and again.resumed_from.endswith("checkpoint-2")
    assert (tmp_path / "sft" / "log_history.json").read_text() == history


def test_a_finished_grpo_resumes_with_nothing_left_to_train(dataset: Path, tmp_path: Path
                                                           ) -> None:
    """GRPO by steps with gradient accumulation (two micro-batches a step): run again on the
    same output, it returns the finished run instead of training a step past max_steps."""
    grpo = {**TINY_RECIPE["grpo"], "max_steps": 2, "completions_per_step": 8,
            "per_device_batch": 4}
    cfg = load_train_config("cpu-tiny", {**TINY_RECIPE, "grpo": grpo})
    funcs = [NamedReward(name, _length) for name in ("format", "accuracy", "consistency")]
    out = tmp_path / "grpo"
    first = run_grpo(cfg, dataset, output_dir=out, reward_funcs=funcs)
    history = (out / "log_history.json").read_text()
    again = run_grpo(cfg, dataset, output_dir=out, reward_funcs=funcs)
    assert first.global_step == again.global_step == 2
    assert again.resumed_from is not None and again.resumed_from.endswith("checkpoint-2")
    assert (out / "log_history.json").read_text() == history


def test_the_demo_table_runs_with_every_label_and_both_pairs(dataset: Path, tmp_path: Path
                                                             ) -> None:
    """The demo's evaluation as it calls it, each trained model stood in for by a rule row
    (no LM): every label must keep its model and both paired differences must name labels
    of the run."""
    models = {"untrained": "chance", "SFT": "first-option", SHIPPED: "oracle",
              ABLATION: "first-option"}
    out = tmp_path / "eval"
    done = evaluate_demo("cpu-tiny", "all", reference="unused", out=out, per_category=1,
                         data={"ID": dataset, "OOD": dataset}, models=models)
    scored = json.loads((out / "eval.json").read_text())
    paired = json.loads((out / "paired.json").read_text())
    assert scored == json.loads(json.dumps(done.to_dict()))
    report = (out / "eval.md").read_text()  # the paper's rows cite the paper
    assert "arXiv 2504.12680, Table 1" in report and "digest" not in report
    for data in ("ID", "OOD"):
        assert list(scored[data]) == ["chance", "first-option", "oracle", *models]
        assert set(paired[data]) == {f"{SHIPPED} - SFT", f"{SHIPPED} - {ABLATION}"}
        # eval.per_category 1: one question of each category
        categories = scored[data]["oracle"]["per_category"]
        assert scored[data]["oracle"]["n"] == len(categories)
    # a variant's settings reach the evaluation too: a bad one is refused there
    with pytest.raises(ConfigError, match="sft"):
        evaluate_demo("cpu-tiny", "all", reference="unused", out=out, per_category=1,
                      data={"ID": dataset}, models=models, overrides=["sft.targets=sideways"])


def test_evaluate_models_refuses_what_the_cli_refuses(
        dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Labels and pairs are checked before any model loads, as domain errors the CLI prints
    as one line."""
    cfg = load_train_config("cpu-tiny")
    rules = [("chance", "chance"), ("first", "first-option")]
    with pytest.raises(EvalError, match="its own label"):
        evaluate_models(rules, [("D", dataset), ("D", dataset)], cfg, tmp_path)
    with pytest.raises(EvalError, match="paired chance:nobody"):
        evaluate_models(rules, [("D", dataset)], cfg, tmp_path, pairs=[("chance", "nobody")])
    assert main(["eval", "--config", "cpu-tiny", "--data", str(dataset), "--model", "chance",
                 "--paired", "chance:nobody"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("embodied-r-train: error: paired chance:nobody")
    assert not (tmp_path / "eval.json").exists()


def test_the_train_demo_refuses_a_bad_setting_before_it_builds_data(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from embodied_r_training.train_demo import main as demo_main

    out = tmp_path / "run"
    assert demo_main(["--out", str(out), "--set", "sft.targets=sideways"]) == 2
    assert "targets" in capsys.readouterr().err
    assert not out.exists()


def test_rationale_think_texts_are_what_sft_trains_on(dataset: Path) -> None:
    from embodied_r_training.data.dataset_files import load_rows
    from embodied_r_training.rl.sft import sft_rows

    cfg = load_train_config("cpu-tiny", {"sft": {"targets": "rationale"}})
    rows = load_rows(dataset, "all", None)
    targets = sft_rows(rows, cfg.sft)
    assert len(targets) == len(rows)
    for row, target in zip(rows, targets, strict=True):
        text = target["completion"][0]["content"]
        assert extract_think(text) and text.endswith("</answer>")
        assert f"<answer>{row['solution'][:1]}." in text
    supported = load_train_config("cpu-tiny", {"sft": {"targets": "rationale",
                                                       "supported_only": True}})
    # a row whose text supports its answer, and the same row with an answer the text refutes
    from test_rationales import APPEARANCE

    refuted = {**APPEARANCE, "id": "refuted", "solution": "A"}
    mixed = [APPEARANCE, refuted]
    assert [t["prompt"] for t in sft_rows(mixed, cfg.sft)] == [r["prompt"] for r in mixed]
    kept = sft_rows(mixed, supported.sft)
    assert len(kept) == 1
    assert kept[0]["completion"][0]["content"].endswith(
        "<answer>C. red box, green box, blue cone</answer>")

"""The ``paper`` recipe trains as the official run did (ms-swift 3.3/3.4 on Embodied-R.code
174ae99), value for value, through TRL's public API."""

from __future__ import annotations

import inspect
import json
import math
import re
from pathlib import Path

import pytest
from bagdata import built_dataset
from test_training_grpo import _const, _dense
from transformers import AutoTokenizer

from embodied_r_ros.core.config import ConfigError
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.prompt_budget import (
    chat_text,
    dataset_layout,
    fit_rows,
    token_counter,
)
from embodied_r_training.recipe import load_train_config
from embodied_r_training.rl.grpo import NamedReward, grpo_kwargs, run_grpo
from embodied_r_training.rl.policy import local_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_dataset(tmp_path_factory.mktemp("paper"))


def test_paper_takes_the_official_values(tmp_path: Path) -> None:
    paper = load_train_config("paper")
    g = paper.grpo
    # 2.1 ms-swift's AdamW (swift/trainers/arguments.py): weight decay 0.1, beta2 0.95
    assert (g.weight_decay, g.adam_beta1, g.adam_beta2, g.adam_epsilon) == (0.1, 0.9, 0.95, 1e-8)
    kwargs = grpo_kwargs(paper, tmp_path, "cpu")
    assert (kwargs["weight_decay"], kwargs["adam_beta2"]) == (0.1, 0.95)
    # 2.2 ms-swift GRPO asserts truncation_strategy='left': nothing deleted
    assert paper.data.over_length == "left" and paper.data.max_prompt_tokens == 6144
    assert load_train_config("official").data.over_length == "left"
    # 2.4 infer/batch_inference.py: greedy, 3096 new tokens, batch 1
    assert (paper.eval.temperature, paper.eval.max_new_tokens, paper.eval.batch_size) == (
        0.0, 3096, 1)
    # 2.8 three trainings resumed with optimizer state (issue #6 of Embodied-R.code)
    assert paper.rewards.stage_mode == "resumed_runs" and not paper.output.save_only_model
    assert [s.epochs for s in paper.rewards.stages] == [2, 2, 8]
    official = load_train_config("official")
    assert official.rewards.stage_mode == "one_run" and official.output.save_only_model
    # 2.9 the local consistency server: fp16, one question at a time
    ref = paper.rewards.reference
    assert ref is not None and (ref.dtype, ref.batch_size) == ("float16", 1)


def test_resumed_runs_needs_what_it_resumes() -> None:
    with pytest.raises(ConfigError, match="save_only_model"):
        load_train_config("paper", {"output": {"save_only_model": True}})
    with pytest.raises(ConfigError, match="max_steps"):
        load_train_config("paper", {"grpo": {"max_steps": 5}})
    with pytest.raises(ConfigError, match="num_epochs 3 differs from the 12 epochs"):
        load_train_config("paper", {"grpo": {"num_epochs": 3}})


def test_left_truncation_keeps_the_last_tokens_and_every_row(dataset: Path,
                                                             tiny_models_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(local_model("tiny-qwen2"))
    rows = load_rows(dataset)
    count = token_counter(tokenizer)
    lengths = [count(r["prompt"]) for r in rows]
    limit = min(lengths) - 5  # every prompt is over it
    layout = dataset_layout(dataset)
    fitted, report = fit_rows(rows, tokenizer, limit, layout, "left")
    assert len(fitted) == len(rows) and report.deleted == 0 and report.shortened == len(rows)
    for row, fit in zip(rows, fitted, strict=True):
        full = chat_text(tokenizer, row["prompt"])
        ids = tokenizer(fit["prompt"], add_special_tokens=False)["input_ids"]
        assert limit - 2 <= len(ids) <= limit
        assert full.endswith(fit["prompt"])  # a suffix: the start (system prompt) went first
        assert row["question_block"] in fit["prompt"]
        assert not fit["prompt"].startswith("<|im_start|>system")
    # a prompt that fits is the same text TRL would render from the messages
    whole, report = fit_rows(rows, tokenizer, max(lengths), layout, "left")
    assert report.shortened == 0
    assert [w["prompt"] for w in whole] == [chat_text(tokenizer, r["prompt"]) for r in rows]
    deleted, report = fit_rows(rows, tokenizer, limit, layout, "delete")
    assert deleted == [] and report.deleted == len(rows)


def _cosine(step: int, total: int) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * step / total))


def test_three_resumed_trainings_keep_the_optimizer_and_restart_the_schedule(
    dataset: Path, tmp_path: Path, tiny_models_dir: Path
) -> None:
    stages = [{"epochs": 1, "format": w[0], "accuracy": w[1], "consistency": w[2]}
              for w in ((0.7, 0.3, 0.0), (0.3, 0.7, 0.0), (0.1, 0.7, 0.2))]
    cfg = load_train_config("cpu-tiny", {
        "data": {"max_rows": 4, "over_length": "left", "max_prompt_tokens": 300},
        "grpo": {"max_steps": -1, "num_epochs": 3, "learning_rate": 1e-3},
        "rewards": {"stage_mode": "resumed_runs", "stages": stages},
        "output": {"save_steps": 100, "save_total_limit": None},
    })
    funcs = [NamedReward("format", _dense), NamedReward("accuracy", _const(1.0)),
             NamedReward("consistency", _const(0.5))]
    out = tmp_path / "run"
    result = run_grpo(cfg, dataset, output_dir=out, reward_funcs=funcs)
    # 4 prompts, 2 per step: 2 steps an epoch, one epoch per stage, each stage a training
    assert result.global_step == 6 and result.rows == 4 and result.shortened_rows == 4
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert saved == [2, 4, 6]  # every stage ends in a full checkpoint the next one resumes
    assert all((out / f"checkpoint-{n}" / "optimizer.pt").is_file() for n in saved)
    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "reward_stage" in h]
    assert [h["step"] for h in steps] == [1, 2, 3, 4, 5, 6]
    assert [h["reward_stage"] for h in steps] == [1, 1, 2, 2, 3, 3]
    assert [h["consistency_rate"] for h in steps] == pytest.approx([0.5] * 6)
    # weighted shares in TRL's rewards/<name>/mean, raw means beside them
    assert [h["rewards/accuracy/mean"] for h in steps] == pytest.approx(
        [0.3, 0.3, 0.7, 0.7, 0.7, 0.7])
    assert all(h["rewards/accuracy/raw_mean"] == pytest.approx(1.0) for h in steps)
    # each training rebuilds the cosine for its own length (2, 4, 6 steps) and continues it
    # from the restored step. The rate logged at step s is the one step s used: lr(s - 1) of
    # its training, except the first step after a resume, which runs at the rate the restored
    # optimizer ended the previous training with (0 at the end of a cosine)
    lrs = [h["learning_rate"] / 1e-3 for h in steps]
    expected = [_cosine(0, 2), _cosine(1, 2), _cosine(2, 2), _cosine(3, 4), _cosine(4, 4),
                _cosine(5, 6)]
    assert lrs == pytest.approx(expected, abs=1e-9)
    assert lrs[3] != pytest.approx(_cosine(3, 6))  # not one cosine over all 6 steps


def test_a_killed_stage_resumes_in_that_stage(dataset: Path, tmp_path: Path,
                                              tiny_models_dir: Path) -> None:
    from test_training_grpo import _StopAfter

    stages = [{"epochs": 1, "format": 0.7, "accuracy": 0.3, "consistency": 0.0},
              {"epochs": 1, "format": 0.3, "accuracy": 0.7, "consistency": 0.0}]
    cfg = load_train_config("cpu-tiny", {
        "data": {"max_rows": 4}, "grpo": {"max_steps": -1, "num_epochs": 2},
        "rewards": {"stage_mode": "resumed_runs", "stages": stages},
        "output": {"save_steps": 1},
    })
    funcs = [NamedReward("format", _dense), NamedReward("accuracy", _const(1.0)),
             NamedReward("consistency", _const(0.0))]
    out = tmp_path / "run"
    first = run_grpo(cfg, dataset, output_dir=out, reward_funcs=funcs, callbacks=[_StopAfter(3)])
    assert first.global_step == 3  # stopped inside stage 2: stage 2 is not over
    second = run_grpo(cfg, dataset, output_dir=out, reward_funcs=funcs)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-3")
    assert second.global_step == 4
    history = json.loads((out / "log_history.json").read_text())
    assert [h["reward_stage"] for h in history if "reward_stage" in h] == [1, 1, 2, 2]


def test_trl_is_used_through_its_public_api_within_a_tested_bound() -> None:
    from importlib.metadata import version

    from packaging.requirements import Requirement
    from packaging.version import Version

    import embodied_r_training.rl.grpo as grpo
    import embodied_r_training.rl.schedule as schedule

    setup = (ROOT / "setup.py").read_text()
    spec = Requirement(re.search(r'"(trl[^"]*)"', setup).group(1)).specifier
    assert any(s.operator == "<" for s in spec), f"no upper bound on trl in setup.py: {spec}"
    assert Version(version("trl")) in spec  # the version this suite ran is inside it
    pinned = re.search(r"^trl==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned and Version(pinned.group(1)) in spec
    for module in (grpo, schedule):
        source = inspect.getsource(module)
        assert "_metrics" not in source and ".reward_weights =" not in source


def test_sft_trains_on_left_truncated_text_prompts(dataset: Path, tmp_path: Path,
                                                   tiny_models_dir: Path) -> None:
    from embodied_r_training.rl.sft import run_sft, sft_rows

    cfg = load_train_config("cpu-tiny", {
        "data": {"max_rows": 2, "over_length": "left", "max_prompt_tokens": 300}})
    rows = sft_rows([{"prompt": "<|im_start|>user\nq<|im_end|>\n", "options": ["A. x", "B. y"],
                      "solution": "B"}], cfg.sft)
    assert isinstance(rows[0]["completion"], str)  # a text prompt takes a text completion
    result = run_sft(cfg, dataset, output_dir=tmp_path / "sft")
    assert result.global_step == 2 and result.shortened_rows == 2
    assert result.metrics["loss/first"] > 0

"""The GRPO prompt pool (``experimental.prompt_pool_*``): only questions the policy answers
right sometimes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from embodied_r_ros.core.config import ConfigError
from embodied_r_ros.core.reasoning import parse_options
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.recipe import load_train_config
from embodied_r_training.rl.grpo import run_grpo
from embodied_r_training.rl.policy import load_policy
from embodied_r_training.rl.prompt_pool import (
    POOL_FILE,
    count_right,
    policy_sampler,
    prompt_pool,
    select_pool,
)


def _reply(row: dict[str, Any], right: bool) -> str:
    options = dict(parse_options(row["options"]))
    letter = row["solution"] if right else next(k for k in options if k != row["solution"])
    return f"<think>I compare.</think><answer>{letter}. {options[letter]}</answer>"


def _replies(rows: list[dict[str, Any]], right: list[int], samples: int = 4) -> dict[str, list]:
    return {r["id"]: [_reply(r, i < k) for i in range(samples)] for r, k in zip(rows, right,
                                                                                strict=True)}


def test_the_pool_keeps_questions_answered_both_ways(dataset: Path) -> None:
    rows = load_rows(dataset, "train")[:4]
    replies = _replies(rows, [2, 4, 0, 1])  # right in 2, 4, 0 and 1 of 4 samples
    counted = count_right(rows, lambda r: replies[r["id"]], "official")
    assert [c.right for c in counted] == [2, 4, 0, 1]
    assert [c.sometimes_right for c in counted] == [True, False, False, True]
    assert [r["id"] for r in select_pool(rows, counted, None)] == [rows[0]["id"], rows[3]["id"]]
    assert [r["id"] for r in select_pool(rows, counted, 1)] == [rows[0]["id"]]


def test_the_pool_is_written_once_and_read_back_on_resume(dataset: Path, tmp_path: Path) -> None:
    rows = load_rows(dataset, "train")[:4]
    replies = _replies(rows, [1, 4, 0, 3])
    cfg = load_train_config("cpu-tiny", {"grpo": {"max_rows": 2},
                                         "experimental": {"prompt_pool_samples": 4}})
    pool = prompt_pool(cfg, rows, tmp_path, lambda r: replies[r["id"]])
    assert len(pool) == 2 and all(replies[r["id"]].count(replies[r["id"]][0]) < 4 for r in pool)
    saved = json.loads((tmp_path / POOL_FILE).read_text())
    assert saved["pool"] == [r["id"] for r in pool] and len(saved["candidates"]) == 4
    assert sorted(c["right"] for c in saved["candidates"]) == [0, 1, 3, 4]
    assert {r["id"] for r in pool} == {rows[0]["id"], rows[3]["id"]}

    def no_sampling(_: dict[str, Any]) -> list[str]:
        raise AssertionError("a resumed run must not sample the pool again")

    assert prompt_pool(cfg, rows, tmp_path, no_sampling) == pool


def test_a_pool_of_nothing_is_a_clear_error(dataset: Path, tmp_path: Path,
                                            tiny_models_dir: Path) -> None:
    """The random tiny model never answers right: GRPO stops before training, naming the key."""
    cfg = load_train_config("cpu-tiny", {"data": {"max_rows": 2},
                                         "grpo": {"max_completion_length": 8},
                                         "experimental": {"prompt_pool_samples": 2}})
    with pytest.raises(ValueError,
                       match=r"none of 2 candidate .*experimental\.prompt_pool_candidates"):
        run_grpo(cfg, dataset, output_dir=tmp_path / "run")
    assert not (tmp_path / "run" / POOL_FILE).exists()
    with pytest.raises(ConfigError, match="prompt_pool_samples must be 0"):
        load_train_config("cpu-tiny", {"experimental": {"prompt_pool_samples": 1}})
    with pytest.raises(ConfigError, match="pool_samples"):  # not a grpo key
        load_train_config("cpu-tiny", {"grpo": {"pool_samples": 2}})


def test_the_sampler_draws_as_grpo_does(dataset: Path, tiny_models_dir: Path) -> None:
    """Several sampled replies per prompt (not greedy), the same ones under the same seed."""
    import torch

    cfg = load_train_config("cpu-tiny", {"grpo": {"max_completion_length": 6},
                                         "experimental": {"prompt_pool_samples": 3}})
    model, tokenizer = load_policy(cfg, "cpu")
    complete = policy_sampler(cfg, model, tokenizer, "cpu")
    row = load_rows(dataset, "train")[0]
    torch.manual_seed(0)
    texts = complete(row)
    assert len(texts) == 3 and len(set(texts)) > 1
    torch.manual_seed(0)
    assert complete(row) == texts

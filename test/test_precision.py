"""The paper's learning rate moves the weights on the precision route the
``paper`` recipe takes on a GPU (fp32 master weights, bf16 autocast), simulated on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from embodied_r_ros.backends.transformers_backend import resolve_dtype
from embodied_r_training.recipe import load_train_config
from embodied_r_training.rl.grpo import grpo_kwargs
from embodied_r_training.rl.policy import load_base, local_model, policy_precision
from embodied_r_training.rl.precision import Precision, training_precision


def _step_changes(model: torch.nn.Module, autocast: torch.dtype | None, cfg_name: str) -> float:
    """Fraction of trainable weights one AdamW step (the recipe's settings) changes."""
    g = load_train_config(cfg_name).grpo
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=g.learning_rate, betas=(g.adam_beta1, g.adam_beta2),
                            eps=g.adam_epsilon, weight_decay=g.weight_decay)
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))  # every token row
    ids = ids[: vocab - vocab % 8].reshape(8, -1)
    with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=autocast is not None):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(params, before, strict=True))
    return changed / sum(b.numel() for b in before)


def test_the_paper_route_keeps_fp32_master_weights_and_bf16_compute(tmp_path: Path) -> None:
    cfg = load_train_config("paper")
    precision = policy_precision(cfg, "cuda")
    assert (precision.weights, precision.compute) == ("float32", "bfloat16")
    kwargs = grpo_kwargs(cfg, tmp_path, "cuda")
    assert (kwargs["bf16"], kwargs["fp16"]) == (True, False)
    assert kwargs["model_init_kwargs"] == {"dtype": "bfloat16"}  # the frozen KL reference only
    assert (kwargs["learning_rate"], kwargs["weight_decay"], kwargs["adam_beta2"]) == (
        5e-7, 0.1, 0.95)
    # auto on CUDA computes in bf16 AND says so to the trainer
    auto = training_precision("auto", "cuda")
    assert auto.trainer_flags() == {"bf16": True, "fp16": False} and auto.weights == "float32"
    # float16 is fp16 autocast over fp32 masters, never fp16 weights stepped in place
    half = training_precision("float16", "cuda")
    assert (half.weights, half.fp16, half.bf16) == ("float32", True, False)
    # CPU: fp32 weights; an explicit bfloat16 is autocast over them (AMX), auto stays fp32;
    # LoRA on CUDA: the frozen base in the compute dtype
    assert training_precision("auto", "cpu") == training_precision("float32", "cpu")
    assert training_precision("float16", "cpu") == Precision("float32", "float32")
    cpu_bf16 = training_precision("bfloat16", "cpu", adapters_only=True)
    assert cpu_bf16.weights == "float32"
    assert cpu_bf16.trainer_flags() == {"bf16": True, "fp16": False}
    lora = load_train_config("paper", {"policy": {"lora": {"r": 8}}})
    assert policy_precision(lora, "cuda").weights == "bfloat16"
    # one rule: the compute dtype is the backends' inference dtype
    for dtype in ("auto", "bfloat16", "float16", "float32"):
        compute = training_precision(dtype, "cuda").compute
        assert resolve_dtype(dtype, "cuda") == getattr(torch, compute)


def test_one_step_at_5e_7_moves_every_weight_on_the_paper_route(tiny_models_dir: Path) -> None:
    cfg = load_train_config("paper", {"policy": {"model": "tiny-qwen2"}})
    precision = policy_precision(cfg, "cuda")  # what paper.yaml selects on a GPU
    torch.manual_seed(0)
    model, _ = load_base(cfg, "cuda")  # loads on CPU in the route's master dtype
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    changed = _step_changes(model, getattr(torch, precision.compute), "paper")
    assert changed >= 0.99, f"only {changed:.1%} of the weights moved"


def test_bf16_weights_lose_the_update_the_check_catches_it(tiny_models_dir: Path) -> None:
    """The defect the first test guards against: stepping bf16 weights directly (the old rule
    loaded ``policy.dtype: bfloat16`` as is) rounds almost every 5e-7 update away."""
    model = AutoModelForCausalLM.from_pretrained(local_model("tiny-qwen2"), dtype=torch.bfloat16)
    changed = _step_changes(model, None, "paper")
    assert changed < 0.05, f"{changed:.1%} of bf16 weights moved"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "auto"])
def test_grpo_takes_the_flags_from_the_one_rule(dtype: str, tmp_path: Path) -> None:
    cfg = load_train_config("paper", {"policy": {"dtype": dtype}})
    expected = training_precision(dtype, "cuda").trainer_flags()
    kwargs = grpo_kwargs(cfg, tmp_path, "cuda")
    assert {k: kwargs[k] for k in ("bf16", "fp16")} == expected

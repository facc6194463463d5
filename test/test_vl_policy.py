"""The official policy, Qwen2.5-VL-3B-Instruct, is trained and served as its text decoder: here
with the tiny random Qwen2.5-VL through GRPO, LoRA, SFT, evaluation and the reasoning node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer

from embodied_r_ros.backends.factory import create_backend
from embodied_r_ros.backends.text_decoder import load_causal_lm
from embodied_r_ros.core.config import ModelConfig
from embodied_r_training.evaluation.evaluate import evaluate
from embodied_r_training.recipe import load_train_config
from embodied_r_training.rewards import completion_text
from embodied_r_training.rl.grpo import NamedReward, run_grpo
from embodied_r_training.rl.policy import load_policy, local_model
from embodied_r_training.rl.sft import run_sft

VL = "tiny-qwen2.5-vl"


def _vl_config(**sections: Any) -> Any:
    return load_train_config("cpu-tiny", {"policy": {"model": VL}, **sections})


def _length(completions: list[Any], **_: Any) -> list[float]:
    return [len(completion_text(c)) / 10.0 for c in completions]


def _zero(completions: list[Any], **_: Any) -> list[float]:
    return [0.0] * len(completions)


REWARDS = [NamedReward("format", _length), NamedReward("accuracy", _zero),
           NamedReward("consistency", _zero)]


def test_the_decoder_gives_the_vl_model_s_logits_on_text(tiny_models_dir: Path) -> None:
    path = local_model(VL)
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("Frame 0: Observe: a red box ahead. Which way?", return_tensors="pt")["input_ids"]
    vl = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    decoder = load_causal_lm(path, torch.float32)
    assert type(decoder).__name__ == "Qwen2ForCausalLM"
    assert not any("visual" in name for name, _ in decoder.named_parameters())
    with torch.no_grad():
        assert torch.equal(vl(input_ids=ids).logits, decoder(input_ids=ids).logits)


def test_text_only_backend_loads_no_vision_tower(tiny_models_dir: Path) -> None:
    cfg = ModelConfig(backend="transformers", model=VL, dtype="float32", device="cpu",
                      max_new_tokens=4)
    text = create_backend(cfg, text_only=True)
    full = create_backend(cfg)
    try:
        assert not text.supports_images and full.supports_images  # type: ignore[attr-defined]
        assert type(text.model).__name__ == "Qwen2ForCausalLM"  # type: ignore[attr-defined]
        conv = [{"role": "user", "content": "Which way did I turn?"}]
        # greedy on the same weights: the same reply either way
        assert text.generate([conv]) == full.generate([conv])
    finally:
        text.close()
        full.close()


def test_grpo_with_lora_on_the_vl_policy_saves_a_plain_causal_lm(
    dataset: Path, tmp_path: Path, tiny_models_dir: Path
) -> None:
    cfg = _vl_config(grpo={"max_steps": 1}, policy={"model": VL, "lora": {"r": 4, "alpha": 8}})
    before = {k: v.clone() for k, v in load_policy(cfg, "cpu")[0].state_dict().items()}
    result = run_grpo(cfg, dataset, output_dir=tmp_path / "run", reward_funcs=REWARDS)
    assert result.global_step == 1
    saved = AutoConfig.from_pretrained(result.final_model)
    assert saved.model_type == "qwen2"  # the reasoning node and eval load it like any LM
    assert (tmp_path / "run" / "final-adapter" / "adapter_config.json").is_file()
    after = load_causal_lm(str(result.final_model), torch.float32).state_dict()
    moved = [k for k in before if "layers" in k and not torch.equal(before[k], after[k])]
    assert moved  # the merged LoRA changed the decoder's weights


def test_full_grpo_and_sft_on_the_vl_policy(dataset: Path, tmp_path: Path,
                                            tiny_models_dir: Path) -> None:
    cfg = _vl_config(grpo={"max_steps": 1})
    grpo = run_grpo(cfg, dataset, output_dir=tmp_path / "grpo", reward_funcs=REWARDS)
    assert AutoConfig.from_pretrained(grpo.final_model).model_type == "qwen2"
    sft = run_sft(_vl_config(sft={"max_steps": 1}, data={"max_rows": 2}), dataset,
                  output_dir=tmp_path / "sft")
    assert sft.global_step == 1 and "loss/first" in sft.metrics
    assert AutoConfig.from_pretrained(sft.final_model).model_type == "qwen2"


def test_eval_runs_the_vl_checkpoint_text_only(dataset: Path, tiny_models_dir: Path) -> None:
    cfg = _vl_config()
    result, preds = evaluate(VL, dataset, cfg, split="all")
    assert result.n == len(preds) == 8
    assert set(result.accuracy_by_mode) == {"official", "tag"}


def test_the_reasoning_node_answers_with_the_vl_checkpoint(tiny_models_dir: Path,
                                                           tmp_path: Path) -> None:
    from ros_helpers import DISCOVERY_SEC, Spinner, require_ros, result_of, ros_context

    require_ros()
    from rclpy.parameter import Parameter

    from embodied_r_interfaces.action import Reason
    from embodied_r_ros.nodes.reasoning_node import ReasoningNode
    from embodied_r_ros.nodes.runtime import start_nodes

    cfg = tmp_path / "vl-reasoner.yaml"
    cfg.write_text(f"base: tiny\nreasoning:\n  model: {{backend: transformers, model: {VL}, "
                   "dtype: float32, device: cpu, max_new_tokens: 8}\n")
    with ros_context(__name__) as ctx:
        import rclpy

        node = ReasoningNode(context=ctx, namespace="/vl", parameter_overrides=[
            Parameter("profile", value="tiny"), Parameter("config_file", value=str(cfg))])
        start_nodes([node])
        tester = rclpy.create_node("vl_tester", context=ctx)
        spinner = Spinner(ctx, [node, tester], threads=4)
        try:
            lm = node.pipeline.lm  # type: ignore[union-attr]
            assert type(lm.model).__name__ == "Qwen2ForCausalLM"
            action = spinner.action_client(Reason, "/vl/reasoning/reason")
            assert action.wait_for_server(timeout_sec=DISCOVERY_SEC)
            goal = Reason.Goal(perception="Frame 0: Observe: a wall.\nQuestion: Where am I?\n"
                               "Choices:\nA. inside\nB. outside", options=["A. inside",
                                                                          "B. outside"])
            handle = result_of(action.send_goal_async(goal), 60.0)
            result = result_of(handle.get_result_async(), 60.0).result
            assert result.success, result.error
            reply = lm.generate([[{"role": "system", "content": node.pipeline.prompts.system},
                                  {"role": "user", "content": goal.perception}]])[0]
            assert result.raw == reply  # the node's answer is the decoder's own greedy reply
        finally:
            spinner.stop()


def test_paper_recipe_names_the_vl_policy_and_reference() -> None:
    paper = load_train_config("paper")
    assert paper.policy.model == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert paper.rewards.reference is not None
    assert json.loads(paper.rewards.reference.model_dump_json())["model"] == paper.policy.model

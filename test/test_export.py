"""``embodied-r-train export``: a trained run (LoRA or full) becomes a named model in the model
cache that a config names and every backend loads; bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from embodied_r_ros.backends import create_backend, resolve_model
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.profiles import load_config
from embodied_r_training.cli import main
from embodied_r_training.rl.policy import local_model


def _lora_run(root: Path, base: str) -> Path:
    """A run directory as ``sft``/``grpo`` leave it with LoRA: ``final-adapter/`` (weights
    away from zero, so merging changes the model) beside a tokenizer in ``final/``."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    peft.save_pretrained(root / "final-adapter")
    AutoTokenizer.from_pretrained(base).save_pretrained(root / "final")
    return root


def _full_run(root: Path, base: str) -> Path:
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)
    model.save_pretrained(root / "final")
    AutoTokenizer.from_pretrained(base).save_pretrained(root / "final")
    (root / "checkpoint-2").mkdir()
    return root


@pytest.fixture
def cache(tiny_models_dir: Path) -> Path:
    return tiny_models_dir


def test_a_lora_run_is_merged_into_its_base_and_a_config_reasons_with_it(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = local_model("tiny-qwen2")
    run = _lora_run(tmp_path / "run", base)
    config_file = tmp_path / "robot.yaml"
    assert main(["export", str(run), "--name", "robot-lora", "--config-out",
                 str(config_file)]) == 0
    out = capsys.readouterr().out
    assert f"exported robot-lora: {cache / 'robot-lora'} (LoRA adapter" in out
    assert "model: {model: robot-lora}" in out and "base: offline" in out

    # the merge is PEFT's own, weight for weight
    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base),
                                         str(run / "final-adapter")).merge_and_unload()
    got = load_file(cache / "robot-lora" / "model.safetensors")
    reference = expected.state_dict()
    assert set(got) == set(reference)
    assert all(torch.allclose(got[k], reference[k]) for k in got)
    untouched = AutoModelForCausalLM.from_pretrained(base).state_dict()
    assert any(not torch.equal(got[k], untouched[k]) for k in got)

    # the name resolves wherever a model name is read, and the printed config names it
    assert resolve_model("robot-lora") == str(cache / "robot-lora")
    config = load_config(path=str(config_file))
    assert config.reasoning.model.model == "robot-lora"
    assert config.perception.backend == "geometric"  # the rest of the offline profile
    lm = create_backend(ModelConfig(model="robot-lora", max_new_tokens=4, device="cpu",
                                    dtype="float32"))
    try:
        (reply,) = lm.complete([[{"role": "user", "content": "Which way?"}]])
        assert reply.text is not None
    finally:
        lm.close()


def test_a_full_run_is_copied_and_a_taken_name_is_refused(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _full_run(tmp_path / "run", local_model("tiny-qwen2"))
    assert main(["export", str(run), "--name", "robot-full"]) == 0
    assert "full weights from" in capsys.readouterr().out
    copied = load_file(cache / "robot-full" / "model.safetensors")
    trained = load_file(run / "final" / "model.safetensors")
    assert all(torch.equal(copied[k], trained[k]) for k in trained)

    assert main(["export", str(run), "--name", "robot-full"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'robot-full' already exists" in err[0] and "--force" in err[0]
    assert main(["export", str(run), "--name", "robot-full", "--force"]) == 0


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoint-1").mkdir(parents=True)
    other = tmp_path / "other-base"  # a base of another shape than the adapter's
    small = Qwen2Config(vocab_size=1100, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    Qwen2ForCausalLM(small).save_pretrained(other)
    AutoTokenizer.from_pretrained(local_model("tiny-qwen2")).save_pretrained(other)
    lora = _lora_run(tmp_path / "lora", local_model("tiny-qwen2"))
    cases = [
        (["export", str(unfinished), "--name", "x1"], "no final weights"),
        (["export", str(tmp_path / "missing"), "--name", "x2"], "no such directory"),
        (["export", str(lora), "--name", "tiny-qwen2"], "built-in offline model"),
        (["export", str(lora), "--name", "a/b"], "no '/'"),
        (["export", str(lora), "--name", "x3", "--base", str(other)], "for another base"),
        (["export", str(lora), "--name", "x4", "--profile", "nope"], "nope"),
        (["export", str(lora), "--name", "x5", "--subfolder", "Weight_9"], "no checkpoint"),
        (["export", str(tmp_path / "missing"), "--name", "x6", "--gguf", "int8"],
         "no such directory"),
    ]
    capsys.readouterr()  # the set-up's own progress bars
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (argv, err)
        assert "checkpoint-1" in err[0] or argv[1] != str(unfinished)
    assert not any((cache / n).exists() for n in ("x1", "x2", "x3", "x4", "x5", "x6"))
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(lora), "--name", "x7", "--gguf", "q2"])
    assert exit_.value.code == 2 and "--gguf" in capsys.readouterr().err


def _gguf_type(path: Path) -> int:
    import gguf

    field = gguf.GGUFReader(str(path)).fields["general.file_type"]
    return int(field.parts[field.data[0]][0])


def test_a_lora_run_exports_as_a_4_bit_gguf_that_a_config_reasons_with(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--gguf q4_k_m``: the adapter merged, then quantised by llama.cpp; the directory (GGUF
    and tokenizer) is what the llamacpp backend loads, with no conversion of its own."""
    llama_cpp = pytest.importorskip("llama_cpp")
    run = _lora_run(tmp_path / "run", local_model("tiny-qwen2"))
    config_file = tmp_path / "robot.yaml"
    assert main(["export", str(run), "--name", "robot-q4", "--gguf", "q4_k_m",
                 "--config-out", str(config_file)]) == 0
    out = capsys.readouterr().out
    assert "merged into" in out and "as GGUF q4_k_m for llama.cpp" in out
    exported = cache / "robot-q4"
    assert _gguf_type(exported / "model.gguf") == llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert (exported / "tokenizer.json").is_file() and not list(exported.glob("*.safetensors"))
    config = load_config(path=str(config_file))
    assert (config.reasoning.model.backend, config.reasoning.model.model,
            config.reasoning.model.quantization) == ("llamacpp", "robot-q4", "q4_k_m")
    lm = create_backend(config.reasoning.model.model_copy(update={"max_new_tokens": 4}),
                        text_only=True)
    try:
        assert lm.path == exported  # loaded as exported, not converted again
        assert lm.complete([[{"role": "user", "content": "Which way?"}]])[0].completion_tokens
    finally:
        lm.close()


def test_a_full_run_and_the_released_checkpoint_export_as_gguf(
    tmp_path: Path, cache: Path, released_hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    run = _full_run(tmp_path / "run", local_model("tiny-qwen2"))
    assert main(["export", str(run), "--name", "robot-q8", "--gguf", "int8"]) == 0
    assert _gguf_type(cache / "robot-q8" / "model.gguf") == llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    assert main(["export", "EmbodiedCity/Embodied-R", "--subfolder", "Weight_2", "--name",
                 "released-w2-q4", "--gguf", "q4_0", "--force"]) == 0
    assert "Weight_2" in capsys.readouterr().out
    written = cache / "released-w2-q4" / "model.gguf"
    assert _gguf_type(written) == llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    # the released checkpoint's chat template (kept in its processor's file) came along
    assert "<|im_start|>" in (cache / "released-w2-q4" / "chat_template.jinja").read_text()

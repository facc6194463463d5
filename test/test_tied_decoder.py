"""A Qwen2.5-VL checkpoint with tied input and output embeddings, as Qwen2.5-VL-3B (hence the
released reasoner) has them: its text decoder loads tied without the vision tower and gives the
full model's logits, and its GGUF export decodes the same greedy tokens on llama.cpp. Older
transformers are refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from released_repo import greedy_tokens, write_checkpoint
from safetensors import safe_open

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.offline import MARKER_FILE
from embodied_r_ros.backends.text_decoder import load_causal_lm
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.config import ModelConfig
from embodied_r_training.cli import main as train_main

PROMPT = [{"role": "user", "content": "Question: Which way did I turn?\nChoices:\n"
           "A. rotate left\nB. rotate right"}]


@pytest.fixture(scope="module")
def tied(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny-qwen2.5-vl``'s shape with tied embeddings (seed 2), laid out as the released
    repository holds its checkpoints (``released_repo.write_checkpoint``)."""
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    source = tiny_models_dir / "tiny-qwen2.5-vl"
    config = AutoConfig.from_pretrained(source)
    config.tie_word_embeddings = True
    torch.manual_seed(2)
    built = tmp_path_factory.mktemp("tied") / "built"
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(built)
    for path in source.iterdir():  # tokenizer, template, processor, generation config
        if path.suffix != ".safetensors" and path.name not in ("config.json", MARKER_FILE):
            shutil.copy(path, built / path.name)
    dest = built.parent / "checkpoint"
    write_checkpoint(built, dest)
    return dest


def test_the_fixture_is_tied_on_disk(tied: Path) -> None:
    names: set[str] = set()
    for file in tied.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            names.update(handle.keys())
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names


def test_its_text_decoder_loads_tied_with_the_full_model_s_logits(tied: Path) -> None:
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    decoder = load_causal_lm(str(tied), dtype=torch.float32)
    assert type(decoder).__name__ == "Qwen2ForCausalLM"
    assert decoder.lm_head.weight.data_ptr() == decoder.model.embed_tokens.weight.data_ptr()
    full = Qwen2_5_VLForConditionalGeneration.from_pretrained(tied, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(tied)("The robot turns left and sees a red door.",
                                              return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        assert torch.equal(decoder(ids).logits, full(input_ids=ids).logits)


def test_its_gguf_export_decodes_the_same_greedy_tokens(
    tied: Path, tiny_models_dir: Path
) -> None:
    pytest.importorskip("llama_cpp")
    assert train_main(["export", str(tied), "--name", "tied-f32", "--gguf", "float32",
                       "--force"]) == 0
    hf = create_backend(ModelConfig(model=str(tied), dtype="float32", device="cpu"),
                        text_only=True)
    gguf = create_backend(ModelConfig(backend="llamacpp", model="tied-f32",
                                      quantization="float32", threads_per_reply=2),
                          cache_dir=tiny_models_dir, text_only=True)
    try:
        ids = gguf.prompt_ids(PROMPT)
        assert ids == hf.encode([PROMPT])["input_ids"][0].tolist()
        want = greedy_tokens(hf.model, ids, 32)
        got: list[int] = []
        for token in gguf.llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, min_p=0.0):
            got.append(int(token))
            if len(got) == 32:
                break
    finally:
        gguf.close()
    assert got == want, (got, want)


def test_an_older_transformers_is_refused_in_one_line(
    tied: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    with pytest.raises(BackendError) as err:
        load_causal_lm(str(tied))
    message = str(err.value)
    assert "\n" not in message
    assert "needs transformers 5 or newer (installed: 4.57.1)" in message

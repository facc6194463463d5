"""The llama.cpp backend on models built offline: GGUF conversion (Qwen2 and Llama), greedy
parity with transformers, the context limit, and the fallback when the engine is missing (stop
strings, cancellation and deadlines: ``test_local_engines.py``, for both CPU engines)."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import QUESTIONS, chat

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.transformers_backend import TransformersBackend
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.config import ConfigError, ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED
from embodied_r_ros.core.profiles import load_config


@pytest.fixture(scope="module")
def llama_cpp() -> object:
    pytest.importorskip("gguf")
    return pytest.importorskip("llama_cpp")


@pytest.fixture(scope="module")
def gguf_lm(llama_cpp: object, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]):
    cfg = tiny_config("tiny-qwen2", backend="llamacpp", quantization="float32",
                      max_new_tokens=24, threads_per_reply=2)
    lm = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    yield lm
    lm.close()


def test_converts_once_and_rebuilds_when_the_source_changes(
    llama_cpp: object, tiny_models_dir: Path, tmp_path: Path
) -> None:
    from embodied_r_ros.backends.gguf_export import describe
    from embodied_r_ros.backends.llamacpp_backend import (
        MARKER_FILE,
        MODEL_FILE,
        ensure_converted,
    )

    source = tmp_path / "my-lm"
    shutil.copytree(tiny_models_dir / "tiny-qwen2", source)
    cache = tmp_path / "cache"
    first = ensure_converted(str(source), "float16", cache)
    weights = first / MODEL_FILE
    assert weights.is_file() and (first / MARKER_FILE).is_file()
    assert (first / "tokenizer.json").is_file()  # loads without the source
    assert describe(weights)["architecture"] == "qwen2"
    assert json.loads(describe(weights)["tensor_types"]) == ["F16", "F32"]
    built = weights.stat().st_mtime_ns
    assert ensure_converted(str(source), "float16", cache) == first
    assert weights.stat().st_mtime_ns == built  # reused, not converted again
    (source / "generation_config.json").write_text(
        (source / "generation_config.json").read_text().replace("false", "false "))
    again = ensure_converted(str(source), "float16", cache)
    assert again == first and (again / MODEL_FILE).stat().st_mtime_ns != built
    q8 = ensure_converted(str(source), "int8", cache)  # one build per quantisation
    assert q8 != first and "Q8_0" in json.loads(describe(q8 / MODEL_FILE)["tensor_types"])


def test_int8_weights_answer(
    llama_cpp: object, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    """Q8_0 runs (a build with ggml's AMX int8 kernels crashed on its first Q8_0 prompt batch
    on this CPU; the Makefile builds without them)."""
    cfg = tiny_config("tiny-qwen2", backend="llamacpp", quantization="int8", max_new_tokens=6)
    lm = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    try:
        replies = lm.complete([chat(q) for q in QUESTIONS])
    finally:
        lm.close()
    assert [r.completion_tokens for r in replies] == [6, 6, 6]


def test_what_it_cannot_convert_is_one_clear_error(
    llama_cpp: object, tiny_models_dir: Path, tmp_path: Path, released_hub: Path
) -> None:
    from embodied_r_ros.backends.llamacpp_backend import ensure_converted

    with pytest.raises(BackendError) as err:  # a hub id neither cached nor downloadable
        ensure_converted("someone/some-hub-model", "float16", tmp_path)
    assert err.value.code == BACKEND_FAILED
    assert "not in the hub cache" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(BackendError) as err:
        ensure_converted(str(tmp_path / "nowhere"), "float16", tmp_path)
    assert "no such directory" in str(err.value) and "\n" not in str(err.value)
    other = tmp_path / "other-family"
    shutil.copytree(tiny_models_dir / "tiny-qwen2", other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(BackendError) as err:  # not a text LM family it writes
        ensure_converted(str(other), "float16", tmp_path)
    assert err.value.code == BACKEND_FAILED
    assert "architecture" in str(err.value) and "\n" not in str(err.value)


def test_a_vl_checkpoint_converts_as_its_text_decoder(
    llama_cpp: object, tiny_models_dir: Path, tmp_path: Path
) -> None:
    """The vision tensors are left out; the decoder's are all there."""
    import gguf

    from embodied_r_ros.backends.llamacpp_backend import MODEL_FILE, ensure_converted

    built = ensure_converted(str(tiny_models_dir / "tiny-qwen2.5-vl"), "float16", tmp_path)
    reader = gguf.GGUFReader(str(built / MODEL_FILE))
    names = {t.name for t in reader.tensors}
    assert "token_embd.weight" in names and "blk.1.ffn_down.weight" in names
    assert not any(name.startswith(("v.", "mm.")) for name in names)
    pre = reader.fields["tokenizer.ggml.pre"]
    assert bytes(pre.parts[pre.data[0]]).decode() == "qwen2"


@pytest.mark.parametrize(("quantization", "ftype"), [("q4_0", "Q4_0"), ("q4_k_m", "Q4_K_M")])
def test_4_bit_weights_come_from_llama_cpps_quantiser_and_answer(
    quantization: str, ftype: str, llama_cpp: Any, tiny_models_dir: Path,
    tiny_config: Callable[..., ModelConfig]
) -> None:
    import gguf

    from embodied_r_ros.backends.llamacpp_backend import MODEL_FILE

    cfg = tiny_config("tiny-qwen2", backend="llamacpp", quantization=quantization,
                      max_new_tokens=5)
    lm = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    try:
        replies = lm.complete([chat(q) for q in QUESTIONS[:2]])
        reader = gguf.GGUFReader(str(lm.path / MODEL_FILE))
    finally:
        lm.close()
    assert [r.completion_tokens for r in replies] == [5, 5]
    file_type = reader.fields["general.file_type"]
    assert int(file_type.parts[file_type.data[0]][0]) == getattr(
        llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    # the tiny rows are too short for 4-bit blocks of 256: llama.cpp falls back per tensor
    assert {t.tensor_type for t in reader.tensors} - {gguf.GGMLQuantizationType.F32}


def test_gpu_layers_need_a_gpu_build_and_fall_back_with_a_warning(
    llama_cpp: Any, tiny_config: Callable[..., ModelConfig],
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embodied_r_ros.backends.llamacpp_backend import gpu_layers

    cfg = tiny_config("tiny-qwen2", backend="llamacpp", n_gpu_layers=-1, device="cuda")
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: True)
    assert gpu_layers(cfg, llama_cpp) == -1
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert gpu_layers(cfg, llama_cpp) == 0
    assert "built without GPU support" in caplog.text and "GGML_CUDA=on" in caplog.text
    with pytest.raises(BackendError, match="n_gpu_layers"):
        gpu_layers(cfg.model_copy(update={"n_gpu_layers": 0}), llama_cpp)
    with pytest.raises(BackendError, match="device 'mps'"):
        gpu_layers(cfg.model_copy(update={"device": "mps"}), llama_cpp)


def test_greedy_replies_equal_transformers_with_the_prefix_kept(
    gguf_lm, tiny_lm: TransformersBackend
) -> None:
    convs = [chat(q) for q in QUESTIONS]
    ref = tiny_lm.complete(convs, max_new_tokens=24)
    batched = gguf_lm.complete(convs, max_new_tokens=24)
    # one at a time, twice: the engine keeps the shared system turn's state between questions
    single = [gguf_lm.complete([c], max_new_tokens=24)[0] for c in convs + convs[:1]]
    for ours in (batched, single[:3], single[3:]):
        assert [c.text for c in ours] == [c.text for c in ref[: len(ours)]]
        assert [c.completion_tokens for c in ours] == [c.completion_tokens
                                                       for c in ref[: len(ours)]]
        assert [c.finish_reason for c in ours] == [c.finish_reason for c in ref[: len(ours)]]


def test_a_llama_model_converts_with_its_rope_layout(
    llama_cpp: object, smollm2_dir: Path, tmp_path: Path,
    tiny_config: Callable[..., ModelConfig]
) -> None:
    """SmolLM2 is a Llama: q and k rows must be interleaved for ggml's rope, or the replies
    part from transformers' after a few tokens."""
    conv = [{"role": "user", "content": "Name three colours of a traffic light."}]
    ref = create_backend(tiny_config(str(smollm2_dir), max_new_tokens=20), text_only=True)
    expected = ref.complete([conv])[0]
    lm = create_backend(tiny_config(str(smollm2_dir), backend="llamacpp",
                                    quantization="float32", max_new_tokens=20),
                        cache_dir=tmp_path, text_only=True)
    try:
        reply = lm.complete([conv])[0]
    finally:
        lm.close()
    assert expected.completion_tokens == 20
    assert reply.text == expected.text


def test_a_prompt_past_the_context_is_one_clear_error(gguf_lm) -> None:
    with pytest.raises(BackendError) as err:
        gguf_lm.complete([chat(QUESTIONS[0])], max_new_tokens=gguf_lm.context)
    assert err.value.code == BACKEND_FAILED
    assert "context" in str(err.value) and "\n" not in str(err.value)
    assert gguf_lm.complete([chat(QUESTIONS[0])], max_new_tokens=3)[0].completion_tokens == 3


@pytest.mark.parametrize(("ct2_installed", "expected"),
                         [(True, "CTranslate2Backend"), (False, "TransformersBackend")])
def test_falls_back_with_one_log_line_when_llama_cpp_is_missing(
    ct2_installed: bool, expected: str, tiny_models_dir: Path,
    tiny_config: Callable[..., ModelConfig], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if ct2_installed:
        pytest.importorskip("ctranslate2")
    else:
        monkeypatch.setitem(sys.modules, "ctranslate2", None)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp -> ImportError
    cfg = tiny_config("tiny-qwen2", backend="llamacpp", quantization="float16")
    with caplog.at_level(logging.INFO, logger="embodied_r_ros.backends.factory"):
        backend = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    assert type(backend).__name__ == expected
    lines = [r for r in caplog.records if r.name == "embodied_r_ros.backends.factory"]
    assert len(lines) == 1 and "llama-cpp-python is not installed" in lines[0].getMessage()
    assert backend.complete([chat(QUESTIONS[0])], max_new_tokens=3)[0].completion_tokens == 3


def test_a_quantisation_the_engine_lacks_is_refused_by_the_schema() -> None:
    with pytest.raises(ValueError, match="not available on backend 'llamacpp'"):
        ModelConfig(model="tiny-qwen2", backend="llamacpp", quantization="int8_float32")
    with pytest.raises(ValueError, match="not available on backend 'ctranslate2'"):
        ModelConfig(model="tiny-qwen2", backend="ctranslate2", quantization="q4_k_m")
    with pytest.raises(ConfigError, match="llamacpp"):
        load_config("offline",
                    overrides={"reasoning": {"model": {"quantization": "int8_float32"}}})


def test_the_offline_profile_reasons_on_llama_cpp_in_float16_on_two_threads() -> None:
    model = load_config("offline").reasoning.model
    assert model.backend == "llamacpp" and model.quantization == "float16"
    assert model.threads_per_reply == 2
    assert model.model == "smollm2-135m-embodied-r"

"""One generation setting for every engine: a checkpoint whose ``generation_config.json`` sets
``repetition_penalty`` 1.05 (as Qwen2.5-VL-3B-Instruct's does) decodes with 1.05 on
transformers, llama.cpp, CTranslate2, vLLM's sampling parameters and an OpenAI-compatible
endpoint once ``generation_from_checkpoint`` is on; only an explicit value changes it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.generation import resolve_generation
from embodied_r_ros.backends.vllm_backend import VLLMBackend
from embodied_r_ros.core.chat import BackendError, ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.profiles import load_config

QUESTION = [{"role": "user", "content": "Which way did I turn? A. left B. right B. right"}]
PENALTY = 1.05


@pytest.fixture(scope="module")
def penalised(tiny_models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny-qwen2`` whose generation config sets repetition_penalty 1.05 and, as Qwen's
    instruct checkpoints, sampling fields that greedy decoding must not pick up."""
    dest = tmp_path_factory.mktemp("penalised") / "tiny-qwen2-penalised"
    shutil.copytree(tiny_models_dir / "tiny-qwen2", dest)
    path = dest / "generation_config.json"
    config = json.loads(path.read_text())
    config.update(repetition_penalty=PENALTY, do_sample=True, temperature=0.1, top_p=0.001,
                  top_k=1)
    path.write_text(json.dumps(config))
    return dest


def model(path: Path, **settings: Any) -> ModelConfig:
    fields: dict[str, Any] = {"model": str(path), "device": "cpu", "dtype": "float32",
                              "max_new_tokens": 24, "temperature": 0.0,
                              "generation_from_checkpoint": True}
    return ModelConfig(**{**fields, **settings})


def test_explicit_values_win_then_the_checkpoint_then_the_schema(
    penalised: Path, tmp_path: Path
) -> None:
    read = resolve_generation(model(penalised), penalised)
    assert (read.repetition_penalty, read.sources["repetition_penalty"]) == (PENALTY,
                                                                              "checkpoint")
    assert read.greedy and read.sources["temperature"] == "config"  # the profile's greedy
    assert (read.top_p, read.top_k) == (0.001, 1)  # unused while greedy
    assert resolve_generation(model(penalised, repetition_penalty=1.3),
                              penalised).repetition_penalty == 1.3
    off = resolve_generation(model(penalised, generation_from_checkpoint=False), penalised)
    assert off.repetition_penalty == 1.0 and not off.chosen("repetition_penalty")
    # the official inference: sampling fields unset decode as the checkpoint says
    unset = ModelConfig(model=str(penalised), generation_from_checkpoint=True)
    assert resolve_generation(unset, penalised).temperature == 0.1
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": False, "temperature": 0.7, "repetition_penalty": 1.1}))
    greedy = resolve_generation(ModelConfig(model="m", generation_from_checkpoint=True), tmp_path)
    assert greedy.greedy and greedy.repetition_penalty == 1.1
    asked = ModelConfig(model="m", generation_from_checkpoint=True, temperature=0.5)
    assert resolve_generation(asked, tmp_path).temperature == 0.5
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.7}))
    assert resolve_generation(ModelConfig(model="m", generation_from_checkpoint=True),
                              tmp_path).greedy  # do_sample absent is false
    (tmp_path / "generation_config.json").write_text(json.dumps({"repetition_penalty": -2}))
    with pytest.raises(BackendError, match=r"generation_config.json: repetition_penalty -2 "):
        resolve_generation(ModelConfig(model="m", generation_from_checkpoint=True), tmp_path)


def test_the_released_profiles_read_the_checkpoint_and_keep_greedy_and_3096() -> None:
    for name in ("paper", "server", "workstation", "jetson"):
        reasoner = load_config(name).reasoning.model
        assert reasoner.generation_from_checkpoint, name
        assert {"temperature", "max_new_tokens"} <= reasoner.model_fields_set, name
        assert (reasoner.temperature, reasoner.max_new_tokens) == (0.0, 3096), name
    assert not load_config("offline").reasoning.model.generation_from_checkpoint


def _record(calls: list[dict[str, Any]], method: Callable[..., Any]) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return method(*args, **kwargs)

    return recorded


@pytest.fixture(scope="module")
def transformers_reply(penalised: Path) -> tuple[str, list[dict[str, Any]]]:
    backend = create_backend(model(penalised))
    calls: list[dict[str, Any]] = []
    backend.model.generate = _record(calls, backend.model.generate)  # type: ignore[attr-defined]
    return backend.generate([QUESTION])[0], calls


def test_transformers_receives_the_checkpoint_s_penalty(
    penalised: Path, transformers_reply: tuple[str, list[dict[str, Any]]]
) -> None:
    reply, calls = transformers_reply
    assert calls[0]["repetition_penalty"] == PENALTY and calls[0]["do_sample"] is False
    # the model's own generation config is overridden in both directions
    plain = create_backend(model(penalised, generation_from_checkpoint=False))
    calls.clear()
    plain.model.generate = _record(calls, plain.model.generate)  # type: ignore[attr-defined]
    plain.generate([QUESTION])
    assert calls[0]["repetition_penalty"] == 1.0


def test_llamacpp_penalises_the_whole_context_as_transformers(
    penalised: Path, tmp_path_factory: pytest.TempPathFactory,
    transformers_reply: tuple[str, list[dict[str, Any]]],
) -> None:
    """The same greedy reply as transformers from the GGUF export with the checkpoint's 1.05,
    and with an explicit, stronger penalty that changes the reply."""
    pytest.importorskip("llama_cpp")
    cache = tmp_path_factory.mktemp("gguf")
    backend = create_backend(model(penalised, backend="llamacpp", quantization="float32",
                                   threads_per_reply=2), cache_dir=cache)
    try:
        calls: list[dict[str, Any]] = []
        backend.llm.generate = _record(calls, backend.llm.generate)  # type: ignore[attr-defined]
        assert backend.generate([QUESTION])[0] == transformers_reply[0]
        assert calls[0]["repeat_penalty"] == PENALTY
        assert backend.llm.last_n_tokens_size == backend.context  # type: ignore[attr-defined]
        strong = backend.generate([QUESTION], repetition_penalty=3.0)[0]
        hf = create_backend(model(penalised, repetition_penalty=3.0))
        assert strong == hf.generate([QUESTION])[0]
        assert strong != backend.generate([QUESTION], repetition_penalty=1.0)[0]
    finally:
        backend.close()


class _RecordingGenerator:
    """A CTranslate2 generator whose ``generate_batch`` keywords are remembered."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.calls: list[dict[str, Any]] = []

    def generate_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.generator.generate_batch(*args, **kwargs)


def test_ctranslate2_receives_the_checkpoint_s_penalty(
    penalised: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytest.importorskip("ctranslate2")
    backend = create_backend(model(penalised, backend="ctranslate2", quantization="float32"),
                             cache_dir=tmp_path_factory.mktemp("ct2"))
    try:
        recording = _RecordingGenerator(backend.generator)  # type: ignore[attr-defined]
        backend.generator = recording  # type: ignore[attr-defined]
        backend.generate([QUESTION])
        backend.generate([QUESTION, QUESTION])  # the batched greedy path
        explicit = model(penalised, backend="ctranslate2", repetition_penalty=1.2)
        assert resolve_generation(explicit, backend.path).repetition_penalty == 1.2
    finally:
        backend.close()
    assert [c["repetition_penalty"] for c in recording.calls] == [PENALTY, PENALTY]


def test_vllm_sampling_parameters_carry_the_checkpoint_s_penalty(penalised: Path) -> None:
    """What ``SamplingParams`` is built from (vLLM itself is not installed here: it needs a
    CUDA torch, so its construction of them is not exercised)."""
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.cfg = model(penalised, backend="vllm")
    backend.generation = resolve_generation(backend.cfg, penalised)
    (kwargs,) = backend.sampling_kwargs(1, backend.generation, None, ())
    assert (kwargs["repetition_penalty"], kwargs["temperature"], kwargs["top_k"]) == (PENALTY,
                                                                                      0.0, -1)


@pytest.fixture
def served(penalised: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The checkpoint behind the project's server on loopback, decoding with the schema's
    defaults unless a request says otherwise; the settings each request reached it with."""
    from embodied_r_ros.serving import serve

    backend: ChatBackend = create_backend(model(penalised, generation_from_checkpoint=False))
    calls: list[dict[str, Any]] = []
    backend.complete = _record(calls, backend.complete)  # type: ignore[method-assign]
    with serve(backend) as server:
        yield server.url, calls


def test_an_openai_endpoint_is_sent_the_checkpoint_s_penalty(
    penalised: Path, served: tuple[str, list[dict[str, Any]]],
    transformers_reply: tuple[str, list[dict[str, Any]]],
) -> None:
    url, calls = served
    client = create_backend(model(penalised, backend="openai", base_url=url))
    try:
        assert client.generate([QUESTION])[0] == transformers_reply[0]
        assert calls[-1]["repetition_penalty"] == PENALTY
        explicit = create_backend(model(penalised, backend="openai", base_url=url,
                                        repetition_penalty=1.2))
        explicit.generate([QUESTION])
        explicit.close()
        assert calls[-1]["repetition_penalty"] == 1.2
        remote = create_backend(model(penalised, backend="openai", base_url=url,
                                      generation_from_checkpoint=False))
        remote.generate([QUESTION])  # nothing chosen: the server's own setting applies
        remote.close()
        assert "repetition_penalty" not in calls[-1]
    finally:
        client.close()


def test_a_chosen_penalty_keys_cached_perception_replies_apart() -> None:
    from embodied_r_ros.core.perception import reply_settings

    plain = reply_settings(ModelConfig(model="m"))
    assert plain == [0.0, 1.0, 512, 640, 0]  # the key replies were cached under before
    assert reply_settings(ModelConfig(model="m", repetition_penalty=PENALTY)) != plain
    assert reply_settings(ModelConfig(model="m", generation_from_checkpoint=True)) != plain


def test_the_server_takes_vllm_s_extensions_validated() -> None:
    from embodied_r_ros.serving.requests import RequestError, parse_settings

    asked = parse_settings({"top_k": 5, "repetition_penalty": PENALTY}).kwargs()
    assert (asked["top_k"], asked["repetition_penalty"]) == (5, PENALTY)
    assert "repetition_penalty" not in parse_settings({}).kwargs()  # the model's own apply
    for bad in ({"top_k": 1.5}, {"top_k": -1}, {"repetition_penalty": 0}):
        with pytest.raises(RequestError, match=next(iter(bad))):
            parse_settings(bad)

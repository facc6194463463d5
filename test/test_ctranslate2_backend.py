"""The CTranslate2 backend on the tiny offline model: conversion, greedy parity with
transformers, and the fallback when it is missing (stop strings, cancellation and deadlines:
``test_local_engines.py``, for both CPU engines)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from engine_helpers import QUESTIONS, chat

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.transformers_backend import TransformersBackend
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED


@pytest.fixture(scope="module")
def ct2() -> object:
    return pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def fast_lm(ct2: object, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]):
    cfg = tiny_config("tiny-qwen2", backend="ctranslate2", quantization="float32",
                      max_new_tokens=24)
    return create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)


def test_converts_once_and_rebuilds_when_the_source_changes(
    ct2: object, tiny_models_dir: Path, tmp_path: Path
) -> None:
    import shutil

    from embodied_r_ros.backends.ctranslate2_backend import MARKER_FILE, ensure_converted

    source = tmp_path / "my-lm"
    shutil.copytree(tiny_models_dir / "tiny-qwen2", source)
    cache = tmp_path / "cache"
    first = ensure_converted(str(source), "int8", cache)
    weights = first / "model.bin"
    assert weights.is_file() and (first / MARKER_FILE).is_file()
    assert (first / "tokenizer.json").is_file()  # loads without the source
    built = weights.stat().st_mtime_ns
    assert ensure_converted(str(source), "int8", cache) == first
    assert weights.stat().st_mtime_ns == built  # reused, not converted again
    (source / "generation_config.json").write_text(
        (source / "generation_config.json").read_text().replace("false", "false "))
    again = ensure_converted(str(source), "int8", cache)
    assert again == first and (again / "model.bin").stat().st_mtime_ns != built
    assert ensure_converted(str(source), "float32", cache) != first  # one build per quantisation


def test_a_model_it_cannot_find_is_one_clear_error(ct2: object, tmp_path: Path,
                                                   released_hub: Path) -> None:
    """A hub id is fetched as files first: one neither cached nor downloadable (offline here)
    is one line, as is a folder that does not exist."""
    from embodied_r_ros.backends.ctranslate2_backend import ensure_converted

    with pytest.raises(BackendError) as err:
        ensure_converted("someone/some-hub-model", "int8", tmp_path)
    assert err.value.code == BACKEND_FAILED
    assert "not in the hub cache" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(BackendError) as err:
        ensure_converted(str(tmp_path / "nowhere"), "int8", tmp_path)
    assert "no such directory" in str(err.value) and "\n" not in str(err.value)


def test_greedy_replies_equal_transformers_batched_and_streamed_with_the_prefix_cached(
    fast_lm, tiny_lm: TransformersBackend
) -> None:
    convs = [chat(q) for q in QUESTIONS]
    ref = tiny_lm.complete(convs, max_new_tokens=24)
    # several greedy prompts, nobody to cancel or to hear single replies: one batched call
    batched = fast_lm.complete(convs, max_new_tokens=24)
    # one at a time: streamed token by token, the shared prefix cached after the first
    streamed = [fast_lm.complete([c], max_new_tokens=24)[0] for c in convs]
    for ours in (batched, streamed):
        assert [c.text for c in ours] == [c.text for c in ref]
        assert [c.completion_tokens for c in ours] == [c.completion_tokens for c in ref]
        assert [c.finish_reason for c in ours] == [c.finish_reason for c in ref]
    # the system turn (and the user header) is shared: later questions reuse its engine state
    assert fast_lm.cached_prefix_tokens >= 8


@pytest.mark.parametrize(("cores", "per_reply", "expected"),
                         [(2, 1, (1, 2)), (8, 2, (2, 4)), (2, 4, (2, 1)), (1, 1, (1, 1)),
                          (3, 2, (2, 1))])
def test_cores_become_workers_of_one_reply_each(cores: int, per_reply: int,
                                                expected: tuple[int, int]) -> None:
    from embodied_r_ros.backends.ctranslate2_backend import cpu_threads

    assert cpu_threads(cores, per_reply) == expected


def test_int8_batch_replies_are_the_single_replies_one_worker_per_core(
    ct2: object, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    cfg = tiny_config("tiny-qwen2", backend="ctranslate2", quantization="int8",
                      max_new_tokens=24, threads=2, threads_per_reply=1, batch_size=4)
    lm = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    assert lm.generator.num_generators == 2  # two workers, one core each
    convs = [chat(q) for q in QUESTIONS]
    batched = lm.complete(convs, max_new_tokens=24)
    single = [lm.complete([c], max_new_tokens=24)[0] for c in convs]
    assert [c.text for c in batched] == [c.text for c in single]
    assert all(c.completion_tokens for c in batched)


class HoldsCallbacks:
    """The engine, keeping every step callback it was given (as its worker thread may, after
    the call has returned)."""

    def __init__(self, generator: object) -> None:
        self.generator, self.held = generator, []

    def generate_batch(self, *args: object, **kwargs: object) -> object:
        self.held.append(kwargs.get("callback"))
        return self.generator.generate_batch(*args, **kwargs)


def test_a_callback_the_engine_still_holds_does_not_keep_the_backend_alive(
    ct2: object, tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig]
) -> None:
    import gc
    import weakref

    cfg = tiny_config("tiny-qwen2", backend="ctranslate2", quantization="int8",
                      max_new_tokens=8, threads=2)
    lm = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    engine = HoldsCallbacks(lm.generator)
    lm.generator = engine
    lm.complete([chat(QUESTIONS[0])], stop=["never"])
    assert engine.held and callable(engine.held[0])
    alive = weakref.ref(lm)
    del lm
    gc.collect()
    # otherwise the engine's worker, dropping the callback last, would destroy the engine
    # from its own thread (std::system_error "Resource deadlock avoided": an abort)
    assert alive() is None


def test_falls_back_to_transformers_with_one_log_line(
    tiny_models_dir: Path, tiny_config: Callable[..., ModelConfig],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 -> ImportError
    cfg = tiny_config("tiny-qwen2", backend="ctranslate2")
    with caplog.at_level(logging.INFO, logger="embodied_r_ros.backends.factory"):
        backend = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    assert isinstance(backend, TransformersBackend)
    lines = [r for r in caplog.records if r.name == "embodied_r_ros.backends.factory"]
    assert len(lines) == 1 and "ctranslate2 is not installed" in lines[0].getMessage()
    assert backend.complete([chat(QUESTIONS[0])], max_new_tokens=3)[0].completion_tokens == 3

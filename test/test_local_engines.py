"""The contract both in-process CPU engines (CTranslate2, llama.cpp) keep on the tiny offline
model, tested once over both: a ``stop`` string ends the reply where transformers' text has it,
and a cancel or a deadline stops the engine's own decoding loop within a few tokens."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engine_helpers import QUESTIONS, StopsAfter, chat

from embodied_r_ros.backends import create_backend
from embodied_r_ros.backends.transformers_backend import TransformersBackend
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_TIMEOUT, CANCELLED

#: per engine: the modules it needs, and its settings beyond tiny-qwen2 at float32
ENGINES = {
    "ctranslate2": (("ctranslate2",), {}),
    "llamacpp": (("gguf", "llama_cpp"), {"threads_per_reply": 2}),
}


@pytest.fixture(scope="module", params=sorted(ENGINES))
def engine_lm(request: pytest.FixtureRequest, tiny_models_dir: Path,
              tiny_config: Callable[..., ModelConfig]) -> Iterator[ChatBackend]:
    modules, settings = ENGINES[request.param]
    for module in modules:
        pytest.importorskip(module)
    cfg = tiny_config("tiny-qwen2", backend=request.param, quantization="float32",
                      max_new_tokens=24, **settings)
    lm = create_backend(cfg, cache_dir=tiny_models_dir, text_only=True)
    assert type(lm).__module__.endswith(f"{request.param}_backend")  # no fallback
    yield lm
    lm.close()


def test_stop_string_ends_generation(engine_lm: ChatBackend, tiny_lm: TransformersBackend) -> None:
    full = tiny_lm.complete([chat(QUESTIONS[0])], max_new_tokens=24)[0]
    assert len(full.text) > 6
    stop = full.text[4:7]
    first = full.text.find(stop)
    reply = engine_lm.complete([chat(QUESTIONS[0])], max_new_tokens=24, stop=[stop])[0]
    assert reply.text == full.text[:first]
    assert reply.finish_reason == "stop"
    assert reply.completion_tokens < full.completion_tokens


@pytest.mark.parametrize("why", [(CANCELLED, "cancelled"), (BACKEND_TIMEOUT, "time is up")])
def test_cancel_or_deadline_mid_generation_stops_the_engine(engine_lm: ChatBackend, why) -> None:
    token = StopsAfter(after=5, why=why)
    with pytest.raises(BackendError) as err:
        engine_lm.complete([chat(QUESTIONS[1])], max_new_tokens=2000, cancel=token)
    assert err.value.code == why[0]
    # the engine's own decoding loop saw the stop: not 2000 tokens of checks
    assert token.checks < 40
    assert engine_lm.complete([chat(QUESTIONS[1])], max_new_tokens=4)[0].completion_tokens == 4


def test_a_passed_deadline_generates_nothing(engine_lm: ChatBackend) -> None:
    token = CancelToken(deadline=time.monotonic() - 1.0)
    with pytest.raises(BackendError) as err:
        engine_lm.complete([chat(QUESTIONS[2])], cancel=token)
    assert err.value.code == BACKEND_TIMEOUT
    assert engine_lm.healthy()  # a spent budget says nothing about the engine

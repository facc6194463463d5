"""llama.cpp backend: a local causal LM converted once to GGUF and run by ``llama-cpp-python``.

On 2 CPU cores it is the one engine measured that both answers within the robot's latency
budget and gives the same answers as ``transformers``: F16 weights on two threads answer a demo
question at p50 2.58 s and agree with transformers fp32 on 98.9 % of the 180 ID answers
(``results/records/bench/lm_engines.json``), where CTranslate2 int8 agrees on 68.9 %
(``results/records/bench/lm_engines_ctranslate2.json``). Unlike CTranslate2, ggml's threads do
speed up one reply of a 135M model: p50 3.79 s on one thread, 2.48 s on two
(``results/records/bench/lm_engines_llamacpp_gguf.json``).

:func:`ensure_converted` writes the local model (an offline model name such as the LoRA-merged
``smollm2-135m-embodied-r``, or a directory) once into ``<model cache>/llamacpp`` with
``gguf_export`` and no hub, rebuilt when the source changes. ``quantization`` picks the weights:
``float16`` (the offline profile), ``int8`` (Q8_0: about half the weight bytes; p50 1.85 s and
90 % agreement in ``lm_engines.json``) or ``float32``.

Generation runs token by token in the calling thread, so a cancel token or a deadline stops it
at the next token and a ``stop`` string ends it as soon as it appears. llama.cpp keeps the key/
value state of the last prompt and re-evaluates only what follows the prefix a new prompt shares
with it: the fixed system prompt and instructions are prefilled once, not per question.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.backends.base import BackendError, Completion, cut_at_stop
from embodied_r_ros.core.backends.local_engine import (
    MARKER_FILE,
    LocalEngineBackend,
    engine_installed,
    ensure_built,
    import_engine,
    load_tokenizer,
)
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

ENGINE = "llamacpp"
MISSING = ("backend 'llamacpp' needs: pip install llama-cpp-python gguf "
           "(requirements-llamacpp.txt and requirements.txt; llama-cpp-python compiles on "
           "install, with the Makefile's flags)")
MODEL_FILE = "model.gguf"
#: bump when the conversion recipe changes so that cached conversions are rebuilt
CONVERT_VERSION = 1
#: the key/value cache's length: the longest prompt plus reply the engine takes (the offline
#: profile's prompts are about 600-2,000 tokens); capped by the model's own context
CONTEXT_TOKENS = 4096
__all__ = ["MARKER_FILE", "LlamaCppBackend", "ensure_converted", "is_installed"]


def is_installed() -> bool:
    """Whether the engine and the GGUF writer (the converter's dependency) import."""
    return engine_installed(MISSING, "gguf", "llama_cpp")


def _import() -> Any:
    return import_engine(MISSING, "gguf", "llama_cpp")


def ensure_converted(model: str, quantization: str = "float16",
                     cache_dir: str | Path | None = None) -> Path:
    """The build directory of ``model`` (its ``model.gguf`` and tokenizer), converting it
    first if it is missing or its source changed."""
    from embodied_r_ros.core.backends.gguf_export import write_gguf

    llama_cpp = _import()
    return ensure_built(ENGINE, model, quantization, cache_dir,
                        engine_version=llama_cpp.__version__, recipe_version=CONVERT_VERSION,
                        convert=lambda source, out: write_gguf(source, out / MODEL_FILE,
                                                               quantization))


class LlamaCppBackend(LocalEngineBackend):
    """A converted text LM in this process (see the module docstring). Several prompts are
    replied to one after another, each on ``threads_per_reply`` cores (on two cores a second
    reply in parallel would only take the first one's second thread)."""

    def __init__(self, cfg: ModelConfig, *, cache_dir: str | None = None) -> None:
        super().__init__()
        llama_cpp = _import()
        if cfg.device not in ("auto", "cpu"):
            raise BackendError(BACKEND_FAILED, f"backend 'llamacpp' runs on the CPU here, "
                                               f"not on device {cfg.device!r}")
        self.cfg = cfg
        self.model_id = cfg.model
        self.path = ensure_converted(cfg.model, cfg.quantization, cache_dir)
        self.tokenizer, self.end_ids = load_tokenizer(self.path, cfg.model)
        cores = cfg.threads or len(os.sched_getaffinity(0))
        self.threads = max(1, min(cfg.threads_per_reply, cores))
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(self.path / MODEL_FILE), n_ctx=CONTEXT_TOKENS, n_batch=512,
                n_threads=self.threads, n_threads_batch=self.threads, seed=cfg.seed,
                verbose=False,
            )
        except (RuntimeError, ValueError) as exc:
            raise BackendError(BACKEND_FAILED, f"cannot load {self.path}: {exc}") from None
        self.context = min(CONTEXT_TOKENS, self.llm.n_ctx())
        logger.info("loaded %s on llama.cpp (llama-cpp-python %s, %s, %d thread(s))",
                    cfg.model, llama_cpp.__version__, cfg.quantization, self.threads)

    def _one(self, ids: list[int], max_new: int, temperature: float, top_p: float,
             seed: int | None, stop: Sequence[str], cancel: CancelToken | None) -> Completion:
        """One reply, a token at a time; the loop checks ``cancel`` and ``stop`` after each."""
        if len(ids) + max_new > self.context:
            raise BackendError(
                BACKEND_FAILED,
                f"prompt of {len(ids)} tokens plus {max_new} new ones exceeds the engine's "
                f"context of {self.context} tokens")
        if temperature > 0:
            if seed is not None:
                self.llm.set_seed(seed)
            sampling: dict[str, Any] = {"temp": temperature, "top_p": top_p, "top_k": 0}
        else:
            sampling = {"temp": 0.0, "top_k": 1}
        end_ids = frozenset(self.end_ids)
        out: list[int] = []
        cut: str | None = None
        try:
            # reset=True (the default) keeps the key/value state of the prefix this prompt
            # shares with the last one and evaluates only the rest
            for token in self.llm.generate(ids, repeat_penalty=1.0, min_p=0.0, **sampling):
                if token in end_ids:
                    break
                out.append(int(token))
                if stop:
                    cut = cut_at_stop(self.tokenizer.decode(out, skip_special_tokens=True), stop)
                    if cut is not None:
                        break
                if len(out) >= max_new or (cancel is not None and cancel.stopped):
                    break
        except (RuntimeError, ValueError) as exc:
            raise BackendError(BACKEND_FAILED, f"generation failed: {exc}") from exc
        return self._reply(ids, out, cut, max_new, cancel)

    def close(self) -> None:
        """Free the engine's weights (e.g. on a lifecycle cleanup)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()

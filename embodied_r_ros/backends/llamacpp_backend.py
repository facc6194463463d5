"""llama.cpp backend: a local causal LM converted once to GGUF and run by ``llama-cpp-python``.

On 2 CPU cores it is the one engine measured that both answers within the robot's latency
budget and gives the same answers as ``transformers``: F16 weights on two threads answer a demo
question at p50 2.58 s and agree with transformers fp32 on 98.9 % of the 180 ID answers
(``results/records/bench/lm_engines.json``), where CTranslate2 int8 agrees on 68.9 %
(``results/records/bench/lm_engines_ctranslate2.json``). Unlike CTranslate2, ggml's threads do
speed up one reply of a 135M model: p50 3.79 s on one thread, 2.48 s on two
(``results/records/bench/lm_engines_llamacpp_gguf.json``).

:func:`ensure_converted` writes the model (an offline model name such as the LoRA-merged
``smollm2-135m-embodied-r``, a directory, or a hub checkpoint such as the released
``EmbodiedCity/Embodied-R``'s ``Weight_1``, fetched as files) once into
``<model cache>/llamacpp`` with ``gguf_export``, rebuilt when the source changes. A directory
that ``embodied-r-train export --gguf`` wrote (``model.gguf`` beside the tokenizer) is loaded
as it is. ``quantization`` picks the weights: ``float16`` (the offline profile), ``int8`` (Q8_0:
about half the weight bytes; p50 1.85 s and 90 % agreement in ``lm_engines.json``),
``float32``, or the 4-bit ``q4_0`` / ``q4_k_m`` (``results/bench/quantization.md``).
``n_gpu_layers`` offloads layers to the GPU of a llama-cpp-python built with CUDA (a Jetson);
a build without GPU support runs them on the CPU, with one warning.

Generation runs token by token in the calling thread, so a cancel token or a deadline stops it
at the next token and a ``stop`` string ends it as soon as it appears. llama.cpp keeps the key/
value state of the last prompt and re-evaluates only what follows the prefix a new prompt shares
with it: the fixed system prompt and instructions are prefilled once, not per question.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.base import cut_at_stop
from embodied_r_ros.backends.generation import GenerationSettings, resolve_generation
from embodied_r_ros.backends.local_engine import (
    MARKER_FILE,
    LocalEngineBackend,
    engine_installed,
    ensure_built,
    import_engine,
    load_tokenizer,
)
from embodied_r_ros.backends.offline import MARKER_FILE as EXPORT_MARKER
from embodied_r_ros.backends.offline import resolve_model
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, Completion
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

ENGINE = "llamacpp"
MISSING = ("backend 'llamacpp' needs: pip install llama-cpp-python gguf "
           "(requirements-llamacpp.txt and requirements.txt; llama-cpp-python compiles on "
           "install, with the Makefile's flags)")
MODEL_FILE = "model.gguf"
#: bump when the conversion recipe changes so that cached conversions are rebuilt
CONVERT_VERSION = 2
__all__ = ["MARKER_FILE", "LlamaCppBackend", "ensure_converted", "is_installed"]


def is_installed() -> bool:
    """Whether the engine and the GGUF writer (the converter's dependency) import."""
    return engine_installed(MISSING, "gguf", "llama_cpp")


def _import() -> Any:
    return import_engine(MISSING, "gguf", "llama_cpp")


def gguf_dir(model: str, cache_dir: str | Path | None = None) -> Path | None:
    """The directory of ``model`` when it is a GGUF export (``model.gguf`` with its tokenizer,
    as ``embodied-r-train export --gguf`` writes it), else None."""
    path = Path(resolve_model(model, cache_dir)).expanduser()
    return path if (path / MODEL_FILE).is_file() else None


def exported_quantization(path: Path) -> str | None:
    """The quantisation a GGUF export records (None for the backend's own builds)."""
    try:
        marker = json.loads((path / EXPORT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker.get("quantization") if isinstance(marker, dict) else None


def ensure_converted(model: str, quantization: str = "float16",
                     cache_dir: str | Path | None = None, **where: str | None) -> Path:
    """The build directory of ``model`` (its ``model.gguf`` and tokenizer), converting it
    first if it is missing or its source changed; ``where``: a hub checkpoint's ``revision``
    and ``subfolder``. A GGUF export is returned as it is."""
    from embodied_r_ros.backends.gguf_export import write_gguf

    llama_cpp = _import()
    exported = gguf_dir(model, cache_dir)
    if exported is not None:
        return exported
    return ensure_built(ENGINE, model, quantization, cache_dir,
                        engine_version=llama_cpp.__version__, recipe_version=CONVERT_VERSION,
                        convert=lambda source, out: write_gguf(source, out / MODEL_FILE,
                                                               quantization), **where)


def penalising_llama(llama_cpp: Any) -> Any:
    """``llama_cpp.Llama`` whose repetition penalty counts the prompt's tokens as well as the
    reply's, as transformers and vLLM do: llama.cpp's penalty sampler only sees the tokens
    accepted into it, and ``Llama.generate`` accepts the sampled ones alone, so the prompt set
    in ``penalised_prompt`` is accepted into each new sampler first."""

    class PenalisingLlama(llama_cpp.Llama):
        penalised_prompt: Sequence[int] = ()

        def _init_sampler(self, *args: Any, **kwargs: Any) -> Any:
            sampler = super()._init_sampler(*args, **kwargs)
            for token in self.penalised_prompt:
                sampler.accept(int(token))
            return sampler

    return PenalisingLlama


def gpu_layers(cfg: ModelConfig, llama_cpp: Any) -> int:
    """The layers to offload: ``n_gpu_layers``, or 0 (one warning) where this llama-cpp-python
    was built without GPU support; a CUDA device with none offloaded is a mistake."""
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise BackendError(BACKEND_FAILED, f"backend 'llamacpp' runs on the CPU or, with "
                                           f"n_gpu_layers, on CUDA; not on device {cfg.device!r}")
    if cfg.device == "cuda" and cfg.n_gpu_layers == 0:
        raise BackendError(BACKEND_FAILED, "backend 'llamacpp' on device 'cuda' needs "
                                           "n_gpu_layers (-1: every layer)")
    if cfg.n_gpu_layers and not llama_cpp.llama_supports_gpu_offload():
        logger.warning("llama-cpp-python was built without GPU support: %s runs on the CPU "
                       "(reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\")", cfg.model)
        return 0
    return cfg.n_gpu_layers


class LlamaCppBackend(LocalEngineBackend):
    """A converted text LM in this process (see the module docstring). Several prompts are
    replied to one after another, each on ``threads_per_reply`` cores (on two cores a second
    reply in parallel would only take the first one's second thread)."""

    def __init__(self, cfg: ModelConfig, *, cache_dir: str | None = None) -> None:
        super().__init__()
        llama_cpp = _import()
        self.cfg = cfg
        self.model_id = cfg.model
        self.gpu_layers = gpu_layers(cfg, llama_cpp)
        self.path = ensure_converted(cfg.model, cfg.quantization, cache_dir,
                                     revision=cfg.revision, subfolder=cfg.subfolder)
        recorded = exported_quantization(self.path)
        if recorded not in (None, cfg.quantization):
            logger.warning("%s is a %s GGUF export: quantization %s does not apply", cfg.model,
                           recorded, cfg.quantization)
        self.tokenizer, self.end_ids = load_tokenizer(self.path, cfg.model)
        cores = cfg.threads or len(os.sched_getaffinity(0))
        self.threads = max(1, min(cfg.threads_per_reply, cores))
        try:
            self.llm = penalising_llama(llama_cpp)(
                model_path=str(self.path / MODEL_FILE), n_ctx=cfg.context_tokens, n_batch=512,
                n_threads=self.threads, n_threads_batch=self.threads, seed=cfg.seed,
                n_gpu_layers=self.gpu_layers, verbose=False,
            )
        except (RuntimeError, ValueError) as exc:
            raise BackendError(BACKEND_FAILED, f"cannot load {self.path}: {exc}") from None
        self.context = min(cfg.context_tokens, self.llm.n_ctx())
        self.context_tokens = self.context
        self.generation = resolve_generation(cfg, self.path)  # the build keeps the config
        # the penalty's window: the whole context, as transformers applies it (default: 64)
        self.llm.last_n_tokens_size = self.context
        logger.info("loaded %s on llama.cpp (llama-cpp-python %s, %s, %d thread(s), %d GPU "
                    "layers; %s)", cfg.model, llama_cpp.__version__, self.path.name,
                    self.threads, self.gpu_layers, self.generation.describe())

    def _one(self, ids: list[int], settings: GenerationSettings, seed: int | None,
             stop: Sequence[str], cancel: CancelToken | None) -> Completion:
        """One reply, a token at a time; the loop checks ``cancel`` and ``stop`` after each."""
        max_new = settings.max_new_tokens
        if len(ids) + max_new > self.context:
            raise BackendError(
                BACKEND_FAILED,
                f"prompt of {len(ids)} tokens plus {max_new} new ones exceeds the engine's "
                f"context of {self.context} tokens")
        if not settings.greedy:
            if seed is not None:
                self.llm.set_seed(seed)
            sampling: dict[str, Any] = {"temp": settings.temperature, "top_p": settings.top_p,
                                        "top_k": settings.top_k}
        else:
            sampling = {"temp": 0.0, "top_k": 1}
        end_ids = frozenset(self.end_ids)
        out: list[int] = []
        cut: str | None = None
        try:
            # reset=True (the default) keeps the key/value state of the prefix this prompt
            # shares with the last one and evaluates only the rest
            self.llm.penalised_prompt = ids if settings.repetition_penalty != 1.0 else ()
            for token in self.llm.generate(ids, repeat_penalty=settings.repetition_penalty,
                                           min_p=0.0, **sampling):
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

"""CTranslate2 backend: a local causal LM converted once to a quantised CPU engine.

CTranslate2's int8 CPU kernels decode the shipped 135M reasoner faster than plain
``transformers`` ``generate``: 43.4 against 29.2 tokens a second, p50 2.80 against 3.87 s a
demo question, one thread a reply (``results/records/bench/lm_engines_ctranslate2.json``). The
engine cannot read a Transformers checkpoint directly, so :func:`ensure_converted` converts the
local model (an offline model name such as the LoRA-merged ``smollm2-135m-embodied-r``, or a
directory) once into the model cache with CTranslate2's own ``TransformersConverter`` and no
hub (``local_engine``: keyed by the source files, the quantisation and the engine version, so a
changed source is rebuilt).

Generation calls back on every token (``generate_batch(callback=...)`` in the calling thread),
so a cancel token or a deadline stops it at the next token and ``stop`` strings end it as soon
as they appear. A greedy call of several prompts with nobody to cancel it or to hear single
replies (an evaluation) runs as one batched ``generate_batch`` call instead. The prompt's fixed
prefix (the system prompt and any instruction every question shares) is the longest token
prefix shared by the prompts seen so far; it is handed to the engine as its ``static_prompt``,
whose model state CTranslate2 caches, so later questions only prefill their own text.
"""

from __future__ import annotations

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
    common_prefix,
    engine_installed,
    ensure_built,
    import_engine,
    load_tokenizer,
)
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import BackendError, Completion
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

MISSING = "backend 'ctranslate2' needs: pip install ctranslate2 (in requirements.txt)"
ENGINE = "ctranslate2"
__all__ = ["MARKER_FILE", "CTranslate2Backend", "cpu_threads", "ensure_converted"]
#: bump when the conversion recipe changes so that cached conversions are rebuilt
CONVERT_VERSION = 2
#: a shared prefix shorter than this is not worth a cached engine state
MIN_PREFIX_TOKENS = 8


def is_installed() -> bool:
    """Whether the engine imports (it is small: no torch)."""
    return engine_installed(MISSING, "ctranslate2")


def _import() -> Any:
    return import_engine(MISSING, "ctranslate2")


def ensure_converted(model: str, quantization: str = "int8",
                     cache_dir: str | Path | None = None, **where: str | None) -> Path:
    """The engine directory of ``model`` (an offline model name, a local checkpoint directory
    or a hub checkpoint: ``where`` = ``revision``, ``subfolder``), converting it first if it is
    missing or its source changed."""
    ctranslate2 = _import()
    return ensure_built(ENGINE, model, quantization, cache_dir,
                        engine_version=ctranslate2.__version__,
                        recipe_version=CONVERT_VERSION,
                        convert=lambda source, out: _convert(source, out, quantization), **where)


def _convert(source: Path, out: Path, quantization: str) -> None:
    from ctranslate2.converters import TransformersConverter

    try:
        TransformersConverter(str(source)).convert(str(out), quantization=quantization,
                                                   force=True)
    except (ValueError, NotImplementedError, KeyError) as exc:  # unsupported architecture
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendError(BACKEND_FAILED, f"cannot convert {source} to CTranslate2: {first}"
                           ) from None


def cpu_threads(cores: int, per_reply: int) -> tuple[int, int]:
    """``(threads per reply, workers)`` for ``cores`` CPU cores: each worker decodes one reply
    on ``per_reply`` cores. A 135M model's matrix-vector products are too small to split: on
    2 cores two threads on one reply take 1.30x the time of one
    (``results/records/bench/ct2_threads_per_reply.md``; the OpenMP barriers cost more than the
    second core gives), so the spare cores run other prompts of a batch instead, and stay free
    for the robot's own work when one question is asked."""
    intra = max(1, min(per_reply, cores))
    return intra, max(1, cores // intra)


class CTranslate2Backend(LocalEngineBackend):
    """A converted text LM in this process (see the module docstring)."""

    batches_greedy = True

    def __init__(self, cfg: ModelConfig, *, cache_dir: str | None = None) -> None:
        super().__init__()
        ctranslate2 = _import()
        self.cfg = cfg
        self.model_id = cfg.model
        self._ct2 = ctranslate2
        self.path = ensure_converted(cfg.model, cfg.quantization, cache_dir,
                                     revision=cfg.revision, subfolder=cfg.subfolder)
        device = "cpu" if cfg.device == "auto" else cfg.device
        self.on_cpu = device == "cpu"
        intra, workers = cpu_threads(cfg.threads or len(os.sched_getaffinity(0)),
                                     cfg.threads_per_reply)
        if not self.on_cpu:  # a GPU: one engine replica, whose batches share each step
            workers = 1
        try:
            self.generator = ctranslate2.Generator(
                str(self.path), device=device, compute_type=cfg.quantization,
                intra_threads=intra, inter_threads=workers,
            )
        except (RuntimeError, ValueError) as exc:
            raise BackendError(BACKEND_FAILED, f"cannot load {self.path}: {exc}") from None
        self.tokenizer, self.end_ids = load_tokenizer(self.path, cfg.model)
        self.generation = resolve_generation(cfg, self.path)  # the build keeps the config
        if self.generation.repetition_penalty != 1.0:
            logger.warning("CTranslate2 penalises repeats of the reply's own tokens only, "
                           "transformers and llama.cpp the prompt's too: %s may answer "
                           "otherwise than on those engines", cfg.model)
        self._prefix: list[int] | None = None  # the shared prompt prefix, once two are seen
        self._last: list[int] | None = None
        logger.info("loaded %s on CTranslate2 %s (%s, %s, %d worker(s) x %d thread(s); %s)",
                    cfg.model, ctranslate2.__version__, device, cfg.quantization, workers, intra,
                    self.generation.describe())

    # -- prompts -----------------------------------------------------------------------------

    def split_prompt(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """``(static prefix, rest)``: the prefix shrinks to what every prompt so far shares
        (at least one token of ``rest`` is always left for the engine to prefill)."""
        if self._prefix is None and self._last is not None:
            self._prefix = self._last[: common_prefix(self._last, ids)]
        self._last = ids
        if self._prefix is None:
            return [], ids
        shared = min(common_prefix(self._prefix, ids), len(ids) - 1)
        self._prefix = self._prefix[:shared]
        if shared < MIN_PREFIX_TOKENS:
            return [], ids
        return ids[:shared], ids[shared:]

    @property
    def cached_prefix_tokens(self) -> int:
        """How many leading prompt tokens the engine's cached state covers (0: none yet)."""
        prefix = self._prefix or []
        return len(prefix) if len(prefix) >= MIN_PREFIX_TOKENS else 0

    # -- generation --------------------------------------------------------------------------

    def _one(self, ids: list[int], settings: GenerationSettings, seed: int | None,
             stop: Sequence[str], cancel: CancelToken | None) -> Completion:
        """One reply, decoded by the engine in this thread; its step callback collects the
        tokens and ends decoding at the next step once ``cancel`` is stopped or a ``stop``
        string appears. (``generate_tokens`` runs the same loop in a second thread and hands
        each token over a queue: no faster, 1.02x the time of this path with identical
        replies, ``results/records/bench/ct2_decode_paths.md``; this way there is no thread to
        close.)"""
        prefix, rest = self.split_prompt(ids)
        tokens = self.tokenizer.convert_ids_to_tokens
        max_new = settings.max_new_tokens
        kwargs: dict[str, Any] = {"max_length": max_new, "end_token": self.end_ids,
                                  "include_prompt_in_result": False,
                                  "repetition_penalty": settings.repetition_penalty}
        if not settings.greedy:
            kwargs.update(sampling_topk=settings.top_k, sampling_topp=settings.top_p,
                          sampling_temperature=settings.temperature)
            if seed is not None:
                self._ct2.set_random_seed(seed)
        else:
            kwargs["sampling_topk"] = 1
        if prefix:
            kwargs.update(static_prompt=tokens(prefix), cache_static_prompt=True)
        out: list[int] = []
        cut: list[str] = []
        # The engine calls back from its worker thread and may drop the callback there after
        # this call has returned; it must not hold the backend (or the engine), or a backend
        # dropped meanwhile is destroyed in that worker, which then joins itself (abort).
        end_ids, decode = frozenset(self.end_ids), self.tokenizer.decode

        def on_step(step: Any) -> bool:
            if step.token_id not in end_ids:
                out.append(int(step.token_id))
                if stop:
                    text = cut_at_stop(decode(out, skip_special_tokens=True), stop)
                    if text is not None:
                        cut.append(text)
                        return True
            return cancel is not None and cancel.stopped

        try:
            self.generator.generate_batch([tokens(rest)], callback=on_step, **kwargs)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(BACKEND_FAILED, f"generation failed: {exc}") from exc
        return self._reply(ids, out, cut[0] if cut else None, max_new, cancel)

    def _batch(self, prompts: list[list[int]], settings: GenerationSettings,
               stop: Sequence[str]) -> list[Completion]:
        """Greedy replies of several prompts in one engine call: what an evaluation asks, many
        questions and nobody waiting on one of them. On CPU every worker takes one prompt at a
        time: no padding, so each reply is its prompt's own (a padded int8 batch of 16 changed
        9 replies and took 2.24x the time: ``results/records/bench/ct2_threads_per_reply.md``;
        :meth:`_one` prefills the cached prefix apart, which can still move a near tie); on a
        GPU ``batch_size`` prompts share a step. A stop string cuts the text afterwards."""
        tokens = self.tokenizer.convert_ids_to_tokens
        max_new = settings.max_new_tokens
        try:
            results = self.generator.generate_batch(
                [tokens(ids) for ids in prompts], max_length=max_new, sampling_topk=1,
                repetition_penalty=settings.repetition_penalty,
                end_token=self.end_ids, include_prompt_in_result=False,
                max_batch_size=1 if self.on_cpu else self.cfg.batch_size)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(BACKEND_FAILED, f"generation failed: {exc}") from exc
        out = []
        for ids, result in zip(prompts, results, strict=True):
            new = [int(t) for t in result.sequences_ids[0] if t not in self.end_ids]
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            cut = cut_at_stop(text, stop) if stop else None
            finish = "stop" if cut is not None or len(new) < max_new else "length"
            out.append(Completion(text=text if cut is None else cut, finish_reason=finish,
                                  prompt_tokens=len(ids), completion_tokens=len(new)))
        return out

    def close(self) -> None:
        """Free the engine's weights (e.g. on a lifecycle cleanup)."""
        self.generator = None

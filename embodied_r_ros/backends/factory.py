"""Build the backend a :class:`ModelConfig` names, importing heavy libraries only for it, and
the pipeline a :class:`Config` names, with its models and its reply cache.

``import embodied_r_ros.backends`` must stay cheap (no torch): ROS nodes that talk to a
remote VLM never need torch, transformers or vLLM installed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from embodied_r_ros.backends.reply_cache import ReplyCache
from embodied_r_ros.core.chat import ChatBackend
from embodied_r_ros.core.config import Config, ModelConfig
from embodied_r_ros.core.pipeline import EmbodiedR

logger = logging.getLogger(__name__)


def create_backend(
    cfg: ModelConfig, *, cache_dir: str | Path | None = None, text_only: bool = False
) -> ChatBackend:
    """The backend for ``cfg.backend``; ``cache_dir`` overrides where offline models live.

    ``text_only``: the model only ever reads text (the reasoning LM, the consistency
    reference), so an in-process VL checkpoint loads without its vision part."""
    cache = None if cache_dir is None else str(cache_dir)
    if cfg.backend == "llamacpp":
        from embodied_r_ros.backends import ctranslate2_backend, llamacpp_backend

        if llamacpp_backend.is_installed():
            return llamacpp_backend.LlamaCppBackend(cfg, cache_dir=cache)
        fallback = "ctranslate2" if ctranslate2_backend.is_installed() else "transformers"
        logger.warning("llama-cpp-python is not installed: %s runs on %s (%s)", cfg.model,
                       fallback, llamacpp_backend.MISSING)
        update: dict[str, object] = {"backend": fallback}
        if fallback == "ctranslate2" and cfg.quantization not in ("int8", "float32"):
            update["quantization"] = "int8"  # CTranslate2's CPU kernels: no float16, no 4-bit
        cfg = cfg.model_copy(update=update)
    if cfg.backend == "ctranslate2":
        from embodied_r_ros.backends import ctranslate2_backend

        if ctranslate2_backend.is_installed():
            return ctranslate2_backend.CTranslate2Backend(cfg, cache_dir=cache)
        logger.warning("ctranslate2 is not installed: %s runs on transformers (slower; "
                       "pip install ctranslate2 for the fast CPU engine)", cfg.model)
        cfg = cfg.model_copy(update={"backend": "transformers"})
    if cfg.backend == "transformers":
        from embodied_r_ros.backends.transformers_backend import TransformersBackend

        return TransformersBackend(cfg, cache_dir=cache, text_only=text_only)
    if cfg.backend == "openai":
        from embodied_r_ros.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(cfg)
    if cfg.backend == "vllm":
        from embodied_r_ros.backends.vllm_backend import VLLMBackend

        return VLLMBackend(cfg, cache_dir=cache, text_only=text_only)
    raise ValueError(f"unknown backend {cfg.backend!r}")  # unreachable: the schema validates


def create_models(
    config: Config, *, perception: bool = True, reasoning: bool = True
) -> tuple[ChatBackend | None, ChatBackend | None, ChatBackend | None]:
    """``(vlm, lm, memory_lm)`` as ``config`` names them: the VLM only for VLM perception, the
    reasoning LMs text-only (a VL checkpoint loads as its text decoder), the memory reader only
    where the memory is on (nothing else writes its texts); ``None`` for a role not asked for
    or not configured."""
    vlm = lm = memory_lm = None
    if perception and config.perception.backend == "vlm":
        assert config.perception.vlm is not None  # the schema guarantees it
        vlm = create_backend(config.perception.vlm)
    if reasoning:
        lm = create_backend(config.reasoning.model, text_only=True)
        if (memory_reader := config.memory_reader()) is not None:
            memory_lm = create_backend(memory_reader, text_only=True)
    return vlm, lm, memory_lm


def reply_cache_for(config: Config) -> ReplyCache | None:
    """The reply cache ``config.cache`` names; streaming perception keeps one in memory even
    where the cache is off (None: no cache)."""
    c = config.cache
    if not (c.enabled or config.perception.mode == "streaming"):
        return None
    return ReplyCache(c.dir if c.enabled else None, max_mb=c.max_mb, memory_mb=c.memory_mb)


def load_pipeline(
    config: Config,
    *,
    vlm: ChatBackend | None = None,
    lm: ChatBackend | None = None,
    memory_lm: ChatBackend | None = None,
    perception: bool = True,
    reasoning: bool = True,
) -> EmbodiedR:
    """An :class:`EmbodiedR` with the models given and, for the roles asked for
    (``perception``, ``reasoning``) and not given, those ``config`` names, loaded here; and
    ``config``'s reply cache. Roles neither given nor asked for stay unloaded."""
    loaded_vlm, loaded_lm, loaded_memory_lm = create_models(
        config, perception=perception and vlm is None, reasoning=reasoning and lm is None)
    return EmbodiedR(config, vlm=vlm or loaded_vlm, lm=lm or loaded_lm,
                     memory_lm=memory_lm or loaded_memory_lm, cache=reply_cache_for(config))

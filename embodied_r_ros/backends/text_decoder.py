"""A causal LM from any checkpoint the reasoner may start from, Qwen2(.5)-VL included.

Embodied-R's official recipe trains the *decoder* of Qwen2.5-VL-3B-Instruct on text prompts
(its video pretraining helps). With text only, Qwen2.5-VL's multimodal RoPE gives every token
the same temporal, height and width position, which is exactly 1-D RoPE; so the decoder is a
``Qwen2ForCausalLM`` with the same weights, and its logits are bit-identical (tested). Loading it
that way lets GRPO, SFT, LoRA and evaluation treat it like any causal LM, and the trained result
saves as a plain causal LM the reasoning node loads. The decoder is loaded straight from the
checkpoint's files: the vision tower is never built and its weights are never read (tested), so
the 3B reasoner holds 3.1 B parameters, not 3.75 B. Its keys are ``model.layers.*``, as
transformers before 4.52 (the released reasoner's) and since 5 save them; transformers 5 is
required (under 4.x the decoder's ``rope_theta`` fell back to 10000 without a word). Tied input
and output embeddings (Qwen2.5-VL-3B's) stay tied.

Trainers that rebuild the model from its path (TRL's KL reference model) need a checkpoint of
the decoder itself: :func:`decoder_checkpoint` writes it once next to the offline models.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

#: Qwen2 config fields carried over from a Qwen2(.5)-VL text config
_TEXT_FIELDS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
    "initializer_range", "rms_norm_eps", "use_sliding_window", "sliding_window",
    "max_window_layers", "layer_types", "attention_dropout", "bos_token_id", "eos_token_id",
    "pad_token_id",
)
VL_TYPES = frozenset({"qwen2_vl", "qwen2_5_vl"})
#: the oldest transformers whose configs and checkpoint layout the decoder reads
MIN_TRANSFORMERS = 5
#: the vision tower's weights, which a text decoder skips: ``visual.*`` / ``model.visual.*``
VISION_KEYS = (r"^visual\.", r"^model\.visual\.")


def require_transformers() -> None:
    """Refuse an older transformers in one line (its Qwen2(.5)-VL configs keep the rope
    parameters elsewhere, and the decoder would silently lose them)."""
    import transformers

    major = int(transformers.__version__.split(".")[0])
    if major < MIN_TRANSFORMERS:
        raise BackendError(BACKEND_FAILED, f"the text decoder needs transformers "
                                           f"{MIN_TRANSFORMERS} or newer (installed: "
                                           f"{transformers.__version__}): pip install -U "
                                           f"'transformers>={MIN_TRANSFORMERS}'")


def is_vision_language(path: str) -> bool:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path).model_type in VL_TYPES


def decoder_config(vl_config: Any) -> Any:
    """The ``Qwen2Config`` of a Qwen2(.5)-VL checkpoint's language model."""
    from transformers import Qwen2Config

    require_transformers()
    text = vl_config.text_config.to_dict()
    # a flat (transformers 4.x) config still carries the legacy ``type: mrope`` beside rope_type
    rope = {k: v for k, v in (text.get("rope_parameters") or {}).items()
            if k not in ("mrope_section", "type")}
    fields = {k: text[k] for k in _TEXT_FIELDS if k in text}
    return Qwen2Config(**fields, rope_parameters=rope or None,
                       tie_word_embeddings=bool(vl_config.tie_word_embeddings))


def load_causal_lm(path: str, dtype: Any = "auto") -> Any:
    """``AutoModelForCausalLM`` for ordinary checkpoints; for Qwen2(.5)-VL, its text decoder as
    a ``Qwen2ForCausalLM`` read from the checkpoint's files without the vision tower."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, Qwen2ForCausalLM

    config = AutoConfig.from_pretrained(path)
    if config.model_type not in VL_TYPES:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)

    class TextDecoder(Qwen2ForCausalLM):
        # the vision weights are expected in the files and skipped, not reported as unexpected
        _keys_to_ignore_on_load_unexpected = list(VISION_KEYS)

    text = decoder_config(config)
    decoder, info = TextDecoder.from_pretrained(path, config=text, dtype=dtype,
                                                output_loading_info=True)
    missing = [k for k in info["missing_keys"]
               if not (k == "lm_head.weight" and text.tie_word_embeddings)]
    if missing:
        raise BackendError(BACKEND_FAILED, f"{path}: no decoder weight {missing[0]!r} (of "
                                           f"{len(missing)} missing); a checkpoint saved by "
                                           "transformers 4.52 to 4.57 (model.language_model.*) "
                                           "loads once re-saved with transformers 5")
    decoder.__class__ = Qwen2ForCausalLM  # saves and reloads as the plain causal LM it is
    try:
        decoder.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:
        decoder.generation_config = GenerationConfig.from_model_config(text)
    return decoder.eval()


def chat_template(path: str, tokenizer: Any) -> str | None:
    """The tokenizer's chat template, else the processor's (``chat_template.jinja``/``.json``
    beside it: a VL checkpoint may keep it there only)."""
    if tokenizer.chat_template:
        return str(tokenizer.chat_template)
    jinja, data = Path(path) / "chat_template.jinja", Path(path) / "chat_template.json"
    if jinja.is_file():
        return jinja.read_text()
    if data.is_file():
        return json.loads(data.read_text()).get("chat_template")
    return None


def decoder_checkpoint(path: str, cache_dir: str | Path | None = None) -> str:
    """``path`` for ordinary checkpoints; for a Qwen2(.5)-VL one, a directory holding its text
    decoder as a plain ``Qwen2ForCausalLM`` checkpoint with the tokenizer and chat template
    (written once, atomically, under the offline model cache; keyed by the source path and its
    config, so another checkpoint never reuses it)."""
    if not is_vision_language(path):
        return path
    from transformers import AutoConfig, AutoTokenizer

    from embodied_r_ros.backends.offline import build_once, model_cache_dir

    source = AutoConfig.from_pretrained(path).to_json_string()
    key = hashlib.sha256(f"{Path(path).expanduser().resolve()}\n{source}".encode()).hexdigest()
    root = model_cache_dir(cache_dir) / "text-decoders"
    dest = root / f"{Path(path).name or 'model'}-{key[:12]}"

    def build(tmp: Path) -> None:
        logger.info("writing the text decoder of %s to %s (once)", path, dest)
        load_causal_lm(path).save_pretrained(tmp)
        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.chat_template = chat_template(path, tokenizer)
        tokenizer.save_pretrained(tmp)

    build_once(dest, lambda: (dest / "config.json").is_file(), build)
    return str(dest)

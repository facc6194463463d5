"""The policy being trained: loading it (any causal LM, or the text decoder of a Qwen2.5-VL
checkpoint, as the official recipe starts from), LoRA, and saving what training produced.

The final save goes through the trainer's own ``save_model``, which gathers the full weights
under DeepSpeed ZeRO-3 (``save_pretrained`` on rank 0 would write only its shard of them). With
LoRA the adapter is kept as it is (``final-adapter/``, small enough to ship) and merged into the
base weights for ``final/``, a plain model directory that every backend loads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from embodied_r_ros.core.config import ConfigError
from embodied_r_training.recipe import TrainConfig
from embodied_r_training.rl.precision import Precision, master_dtype, training_precision

log = logging.getLogger(__name__)

ADAPTER_DIR = "final-adapter"


def local_model(name: str) -> str:
    """A local directory for offline model names; hub ids and paths pass unchanged."""
    from embodied_r_ros.backends.offline import resolve_model

    return resolve_model(name)


def policy_precision(cfg: TrainConfig, device: str) -> Precision:
    """The run's precision (:mod:`.precision`): fp32 master weights, ``policy.dtype`` compute."""
    adapters_only = cfg.policy.lora is not None or bool(cfg.policy.adapter)
    return training_precision(cfg.policy.dtype, device, adapters_only=adapters_only)


def checkpointing_flag(cfg: TrainConfig) -> dict[str, bool]:
    """The trainer argument for ``policy.gradient_checkpointing``, under this transformers' name:
    ``activation_checkpointing`` since it was renamed (``gradient_checkpointing`` stays as a
    deprecated alias), ``gradient_checkpointing`` before (5.17, the GPU machines' image)."""
    import dataclasses

    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    name = ("activation_checkpointing" if "activation_checkpointing" in fields
            else "gradient_checkpointing")
    return {name: cfg.policy.gradient_checkpointing}


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_base(cfg: TrainConfig, device: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``policy.model``; a Qwen2(.5)-VL checkpoint loads as its text
    decoder, from a decoder checkpoint written once (so that TRL can rebuild its frozen KL
    reference from the model's path, as it does for any causal LM)."""
    from transformers import AutoModelForCausalLM

    from embodied_r_ros.backends.text_decoder import decoder_checkpoint

    path = decoder_checkpoint(local_model(cfg.policy.model))
    dtype = master_dtype(policy_precision(cfg, device))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, load_tokenizer(path)


def check_adapter(cfg: TrainConfig) -> Path | None:
    """``policy.adapter`` as a path, checked before anything loads: a run pointed at an adapter
    that was never written (its SFT not run yet, a typo) stops with one line naming it."""
    if not cfg.policy.adapter:
        return None
    adapter = Path(cfg.policy.adapter).expanduser()
    if not (adapter / "adapter_config.json").is_file():
        what = "does not exist" if not adapter.exists() else "has no adapter_config.json"
        raise ConfigError(f"config key 'policy.adapter': {adapter} {what}; train the adapter "
                          "first (embodied-r-train sft) or point the key at a PEFT adapter")
    return adapter


def load_policy(cfg: TrainConfig, device: str) -> tuple[Any, Any]:
    """The base model, wrapped in ``policy.adapter`` (trainable) when one is given."""
    adapter = check_adapter(cfg)
    model, tokenizer = load_base(cfg, device)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
        log.info("continuing LoRA adapter %s", adapter)
    return model, tokenizer


def lora_config(cfg: TrainConfig) -> Any:
    """A new LoRA for the trainer; None for full fine-tuning or when an adapter continues."""
    if cfg.policy.lora is None or cfg.policy.adapter:
        return None
    from peft import LoraConfig

    lora = cfg.policy.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def save_final(trainer: Any, tokenizer: Any, final: Path, cfg: TrainConfig) -> Path | None:
    """Full weights in ``final/`` (LoRA merged); with LoRA also the adapter alone, returned."""
    from peft import PeftModel

    model = trainer.accelerator.unwrap_model(trainer.model)
    adapter: Path | None = None
    if isinstance(model, PeftModel):
        adapter = final.parent / ADAPTER_DIR
        trainer.save_model(str(adapter))  # every rank takes part (ZeRO-3 gathers here)
        if trainer.accelerator.is_main_process:
            base = load_base(cfg, "cpu")[0]
            merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
            merged.save_pretrained(final)
    else:
        trainer.save_model(str(final))
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(final)
    trainer.accelerator.wait_for_everyone()
    return adapter

"""The one training-precision rule: float32 master weights on every route, half precision only
for the arithmetic.

At the paper's learning rate of 5e-7 an AdamW step moves a weight by about 5e-7, far below
bfloat16's resolution (8 bits of mantissa: a step of 2**-8 relative), so an optimizer stepping
bfloat16 weights rounds almost every update away (0.7 % of an 896x896 layer's weights changed
in a CPU check, 100 % in float32). The official run trained under DeepSpeed ZeRO-3 in bf16,
which keeps fp32 master weights. Here the policy is always *loaded* in float32 and
``policy.dtype`` names the *compute* precision: on CUDA the trainer runs the forward and
backward passes under bf16 (or fp16) autocast (``bf16=True`` / ``fp16=True`` in the trainer's
arguments, with fp32 parameters that is mixed precision, not half-precision training); under
DeepSpeed the same flags make DeepSpeed hold the fp32 master copy. On CPU ``auto`` and
``float16`` train in fp32; an explicit ``bfloat16`` runs bf16 autocast over fp32 weights (base
included: nothing is held in bf16), which CPUs with AMX or AVX512-BF16 compute about twice as
fast (SmolLM2-135M with LoRA, 4 x 800 tokens forward and backward on 2 CPU cores: 17.9 s
in fp32, 9.0 s under bf16 autocast).
The compute dtype follows the inference rule of the backends
(:func:`embodied_r_ros.backends.transformers_backend.resolve_dtype`: ``auto`` is bf16 on
CUDA), so one rule decides both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Compute = Literal["float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class Precision:
    """How a training run holds and computes its weights."""

    weights: str  # the dtype the policy is loaded in: float32 unless only adapters train
    compute: Compute  # the autocast dtype of the forward/backward passes

    @property
    def bf16(self) -> bool:
        return self.compute == "bfloat16"

    @property
    def fp16(self) -> bool:
        return self.compute == "float16"

    def trainer_flags(self) -> dict[str, Any]:
        """The ``bf16``/``fp16`` arguments of TRL's (and Transformers') training arguments."""
        return {"bf16": self.bf16, "fp16": self.fp16}

    def frozen_model_kwargs(self) -> dict[str, Any]:
        """``model_init_kwargs`` for TRL's frozen KL reference: never stepped, so it may be held
        in the compute dtype (half the memory of the fp32 policy)."""
        return {"dtype": self.compute} if self.compute != "float32" else {}


def training_precision(dtype: str, device: str, *, adapters_only: bool = False) -> Precision:
    """The precision of a training run on ``device`` (``cpu`` or ``cuda``) for ``policy.dtype``.

    ``adapters_only`` (LoRA): the base weights are frozen, so they are held in the compute
    dtype; PEFT keeps the trainable adapter weights in float32 (``autocast_adapter_dtype``)."""
    from embodied_r_ros.backends.transformers_backend import resolve_dtype

    if device != "cuda":
        return Precision("float32", "bfloat16" if dtype == "bfloat16" else "float32")
    compute = str(resolve_dtype(dtype, device)).removeprefix("torch.")
    if compute not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"unsupported training dtype {dtype!r}")
    return Precision(compute if adapters_only else "float32", compute)  # type: ignore[arg-type]


def master_dtype(precision: Precision) -> Any:
    import torch

    return getattr(torch, precision.weights)

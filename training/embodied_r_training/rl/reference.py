"""The frozen reference LM of the consistency reward, as training and evaluation both build it.

The reference is ``rewards.reference`` when configured (an in-process model or a server, as the
official 5-GPU layout), else the policy's initial weights in-process; it always decodes at the
paper's temperature 0.1 for at most 10 new tokens, whatever the config says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.chat import ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.prompts import PromptSet, prompts_from
from embodied_r_ros.core.reasoning import AnswerMode
from embodied_r_training.data.prompt_budget import PromptLayout
from embodied_r_training.recipe import TrainConfig
from embodied_r_training.rewards import (
    REFERENCE_MAX_NEW_TOKENS,
    REFERENCE_TEMPERATURE,
    ConsistencyReward,
)


def reference_backend(cfg: TrainConfig, device: str) -> ChatBackend:
    """The frozen reference LM: the configured one, else the policy's initial weights."""
    from embodied_r_ros.backends.factory import create_backend

    ref = cfg.rewards.reference or ModelConfig(
        backend="transformers",
        model=cfg.policy.model,
        dtype="auto" if device == "cpu" else cfg.policy.dtype,
        device=device,
        batch_size=32,
    )
    ref = ref.model_copy(
        update={"temperature": REFERENCE_TEMPERATURE, "max_new_tokens": REFERENCE_MAX_NEW_TOKENS}
    )
    return create_backend(ref, text_only=True)


def reference_prompts(cfg: TrainConfig, layout: PromptLayout | None = None) -> PromptSet:
    """The consistency reference's wording: ``rewards.prompts``, else the dataset's."""
    if cfg.rewards.prompts:
        return prompts_from(cfg.rewards.prompts)
    return layout.prompts if layout is not None else prompts_from(None)


def consistency_reward(
    cfg: TrainConfig, reference: ChatBackend, layout: PromptLayout | None = None,
    answer_mode: AnswerMode | None = None,
) -> ConsistencyReward:
    """The consistency reward as ``cfg.rewards`` configures it (training and evaluation);
    ``answer_mode`` overrides the config's reading (an evaluation's headline reading, so the
    rate counts among the answers that reading calls correct)."""
    r = cfg.rewards
    return ConsistencyReward(reference, answer_mode=answer_mode or r.answer_mode,
                             prompts=reference_prompts(cfg, layout), fallback=r.fallback)


@dataclass(frozen=True)
class GoldCheck:
    """How often the reference re-derives the gold answer from a gold rationale's think text."""

    rows: int
    consistent: int
    failed: int  # reference calls that raised

    @property
    def rate(self) -> float:
        return self.consistent / self.rows if self.rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "consistent": self.consistent, "failed": self.failed,
                "rate": round(self.rate, 4)}


def gold_rationale_check(
    cfg: TrainConfig,
    reference: ChatBackend,
    rows: Sequence[Mapping[str, Any]],
    layout: PromptLayout | None = None,
) -> GoldCheck:
    """The consistency reward, exactly as training asks it, on the rows' gold rationales
    (:func:`~embodied_r_training.data.rationales.rationale`, answered with letter and text):
    a reference that cannot reach the stated answer from these makes the reward noise."""
    from embodied_r_training.data.rationales import completion

    if not rows:
        raise ValueError("no rows to check the reference on")
    judge = consistency_reward(cfg, reference, layout)
    rewards = judge(
        prompts=[r["prompt"] for r in rows],
        completions=[completion(r, letter=True) for r in rows],
        solution=[r["solution"] for r in rows],
        options=[r["options"] for r in rows],
        question_block=[r.get("question_block") for r in rows],
    )
    return GoldCheck(len(rows), int(sum(rewards)), judge.last_batch["failed"])

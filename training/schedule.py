"""The paper's reward-weight schedule, switched at epoch boundaries inside one GRPO run.

Embodied-R weights format : accuracy : consistency 7:3:0 for epochs 1-2, 3:7:0 for epochs 3-4
and 1:7:2 for epochs 5-12 (digest §2.4). The weights are a pure function of the epoch, so a run
resumed from a checkpoint lands in the same stage it was killed in. :class:`RewardSchedule`
sets the trainer's ``reward_weights`` tensor at the start of training and of every epoch.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from .config import Stage

log = logging.getLogger(__name__)


def epoch_index(epoch: float | None) -> int:
    """0-based index of the epoch being trained, from ``TrainerState.epoch`` (a float that is
    ``k`` exactly at the end of epoch ``k`` and ``k + fraction`` inside epoch ``k + 1``)."""
    if epoch is None:
        return 0
    return max(0, math.floor(epoch + 1e-9))


def stage_at(stages: Sequence[Stage], epoch: int) -> int:
    """Index of the stage that covers 0-based ``epoch``; the last stage continues past the end."""
    if not stages:
        raise ValueError("a schedule needs at least one stage")
    end = 0
    for i, stage in enumerate(stages):
        end += stage.epochs
        if epoch < end:
            return i
    return len(stages) - 1


def weights_at(stages: Sequence[Stage], epoch: int) -> list[float]:
    return stages[stage_at(stages, epoch)].weights()


class RewardSchedule(TrainerCallback):
    """Applies the stage weights through ``apply(stage_index, weights)`` when they change."""

    def __init__(
        self, stages: Sequence[Stage], apply: Callable[[int, list[float]], None]
    ) -> None:
        self.stages = list(stages)
        self.apply = apply
        self.current: int | None = None

    def _update(self, state: TrainerState) -> None:
        epoch = epoch_index(state.epoch)
        stage = stage_at(self.stages, epoch)
        if stage != self.current:
            weights = self.stages[stage].weights()
            log.info("epoch %d: reward stage %d, weights %s", epoch + 1, stage + 1, weights)
            self.apply(stage, weights)
            self.current = stage

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._update(state)

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._update(state)

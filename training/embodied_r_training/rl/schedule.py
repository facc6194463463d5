"""The paper's reward-weight schedule, through TRL's and Transformers' public surfaces.

Embodied-R weights format : accuracy : consistency 7:3:0 for epochs 1-2, 3:7:0 for epochs 3-4
and 1:7:2 for epochs 5-12 (the paper's schedule; the maintainers confirm it in
EmbodiedCity/Embodied-R.code issue #6). The weights are a pure function of the epoch, so a run
resumed from a checkpoint lands in the same stage it was killed in.

:class:`StageSchedule` is a ``TrainerCallback`` that keeps the current stage (``on_train_begin``
/ ``on_epoch_begin``) and adds the consistency rate, the weights and the stage to every log
(``on_log``). Each reward is a :class:`StagedReward`: it multiplies its raw scores by its weight
in the current stage, so TRL sums already weighted rewards (its own ``reward_weights`` stay 1)
and its ``rewards/<name>/mean`` is that reward's weighted share of ``reward``; the raw mean is
logged beside it as ``rewards/<name>/raw_mean`` through the ``log_metric`` keyword TRL hands to
reward functions.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from embodied_r_training.recipe import Stage

log = logging.getLogger(__name__)

RAW = "rewards/{}/raw_mean"


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


def stage_end_epoch(stages: Sequence[Stage], stage: int) -> int:
    """The epoch count at the end of ``stage`` (cumulative)."""
    return sum(s.epochs for s in stages[: stage + 1])


class StageSchedule(TrainerCallback):
    """The current reward stage, kept from the trainer's epoch; its weights and the consistency
    rate go into every log."""

    def __init__(self, stages: Sequence[Stage], names: Sequence[str]) -> None:
        if not stages:
            raise ValueError("a schedule needs at least one stage")
        self.stages = list(stages)
        self.names = list(names)
        self.current = 0

    def weights(self) -> list[float]:
        return self.stages[self.current].weights()

    def _update(self, state: TrainerState) -> None:
        epoch = epoch_index(state.epoch)
        stage = stage_at(self.stages, epoch)
        if stage != self.current or epoch == 0:
            log.info("epoch %d: reward stage %d, weights %s", epoch + 1, stage + 1,
                     self.stages[stage].weights())
        self.current = stage

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._update(state)

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._update(state)

    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        logs: dict[str, float] | None = None, **kw: Any,
    ) -> None:
        """Adds ``consistency_rate`` (raw consistency / raw accuracy), ``reward_weights/*`` and
        ``reward_stage`` to a training log, in the dict the later callbacks (TensorBoard) see
        and in the entry the trainer appended to ``state.log_history``."""
        if logs is None or "loss" not in logs and RAW.format(self.names[0]) not in logs:
            return
        extra: dict[str, float] = {}
        acc, cons = logs.get(RAW.format("accuracy")), logs.get(RAW.format("consistency"))
        if acc is not None and cons is not None and acc > 0:
            extra["consistency_rate"] = cons / acc
        for name, weight in zip(self.names, self.weights(), strict=True):
            extra[f"reward_weights/{name}"] = weight
        extra["reward_stage"] = self.current + 1
        logs.update(extra)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(extra)


class StagedReward:
    """One reward of the weighted sum: raw scores times this reward's weight in the current
    stage. ``skip_unweighted``: while the weight is 0 the function is not called (the
    consistency reference costs a model call per correct answer) and scores 0."""

    def __init__(
        self,
        name: str,
        fn: Callable[..., Sequence[float | None]],
        index: int,
        schedule: StageSchedule,
        *,
        skip_unweighted: bool = False,
    ) -> None:
        self.__name__ = name  # TRL logs a reward function by its __name__
        self.fn = fn
        self.index = index
        self.schedule = schedule
        self.skip_unweighted = skip_unweighted

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        completions = kwargs.get("completions", args[1] if len(args) > 1 else [])
        weight = self.schedule.weights()[self.index]
        if weight == 0 and self.skip_unweighted:
            return [0.0] * len(completions)
        raw = list(self.fn(*args, **kwargs))
        valid = [r for r in raw if r is not None and r == r]
        log_metric = kwargs.get("log_metric")
        if log_metric is not None and valid:
            log_metric(RAW.format(self.__name__), sum(valid) / len(valid))
        return [None if r is None else weight * r for r in raw]

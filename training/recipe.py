"""The trainer's validated configuration: one YAML file per setting set (``training/configs``).

The defaults here are the shared base of every shipped config, NOT the paper's recipe: the
paper's recipe is ``configs/paper.yaml``, which sets on top of them what the official run used
and these defaults do not (gradient checkpointing, the official answer reading, the consistency
reference, the stage schedule run as three resumed trainings with optimizer state kept, and
greedy evaluation of 3096 tokens one prompt at a time). Where the defaults follow the official
run they follow ms-swift 3.3/3.4's own defaults (AdamW with weight decay 0.1 and beta2 0.95, a
cosine schedule, top-k 50, top-p 0.9, left truncation of over-long prompts).
``training/README.md`` tabulates each value of ``paper.yaml`` and where it comes from.

A file may name another in ``base`` and override any key; unknown keys and bad values raise
:class:`~embodied_r_ros.core.config.ConfigError` naming the key, as the core config does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from embodied_r_ros.core.config import (
    ConfigError,
    ModelConfig,
    StrictModel,
    check_engine_quantization,
    deep_merge,
    locate_yaml,
    read_yaml,
    resolve_base,
    yaml_names,
)
from embodied_r_ros.core.config import format_validation_error as format_error
from embodied_r_ros.core.rewards import REWARD_NAMES

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
ACCELERATE_DIR = Path(__file__).resolve().parent / "accelerate"

Dtype = Literal["auto", "float32", "float16", "bfloat16"]
Device = Literal["auto", "cpu", "cuda"]


class LoraSettings(StrictModel):
    """PEFT LoRA instead of full fine-tuning (the paper trains all weights)."""

    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] | str = "all-linear"


class PolicySettings(StrictModel):
    """The reasoning LM being trained: hub id, local directory or offline model name."""

    # The official recipe starts from the VL model; its text decoder is what trains (see
    # core/backends/text_decoder.py). "Qwen/Qwen2.5-3B-Instruct" is the text-only alternative.
    model: str = Field("Qwen/Qwen2.5-VL-3B-Instruct", min_length=1)
    # the compute (autocast) dtype on CUDA; the trained weights are always fp32 masters
    # (embodied_r_training.rl.precision); CPU trains in fp32
    dtype: Dtype = "bfloat16"
    gradient_checkpointing: bool = False
    lora: LoraSettings | None = None
    # a PEFT LoRA adapter of ``model`` to start from and keep training (GRPO after LoRA SFT):
    # its own rank and targets apply, ``lora`` is ignored
    adapter: str | None = None


class DataSettings(StrictModel):
    split: Literal["train", "val", "test", "all"] = "train"
    fold: int | None = Field(None, ge=0, description="k-fold: train on all folds but this one")
    max_prompt_tokens: int = Field(6144, ge=64, description="ms-swift's max_length")
    # what training does with a longer prompt: "left" keeps its last max_prompt_tokens tokens
    # (ms-swift's GRPO sets and asserts truncation_strategy='left': what the official runs did),
    # "delete" leaves the row out, "drop_oldest_frames" drops its oldest key frames until it fits
    over_length: Literal["left", "delete", "drop_oldest_frames"] = "left"
    max_rows: int | None = Field(None, ge=1, description="the split's first N rows (demos)")
    val_split: Literal["val", "test"] | None = Field(
        "val", description="the split GRPO validates on every grpo.eval_steps (None: never)"
    )


class Stage(StrictModel):
    """A run of epochs with fixed reward weights (format : accuracy : consistency)."""

    epochs: int = Field(ge=1)
    format: float = Field(ge=0.0)
    accuracy: float = Field(ge=0.0)
    consistency: float = Field(ge=0.0)

    def weights(self) -> list[float]:
        return [float(getattr(self, name)) for name in REWARD_NAMES]


PAPER_STAGES = (
    Stage(epochs=2, format=0.7, accuracy=0.3, consistency=0.0),
    Stage(epochs=2, format=0.3, accuracy=0.7, consistency=0.0),
    Stage(epochs=8, format=0.1, accuracy=0.7, consistency=0.2),
)


class RewardSettings(StrictModel):
    answer_mode: Literal["tag", "official"] = "tag"
    # the consistency reference's prompt file (config/prompts.yaml format); None: the one the
    # dataset was built with (its manifest), else the shipped one
    prompts: str | None = None
    # a reference call that fails or replies nothing: "none" scores 0 (the official API variant),
    # "think_regex" reads the letter from the think text (the official local variant)
    fallback: Literal["none", "think_regex"] = "none"
    # The last stage continues when training runs past the listed epochs.
    stages: list[Stage] = Field(default_factory=lambda: list(PAPER_STAGES), min_length=1)
    # The frozen reference LM of the consistency reward (temperature/max_new_tokens are the
    # paper's 0.1 / 10 whatever is set here). None: the policy's initial weights, in-process.
    reference: ModelConfig | None = None
    skip_unweighted_consistency: bool = Field(
        True, description="no reference calls while the consistency weight is 0"
    )
    # one_run: the stages switch at epoch boundaries inside one training (one cosine schedule
    # over all epochs); resumed_runs: the maintainers' way (Embodied-R.code issue #6): one
    # training per stage, each resuming the previous one's full checkpoint (optimizer kept)
    stage_mode: Literal["one_run", "resumed_runs"] = "one_run"


class GRPOSettings(StrictModel):
    num_generations: int = Field(8, ge=2, description="group size G")
    completions_per_step: int = Field(32, ge=2, description="completions per optimizer step")
    per_device_batch: int = Field(8, ge=1, description="completions per device per micro-step")
    learning_rate: float = Field(5e-7, gt=0.0)
    # AdamW as ms-swift configures it (swift/trainers/arguments.py: weight_decay 0.1, adam_beta2
    # 0.95; beta1 and epsilon are Transformers' 0.9 and 1e-8)
    weight_decay: float = Field(0.1, ge=0.0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.95, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0)
    beta: float = Field(0.001, ge=0.0, description="KL coefficient")
    temperature: float = Field(1.0, gt=0.0)
    top_k: int = Field(50, ge=0, description="0: no top-k filtering")
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    max_completion_length: int = Field(2048, ge=1)
    num_epochs: float = Field(12.0, gt=0.0)
    max_steps: int = Field(-1, description="> 0 overrides num_epochs")
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0)
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = "cosine"
    eval_steps: int = Field(100, ge=0, description="validate every N steps (0: never)")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "grpo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    num_iterations: int = Field(1, ge=1)
    # a seeded sample of this many training rows (every category, not one world's first rows):
    # the epoch of a CPU recipe; None: every row
    max_rows: int | None = Field(None, ge=1)
    # a prompt pool (issue 17 item 2, :mod:`embodied_r_training.rl.prompt_pool`): sample this many
    # completions per candidate question with the policy before GRPO and train only on those
    # answered right by some and wrong by others (max_rows of them); 0: every row is a prompt
    pool_samples: int = Field(0, ge=0)
    pool_candidates: int | None = Field(None, ge=1, description="seeded candidates; None: all")
    max_grad_norm: float = Field(1.0, gt=0.0)
    seed: int = 0
    device: Device = "auto"
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = Field(0.4, gt=0.0, le=1.0)
    vllm_tensor_parallel_size: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _batches(self) -> GRPOSettings:
        if self.completions_per_step % self.num_generations:
            raise ValueError("completions_per_step must be a multiple of num_generations")
        if self.completions_per_step % self.per_device_batch:
            raise ValueError("completions_per_step must be a multiple of per_device_batch")
        if self.pool_samples == 1:
            raise ValueError("pool_samples must be 0 (no pool) or at least 2: one sample "
                             "cannot be both right and wrong")
        return self

    def gradient_accumulation(self, world_size: int) -> int:
        per_step = self.per_device_batch * world_size
        if self.completions_per_step % per_step:
            raise ConfigError(
                f"config key 'grpo.completions_per_step': {self.completions_per_step} is not a "
                f"multiple of per_device_batch x processes = {per_step}"
            )
        return self.completions_per_step // per_step


class SFTSettings(StrictModel):
    """SFT on the same rows: the baseline (a fixed think text + the right option) or the cold
    start (a reasoning text written from the row, :mod:`embodied_r_training.data.rationales`)."""

    # reference: only the consistency reference's task (the question and a gold rationale's
    # think text -> its letter), for every gold rationale: a reference of its own, so that the
    # policy's SFT keeps its whole budget for rationales (reference_share 0)
    targets: Literal["template", "rationale", "reference"] = "template"
    # rationale and reference targets: only rows whose text supports the answer (oracle rules)
    supported_only: bool = False
    answer_letter: bool = Field(True, description="'B. text' in the answer tag, else 'text'")
    # with answer_letter: how the think text concludes. letter_first, "So: B. back-right": the
    # letter is written before the text it names; text_first, "So: back-right (B)": the option
    # text the walk leads to, then its letter (issue 17: letter-first SFT answered "A" to 43 of
    # 60 questions, while the text-only reasoner's letters were balanced)
    # option_walk, "So: back-right. A. left: no. B. back-right: yes.": the text, then each
    # option copied from the prompt and compared with it up to the match (a 135M model that
    # wrote the right text named its letter no better than chance: 14 of 60 letters matched)
    # option_check: the option walk, except that appearance order and relative distance check
    # each option by a local rule (first frames that never fall; the smallest bearing gap so
    # far): the option walk's conclusion was right in 15 and 6 of 30 such ID replies, and its
    # letter named that conclusion in 3 of 18 appearance-order replies
    conclusion: Literal["letter_first", "text_first", "option_walk", "option_check"] = (
        "letter_first")
    # needed: the walk notes only frames with something the question needs; every_frame: a
    # note per frame opening with its motion (the sparse walk's sightings landed in a
    # neighbouring frame a fifth of the time)
    walk: Literal["needed", "every_frame"] = "needed"
    # rationale targets only: extra rows, this share of the policy rows, that teach the
    # consistency reference's task (the question and a gold think text -> the letter), so that
    # the frozen SFT checkpoint can serve as the reference (issue 17)
    reference_share: float = Field(0.0, ge=0.0, le=1.0)

    learning_rate: float = Field(1e-5, gt=0.0)
    num_epochs: float = Field(3.0, gt=0.0)
    max_steps: int = -1
    per_device_batch: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0)
    think_template: str = (
        "I compare each option with what the video content says about the scene and my motion, "
        "and keep the one it supports."
    )
    seed: int = 0
    device: Device = "auto"


class EvalSettings(StrictModel):
    """Generation settings for ``eval`` (the official batch inference is greedy, 3096 new
    tokens, one prompt at a time: ``paper.yaml``)."""

    max_new_tokens: int = Field(2048, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    batch_size: int = Field(8, ge=1)
    # the engine of the evaluated models: transformers, or a CTranslate2 conversion (float32:
    # the same weights, batched greedy decoding several times faster on CPU; int8: quantised),
    # or a llama.cpp one (float16: 98.9 % the same answers as transformers, bench/lm_engines.py)
    backend: Literal["transformers", "ctranslate2", "llamacpp"] = "transformers"
    quantization: Literal["int8", "int8_float32", "int16", "float16", "float32"] = "float32"
    device: Device = "auto"
    dtype: Dtype = "auto"
    consistency: bool = Field(True, description="ask the reference LM about correct answers")
    # None: prompts are evaluated whole; a number: the oldest key frames are dropped to fit it
    max_prompt_tokens: int | None = Field(None, ge=64)
    # None: every question of the split; a number: the first N of each category, in file order
    # (a fixed, balanced subset when the full sets do not fit the time)
    per_category: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _engine_quantization(self) -> EvalSettings:
        check_engine_quantization(self.backend, self.quantization)
        return self


class OutputSettings(StrictModel):
    dir: str = "runs/embodied-r"
    save_steps: int = Field(100, ge=1)
    save_total_limit: int | None = Field(3, ge=1)
    # true: weights only (the official quick-start scripts); a resumed run then keeps its step,
    # epoch and reward stage but restarts the optimizer. false: optimizer, scheduler and RNG
    # state too (exact resumption; required by rewards.stage_mode resumed_runs)
    save_only_model: bool = True
    logging_steps: int = Field(1, ge=1)
    tensorboard: bool = True
    log_completions: bool = False


class TrainConfig(StrictModel):
    name: str = "custom"
    description: str = ""
    policy: PolicySettings = PolicySettings()
    data: DataSettings = DataSettings()
    grpo: GRPOSettings = GRPOSettings()
    rewards: RewardSettings = RewardSettings()
    sft: SFTSettings = SFTSettings()
    eval: EvalSettings = EvalSettings()
    output: OutputSettings = OutputSettings()

    @model_validator(mode="after")
    def _vllm(self) -> TrainConfig:
        g = self.grpo
        if g.use_vllm and g.vllm_mode == "server" and not g.vllm_server_base_url:
            raise ValueError("grpo.vllm_server_base_url is required for vllm_mode 'server'")
        return self

    @model_validator(mode="after")
    def _resumed_runs(self) -> TrainConfig:
        if self.rewards.stage_mode != "resumed_runs":
            return self
        epochs = sum(s.epochs for s in self.rewards.stages)
        if self.output.save_only_model:
            raise ValueError("rewards.stage_mode resumed_runs resumes each stage with its "
                             "optimizer state: set output.save_only_model false")
        if self.grpo.max_steps > 0:
            raise ValueError("rewards.stage_mode resumed_runs runs whole stages: grpo.max_steps "
                             "must be -1")
        if self.grpo.num_epochs != epochs:
            raise ValueError(f"grpo.num_epochs {self.grpo.num_epochs:g} differs from the "
                             f"{epochs} epochs of rewards.stages (rewards.stage_mode "
                             "resumed_runs)")
        return self


def available_configs() -> list[str]:
    return yaml_names(CONFIG_DIR)


def config_path(name_or_path: str | Path, origin: Path | None = None) -> Path:
    """A shipped config by name (``cpu-tiny``) or a YAML file path (relative to ``origin``)."""
    return locate_yaml(name_or_path, CONFIG_DIR, "training config", origin)


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``["grpo.max_steps=10", "output.dir=runs/x"]`` -> a nested dict (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r}: expected KEY=VALUE, e.g. grpo.max_steps=10")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {pair!r}: '{part}' is set twice")
        node[parts[-1]] = value
    return out


def load_train_config(
    name_or_path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """A shipped config or file (default: the paper's), nested ``overrides`` applied, validated."""
    data: dict[str, Any] = {}
    if name_or_path is not None:
        path = config_path(name_or_path)
        data = resolve_base(read_yaml(path), config_path, (str(path.resolve()),), path)
    if overrides:
        data = deep_merge(data, overrides)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_error(err)) from None


def world_size() -> int:
    """Processes of this run (``accelerate launch`` sets WORLD_SIZE)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def device_name(device: Device) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``: the backends' ``resolve_device``
    rule, as the device string a ``ModelConfig`` or TRL takes."""
    from embodied_r_ros.core.backends.transformers_backend import resolve_device

    return resolve_device(device).type

"""The trainer's validated configuration: one YAML file per setting set (``training/configs``).

The defaults here are the shared base of every shipped config, NOT the paper's recipe: the
paper's recipe is ``configs/paper.yaml``, which sets on top of them what the official run used
and these defaults do not (gradient checkpointing, the official answer reading, the consistency
reference, the stage schedule run as three resumed trainings with optimizer state kept, and
greedy evaluation of 3096 tokens one prompt at a time). Where the defaults follow the official
run they follow ms-swift 3.3/3.4's own defaults (AdamW with weight decay 0.1 and beta2 0.95, a
cosine schedule, top-k 50, top-p 0.9, left truncation of over-long prompts).
``docs/fidelity.md`` tabulates each value of ``paper.yaml`` and where it comes from.

A file may name another in ``base`` and override any key; unknown keys and bad values raise
:class:`~embodied_r_ros.core.config.ConfigError` naming the key, as the core config does.
Options that work and are tested but that no shipped recipe uses live under ``experimental``.
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
    Quantization,
    StrictModel,
    check_engine_quantization,
)
from embodied_r_ros.core.profiles import (
    deep_merge,
    locate_yaml,
    read_yaml,
    resolve_base,
    yaml_names,
)
from embodied_r_ros.core.profiles import format_validation_error as format_error
from embodied_r_training.rewards import REWARD_NAMES

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

Dtype = Literal["auto", "float32", "float16", "bfloat16"]
Device = Literal["auto", "cpu", "cuda"]


class LoraSettings(StrictModel):
    """PEFT LoRA instead of full fine-tuning (the paper trains all weights)."""

    r: int = Field(16, ge=1, description="the adapters' rank")
    alpha: int = Field(32, ge=1, description="scaling: the update is multiplied by alpha / r")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the adapters' input")
    target_modules: list[str] | str = Field(
        "all-linear", description="module names to adapt, or PEFT's 'all-linear'")


class PolicySettings(StrictModel):
    """The reasoning LM being trained: hub id, local directory or offline model name."""

    #: the official recipe starts from the VL model and trains its text decoder
    #: (backends/text_decoder.py); "Qwen/Qwen2.5-3B-Instruct" is the text-only alternative
    model: str = Field("Qwen/Qwen2.5-VL-3B-Instruct", min_length=1)
    #: the compute (autocast) dtype on CUDA; the trained weights are always fp32 masters
    #: (:mod:`embodied_r_training.rl.precision`); CPU trains in fp32
    dtype: Dtype = "bfloat16"
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory, slower")
    #: null: full fine-tuning, as the paper
    lora: LoraSettings | None = None
    #: a PEFT LoRA adapter of ``model`` to start from and keep training (GRPO after LoRA SFT):
    #: its own rank and targets apply, ``lora`` is ignored
    adapter: str | None = None


class DataSettings(StrictModel):
    """Which rows of a built dataset train, and how over-long prompts are handled."""

    split: Literal["train", "val", "test", "all"] = Field(
        "train", description="the split that trains")
    fold: int | None = Field(None, ge=0, description="k-fold: train on all folds but this one")
    max_prompt_tokens: int = Field(6144, ge=64, description="ms-swift's max_length")
    #: what training does with a longer prompt: "left" keeps its last max_prompt_tokens tokens
    #: (ms-swift's GRPO sets and asserts truncation_strategy='left', so the official runs did
    #: this), "delete" leaves the row out, "drop_oldest_frames" drops its oldest key frames
    #: until it fits
    over_length: Literal["left", "delete", "drop_oldest_frames"] = "left"
    max_rows: int | None = Field(
        None, ge=1, description="the split's first N rows (quick runs); null: every row")
    val_split: Literal["val", "test"] | None = Field(
        "val", description="the split GRPO validates on every grpo.eval_steps (null: never)"
    )


class Stage(StrictModel):
    """A run of epochs with fixed reward weights (format : accuracy : consistency)."""

    epochs: int = Field(ge=1, description="epochs of this stage")
    format: float = Field(ge=0.0, description="weight of the format reward")
    accuracy: float = Field(ge=0.0, description="weight of the accuracy reward")
    consistency: float = Field(ge=0.0, description="weight of the consistency reward")

    def weights(self) -> list[float]:
        return [float(getattr(self, name)) for name in REWARD_NAMES]


PAPER_STAGES = (
    Stage(epochs=2, format=0.7, accuracy=0.3, consistency=0.0),
    Stage(epochs=2, format=0.3, accuracy=0.7, consistency=0.0),
    Stage(epochs=8, format=0.1, accuracy=0.7, consistency=0.2),
)


class RewardSettings(StrictModel):
    """The paper's three rewards (format, accuracy, consistency) and their schedule."""

    #: how the accuracy reward reads an answer: "tag", the ``<answer>`` tag against the
    #: options; "official", the official reward's normalisation of the whole completion
    #: (train/reward/choice_accuracy_reward.py of Embodied-R.code)
    answer_mode: Literal["tag", "official"] = "tag"
    #: the consistency reference's prompt file (config/prompts.yaml format); null: the one the
    #: dataset was built with (its manifest), else the shipped one
    prompts: str | None = None
    #: a reference call that fails or replies nothing: "none" scores 0 (the official API
    #: variant), "think_regex" reads the letter from the think text (the official local one)
    fallback: Literal["none", "think_regex"] = "none"
    #: the weights per run of epochs (the paper's 7:3:0, 3:7:0, 1:7:2 over 2 + 2 + 8 epochs);
    #: the last stage continues when training runs past the listed epochs
    stages: list[Stage] = Field(default_factory=lambda: list(PAPER_STAGES), min_length=1)
    #: the frozen reference LM of the consistency reward (it always decodes at the paper's
    #: temperature 0.1 for at most 10 tokens). null: the policy's initial weights, in-process
    reference: ModelConfig | None = None
    skip_unweighted_consistency: bool = Field(
        True, description="no reference calls while the consistency weight is 0"
    )
    #: one_run: the stages switch at epoch boundaries inside one training (one cosine schedule
    #: over all epochs); resumed_runs: as the maintainers run the paper's schedule
    #: (EmbodiedCity/Embodied-R.code issue #6), one training per stage, each resuming the
    #: previous one's full checkpoint (optimizer state kept)
    stage_mode: Literal["one_run", "resumed_runs"] = "one_run"


class GRPOSettings(StrictModel):
    """GRPO (TRL's ``GRPOTrainer``) as ms-swift 3.3/3.4 ran it for the official scripts."""

    num_generations: int = Field(8, ge=2, description="group size G")
    completions_per_step: int = Field(32, ge=2, description="completions per optimizer step")
    per_device_batch: int = Field(8, ge=1, description="completions per device per micro-step")
    learning_rate: float = Field(5e-7, gt=0.0, description="the paper's 5e-7 (full weights)")
    #: AdamW as ms-swift configures it (swift/trainers/arguments.py: weight_decay 0.1,
    #: adam_beta2 0.95; beta1 and epsilon are Transformers' 0.9 and 1e-8)
    weight_decay: float = Field(0.1, ge=0.0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.95, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0)
    beta: float = Field(0.001, ge=0.0, description="KL coefficient")
    temperature: float = Field(1.0, gt=0.0, description="rollout sampling temperature")
    top_k: int = Field(50, ge=0, description="0: no top-k filtering")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="rollout nucleus sampling")
    max_completion_length: int = Field(2048, ge=1, description="new tokens per rollout")
    num_epochs: float = Field(12.0, gt=0.0, description="passes over the training rows")
    max_steps: int = Field(-1, description="> 0 overrides num_epochs")
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0, description="share of steps warming up")
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        "cosine", description="the learning-rate schedule after warmup")
    eval_steps: int = Field(100, ge=0, description="validate every N steps (0: never)")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = Field(
        "grpo", description="TRL's loss normalisation; grpo is the paper's")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="divide advantages by the group's (or batch's) reward std")
    num_iterations: int = Field(
        1, ge=1, description="updates per batch of rollouts (1: on-policy, as the paper)")
    #: a seeded sample of this many training rows (every category, not one world's first
    #: rows): the epoch of a CPU recipe; null: every row
    max_rows: int | None = Field(None, ge=1)
    max_grad_norm: float = Field(1.0, gt=0.0, description="gradient clipping")
    seed: int = Field(0, description="seeds the model, the sampler and max_rows' draw")
    device: Device = "auto"
    use_vllm: bool = Field(False, description="rollouts on vLLM (GPU only)")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate", description="vLLM in the training process, or a `trl vllm-serve` server")
    vllm_server_base_url: str | None = Field(None, description="the server (vllm_mode server)")
    vllm_gpu_memory_utilization: float = Field(
        0.4, gt=0.0, le=1.0, description="colocated vLLM's share of GPU memory")
    vllm_tensor_parallel_size: int = Field(1, ge=1, description="GPUs per colocated vLLM")

    @model_validator(mode="after")
    def _batches(self) -> GRPOSettings:
        if self.completions_per_step % self.num_generations:
            raise ValueError("completions_per_step must be a multiple of num_generations")
        if self.completions_per_step % self.per_device_batch:
            raise ValueError("completions_per_step must be a multiple of per_device_batch")
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

    #: template: ``think_template`` then the right option (the paper's SFT baseline);
    #: rationale: a walk through the frames to the answer (a cold start for GRPO); reference:
    #: only the consistency reference's task (the question and a gold rationale's think text
    #: -> its letter), to train a reference model of its own
    targets: Literal["template", "rationale", "reference"] = "template"
    #: rationale and reference targets: only rows whose text supports the answer (by the
    #: oracle's rules); the others would teach a conclusion the text does not reach
    supported_only: bool = False
    answer_letter: bool = Field(True, description="'B. text' in the answer tag, else 'text'")
    #: rationale targets only: extra rows, this share of the policy rows, that teach the
    #: consistency reference's task, so that the frozen SFT checkpoint can serve as the
    #: reference of the GRPO run that follows
    reference_share: float = Field(0.0, ge=0.0, le=1.0)

    learning_rate: float = Field(1e-5, gt=0.0)
    num_epochs: float = Field(3.0, gt=0.0, description="passes over the SFT rows")
    max_steps: int = Field(-1, description="> 0 overrides num_epochs")
    per_device_batch: int = Field(4, ge=1, description="rows per device per micro-step")
    gradient_accumulation_steps: int = Field(1, ge=1, description="micro-steps per step")
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0, description="share of steps warming up")
    think_template: str = Field(
        "I compare each option with what the video content says about the scene and my "
        "motion, and keep the one it supports.",
        description="the think text of template targets")
    seed: int = Field(0, description="seeds the model and the reference rows' draw")
    device: Device = "auto"


class EvalSettings(StrictModel):
    """Generation settings for ``eval`` (the official batch inference is greedy, 3096 new
    tokens, one prompt at a time: ``paper.yaml``)."""

    max_new_tokens: int = Field(2048, ge=1, description="new tokens per reply")
    temperature: float = Field(0.0, ge=0.0, description="0: greedy")
    batch_size: int = Field(8, ge=1, description="prompts generated together")
    #: the engine of the evaluated models: transformers, or a CTranslate2 conversion (float32:
    #: the same weights, batched greedy decoding several times faster on CPU; int8:
    #: quantised), or a llama.cpp one (GGUF; float16 keeps the answers of transformers)
    backend: Literal["transformers", "ctranslate2", "llamacpp"] = "transformers"
    quantization: Quantization = Field(
        "float32", description="the weights of a ctranslate2 or llamacpp engine")
    device: Device = "auto"
    dtype: Dtype = Field("auto", description="transformers' weight dtype")
    consistency: bool = Field(True, description="ask the reference LM about correct answers")
    #: null: prompts are evaluated whole; a number: the oldest key frames are dropped to fit it
    max_prompt_tokens: int | None = Field(None, ge=64)
    #: null: every question of the split; a number: the first N of each category, in file
    #: order (a fixed, balanced subset when the full sets do not fit the time)
    per_category: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _engine_quantization(self) -> EvalSettings:
        check_engine_quantization(self.backend, self.quantization)
        return self


class OutputSettings(StrictModel):
    """Where a run writes, and what it keeps."""

    dir: str = Field("runs/embodied-r", description="the run directory (--out overrides it)")
    save_steps: int = Field(100, ge=1, description="a checkpoint every N steps")
    save_total_limit: int | None = Field(
        3, ge=1, description="checkpoints kept (oldest go first); null: all")
    #: true: weights only (the official quick-start scripts); a resumed run then keeps its
    #: step, epoch and reward stage but restarts the optimizer. false: optimizer, scheduler and
    #: RNG state too (exact resumption; required by rewards.stage_mode resumed_runs)
    save_only_model: bool = True
    logging_steps: int = Field(1, ge=1, description="a log line every N steps")
    tensorboard: bool = Field(True, description="TensorBoard event files in the run directory")
    log_completions: bool = Field(False, description="log sampled GRPO completions")


class ExperimentalSettings(StrictModel):
    """Options that work and are tested but that no shipped recipe uses: whether they help is
    not established, and they may change or go."""

    #: a GRPO prompt pool (:mod:`embodied_r_training.rl.prompt_pool`): before GRPO, sample this
    #: many completions per candidate question with the policy and train only on the questions
    #: answered right by some and wrong by others (at most ``grpo.max_rows`` of them), so that
    #: every group has a reward to compare; 0: off, every row is a prompt
    prompt_pool_samples: int = Field(0, ge=0)
    prompt_pool_candidates: int | None = Field(
        None, ge=1, description="seeded candidate questions of the pool; null: every row")

    @model_validator(mode="after")
    def _pool(self) -> ExperimentalSettings:
        if self.prompt_pool_samples == 1:
            raise ValueError("prompt_pool_samples must be 0 (no pool) or at least 2: one "
                             "sample cannot be both right and wrong")
        return self


class TrainConfig(StrictModel):
    """A training config: one section per phase."""

    name: str = "custom"
    description: str = ""
    policy: PolicySettings = PolicySettings()
    data: DataSettings = DataSettings()
    grpo: GRPOSettings = GRPOSettings()
    rewards: RewardSettings = RewardSettings()
    sft: SFTSettings = SFTSettings()
    eval: EvalSettings = EvalSettings()
    output: OutputSettings = OutputSettings()
    experimental: ExperimentalSettings = ExperimentalSettings()

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
    from embodied_r_ros.backends.transformers_backend import resolve_device

    return resolve_device(device).type

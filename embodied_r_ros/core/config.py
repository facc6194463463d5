"""One validated configuration schema for the CLI, the ROS nodes and the trainer.

Profiles are YAML files in ``config/`` (``tiny``, ``offline``, ``workstation``, ``server``);
a user file or ``--config`` may name a profile in ``base`` and override any key. Unknown keys
and invalid values raise :class:`ConfigError` naming the key path (``reasoning.model.dtype``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
PROFILES = ("tiny", "offline", "workstation", "server")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the offending key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class KeyframeConfig(_Strict):
    """Key-frame extraction, defaults as in the official code (``train/conver_format/utils.py``)."""

    sample_fps: float = Field(1.0, ge=0.0, description="pre-sampling rate; 0 keeps every frame")
    overlap_threshold: float = Field(0.5, gt=0.0, le=1.0)
    min_frames: int = Field(4, ge=0, description="clamp lower bound; 0 disables")
    max_frames: int = Field(32, ge=0, description="clamp upper bound; 0 disables")
    n_features: int = Field(500, ge=10, description="ORB features")
    min_matches: int = Field(10, ge=4, description="a frame needs MORE than this many matches")
    ransac_reproj_px: float = Field(5.0, gt=0.0)
    max_side: int = Field(640, ge=0, description="processing resolution (longest side); 0 = native")

    @model_validator(mode="after")
    def _bounds(self) -> KeyframeConfig:
        if self.min_frames and self.max_frames and self.min_frames > self.max_frames:
            raise ValueError("min_frames must not exceed max_frames")
        return self


class ModelConfig(_Strict):
    """A chat model behind one of the backends in ``core/backends``."""

    backend: Literal["transformers", "openai", "vllm"] = "transformers"
    # A hub id, a local directory, or an offline model name (``tiny-qwen2``,
    # ``tiny-qwen2.5-vl``, ``smollm2-135m``) built by ``core/backends/offline.py``.
    model: str = Field(min_length=1)
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    device: str = "auto"
    max_new_tokens: int = Field(512, ge=1, le=32768)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    batch_size: int = Field(4, ge=1)
    seed: int = 0
    # openai backend
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="name of the env var holding the key")
    timeout_s: float = Field(60.0, gt=0.0)
    retries: int = Field(2, ge=0)
    max_concurrency: int = Field(8, ge=1)
    # images sent to a VLM are resized so their longest side is at most this (0 = as is)
    image_max_side: int = Field(640, ge=0)

    @model_validator(mode="after")
    def _endpoint(self) -> ModelConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("base_url is required for backend 'openai'")
        return self


class CameraConfig(_Strict):
    """Pinhole intrinsics for visual ego-motion; unset values fall back to a guess from hfov."""

    fx: float | None = Field(None, gt=0.0)
    fy: float | None = Field(None, gt=0.0)
    cx: float | None = None
    cy: float | None = None
    hfov_deg: float = Field(70.0, gt=1.0, lt=179.0, description="used when fx is unset")


class PerceptionConfig(_Strict):
    # vlm: the paper's question-conditioned VLM; geometric: actions from ego-motion only.
    backend: Literal["vlm", "geometric"] = "vlm"
    vlm: ModelConfig | None = None
    camera: CameraConfig = CameraConfig()
    prompt_version: str = "embodied-r-v1"
    report_motion: bool = Field(True, description="write measured motion beside the VLM's action")

    @model_validator(mode="after")
    def _needs_vlm(self) -> PerceptionConfig:
        if self.backend == "vlm" and self.vlm is None:
            raise ValueError("perception.vlm is required when perception.backend is 'vlm'")
        return self


class ReasoningConfig(_Strict):
    model: ModelConfig
    answer_mode: Literal["tag", "official"] = "tag"


class CacheConfig(_Strict):
    enabled: bool = True
    dir: str = "~/.cache/embodied_r/perception"


class Config(_Strict):
    """The whole pipeline: key frames -> perception -> reasoning."""

    name: str = "custom"
    description: str = ""
    keyframes: KeyframeConfig = KeyframeConfig()
    perception: PerceptionConfig
    reasoning: ReasoningConfig
    cache: CacheConfig = CacheConfig()


def format_validation_error(err: ValidationError) -> str:
    """``config key 'a.b': message`` for the first error (the key path is what users need)."""
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"config key '{key}': {msg}"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping at top level")
    return data


def resolve_base(
    data: dict[str, Any],
    locate: Callable[[str], Path],
    seen: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Merge ``data`` over the config its ``base`` key names (recursively; cycles fail).

    ``locate`` turns a name or path into a file; the trainer passes its own.
    """
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError("config key 'base': must be a config name or a path")
    if base in seen:
        raise ConfigError(f"config key 'base': cycle through {base!r}")
    parent = resolve_base(read_yaml(locate(base)), locate, (*seen, base))
    return deep_merge(parent, data)


def _resolve(data: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
    return resolve_base(data, profile_path, seen)


def locate_yaml(name_or_path: str | Path, directory: Path, kind: str) -> Path:
    """A YAML file given by path, or by name (``tiny``) in ``directory``; ``kind`` names what
    is looked for in the error (``profile``, ``training config``)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    candidate = directory / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = ", ".join(yaml_names(directory))
        raise ConfigError(f"unknown {kind} '{name_or_path}' (known: {known})")
    return candidate


def yaml_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def profile_path(name_or_path: str) -> Path:
    """The YAML file for a profile name (``tiny``) or an explicit path."""
    return locate_yaml(name_or_path, CONFIG_DIR, "profile")


def available_profiles() -> list[str]:
    return yaml_names(CONFIG_DIR)


def config_from_dict(data: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(_resolve(dict(data)))
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def load_config(
    profile: str | None = None,
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Config:
    """Load a profile and/or a file, apply nested ``overrides``, validate once."""
    data: dict[str, Any] = {}
    if profile is not None:
        data = _resolve(read_yaml(profile_path(profile)), (profile,))
    if path is not None:
        data = deep_merge(data, _resolve(read_yaml(profile_path(str(path)))))
    if overrides:
        data = deep_merge(data, overrides)
    if not data:
        raise ConfigError("no configuration given: name a profile or a config file")
    return config_from_dict(data)

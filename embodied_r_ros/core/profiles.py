"""Profiles and configuration files, layered into the one schema (:mod:`.config`).

Profiles are YAML files in ``config/profiles/`` (``tiny``, ``offline``, ``workstation``,
``server``, ``paper``, ``jetson``); a user file or ``--config`` may name a profile (or a file,
relative to itself) in ``base`` and override any key; the layers merge into one
:class:`~embodied_r_ros.core.config.Config`, validated once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from embodied_r_ros.core.config import NAME_RE, PROFILES_DIR, Config, ConfigError


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


def merge_layer(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base`` (:func:`deep_merge`), except that a layer naming another
    ``reasoning.model.model`` without a ``reasoning.memory_model`` drops the base's memory
    reader: it was trained beside the base's reasoning model, and the new model reads memory
    texts itself unless the layer names a reader for it."""
    merged = deep_merge(base, over)
    reasoning, before = over.get("reasoning"), base.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(before, dict) \
            and "memory_model" not in reasoning and isinstance(reasoning.get("model"), dict) \
            and "model" in reasoning["model"] \
            and reasoning["model"]["model"] != (before.get("model") or {}).get("model"):
        merged["reasoning"] = {k: v for k, v in merged["reasoning"].items()
                               if k != "memory_model"}
    return merged


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


Locator = Callable[[str, Path | None], Path]


def resolve_base(
    data: dict[str, Any],
    locate: Locator,
    seen: tuple[str, ...] = (),
    origin: Path | None = None,
    paths: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Merge ``data`` over the config its ``base`` key names (recursively; cycles fail).

    ``locate(name_or_path, origin)`` turns a name or path into a file, a relative path counting
    from ``origin``, the file that holds ``data``; the trainer passes its own locator. The
    dotted keys in ``paths`` are file paths, made relative to the file that sets them.
    """
    data = anchor_paths(data, origin, paths)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError("config key 'base': must be a config name or a path")
    path = locate(base, origin)
    if str(path.resolve()) in seen:
        raise ConfigError(f"config key 'base': cycle through {base!r}")
    parent = resolve_base(read_yaml(path), locate, (*seen, str(path.resolve())), path, paths)
    return merge_layer(parent, data)


def anchor_paths(data: dict[str, Any], origin: Path | None, keys: tuple[str, ...]
                 ) -> dict[str, Any]:
    """``data`` with the relative file paths at the dotted ``keys`` made relative to
    ``origin``'s folder, so a config means the same files from any working directory."""
    if origin is None or not keys:
        return data
    out = dict(data)
    for key in keys:
        head, _, rest = key.partition(".")
        value = out.get(head)
        if rest and isinstance(value, dict):
            out[head] = anchor_paths(value, origin, (rest,))
        elif not rest and isinstance(value, str) and value:
            if not Path(value).expanduser().is_absolute():
                out[head] = str(origin.resolve().parent / value)
    return out


def is_path(name_or_path: str | Path) -> bool:
    """A YAML file name or a path, as opposed to a bare name such as ``tiny``."""
    text = str(name_or_path)
    return Path(text).suffix in (".yaml", ".yml") or "/" in text or os.sep in text


def locate_yaml(
    name_or_path: str | Path, directory: Path, kind: str, origin: Path | None = None
) -> Path:
    """A YAML file given by path (relative to the file ``origin`` that names it, else to the
    working directory), or by name (``tiny``) inside ``directory``; ``kind`` names what is
    looked for in the error (``profile``, ``training config``). Names never leave
    ``directory``."""
    if is_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_absolute() and origin is not None:
            path = origin.resolve().parent / path
        if path.suffix not in (".yaml", ".yml"):
            raise ConfigError(f"config file {path} must be a .yaml or .yml file")
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    name = str(name_or_path)
    candidate = directory / f"{name}.yaml"
    if not NAME_RE.match(name) or ".." in name or not candidate.is_file():
        known = ", ".join(yaml_names(directory))
        raise ConfigError(f"unknown {kind} '{name}' (known: {known}; or give a .yaml path)")
    return candidate


def yaml_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def profile_path(name_or_path: str, origin: Path | None = None) -> Path:
    """The YAML file for a profile name (``tiny``, in ``config/profiles``) or a path."""
    return locate_yaml(name_or_path, PROFILES_DIR, "profile", origin)


def available_profiles() -> list[str]:
    return yaml_names(PROFILES_DIR)


#: pipeline config keys that hold file paths
PATH_KEYS = ("prompts",)


def _resolve(data: dict[str, Any], origin: Path | None = None) -> dict[str, Any]:
    seen = (str(origin.resolve()),) if origin is not None else ()
    return resolve_base(data, profile_path, seen, origin, PATH_KEYS)


def config_from_dict(data: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(_resolve(dict(data)))
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def api_key_from_env(name: str) -> str:
    """The API key in environment variable ``name``, surrounding whitespace (a Windows line
    ending from an env file) stripped; the error names the variable, never the value."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        raise ConfigError(f"environment variable {name} (the API key) is not set")
    key = raw.strip()
    if any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ConfigError(
            f"environment variable {name} holds an API key with spaces or control characters "
            "inside it; it was not used"
        )
    return key


def load_config(
    profile: str | None = None,
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Config:
    """Load a profile and/or a file, apply nested ``overrides``, validate once."""
    data: dict[str, Any] = {}
    if profile is not None:
        located = profile_path(profile)
        data = _resolve(read_yaml(located), located)
    if path is not None:
        located = profile_path(str(path))
        data = merge_layer(data, _resolve(read_yaml(located), located))
    if overrides:
        data = merge_layer(data, overrides)
    if not data:
        raise ConfigError("no configuration given: name a profile or a config file")
    return config_from_dict(data)

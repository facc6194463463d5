"""The generation settings a model decodes with, resolved in one place for every engine.

The official inference (ms-swift's ``PtEngine``: ``prepare_generation_config``, alike in 3.3
and 3.4) takes each of ``temperature``, ``top_k``, ``top_p`` and ``repetition_penalty`` that a
request leaves unset from the checkpoint's ``generation_config.json``, and decodes greedily when
that file's ``do_sample`` is false or absent and the request sets no temperature
(Qwen2.5-VL-3B-Instruct's file, hence the released reasoner's, sets ``repetition_penalty``
1.05). With ``generation_from_checkpoint`` the same holds here: a field the configuration sets
explicitly wins, else the checkpoint's, else the schema's default. Backends read
:class:`GenerationSettings` and nothing else, so transformers, llama.cpp,
CTranslate2, vLLM and an OpenAI-compatible endpoint decode with the same values.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

GENERATION_FILE = "generation_config.json"
#: the sampling fields resolved from the configuration or the checkpoint
FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass(frozen=True)
class GenerationSettings:
    """What one call decodes with. ``temperature`` 0 is greedy (``top_p``/``top_k`` unused);
    ``top_k`` 0 filters nothing; ``repetition_penalty`` 1 penalises nothing."""

    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    #: where each of :data:`FIELDS` came from: ``config``, ``checkpoint``, ``default`` or
    #: ``call`` (a per-call value)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def chosen(self, name: str) -> bool:
        """Whether ``name`` was chosen (configured, read from the checkpoint or asked for by the
        call) rather than left at the schema's default: what a remote request sends."""
        return self.sources.get(name, "default") != "default"

    def with_call(self, *, max_new_tokens: int | None = None, temperature: float | None = None,
                  top_p: float | None = None, top_k: int | None = None,
                  repetition_penalty: float | None = None) -> GenerationSettings:
        """These settings with a call's own values (``None``: keep the resolved one)."""
        given = {"temperature": temperature, "top_p": top_p, "top_k": top_k,
                 "repetition_penalty": repetition_penalty}
        given = {k: v for k, v in given.items() if v is not None}
        if max_new_tokens is not None:
            given["max_new_tokens"] = max_new_tokens
        if not given:
            return self
        sources = {**self.sources, **{k: "call" for k in given if k in FIELDS}}
        return replace(self, **given, sources=sources)

    def describe(self) -> str:
        """One line for the log: each value and where it came from."""
        parts = [f"{name} {getattr(self, name):g} ({self.sources.get(name, 'default')})"
                 for name in FIELDS]
        return f"max_new_tokens {self.max_new_tokens}, " + ", ".join(parts)


def checkpoint_generation(checkpoint: str | Path) -> dict[str, Any]:
    """The sampling fields and ``do_sample`` of ``checkpoint``'s ``generation_config.json``
    (those it sets; none where it has no such file); a value out of the schema's bounds is one
    line naming the file and the field."""
    path = Path(checkpoint) / GENERATION_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BackendError(BACKEND_FAILED, f"{path}: not a readable JSON file ({exc})") from None
    return validated(data, str(path))


def validated(data: object, where: str) -> dict[str, Any]:
    """The sampling fields and ``do_sample`` a generation config (``where``: its file, for the
    error) sets, each checked against the schema's bounds."""
    if not isinstance(data, dict):
        raise BackendError(BACKEND_FAILED, f"{where}: not a JSON object")
    out: dict[str, Any] = {}
    bounds = ModelConfig.model_fields
    for name in (*FIELDS, "do_sample"):
        value = data.get(name)
        if value is None:
            continue
        if name == "do_sample":
            ok = isinstance(value, bool)
        elif name == "top_k":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = (isinstance(value, int | float) and not isinstance(value, bool)
                  and math.isfinite(value) and _within(bounds[name].metadata, float(value)))
        if not ok:
            raise BackendError(BACKEND_FAILED, f"{where}: {name} {value!r} is not a value "
                                               "this backend can decode with")
        out[name] = value
    return out


def _within(metadata: list[Any], value: float) -> bool:
    """Whether ``value`` meets the schema field's numeric constraints (``ge``, ``gt``, ``le``)."""
    for rule in metadata:
        for attr, holds in (("ge", value.__ge__), ("gt", value.__gt__), ("le", value.__le__)):
            bound = getattr(rule, attr, None)
            if bound is not None and not holds(bound):
                return False
    return True


def resolve_generation(cfg: ModelConfig, checkpoint: str | Path | None) -> GenerationSettings:
    """The settings ``cfg`` decodes with. With ``generation_from_checkpoint``, fields ``cfg``
    does not set explicitly come from the generation config of ``checkpoint`` (a directory, or
    a hub id whose file is fetched as ``from_pretrained`` fetches it; ``do_sample`` false or
    absent: greedy unless ``cfg`` sets a temperature)."""
    read: dict[str, Any] = {}
    where = checkpoint_dir(str(checkpoint)) if cfg.generation_from_checkpoint and checkpoint \
        else None
    if where is not None:
        read = checkpoint_generation(where)
    explicit = cfg.model_fields_set
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in FIELDS:
        if name in explicit:
            values[name], sources[name] = getattr(cfg, name), "config"
        elif name in read:
            values[name], sources[name] = read[name], "checkpoint"
        else:
            values[name], sources[name] = getattr(cfg, name), "default"
    # transformers' GenerationConfig has do_sample false unless the file sets it true
    if where is not None and not read.get("do_sample", False) and "temperature" not in explicit:
        values["temperature"], sources["temperature"] = 0.0, "checkpoint"
    return GenerationSettings(max_new_tokens=cfg.max_new_tokens, temperature=float(
        values["temperature"]), top_p=float(values["top_p"]), top_k=int(values["top_k"]),
        repetition_penalty=float(values["repetition_penalty"]), sources=sources)


def local_checkpoint(model: str, cache_dir: str | Path | None = None) -> Path | None:
    """The directory of ``model`` where it is already one on this machine (a directory, a built
    offline model, an exported name), or None (a remote server's model id): never fetches or
    builds anything."""
    from embodied_r_ros.backends.offline import (
        exported_model,
        is_offline_model,
        model_cache_dir,
    )

    if is_offline_model(model):
        path = model_cache_dir(cache_dir) / model
    else:
        path = exported_model(model, cache_dir) or Path(model).expanduser()
    return path if path.is_dir() else None


def checkpoint_dir(path: str) -> Path | None:
    """The local directory holding ``path``'s ``generation_config.json``: ``path`` itself when
    it is a directory, else the hub cache's copy of the file (fetched as ``from_pretrained``
    would fetch it), or None where the checkpoint has none."""
    if Path(path).expanduser().is_dir():
        return Path(path).expanduser()
    from transformers.utils import cached_file

    try:
        found = cached_file(path, GENERATION_FILE, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError):  # not a hub id, or not reachable
        return None
    return Path(found).parent if found else None

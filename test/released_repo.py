"""A local Hugging Face hub cache holding ``EmbodiedCity/Embodied-R`` laid out as the hub holds
it: no checkpoint at the root, one whole Qwen2.5-VL checkpoint in each of ``Weight_1`` and
``Weight_2`` (here tiny random ones, seeds 0 and 1), saved as transformers 4.51 saved them (the
official code's version): a flat config whose text fields sit at the top with ``rope_scaling``
``{"type": "mrope"}``, ``visual.*`` weights beside ``model.layers.*``, and the chat template in
the processor's ``chat_template.json`` only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.checkpoints import RELEASED_REPO, RELEASED_RUNS
from embodied_r_ros.backends.offline import MARKER_FILE, ensure_offline_model

#: the snapshot's commit (any 40 hex digits: the cache only names it)
COMMIT = "5e1ea5ed0000000000000000000000000000e1e5"


def legacy_config(config: dict) -> dict:
    """A transformers 5 Qwen2.5-VL config as transformers 4.51 wrote it."""
    flat = {k: v for k, v in config.items() if k not in ("text_config", "dtype")}
    text = {k: v for k, v in config["text_config"].items()
            if k not in ("rope_parameters", "model_type", "layer_types", "dtype")}
    rope = config["text_config"]["rope_parameters"]
    vision = {k: v for k, v in config["vision_config"].items()
              if k not in ("rope_parameters", "model_type")}
    return {**flat, **text, "vision_config": vision, "rope_theta": rope["rope_theta"],
            "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]},
            "torch_dtype": "float32", "transformers_version": "4.51.3"}


def write_checkpoint(source: Path, dest: Path) -> None:
    """``source`` (a tiny Qwen2.5-VL built offline) copied to ``dest`` in the legacy layout."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(MARKER_FILE))
    config = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps(legacy_config(config), indent=1))
    template = dest / "chat_template.jinja"
    (dest / "chat_template.json").write_text(json.dumps({"chat_template": template.read_text()}))
    template.unlink()
    tokenizer_config = json.loads((dest / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))


def build_hub_cache(root: Path, model_cache: Path) -> Path:
    """``root``, a hub cache (``HF_HUB_CACHE``) holding the released repository."""
    repo = root / ("models--" + RELEASED_REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    for seed, run in enumerate(RELEASED_RUNS):
        write_checkpoint(ensure_offline_model("tiny-qwen2.5-vl", model_cache, seed=seed),
                         snapshot / run)
    (snapshot / "README.md").write_text("Embodied-R Model Weights\n")
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return root


def greedy_tokens(model: Any, ids: list[int], n: int) -> list[int]:
    """``n`` argmax tokens of a transformers ``model`` after ``ids``, end tokens included
    (nothing stops early): what a GGUF export must decode alike."""
    import torch

    tokens = torch.tensor([ids])
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(n):
            nxt = int(model(tokens).logits[0, -1].argmax())
            out.append(nxt)
            tokens = torch.cat([tokens, torch.tensor([[nxt]])], dim=1)
    return out

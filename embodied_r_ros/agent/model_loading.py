"""Naming the models a node serves (``backends.factory.load_pipeline`` loads them, once, at
start-up, never inside a camera callback)."""

from __future__ import annotations

from embodied_r_ros.core.config import Config


def describe_models(config: Config, *, perception: bool = True, reasoning: bool = True) -> str:
    """One line naming the models, e.g. for logs and the demo's banner."""
    parts = []
    if perception:
        if config.perception.backend == "vlm" and config.perception.vlm is not None:
            parts.append(f"VLM {config.perception.vlm.model} ({config.perception.vlm.backend})")
        else:
            parts.append("geometric perception (no VLM)")
    if reasoning:
        lm = config.reasoning.model
        parts.append(f"LM {lm.model} ({lm.backend})")
        if (reader := config.memory_reader()) is not None:
            parts.append(f"memory texts: LM {reader.model} ({reader.backend})")
    return "; ".join(parts)

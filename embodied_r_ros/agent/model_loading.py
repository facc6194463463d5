"""Loading the models a node serves, once, at start-up (never inside a camera callback)."""

from __future__ import annotations

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.pipeline import EmbodiedR, create_models


def build_pipeline(config: Config, *, perception: bool = True, reasoning: bool = True) -> EmbodiedR:
    """An :class:`EmbodiedR` holding only the models this process serves.

    The perception node loads the VLM alone and the reasoning node the LM alone, so the VLM can
    live on another machine; the all-in-one process loads both into one instance.
    """
    vlm, lm, memory_lm = create_models(config, perception=perception, reasoning=reasoning)
    return EmbodiedR(config, vlm=vlm, lm=lm, memory_lm=memory_lm, load_models=False)


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

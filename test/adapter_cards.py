"""What every shipped adapter's card must state about the adapter itself."""

from __future__ import annotations

import json
from typing import Any

from embodied_r_ros.backends import offline


def checked_card(name: str) -> tuple[dict[str, Any], str]:
    """The adapter config and model card of shipped adapter ``name``, after checking that it
    ships small, adapts the offline SmolLM2 every linear layer, and that its card states its
    own shape and size."""
    adapter = offline.adapter_dir(name)
    weights = adapter / "adapter_model.safetensors"
    assert weights.stat().st_size <= 20_000_000
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == "smollm2-135m"
    assert len(config["target_modules"]) == 7  # q k v o gate up down: every linear layer
    card = (adapter / "README.md").read_text()
    assert f"(r {config['r']}, alpha {config['lora_alpha']}, every linear" in card
    assert f"float16 safetensors, {weights.stat().st_size / 1e6:.2f} MB" in card
    return config, card

"""One meaning per name: a function or method name the project gives to one concept is not
reused for another elsewhere: a reader who learns one meaning must not meet another."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: name -> the only module that may define it
OWNERS = {
    "primary_action": "embodied_r_ros/core/actions.py",
    "visual_motions": "embodied_r_ros/core/pipeline.py",
    "resolve_device": "embodied_r_ros/backends/transformers_backend.py",
    "write_atomic": None,  # checked below: defined once, wherever it lives
    "wrap_deg": "embodied_r_ros/core/poses.py",
    "quadrant": "embodied_r_ros/core/poses.py",
    "parse_perception": "embodied_r_ros/reading/legacy_text.py",
    "stated_view": "embodied_r_ros/core/perception_text.py",
}


def _definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for folder in ("embodied_r_ros", "training"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[node.name].append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("name", sorted(OWNERS))
def test_a_name_has_one_definition(name: str) -> None:
    places = _definitions()[name]
    assert len(places) == 1, f"{name} is defined in {places}"
    if OWNERS[name] is not None:
        assert places == [OWNERS[name]]

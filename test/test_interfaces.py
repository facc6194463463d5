"""What the interface files say is what the code does: the error codes ``SpatialQuery`` lists are
every code the runtime defines, and its action is field-for-field its service."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import embodied_r_ros

PACKAGE = Path(embodied_r_ros.__file__).parent
INTERFACES = PACKAGE.parent / "embodied_r_interfaces"
#: the layers whose errors reach a SpatialQuery response (the client's own REJECTED aside)
SERVING = ("core", "agent", "nodes")


def defined_codes() -> set[str]:
    """Module-level ``NAME = "NAME"`` string constants of the serving layers: the error codes."""
    codes = set()
    for layer in SERVING:
        for path in (PACKAGE / layer).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.Constant)
                        and node.value.value == node.targets[0].id):
                    codes.add(node.targets[0].id)
    return codes


def listed_codes(text: str) -> list[str]:
    match = re.search(r"# Empty on success, else one of: (.*?)\.\n", text, re.S)
    assert match, "no list of error codes"
    return [c.strip() for c in match.group(1).replace("#", " ").split(",")]


def fields(section: str) -> list[str]:
    return [line.strip() for line in section.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_query_service_lists_every_error_code_the_runtime_returns() -> None:
    listed = listed_codes((INTERFACES / "srv" / "SpatialQuery.srv").read_text())
    assert len(listed) == len(set(listed))
    codes = defined_codes()
    assert {"BAD_REQUEST", "BAD_STAMP", "BUSY", "CANCELLED", "INTERNAL"} <= codes  # found
    assert set(listed) == codes


def test_the_query_action_is_the_query_service_field_for_field() -> None:
    request, response = (INTERFACES / "srv" / "SpatialQuery.srv").read_text().split("---\n")
    goal, result, _feedback = (INTERFACES / "action" / "SpatialQuery.action").read_text().split(
        "---\n")
    assert fields(goal) == fields(request)
    assert fields(result) == fields(response)

"""What the interface files say is what the code does: the error codes are the constants of
``SpatialQuery``, mirrored once in Python (``embodied_r_ros.core.error_codes``) and taken from
there by every layer, and the query action is field-for-field its service."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from ros_helpers import require_ros

import embodied_r_ros
from embodied_r_ros.core import error_codes

PACKAGE = Path(embodied_r_ros.__file__).parent
INTERFACES = PACKAGE.parent / "embodied_r_interfaces"
MIRROR = PACKAGE / "core" / "error_codes.py"
#: the layers whose errors reach a SpatialQuery response, and the clients of it
SERVING = ("core", "backends", "recordings", "agent", "nodes", "serving", "cli.py", "client.py")
CONSTANT = re.compile(r'^string ([A-Z][A-Z0-9_]*)="([^"]*)"$', re.M)


def constants(text: str) -> list[tuple[str, str]]:
    """``string NAME="VALUE"`` constants of an interface section, in order."""
    return CONSTANT.findall(text)


def fields(section: str) -> list[str]:
    return [line.strip() for line in section.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def serving_files() -> list[Path]:
    return sorted(p for name in SERVING for p in (
        [PACKAGE / name] if name.endswith(".py") else (PACKAGE / name).rglob("*.py")))


def test_the_python_mirror_is_the_query_service_constants() -> None:
    _request, response = (INTERFACES / "srv" / "SpatialQuery.srv").read_text().split("---\n")
    listed = constants(response)
    assert listed and all(name == value for name, value in listed)
    assert [name for name, _ in listed] == list(error_codes.SERVER_CODES)
    assert all(getattr(error_codes, code) == code for code in error_codes.SERVER_CODES)
    assert error_codes.REJECTED not in error_codes.SERVER_CODES  # the client's own


def test_the_mirror_holds_every_code_it_defines_in_its_lists() -> None:
    defined = {n.targets[0].id for n in ast.parse(MIRROR.read_text()).body
               if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)}
    assert defined == {*error_codes.SERVER_CODES, error_codes.REJECTED}


def test_no_other_module_spells_an_error_code() -> None:
    """Every layer imports its codes from the mirror: no ``"BUSY"`` literal elsewhere."""
    codes = {*error_codes.SERVER_CODES, error_codes.REJECTED}
    found = []
    for path in serving_files():
        if path == MIRROR:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in codes:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert not found, found


def test_the_generated_types_carry_the_constants() -> None:
    require_ros()
    from embodied_r_interfaces.action import SpatialQuery as QueryAction
    from embodied_r_interfaces.srv import SpatialQuery

    for code in error_codes.SERVER_CODES:
        assert getattr(SpatialQuery.Response, code) == code
        assert getattr(QueryAction.Result, code) == code
    # constants are not fields: the wire format keeps error_code a plain string
    assert SpatialQuery.Response.get_fields_and_field_types()["error_code"] == "string"


@pytest.mark.parametrize("name", ["srv/GetWindow.srv", "action/Perceive.action",
                                  "action/Reason.action"])
def test_internal_interfaces_refer_to_the_query_constants(name: str) -> None:
    """A peer's error_code goes into the query's response as it is: same codes, one list."""
    text = (INTERFACES / name).read_text()
    assert not constants(text)
    assert "one of the SpatialQuery.srv constants" in text


def test_the_query_action_is_the_query_service_field_for_field() -> None:
    request, response = (INTERFACES / "srv" / "SpatialQuery.srv").read_text().split("---\n")
    goal, result, _feedback = (INTERFACES / "action" / "SpatialQuery.action").read_text().split(
        "---\n")
    assert fields(goal) == fields(request)
    assert fields(result) == fields(response)

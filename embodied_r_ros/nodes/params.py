"""Declaring ROS parameters with a description and a range, in one line each.

Every node parameter goes through :func:`declare`, so ``ros2 param describe`` shows what it is
for and what values it accepts, and out-of-range values are refused by rclpy itself. A spec is
read-only unless it is safe to change on a running node (``read_only=False``): such a parameter
can be set at any time (``ros2 param set``), is validated in a parameter callback (its choices,
and the node's own ``check``), and once set is current in the dict :func:`declare` returned and
handed to the node's ``on_change``. The specs are plain data (:data:`Spec`) so the launch-file
test can check every name the launch file uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from embodied_r_ros.core.config import Config, ConfigError
from embodied_r_ros.core.profiles import load_config


@dataclass(frozen=True)
class Spec:
    """One parameter: default, description, (for numbers) an inclusive range, and whether it
    may be set on a running node (``read_only=False``)."""

    name: str
    default: Any
    description: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    read_only: bool = True


def _descriptor(spec: Spec) -> ParameterDescriptor:
    desc = spec.description
    if spec.choices:
        desc += f" (one of: {', '.join(spec.choices)})"
    d = ParameterDescriptor(description=desc, read_only=spec.read_only)
    if spec.lo is not None and spec.hi is not None:
        if isinstance(spec.default, bool):
            pass
        elif isinstance(spec.default, int):
            d.integer_range = [IntegerRange(from_value=int(spec.lo), to_value=int(spec.hi), step=1)]
        elif isinstance(spec.default, float):
            d.floating_point_range = [
                FloatingPointRange(from_value=float(spec.lo), to_value=float(spec.hi), step=0.0)
            ]
    return d


#: a node's own check of a settable parameter's new value: the reason to refuse it, or None
Check = Callable[[str, Any], str | None]


def declare(
    node: Node,
    specs: tuple[Spec, ...],
    *,
    check: Check | None = None,
    on_change: Callable[[str, Any], None] | None = None,
) -> dict[str, Any]:
    """Declare ``specs`` on ``node`` and return their current values by name.

    Raises ``ValueError`` for a value outside ``choices`` (rclpy enforces numeric ranges). The
    settable ones among the specs declared here are watched: a new value outside ``choices`` or
    refused by ``check`` is refused with its reason; an accepted one updates the returned dict
    and goes to ``on_change``.
    """
    values: dict[str, Any] = {}
    watched: dict[str, Spec] = {}
    for spec in specs:
        if node.has_parameter(spec.name):
            values[spec.name] = node.get_parameter(spec.name).value
            continue
        param = node.declare_parameter(spec.name, spec.default, _descriptor(spec))
        value = param.value
        if spec.choices and value not in spec.choices:
            raise ValueError(f"parameter {spec.name}={value!r}: expected one of {spec.choices}")
        values[spec.name] = value
        if not spec.read_only:
            watched[spec.name] = spec
    if watched:
        _watch(node, watched, values, check, on_change)
    return values


def with_defaults(specs: tuple[Spec, ...], defaults: Mapping[str, Any]) -> tuple[Spec, ...]:
    """``specs`` with the defaults that ``defaults`` names replaced (presets a node starts
    from, below its own parameter overrides)."""
    return tuple(replace(s, default=defaults[s.name]) if s.name in defaults else s
                 for s in specs)


def _watch(node: Node, specs: dict[str, Spec], values: dict[str, Any], check: Check | None,
           on_change: Callable[[str, Any], None] | None) -> None:
    def validate(params: list[Parameter]) -> SetParametersResult:
        for param in params:
            spec = specs.get(param.name)
            if spec is None:
                continue
            reason = None
            if spec.choices and param.value not in spec.choices:
                reason = f"{param.name}={param.value!r}: expected one of {spec.choices}"
            elif check is not None:
                reason = check(param.name, param.value)
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    def changed(params: list[Parameter]) -> None:
        for param in params:
            if param.name in specs:
                values[param.name] = param.value
                if on_change is not None:
                    on_change(param.name, param.value)

    node.add_on_set_parameters_callback(validate)
    node.add_post_set_parameters_callback(changed)


#: the camera a node serves unless told otherwise (the frame buffer's ``camera_name``, the
#: ``cameras`` of the query server and the perception node)
DEFAULT_CAMERA = "front"

# Declared by a node that loads the pipeline configuration itself (not when it is handed one).
CONFIG_SPECS: tuple[Spec, ...] = (
    Spec("profile", "offline", "pipeline profile from config/profiles (tiny, offline, "
         "workstation, server, paper, jetson) or a .yaml path"),
    Spec("config_file", "", "YAML config layered over the profile (empty = none); it may name "
         "its own profile in 'base'"),
)
#: the same for a managed node, which reads them on every configure: settable, so that
#: cleanup -> set parameters -> configure loads another profile
MODEL_CONFIG_SPECS: tuple[Spec, ...] = tuple(
    replace(s, read_only=False, description=s.description + " (read on configure)")
    for s in CONFIG_SPECS
)
DIAGNOSTICS_SPEC = Spec("diagnostics_period_sec", 1.0, "period of /diagnostics messages",
                        0.1, 60.0, read_only=False)
AUTOSTART_SPEC = Spec("autostart", True, "managed node: configure (load the model) and activate "
                      "at start; false waits for lifecycle transitions")


def load_node_config(values: dict[str, Any]) -> Config:
    """The pipeline config named by a node's ``profile``/``config_file`` parameters."""
    profile = values["profile"] or None
    path = values["config_file"] or None
    if profile is None and path is None:
        raise ConfigError("set the 'profile' or 'config_file' parameter")
    return load_config(profile=profile, path=path)

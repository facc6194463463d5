"""Declaring ROS parameters with a description and a range, in one line each.

Every node parameter goes through :func:`declare`, so ``ros2 param describe`` shows what it is
for and what values it accepts, and out-of-range values are refused by rclpy itself. The specs
are plain data (:data:`Spec`) so the launch-file test can check every name the launch file uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node

from embodied_r_ros.core.config import Config, ConfigError, load_config


@dataclass(frozen=True)
class Spec:
    """One parameter: default, description and (for numbers) an inclusive range."""

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


def declare(node: Node, specs: tuple[Spec, ...]) -> dict[str, Any]:
    """Declare ``specs`` on ``node`` and return their current values by name.

    Raises ``ValueError`` for a value outside ``choices`` (rclpy enforces numeric ranges).
    """
    values: dict[str, Any] = {}
    for spec in specs:
        if node.has_parameter(spec.name):
            values[spec.name] = node.get_parameter(spec.name).value
            continue
        param = node.declare_parameter(spec.name, spec.default, _descriptor(spec))
        value = param.value
        if spec.choices and value not in spec.choices:
            raise ValueError(f"parameter {spec.name}={value!r}: expected one of {spec.choices}")
        values[spec.name] = value
    return values


# Declared by a node that loads the pipeline configuration itself (not when it is handed one).
CONFIG_SPECS: tuple[Spec, ...] = (
    Spec("profile", "offline", "pipeline profile from config/profiles (tiny, offline, "
         "workstation, server) or a .yaml path"),
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
                        0.1, 60.0)
AUTOSTART_SPEC = Spec("autostart", True, "managed node: configure (load the model) and activate "
                      "at start; false waits for lifecycle transitions")


def load_node_config(values: dict[str, Any]) -> Config:
    """The pipeline config named by a node's ``profile``/``config_file`` parameters."""
    profile = values["profile"] or None
    path = values["config_file"] or None
    if profile is None and path is None:
        raise ConfigError("set the 'profile' or 'config_file' parameter")
    return load_config(profile=profile, path=path)

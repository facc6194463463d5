"""The core stays ROS-free so training, the CLI and the nodes share one implementation."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import embodied_r_ros.core as core

ROS_ROOTS = {"rclpy", "rosidl_runtime_py", "sensor_msgs", "nav_msgs", "embodied_r_interfaces"}
CORE_DIR = Path(core.__file__).parent


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_core_module_imports_ros_statically() -> None:
    files = sorted(CORE_DIR.rglob("*.py"))
    assert len(files) > 5
    offenders = {str(f.relative_to(CORE_DIR)): _imported_roots(f) & ROS_ROOTS for f in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_every_core_module_loads_no_ros() -> None:
    names = [
        m.name
        for m in pkgutil.walk_packages(core.__path__, prefix="embodied_r_ros.core.")
        if not m.name.endswith(("vllm_backend",))  # optional extra, not installed in CI
    ]
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(ROS_ROOTS)!r})\n"
        "print('ROS:', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

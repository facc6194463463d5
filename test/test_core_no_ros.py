"""The core stays ROS-free so training, the CLI and the nodes share one implementation, and
imports point one way, from the top of each layer cake down:

* ``embodied_r_ros``: ``core`` (the method) < ``agent`` (the ROS-free runtime) < ``nodes``;
  ``backends`` (the models behind the core's chat interface) stand on the core, which never
  imports them: it is handed its models; ``recordings`` (bags, ROS image and tf messages,
  video files) stand on the core, which never reads a recording itself; ``sim``, ``serving``
  and ``memory`` stand on the core alone; ``reading`` (the rule reader, old texts) stands on
  ``sim`` and the core, and the world generator calls it only through the check it is given;
  none of them uses the training package;
* ``embodied_r_training``: ``data`` < ``rl`` < ``evaluation`` < the CLI, the export and the
  training demo on top; ``recipe``, ``rewards`` and ``plots`` are leaves every layer may use;
* ``lab`` (experiments, benchmark replays, the long world; never installed) stands on both
  installed packages, and nothing installed imports it.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import embodied_r_ros.core as core

ROS_ROOTS = {"rclpy", "rosidl_runtime_py", "sensor_msgs", "nav_msgs", "embodied_r_interfaces"}
CORE_DIR = Path(core.__file__).parent
PACKAGE_DIR = CORE_DIR.parent  # embodied_r_ros
TRAINING = "embodied_r_training"
TRAINING_DIR = PACKAGE_DIR.parent / "training" / TRAINING
TRAINING_TOP = (f"{TRAINING}.cli", f"{TRAINING}.export", f"{TRAINING}.train_demo")
LAB = "lab"
#: package -> the packages it must not import (the one-way rule)
FORBIDDEN = {
    "embodied_r_ros.core": ("embodied_r_ros.agent", "embodied_r_ros.nodes", "embodied_r_ros.sim",
                            "embodied_r_ros.serving", "embodied_r_ros.memory",
                            "embodied_r_ros.reading", "embodied_r_ros.recordings",
                            "embodied_r_ros.backends", TRAINING, LAB),
    "embodied_r_ros.backends": ("embodied_r_ros.agent", "embodied_r_ros.nodes",
                                "embodied_r_ros.sim", "embodied_r_ros.serving",
                                "embodied_r_ros.memory", "embodied_r_ros.reading",
                                "embodied_r_ros.recordings", TRAINING, LAB),
    "embodied_r_ros.recordings": ("embodied_r_ros.agent", "embodied_r_ros.nodes",
                                  "embodied_r_ros.sim", "embodied_r_ros.serving",
                                  "embodied_r_ros.memory", "embodied_r_ros.reading",
                                  "embodied_r_ros.backends", TRAINING, LAB),
    "embodied_r_ros.agent": ("embodied_r_ros.nodes", "embodied_r_ros.sim", TRAINING, LAB),
    "embodied_r_ros.nodes": ("embodied_r_ros.sim", TRAINING, LAB),
    "embodied_r_ros.sim": ("embodied_r_ros.agent", "embodied_r_ros.nodes",
                           "embodied_r_ros.reading", TRAINING, LAB),
    "embodied_r_ros.reading": ("embodied_r_ros.agent", "embodied_r_ros.nodes", TRAINING, LAB),
    "embodied_r_ros.serving": ("embodied_r_ros.agent", "embodied_r_ros.nodes", TRAINING, LAB),
    "embodied_r_ros.memory": ("embodied_r_ros.agent", "embodied_r_ros.nodes", "embodied_r_ros.sim",
                              "embodied_r_ros.serving", TRAINING, LAB),
    # what an operator watches: built for the nodes, never from them
    "embodied_r_ros.viewer": ("embodied_r_ros.nodes", "embodied_r_ros.sim", TRAINING, LAB),
    # the package's top (CLI, demo, player, client) and every other subpackage
    "embodied_r_ros": (TRAINING, LAB),
    f"{TRAINING}.data": (f"{TRAINING}.rl", f"{TRAINING}.evaluation", *TRAINING_TOP,
                         "embodied_r_ros.nodes", "embodied_r_ros.agent", LAB),
    f"{TRAINING}.rl": (f"{TRAINING}.evaluation", *TRAINING_TOP, "embodied_r_ros.nodes",
                       "embodied_r_ros.agent", LAB),
    f"{TRAINING}.evaluation": (*TRAINING_TOP, "embodied_r_ros.nodes", "embodied_r_ros.agent",
                               LAB),
    TRAINING: (LAB,),
}
#: packages whose modules never import ROS
ROS_FREE = ("embodied_r_ros.core", "embodied_r_ros.backends", "embodied_r_ros.recordings",
            "embodied_r_ros.agent", "embodied_r_ros.sim",
            "embodied_r_ros.reading",
            "embodied_r_ros.serving", "embodied_r_ros.memory", "embodied_r_ros.viewer",
            f"{TRAINING}.data",
            f"{TRAINING}.rl",
            f"{TRAINING}.evaluation")


def _folder(package: str) -> Path:
    if package.startswith(TRAINING):
        return TRAINING_DIR.joinpath(*package.split(".")[1:])
    return PACKAGE_DIR.parent.joinpath(*package.split("."))


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def _imported_modules(path: Path, package: str) -> set[str]:
    """Every module ``path`` (a module of ``package``) imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _package_of(path: Path) -> str:
    """The package a file's relative imports start from (its directory, ``__init__`` too)."""
    if path.is_relative_to(TRAINING_DIR):
        return ".".join((TRAINING, *path.relative_to(TRAINING_DIR).parts[:-1]))
    return ".".join(path.relative_to(PACKAGE_DIR.parent).parts[:-1])


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way_statically(package: str) -> None:
    root = _folder(package)
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 3, root
    offenders = {}
    for f in files:
        bad = {m for m in _imported_modules(f, _package_of(f)) if _within(m, FORBIDDEN[package])}
        if bad:
            offenders[str(f.relative_to(PACKAGE_DIR.parent))] = sorted(bad)
    assert offenders == {}


@pytest.mark.parametrize("package", ROS_FREE)
def test_ros_free_layers_import_no_ros_statically(package: str) -> None:
    files = sorted(_folder(package).rglob("*.py"))
    assert len(files) >= 3, package
    offenders = {str(f.relative_to(PACKAGE_DIR.parent)): _imported_roots(f) & ROS_ROOTS
                 for f in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_import_check_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    """The checker itself: both spellings of a forbidden import are found."""
    module = tmp_path / "m.py"
    module.write_text("from ..nodes import params\nimport embodied_r_training.rl.grpo\n"
                      "from . import poses\ndef f():\n    from ..sim import world\n")
    names = _imported_modules(module, "embodied_r_ros.core")
    assert {"embodied_r_ros.nodes", "embodied_r_training.rl.grpo", "embodied_r_ros.sim.world",
            "embodied_r_ros.core.poses"} <= names
    bad = {n for n in names if _within(n, FORBIDDEN["embodied_r_ros.core"])}
    assert "embodied_r_ros.core.poses" not in bad and "embodied_r_ros.sim.world" in bad


def test_importing_every_core_module_loads_no_ros() -> None:
    """The method and what it stands on (backends, recordings) load no ROS and nothing above."""
    import embodied_r_ros.backends as backends
    import embodied_r_ros.recordings as recordings

    names = [
        m.name
        for pkg in (core, backends, recordings)
        for m in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + ".")
        if not m.name.endswith(("vllm_backend",))  # optional extra, not installed in CI
    ]
    above = tuple(p for p in FORBIDDEN["embodied_r_ros.core"]
                  if p not in ("embodied_r_ros.recordings", "embodied_r_ros.backends"))
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(ROS_ROOTS)!r}\n"
        f"             or m.startswith({above!r}))\n"
        "print('loaded:', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_core_alone_loads_no_backend() -> None:
    """The method is handed its models: importing all of it loads no backend module."""
    names = [m.name for m in pkgutil.walk_packages(core.__path__, prefix=core.__name__ + ".")]
    assert len(names) >= 20
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "print(sorted(m for m in sys.modules if m.startswith('embodied_r_ros.backends')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_importing_the_nodes_and_the_simulator_loads_no_training() -> None:
    from ros_helpers import require_ros

    require_ros()  # the nodes import rclpy
    import embodied_r_ros.nodes as nodes
    import embodied_r_ros.sim as sim

    names = [m.name for pkg in (nodes, sim)
             for m in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + ".")]
    assert len(names) >= 5
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] == {TRAINING!r})\n"
        "print('loaded:', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_nothing_installed_loads_the_lab() -> None:
    """The lab sits beside the packages in the checkout, so it would import: loading every
    installed module (both packages, the nodes included where ROS is) must not load it."""
    import embodied_r_ros
    import embodied_r_training

    skip = ("vllm_backend",)  # optional extra, not installed in CI
    names = [m.name for pkg in (embodied_r_ros, embodied_r_training)
             for m in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + ".")
             if not m.name.endswith(skip) and not m.name.endswith("__main__")]
    assert len(names) >= 100
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}:\n"
        "    try: importlib.import_module(n)\n"
        "    except ImportError as e:\n"
        "        if \"'lab\" in str(e): raise\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] == {LAB!r})\n"
        "print('loaded:', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    root = PACKAGE_DIR.parent
    assert (root / LAB).is_dir()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr

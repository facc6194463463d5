"""What the package needs is declared where each route reads it: ``package.xml`` names every
module the code imports under its rosdep key (the colcon route), ``setup.py``'s
``install_requires`` holds every one a node needs (a plain ``pip install .``), and the model
engines and the trainer stay optional extras that no node imports at start."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ros_helpers import LOCALHOST_ENV, domain_id, require_ros

REPO = Path(__file__).resolve().parents[1]
#: the package's Python code: the ROS package installs embodied_r_training (training/) too
SOURCES = ("embodied_r_ros", "training", "launch")
OWN = {"embodied_r_ros", "embodied_r_training", "training", "_hamming"}

#: the rosdep key package.xml declares for each third-party module the code imports
ROSDEP: dict[str, str] = {
    "rclpy": "rclpy",
    "rcl_interfaces": "rcl_interfaces",
    "builtin_interfaces": "builtin_interfaces",
    "std_msgs": "std_msgs",
    "geometry_msgs": "geometry_msgs",
    "sensor_msgs": "sensor_msgs",
    "nav_msgs": "nav_msgs",
    "visualization_msgs": "visualization_msgs",
    "diagnostic_msgs": "diagnostic_msgs",
    "lifecycle_msgs": "lifecycle_msgs",
    "tf2_msgs": "tf2_msgs",  # the pip route builds it (tools/setup_ros.py)
    "tf2_ros": "tf2_ros_py",  # the frame buffer's pose_source tf, where installed
    "embodied_r_interfaces": "embodied_r_interfaces",
    "launch": "launch",
    "launch_ros": "launch_ros",
    "numpy": "python3-numpy",
    "cv2": "python3-opencv",
    "yaml": "python3-yaml",
    "pydantic": "python3-pydantic",
    "PIL": "python3-pil",
    "tqdm": "python3-tqdm",
    "openai": "python3-openai-pip",
    "httpx2": "python3-openai-pip",  # the HTTP client openai is built on (its limits)
    "rosbags": "python3-rosbags-pip",  # rosbags.image: rosbags-image, no rosdep key (pip)
}
#: modules of optional features: pip extras, imported only when a profile or command uses them
OPTIONAL: dict[str, str] = {
    "torch": "ml", "transformers": "ml", "accelerate": "ml", "tokenizers": "ml", "gguf": "ml",
    "peft": "ml", "safetensors": "ml", "filelock": "ml", "ctranslate2": "ml",
    "huggingface_hub": "ml",
    "llama_cpp": "llamacpp", "vllm": "vllm",
    "trl": "train", "datasets": "train", "matplotlib": "train", "pandas": "train",
    "tensorboard": "train",
    "psycopg": "postgres",
    "mcap": "memory",
    "foxglove": "viewer",
}
#: pip distributions (install_requires) the ROS modules above stand for; ROS comes from ROS
PIP = {"numpy": "numpy", "cv2": "opencv-python-headless", "yaml": "pyyaml",
       "pydantic": "pydantic", "PIL": "pillow", "tqdm": "tqdm", "openai": "openai",
       "rosbags": "rosbags-image"}
#: the console scripts a plain install must run (embodied-r-train is the trainer: extras)
RUNTIME_SCRIPTS = ("embodied-r", "embodied_r", "frame_buffer", "perception_node",
                   "reasoning_node", "query_server", "bag_player")


def imported_modules() -> dict[str, set[str]]:
    """Third-party top-level modules the package imports (lazily too), and where."""
    found: dict[str, set[str]] = {}
    for root in SOURCES:
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in OWN | {"__future__"}:
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def setup_keywords() -> dict[str, object]:
    tree = ast.parse((REPO / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "setup")
    return {kw.arg: kw.value for kw in call.keywords if kw.arg}


def requirement_name(spec: str) -> str:
    return spec.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip()


def manifest() -> object:
    catkin_pkg = pytest.importorskip("catkin_pkg.package")
    pkg = catkin_pkg.parse_package(str(REPO / "package.xml"))
    pkg.validate()
    return pkg


def test_every_import_is_declared_or_optional() -> None:
    found = imported_modules()
    undeclared = {m: sorted(w)[:3] for m, w in found.items() if m not in ROSDEP | OPTIONAL}
    assert not undeclared, f"declare these in package.xml (and here) or make them optional: " \
                           f"{undeclared}"
    assert set(ROSDEP) <= set(found), f"no longer imported: {set(ROSDEP) - set(found)}"


def test_package_xml_declares_exactly_the_imports_rosdep_keys() -> None:
    pkg = manifest()
    declared = {d.name for d in pkg.exec_depends}  # type: ignore[attr-defined]
    assert declared == set(ROSDEP.values()), declared ^ set(ROSDEP.values())
    assert not declared & set(OPTIONAL)


def test_a_plain_pip_install_brings_what_the_nodes_import() -> None:
    requires = {requirement_name(ast.literal_eval(e))
                for e in setup_keywords()["install_requires"].elts}  # type: ignore[attr-defined]
    assert {PIP[m] for m in PIP} <= requires, {PIP[m] for m in PIP} - requires
    assert "rosbags" in requires  # the bag player reads bags with rosbags itself
    extras = ast.literal_eval(setup_keywords()["extras_require"])  # type: ignore[arg-type]
    assert not {requirement_name(s) for specs in extras.values() for s in specs} & requires


def test_every_optional_module_comes_with_its_extra() -> None:
    """``pip install .[<extra>]`` brings each optional module (by its distribution's name)."""
    extras = ast.literal_eval(setup_keywords()["extras_require"])  # type: ignore[arg-type]
    assert set(OPTIONAL.values()) <= set(extras), set(OPTIONAL.values()) - set(extras)
    distribution = {"cv2": "opencv-python-headless", "PIL": "pillow", "llama_cpp":
                    "llama-cpp-python", "httpx2": "httpx", "foxglove": "foxglove-sdk"}
    for module, extra in OPTIONAL.items():
        names = {requirement_name(s).lower() for s in extras[extra]}
        assert distribution.get(module, module).lower() in names, (module, extra, names)


def test_the_runtime_scripts_start_without_any_optional_package(tmp_path: Path) -> None:
    """Every node module imports, and every node is built, with the optional modules made
    unimportable: what a plain ``pip install .`` without extras has."""
    require_ros()
    tree = setup_keywords()["entry_points"]
    scripts = dict(s.replace(" ", "").split("=", 1)
                   for s in ast.literal_eval(tree)["console_scripts"])  # type: ignore[arg-type]
    modules = sorted({scripts[name].split(":")[0] for name in RUNTIME_SCRIPTS})
    script = tmp_path / "plain.py"
    script.write_text(f"""
import importlib, importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(OPTIONAL)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (an extra)", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
for module in {modules!r}:
    importlib.import_module(module)

import rclpy
from rclpy.parameter import Parameter
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode
from embodied_r_ros.nodes.perception_node import PerceptionNode
from embodied_r_ros.nodes.query_server import QueryServerNode
from embodied_r_ros.nodes.reasoning_node import ReasoningNode

rclpy.init()
wait = [Parameter("autostart", value=False)]
nodes = [FrameBufferNode(), QueryServerNode(), PerceptionNode(parameter_overrides=wait),
         ReasoningNode(parameter_overrides=wait)]
for node in nodes:
    node.close() if hasattr(node, "close") else None
    node.destroy_node()
rclpy.shutdown()
print("plain install ok:", len(nodes), "nodes")
""")
    env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__))}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "plain install ok: 4 nodes" in proc.stdout

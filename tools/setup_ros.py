#!/usr/bin/env python3
"""Make the ROS 2 wheels from the package index usable for building, then build the interfaces.

The index's ``ros-*`` wheels (the "pip route") carry cmake exports with the build machine's
Python paths baked in (``/opt/python/cp311-cp311/include/python3.11`` and
``.../lib/python3.11/site-packages``); cmake refuses them at generate time. This script rewrites
those prefixes to this interpreter's paths, for whatever ``cpXY`` the wheels were built with, and
then configures, builds and installs ``embodied_r_interfaces`` into the environment's prefix,
and ``tools/tf2_msgs`` (``tf2_msgs/TFMessage``, which the index has no wheel for: the frame
buffer's tf reader and the bag player need it) where the environment has no ``tf2_msgs`` of its
own.

It is idempotent: a second run finds nothing to rewrite and, while the interface sources are
unchanged, skips the build (well under a second). Run it with the venv's interpreter:

    .venv/bin/python tools/setup_ros.py            # rewrite + build + verify
    .venv/bin/python tools/setup_ros.py --force    # rebuild even when up to date

On a native ROS 2 install none of this is needed: ``colcon build`` builds the package.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("setup_ros")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "embodied_r_interfaces"
PACKAGE_DIR = REPO / PACKAGE
STAMP_NAME = ".embodied_r_source_hash"


@dataclass(frozen=True)
class Package:
    """An interface package to build: its name and sources; a vendored one (a copy of a ROS
    package) is built only where the environment cannot import one of its own."""

    name: str
    source: Path
    vendored: bool = False


INTERFACES = Package(PACKAGE, PACKAGE_DIR)
TF2_MSGS = Package("tf2_msgs", REPO / "tools" / "tf2_msgs", vendored=True)
PACKAGES = (INTERFACES, TF2_MSGS)

# manylinux interpreters live at /opt/python/cp3XY-cp3XY[t]/; the wheels bake that root.
_BAKED_ROOT = r"/opt/python/cp3\d+-cp3\d+t?"
_BAKED_INCLUDE = re.compile(_BAKED_ROOT + r"/include/python3\.\d+t?")
_BAKED_NUMPY = re.compile(_BAKED_ROOT + r"/lib/python3\.\d+t?/site-packages/numpy/_?core/include")
_BAKED_SITE = re.compile(_BAKED_ROOT + r"/lib/python3\.\d+t?/site-packages")


class SetupError(RuntimeError):
    """A step that cannot succeed; the message says what to install or fix."""


@dataclass(frozen=True)
class PythonPaths:
    """Where this interpreter's headers, packages and numpy headers really are."""

    include: str
    purelib: str
    numpy_include: str | None

    @classmethod
    def current(cls) -> PythonPaths:
        paths = sysconfig.get_paths()
        try:
            import numpy

            numpy_include: str | None = numpy.get_include()
        except ImportError:
            numpy_include = None
        return cls(paths["include"], paths["purelib"], numpy_include)


def rewrite_text(text: str, paths: PythonPaths) -> str:
    """Replace every baked manylinux prefix in ``text`` with this interpreter's paths."""
    if paths.numpy_include:
        text = _BAKED_NUMPY.sub(lambda _: paths.numpy_include or "", text)
    text = _BAKED_INCLUDE.sub(lambda _: paths.include, text)
    return _BAKED_SITE.sub(lambda _: paths.purelib, text)


def rewrite_cmake_exports(prefix: Path, paths: PythonPaths) -> list[Path]:
    """Rewrite ``prefix/share/**/*.cmake`` in place; returns the files that changed."""
    changed = []
    for path in sorted((prefix / "share").rglob("*.cmake")):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if "/opt/python/" not in text:
            continue
        new = rewrite_text(text, paths)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def source_hash(package_dir: Path = PACKAGE_DIR) -> str:
    """Hash of everything that decides the generated code (sources plus interpreter)."""
    digest = hashlib.sha256(f"{sys.version_info[:2]}|{sys.prefix}".encode())
    for path in sorted(package_dir.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(package_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _stamp(prefix: Path, name: str = PACKAGE) -> Path:
    return prefix / "share" / name / STAMP_NAME


def is_built(prefix: Path, package: Package = INTERFACES) -> bool:
    stamp = _stamp(prefix, package.name)
    return stamp.is_file() and stamp.read_text().strip() == source_hash(package.source)


def provided_elsewhere(prefix: Path, package: Package) -> bool:
    """A vendored package the environment already has (a ROS install's), not one built here;
    the sources here (a namespace package to Python where ``tools/`` is on the path) do not
    count."""
    if not package.vendored or _stamp(prefix, package.name).is_file():
        return False
    spec = importlib.util.find_spec(package.name)
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    return origin is not None and REPO not in origin.parents


def _env(prefix: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["AMENT_PREFIX_PATH"] = os.pathsep.join(
        p for p in (str(prefix), env.get("AMENT_PREFIX_PATH", "")) if p
    )
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["CMAKE_PREFIX_PATH"] = str(prefix)
    return env


def _run(cmd: list[str], env: dict[str, str]) -> None:
    LOG.info("$ %s", " ".join(cmd))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        hint = ""
        missing = re.search(r"By not providing \"Find(\w+)\.cmake\"", tail) or re.search(
            r"Could not find a package configuration file provided by\s+\"(\w+)\"", tail
        )
        if missing:
            name = missing.group(1).replace("_", "-")
            hint = f"\nhint: pip install ros-{name}"
        raise SetupError(f"command failed: {' '.join(cmd)}\n{tail}{hint}")


def build_interfaces(prefix: Path, jobs: int, package: Package = INTERFACES) -> None:
    """cmake configure / build / install of an interface package into ``prefix``."""
    if shutil.which("cmake") is None:
        raise SetupError("cmake not found: install cmake >= 3.16 (apt-get install cmake)")
    if not (prefix / "share" / "rosidl_default_generators").is_dir():
        raise SetupError(
            "rosidl_default_generators is not installed in "
            f"{prefix}: pip install -r requirements-ros.txt"
        )
    build = prefix / "build" / package.name
    env = _env(prefix)
    _run(
        [
            "cmake",
            "-S",
            str(package.source),
            "-B",
            str(build),
            f"-DCMAKE_PREFIX_PATH={prefix}",
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DBUILD_TESTING=OFF",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        env,
    )
    _run(["cmake", "--build", str(build), f"-j{jobs}"], env)
    _run(["cmake", "--install", str(build)], env)
    _stamp(prefix, package.name).write_text(source_hash(package.source) + "\n")


def verify(prefix: Path) -> None:
    """Import the generated Python types in a fresh interpreter (the wheels' bootstrap sets
    LD_LIBRARY_PATH only at start-up)."""
    code = (
        "import rclpy\n"
        "from embodied_r_interfaces.srv import SpatialQuery\n"
        "from embodied_r_interfaces.action import SpatialQuery as A\n"
        "r = SpatialQuery.Request(question='q', options=['A. x'])\n"
        "assert r.options == ['A. x'] and hasattr(A, 'Feedback')\n"
        "from tf2_msgs.msg import TFMessage\n"
        "assert TFMessage.get_fields_and_field_types() == "
        "{'transforms': 'sequence<geometry_msgs/TransformStamped>'}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(prefix), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SetupError(f"built, but the import check failed:\n{proc.stderr.strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=Path(sys.prefix),
                        help="environment to fix and install into (default: this venv)")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="setup_ros: %(message)s")
    prefix = args.prefix.resolve()
    if prefix == Path(sys.base_prefix).resolve() and "VIRTUAL_ENV" not in os.environ:
        LOG.warning("not in a virtual environment: installing into %s", prefix)
    try:
        changed = rewrite_cmake_exports(prefix, PythonPaths.current())
        LOG.info("rewrote baked Python paths in %d cmake file(s)", len(changed))
        for package in PACKAGES:
            if provided_elsewhere(prefix, package):
                LOG.info("%s comes with this environment: not built", package.name)
            elif args.force or not is_built(prefix, package):
                build_interfaces(prefix, args.jobs, package)
                LOG.info("built and installed %s into %s", package.name, prefix)
            else:
                LOG.info("%s is up to date in %s", package.name, prefix)
        verify(prefix)
    except SetupError as exc:
        print(f"setup_ros: error: {exc}", file=sys.stderr)
        return 1
    LOG.info("ROS 2 interfaces ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPU check's bundle: the wheels a lent GPU machine's image lacks, and whether they are all
there.

Such a machine runs CPython 3.12 with a fixed set of packages (``tools/gpu-image-packages.txt``)
and reaches no package index, so what the check needs beyond the image travels with the working
tree as wheels, at most 24 MiB of them. ``tools/gpu-bundle.lock.json`` pins each wheel (file,
SHA-256, size) and records its ``Requires-Dist`` lines, so whether the bundle is complete is
decided offline from the lock; ``make gpu-bundle`` downloads the pinned wheels into
``build/gpu-bundle/`` and checks them against the lock.

  python bench/_gpu_bundle.py lock NAME==VERSION ...   # download, write the lock
  python bench/_gpu_bundle.py build [DIR]              # download the locked wheels, check them
  python bench/_gpu_bundle.py check [DIR]              # check a downloaded bundle
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "tools" / "gpu-bundle.lock.json"
IMAGE = REPO / "tools" / "gpu-image-packages.txt"
BUNDLE_DIR = REPO / "build" / "gpu-bundle"
MAX_BYTES = 24 * 2**20
#: never in the bundle: hundreds of MiB, and it pins its own torch
EXCLUDED = ("vllm",)
#: the GPU machine's interpreter, for evaluating environment markers
TARGET_ENV = {
    "python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "sys_platform": "linux",
    "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
    "platform_release": "", "platform_version": "", "implementation_version": "3.12.3",
}
#: ``pip download`` options that fetch the wheels the GPU machine installs
PIP_TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
              *(f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
                                            "manylinux2014_x86_64", "manylinux1_x86_64"))]


def read_image(path: Path = IMAGE) -> dict[str, Version | None]:
    """The image's packages: canonical name -> version where known, else None."""
    packages: dict[str, Version | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            packages[canonicalize_name(name)] = Version(version) if version else None
    return packages


def read_lock(path: Path = LOCK) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["wheels"]


def applies(requirement: Requirement) -> bool:
    """Whether a ``Requires-Dist`` line applies on the GPU machine with no extra asked for."""
    return requirement.marker is None or requirement.marker.evaluate({**TARGET_ENV, "extra": ""})


def wheel_entry(wheel: Path) -> dict[str, Any]:
    """A lock entry read from a wheel file: name, version, file, hash, size, Requires-Dist."""
    name, version, _, _ = parse_wheel_filename(wheel.name)
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist()
                        if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist")
    return {"name": str(name), "version": str(version), "file": wheel.name,
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "bytes": wheel.stat().st_size, "requires_dist": list(requires or [])}


def closure_problems(wheels: list[dict[str, Any]],
                     image: dict[str, Version | None]) -> list[str]:
    """What keeps these wheels from being one complete install over the image (empty: none):
    a requirement neither they nor the image hold, a version outside a requirement, a name
    twice, an excluded package, more than ``MAX_BYTES``."""
    problems = []
    names = Counter(canonicalize_name(w["name"]) for w in wheels)
    problems += [f"{name} is in the bundle {n} times" for name, n in names.items() if n > 1]
    problems += [f"{name} must not be in the bundle" for name in names if name in EXCLUDED]
    size = sum(w["bytes"] for w in wheels)
    if size > MAX_BYTES:
        problems.append(f"the bundle is {size / 2**20:.1f} MiB, over {MAX_BYTES / 2**20:g} MiB")
    bundled = {canonicalize_name(w["name"]): Version(w["version"]) for w in wheels}
    for wheel in wheels:
        for line in wheel["requires_dist"]:
            req = Requirement(line)
            if not applies(req):
                continue
            name = canonicalize_name(req.name)
            where, version = (("bundle", bundled[name]) if name in bundled else
                              ("image", image[name]) if name in image else (None, None))
            if where is None:
                problems.append(f"{wheel['name']} needs {line}: in neither bundle nor image")
            elif version is not None and not req.specifier.contains(version, prereleases=True):
                problems.append(f"{wheel['name']} needs {line}: the {where} has {version}")
    return problems


def folder_problems(folder: Path, lock: list[dict[str, Any]]) -> list[str]:
    """A downloaded bundle against its lock: the same files, hashes and metadata, nothing
    more."""
    wheels = {p.name: wheel_entry(p) for p in sorted(folder.glob("*.whl"))}
    expected = {w["file"]: w for w in lock}
    problems = [f"{name}: not in the lock" for name in wheels.keys() - expected.keys()]
    problems += [f"{name}: missing from {folder}" for name in expected.keys() - wheels.keys()]
    for name in wheels.keys() & expected.keys():
        problems += [f"{name}: {key} differs from the lock" for key in expected[name]
                     if wheels[name][key] != expected[name][key]]
    return problems


def installed_problems(lock: list[dict[str, Any]]) -> list[str]:
    """Where the interpreter running this (image and bundle together) does not meet the bundle's
    requirements: a locked package at another version, or one it needs missing or outside the
    versions it accepts. Evaluated on this interpreter's own environment markers."""
    problems = []
    for wheel in lock:
        try:
            have = importlib.metadata.version(wheel["name"])
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{wheel['name']} is not installed")
            continue
        if Version(have) != Version(wheel["version"]):
            problems.append(f"{wheel['name']} {have} found, the bundle's is {wheel['version']}")
        for line in wheel["requires_dist"]:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                found = Version(importlib.metadata.version(req.name))
            except importlib.metadata.PackageNotFoundError:
                problems.append(f"{wheel['name']} needs {line}: not installed")
                continue
            if not req.specifier.contains(found, prereleases=True):
                problems.append(f"{wheel['name']} needs {line}: {found} installed")
    return problems


def download(requirements: list[str], dest: Path, hashes: bool) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as reqs:
        reqs.write("\n".join(requirements) + "\n")
        reqs.flush()
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *PIP_TARGET,
               "--dest", str(dest), "--requirement", reqs.name]
        subprocess.run([*cmd, *(["--require-hashes"] if hashes else [])], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="download the named wheels and write the lock from them")
    lock.add_argument("pins", nargs="+", metavar="NAME==VERSION")
    for name in ("build", "check"):
        sub.add_parser(name).add_argument("dir", type=Path, nargs="?", default=BUNDLE_DIR)
    args = p.parse_args(argv)
    image = read_image()
    if args.command == "lock":
        with tempfile.TemporaryDirectory() as tmp:
            download(args.pins, Path(tmp), hashes=False)
            wheels = [wheel_entry(w) for w in sorted(Path(tmp).glob("*.whl"))]
        if problems := closure_problems(wheels, image):
            print("\n".join(["gpu bundle: not locked:", *problems]), file=sys.stderr)
            return 1
        LOCK.write_text(json.dumps({"python": "3.12", "platform": "manylinux x86_64",
                                    "wheels": wheels}, indent=1) + "\n")
        print(f"{LOCK}: {len(wheels)} wheels")
        return 0
    wheels = read_lock()
    if args.command == "build":
        download([f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}" for w in wheels],
                 args.dir, hashes=True)
    problems = folder_problems(args.dir, wheels) + closure_problems(wheels, image)
    if problems:
        print("\n".join([f"gpu bundle {args.dir}:", *problems]), file=sys.stderr)
        return 1
    size = sum(w["bytes"] for w in wheels) / 2**20
    print(f"{args.dir}: {len(wheels)} wheels, {size:.1f} MiB, complete over the image")
    return 0


if __name__ == "__main__":
    sys.exit(main())

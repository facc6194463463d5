"""The command recipes of the README and the docs, as the suite runs them.

A recipe is a ```` ```bash ```` block right after a ``<!-- recipe: NAME -->`` comment. Its first
lines, up to the first blank line, set the user's values (``BAG=~/bags/patrol``); the rest are
the commands. A test gives every value for the synthetic world and the tiny models and runs the
commands verbatim with bash (``-euo pipefail``: a failing step fails the recipe).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the files whose recipes are run: the README and every docs page
SOURCES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
MARKED = re.compile(r"<!-- recipe: ([\w-]+) -->\n```bash\n(.*?)^```", re.S | re.M)
SETTING = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+)(\s+#.*)?$")


@dataclass(frozen=True)
class Recipe:
    name: str
    settings: dict[str, str]  # name -> the value the docs show
    commands: str


def parse(block: str, name: str) -> Recipe:
    head, blank, commands = block.partition("\n\n")
    lines = head.splitlines()
    matches = [SETTING.match(line) for line in lines]
    assert blank and lines and all(matches), (
        f"recipe {name}: open with NAME=value lines, then a blank line, then the commands")
    return Recipe(name, {m[1]: m[2] for m in matches if m}, commands)


def recipes() -> dict[str, Recipe]:
    """Every marked recipe by name; a name used twice must hold the same block."""
    found: dict[str, Recipe] = {}
    for source in SOURCES:
        for name, block in MARKED.findall(source.read_text()):
            recipe = parse(block, name)
            assert found.setdefault(name, recipe) == recipe, (
                f"recipe {name} differs in {source.relative_to(REPO)}")
    return found


def run(recipe: Recipe, values: dict[str, str], home: Path, timeout: float,
        env: dict[str, str] | None = None) -> str:
    """Run ``recipe`` with ``values`` for its settings (exactly those), ``home`` as ``$HOME``
    and the venv's scripts on the path; returns stdout and stderr, raising on failure. The
    recipe runs in a process group of its own, ended afterwards with whatever it left running
    (a node started with ``&`` by a recipe that failed half-way)."""
    assert set(values) == set(recipe.settings), (
        f"recipe {recipe.name}: the test sets {sorted(values)}, the docs {sorted(recipe.settings)}")
    script = "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items()) + recipe.commands
    venv_bin = str(Path(sys.executable).parent)
    full_env = {**os.environ, **(env or {}), "HOME": str(home),
                "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                # the user's font cache, not one rebuilt in every fresh $HOME
                "MPLCONFIGDIR": os.environ.get("MPLCONFIGDIR",
                                               str(Path.home() / ".cache" / "matplotlib")),
                "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], env=full_env, cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(f"recipe {recipe.name} ran over {timeout:g} s:\n{output}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"recipe {recipe.name} failed ({proc.returncode}):\n{output}"
    return output

"""One GPU check for a lent GPU machine as it is: the released reasoner's latency at its 3B shape
and GRPO steps of the ``paper`` recipe's shape, each reported as ran, failed or unavailable.

The default checks need only the image's torch and transformers and the bundle's TRL
(``bench/gpu_check.sh`` installs it; no index, no hub):

  reasoning/transformers  the released reasoner's reasoning latency at its 3B shape with random
                          weights, transformers bf16: p50 of a 700-token prompt and 160 new
                          tokens (``_reasoner_latency.py``); bound: 160 tokens made from 700
                          with no vision weights loaded
  grpo/trl-generate       three GRPO steps of the ``paper`` recipe's shape with TRL's own
                          generation (``grpo_gpu.py``): steps per minute, the share of sampled
                          weights each step changes (bound: >= 99 % every step, all three
                          steps run), peak GPU memory

``--vllm`` adds, for machines that have vLLM (``_gpu_vllm.py``): reasoning/vllm,
grpo/vllm-colocate and perception/vllm. llama.cpp with CUDA is not part of the check (its source
cannot travel; docs/installation.md builds it on a workstation or a Jetson).

Each check is reported ``ran`` (its figures, and whether it met its bound), ``failed`` (the
error) or ``unavailable`` (why this machine cannot run it). ``ok`` is true only when every check
asked for ran and met its bound, and the checks took at most ``--budget-s`` (300 s). Exit 0 when
ok, 1 when not, 2 on bad usage or a full run without CUDA.

  bash bench/gpu_check.sh [--dry-run] [--json PATH]   # as the GPU machine runs it
  python bench/gpu_check.py --dry-run                 # CPU: each check in its small form
  python bench/gpu_check.py --parts reasoning --vllm  # a subset, the vLLM engines too
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
import _figures  # noqa: E402, F401 - puts the project on the path where it is not installed
import _gpu_bundle  # noqa: E402 - helper modules of this folder
import _gpu_vllm as vllm  # noqa: E402
import _reasoner_latency as reasoner  # noqa: E402

log = logging.getLogger("gpu_check")

#: every check, and whether it needs vLLM
CHECKS = {"reasoning/transformers": False, "grpo/trl-generate": False,
          "reasoning/vllm": True, "grpo/vllm-colocate": True, "perception/vllm": True}
PARTS = ("reasoning", "grpo", "perception")
BUDGET_S = 300.0
GRPO_STEPS = 3
LOG_TAIL = 2000  # characters of a failed subprocess's log kept in the report

Runner = Callable[[], dict[str, Any]]


class Unavailable(Exception):  # noqa: N818 - a status, not an error
    """A check this machine cannot run: the message says why; ``details`` what was prepared."""

    def __init__(self, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.details = details or {}


def attempt(run: Runner) -> dict[str, Any]:
    """One check's entry: ``ran`` with its figures (``bound_met`` among them), ``failed`` with
    the error, or ``unavailable`` with the reason. A failure never stops the other checks."""
    t0 = time.perf_counter()
    try:
        figures = run()
    except Unavailable as exc:
        return {"status": "unavailable", "reason": str(exc), **exc.details}
    except Exception as exc:  # noqa: BLE001 - any failure is this check's result
        log.exception("check failed")
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.perf_counter() - t0, 1)}
    return {"status": "ran", **figures, "seconds": round(time.perf_counter() - t0, 1)}


def run_checks(runners: dict[str, Runner]) -> dict[str, dict[str, Any]]:
    return {name: attempt(run) for name, run in runners.items()}


def all_met(checks: dict[str, dict[str, Any]]) -> bool:
    """Every check asked for ran and met its bound (and at least one was asked for)."""
    return bool(checks) and all(c["status"] == "ran" and c.get("bound_met") is True
                                for c in checks.values())


def asked(parts: list[str], with_vllm: bool) -> list[str]:
    return [name for name, needs_vllm in CHECKS.items()
            if name.split("/")[0] in parts and (with_vllm or not needs_vllm)]


def project_env() -> dict[str, str]:
    """The environment of the check's subprocesses: the project on ``PYTHONPATH`` (where it is
    not installed), the hub offline (nothing can be fetched; a lookup would only wait)."""
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "training")]
    env["PYTHONPATH"] = os.pathsep.join(
        [*(env.get("PYTHONPATH") or "").split(os.pathsep), *paths]).strip(os.pathsep)
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def interpreter_flags() -> list[str]:
    """This interpreter's isolation flags, for the check's subprocesses to run as it does."""
    return [flag for flag, on in (("-S", sys.flags.no_site), ("-s", sys.flags.no_user_site))
            if on]


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_TAIL:] if path.is_file() else ""


class GpuChecks:
    """The checks' runners, on the GPU (``gpu``) or in their small CPU form (the dry run)."""

    def __init__(self, args: argparse.Namespace, gpu: bool) -> None:
        self.args = args
        self.gpu = gpu
        self.work: Path = args.workdir
        self.work.mkdir(parents=True, exist_ok=True)
        self.env = project_env()
        self._checkpoint: Path | None = None
        self._vllm_python: str | None = None

    def runners(self, names: list[str]) -> dict[str, Runner]:
        table: dict[str, Runner] = {
            "reasoning/transformers": self.reasoning_transformers,
            "reasoning/vllm": self.reasoning_vllm,
            "grpo/trl-generate": lambda: self.grpo("none"),
            "grpo/vllm-colocate": lambda: self.grpo("colocate"),
            "perception/vllm": self.perception,
        }
        return {name: table[name] for name in names}

    def checkpoint(self) -> Path:
        """The released layout's random checkpoint: 3B on the GPU, tiny on the CPU; once."""
        if self._checkpoint is None:
            root = self.work / ("embodied-r-3b" if self.gpu else "embodied-r-tiny")
            self._checkpoint = reasoner.write_checkpoint(
                root, tiny=not self.gpu, device="cuda" if self.gpu else "cpu")
        return self._checkpoint

    @property
    def vllm_interpreter(self) -> str:
        """The interpreter meant to have vLLM: ``--vllm-python``, else this one."""
        return self.args.vllm_python or sys.executable

    def vllm_python(self, details: dict[str, Any]) -> str:
        """:attr:`vllm_interpreter` once it is known to import vLLM; else :class:`Unavailable`
        with ``details`` (what was prepared)."""
        python = self.vllm_interpreter
        if self._vllm_python != python:
            if not Path(python).exists() or not vllm.has_vllm(python, self.env):
                raise Unavailable(f"vLLM is not installed on this machine ({python} cannot "
                                  "import it; --vllm-python names one that can)", details)
            self._vllm_python = python
        return python

    def reasoning_transformers(self) -> dict[str, Any]:
        checkpoint = self.checkpoint()
        ids = reasoner.prompt_ids(checkpoint)
        repeats = self.args.repeats if self.gpu else 1
        result = reasoner.transformers_latency(checkpoint, ids, repeats, self.gpu)
        return {**result, "checkpoint": str(checkpoint), "prompt_tokens": len(ids),
                "shape": reasoner.shape_counts(),  # the 3B shape's, also in the dry run
                "bound_met": reasoner.meets_bound(result, len(ids))}

    def reasoning_vllm(self) -> dict[str, Any]:
        checkpoint = self.checkpoint()
        port = self.args.port + 1
        cmd = reasoner.vllm_serve_command(self.vllm_interpreter, checkpoint, port, 0.3)
        self.vllm_python({"serve": cmd})
        if not self.gpu:
            return {"serve": cmd, "bound_met": True}
        ids = reasoner.prompt_ids(checkpoint)
        with vllm.vllm_server(cmd, self.env, port, self.work / "vllm-3b.log") as url:
            result = reasoner.vllm_latency(url, ids, self.args.repeats)
        return {**result, "prompt_tokens": len(ids),
                "bound_met": reasoner.meets_bound(result, len(ids))}

    def grpo(self, mode: str) -> dict[str, Any]:
        """``grpo_gpu.py`` in its own process (``--dry-run`` on the CPU: the trainer's arguments
        and imports), as the run would start it."""
        out, log_file = self.work / f"grpo-{mode}.json", self.work / f"grpo-{mode}.log"
        out.unlink(missing_ok=True)
        args = [str(BENCH / "grpo_gpu.py"), "--steps", str(GRPO_STEPS), "--vllm", mode,
                "--min-steps-per-minute", "0", "--json", str(out),
                *([] if self.gpu else ["--dry-run"])]
        python = sys.executable
        if mode == "colocate":
            python = self.vllm_python({"command": [self.vllm_interpreter, *args]})
        cmd = [python, *(interpreter_flags() if python == sys.executable else []), *args]
        with log_file.open("w") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env).returncode
        if not out.is_file():
            raise RuntimeError(f"grpo_gpu.py exited {rc} with no result; its log ends: "
                               f"{_tail(log_file)}")
        result = json.loads(out.read_text())
        if not self.gpu:
            return {"command": cmd, "unknown": result["unknown"], "kwargs": result["kwargs"],
                    "bound_met": rc == 0 and not result["unknown"]}
        changed = result.get("weights_changed_per_step", [])
        return {**result, "command": cmd, "rc": rc,
                "bound_met": bool(result["bound"]["ok"]) and len(changed) == GRPO_STEPS}

    def perception(self) -> dict[str, Any]:
        model = vllm.build_vl_model_dir(self.work / vllm.SERVED_NAME)
        if problems := vllm.check_vl_model_dir(Path(model["dir"])):
            raise RuntimeError(f"the served model directory: {'; '.join(problems)}")
        vllm.validate_perception_configs(self.args.port, self.args.vlm_tokens,
                                         self.work / "cache")
        cmd = vllm.serve_command(self.vllm_interpreter, Path(model["dir"]), self.args.port,
                                 self.args.vllm_memory)
        self.vllm_python({"model": model, "serve": cmd})
        if not self.gpu:
            return {"model": model, "serve": cmd, "bound_met": True}
        with vllm.vllm_server(cmd, self.env, self.args.port,
                              self.work / "vllm-serve.log") as url:
            result = vllm.perception_latency(url, self.args.vlm_tokens, 0.5, self.work / "cache")
        return {**result, "model": model, "serve": cmd, "bound_met": result["ok"]}


def environment() -> dict[str, Any]:
    """What ran the check: the interpreter, the versions that matter, where the project was
    imported from (and whether it is installed), and where the environment misses the
    bundle's requirements."""
    import importlib.metadata

    import embodied_r_ros
    import embodied_r_training

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    hooks = [getattr(f, "__module__", type(f).__module__) for f in sys.meta_path]
    project = {m.__name__: str(Path(m.__file__ or "").parent)
               for m in (embodied_r_ros, embodied_r_training)}
    return {
        "python": sys.version.split()[0], "executable": sys.executable,
        "versions": {name: version(name) for name in (
            "torch", "transformers", "trl", "datasets", "accelerate", "peft", "pydantic",
            "huggingface-hub", "tokenizers")},
        "project": project,
        "project_installed": any("__editable__" in h for h in hooks) or any(
            not Path(p).is_relative_to(REPO) for p in project.values()),
        "bundle_problems": _gpu_bundle.installed_problems(_gpu_bundle.read_lock()),
    }


def run(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    import torch

    gpu = not args.dry_run
    report: dict[str, Any] = {"check": "gpu_check", "dry_run": args.dry_run,
                              "asked": names, "environment": environment()}
    if gpu and not torch.cuda.is_available():
        report.update(error="no CUDA device (--dry-run checks on the CPU)", ok=False)
        return report
    report["device"] = torch.cuda.get_device_name(0) if gpu else "cpu"
    start = time.perf_counter()
    report["checks"] = run_checks(GpuChecks(args, gpu).runners(names))
    report["check_s"] = round(time.perf_counter() - start, 1)
    report["budget_s"] = args.budget_s
    within = args.dry_run or report["check_s"] <= args.budget_s
    report["ok"] = all_met(report["checks"]) and within
    return report


def summary(name: str, r: dict[str, Any]) -> str:
    if r["status"] == "unavailable":
        return r["reason"]
    if r["status"] == "failed":
        return r["error"].splitlines()[0][:150]
    if "p50_s" in r:
        return (f"p50 {r['p50_s']} s, {r['new_tokens']} tokens from {r['prompt_tokens']}"
                + (f", peak {r['peak_gpu_gib']} GiB" if "peak_gpu_gib" in r else ""))
    if "steps_per_minute" in r:
        changed = r.get("weights_changed_per_step") or [0.0]
        return (f"{r['steps_per_minute']} steps/min, weights changed >= {min(changed):.4f} a "
                f"step, peak {r.get('peak_gpu_memory_gib')} GiB")
    if "rows" in r:
        last = r["rows"][-1]
        return (f"{last['key_frames']} key frames at once: {last['concurrent_over_single_call']}"
                " x one call (<= 2)")
    if "unknown" in r:
        return f"GRPOConfig takes every argument: {not r['unknown']}"
    return "prepared"


def print_table(report: dict[str, Any]) -> None:
    if "error" in report:
        print(f"gpu_check: {report['error']}")
        return
    print(f"GPU check on {report['device']}{' (dry run)' if report['dry_run'] else ''}: "
          f"{report['check_s']} s (budget {report['budget_s']:g} s)")
    for name, r in report["checks"].items():
        status = r["status"] + ("" if r["status"] != "ran" else
                                ", met" if r.get("bound_met") else ", MISSED")
        print(f"{name:>22s} | {status:<12s} | {summary(name, r)}")
    print("OK" if report["ok"] else "NOT OK")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true",
                   help="each check in its small CPU form: a tiny checkpoint, the trainer's "
                        "arguments and imports, the vLLM plans")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/gpu-check"))
    p.add_argument("--parts", type=lambda text: text.split(","), default=list(PARTS),
                   help=f"the parts to check, comma-separated (default {','.join(PARTS)})")
    p.add_argument("--vllm", action="store_true",
                   help="also the vLLM engines (reasoning, GRPO rollouts, perception)")
    p.add_argument("--vllm-python", help="the python of an environment that has vLLM")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--vllm-memory", type=float, default=0.5,
                   help="vllm serve's share of GPU memory for the perception part")
    p.add_argument("--vlm-tokens", type=int, default=64, help="new tokens per VLM reply")
    p.add_argument("--budget-s", type=float, default=BUDGET_S)
    p.add_argument("--repeats", type=int, default=5, help="timed runs per reasoning engine")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args(argv)
    if unknown := sorted(set(args.parts) - set(PARTS)):
        p.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    names = asked(args.parts, args.vllm)
    if not names:
        p.error(f"--parts {','.join(args.parts)}: no check without --vllm")
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    report = run(args, names)
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    if "error" in report:
        return 2
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

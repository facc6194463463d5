"""The GPU check runs on a lent GPU machine as it is: through ``bench/gpu_check.sh`` with the
project not installed, its bundle complete over the machine's image, and an honest status."""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _bench(name: str) -> ModuleType:
    path = ROOT / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    """``bash bench/gpu_check.sh --dry-run --vllm`` as the GPU machine runs it: the project only
    on ``PYTHONPATH``. This interpreter runs it with ``-S`` (no site-packages, so no editable
    install of the project), its own packages standing in for the bundle's (``--site``)."""
    work = tmp_path_factory.mktemp("gpu-check")
    out = work / "report.json"
    env = {**os.environ, "PYTHON": f"{sys.executable} -S", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        ["bash", "bench/gpu_check.sh", "--dry-run", "--vllm", "--site",
         sysconfig.get_paths()["purelib"], "--json", str(out), "--workdir", str(work / "w")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.is_file(), proc.stderr[-3000:]
    return proc.returncode, json.loads(out.read_text()), proc.stdout


def test_the_dry_run_runs_through_the_script_with_the_project_not_installed(
        dry_run: tuple[int, dict[str, Any], str]) -> None:
    rc, report, stdout = dry_run
    env = report["environment"]
    assert env["project_installed"] is False
    assert env["project"] == {"embodied_r_ros": str(ROOT / "embodied_r_ros"),
                              "embodied_r_training": str(ROOT / "training/embodied_r_training")}
    assert report["asked"] == list(_bench("gpu_check").CHECKS)  # --vllm: every check
    checks = report["checks"]
    # the default checks ran in their small form and met their bounds
    reasoning = checks["reasoning/transformers"]
    assert (reasoning["status"], reasoning["bound_met"]) == ("ran", True), reasoning
    assert reasoning["prompt_tokens"] == 700 and reasoning["new_tokens"] == 160
    assert reasoning["visual_params"] == 0 and Path(reasoning["checkpoint"]).name == "Weight_1"
    assert reasoning["shape"] == {"text_params": 3_085_938_688, "vision_params": 668_684_288}
    grpo = checks["grpo/trl-generate"]
    assert (grpo["status"], grpo["bound_met"], grpo["unknown"]) == ("ran", True, []), grpo
    assert "-S" in grpo["command"] and "--dry-run" in grpo["command"]  # run as the check runs
    kwargs = grpo["kwargs"]
    assert (kwargs["bf16"], kwargs["learning_rate"], kwargs["weight_decay"]) == (True, 5e-7, 0.1)
    assert (kwargs["num_generations"], kwargs["gradient_accumulation_steps"]) == (8, 4)
    assert kwargs["max_steps"] == 3 and not kwargs.get("use_vllm", False)
    # the vLLM checks: prepared, and unavailable where vLLM is not installed, so not ok
    perception, served = checks["perception/vllm"], checks["reasoning/vllm"]
    config = json.loads((Path(perception["model"]["dir"]) / "config.json").read_text())
    assert config["text_config"]["hidden_size"] == 3584  # Qwen2.5-VL-7B's shape
    assert not list(Path(perception["model"]["dir"]).glob("*.safetensors"))  # dummy weights
    serve = served["serve"]
    assert serve[serve.index("--load-format") + 1] == "dummy"
    assert json.loads(serve[serve.index("--limit-mm-per-prompt") + 1]) == {"image": 0, "video": 0}
    assert serve[serve.index("--model") + 1] == reasoning["checkpoint"]
    if HAS_VLLM:
        pytest.skip("vLLM is installed here: the unavailable path is not taken")
    for name in ("perception/vllm", "reasoning/vllm", "grpo/vllm-colocate"):
        assert checks[name]["status"] == "unavailable", name
        assert "vLLM is not installed on this machine" in checks[name]["reason"]
    assert report["ok"] is False and rc == 1
    assert "NOT OK" in stdout and "unavailable" in stdout


def test_ok_only_when_every_check_asked_for_ran_and_met_its_bound() -> None:
    bench = _bench("gpu_check")

    def unavailable() -> dict[str, Any]:
        raise bench.Unavailable("vLLM is not installed on this machine", {"serve": ["vllm"]})

    def broken() -> dict[str, Any]:
        raise RuntimeError("CUDA out of memory")

    checks = bench.run_checks({"met": lambda: {"bound_met": True, "p50_s": 1.0},
                               "missed": lambda: {"bound_met": False},
                               "vllm": unavailable, "broken": broken})
    assert checks["met"]["status"] == "ran" and checks["met"]["p50_s"] == 1.0
    assert checks["vllm"] == {"status": "unavailable", "serve": ["vllm"],
                              "reason": "vLLM is not installed on this machine"}
    assert checks["broken"]["status"] == "failed"
    assert checks["broken"]["error"] == "RuntimeError: CUDA out of memory"
    assert bench.all_met({"met": checks["met"]}) is True
    for other in ("missed", "vllm", "broken"):
        assert bench.all_met({"met": checks["met"], other: checks[other]}) is False, other
    assert bench.all_met({}) is False
    assert bench.asked(["reasoning", "grpo"], with_vllm=False) == [
        "reasoning/transformers", "grpo/trl-generate"]
    for argv in (["--parts", "bogus"], ["--parts", "perception"]):  # perception needs --vllm
        with pytest.raises(SystemExit) as exit_:
            bench.main(["--dry-run", *argv])
        assert exit_.value.code == 2


def test_the_locked_bundle_is_complete_over_the_image_and_small() -> None:
    bundle = _bench("_gpu_bundle")
    lock, image = bundle.read_lock(), bundle.read_image()
    assert bundle.closure_problems(lock, image) == []
    assert {"trl", "datasets", "pydantic"} <= {w["name"] for w in lock}
    assert "torch" in image and str(image["transformers"]) == "5.17.0"
    # the recorded Requires-Dist is the wheels' own: the suite's installed copies of the same
    # versions say the same (CI has no bundle to read)
    compared = set()
    for wheel in lock:
        try:
            installed = importlib.metadata.version(wheel["name"])
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed == wheel["version"]:
            assert (importlib.metadata.requires(wheel["name"]) or []) == wheel["requires_dist"]
            compared.add(wheel["name"])
    assert {"trl", "datasets", "pydantic"} <= compared
    folder = ROOT / "build" / "gpu-bundle"
    if folder.is_dir():  # made here by make gpu-bundle: the very files of the lock
        assert bundle.folder_problems(folder, lock) == []


def test_an_incomplete_bundle_is_named() -> None:
    bundle = _bench("_gpu_bundle")
    lock, image = bundle.read_lock(), bundle.read_image()
    broken = copy.deepcopy(lock)
    trl = next(w for w in broken if w["name"] == "trl")
    trl["requires_dist"] += ["rich-but-absent>=1", "transformers>=9", "wandb; extra == 'log'"]
    broken.append({**trl, "version": "1.15.0"})
    broken.append({"name": "vllm", "version": "0.30.0", "bytes": 30 * 2**20,
                   "requires_dist": []})
    problems = bundle.closure_problems(broken, image)
    assert "trl needs rich-but-absent>=1: in neither bundle nor image" in problems
    assert "trl needs transformers>=9: the image has 5.17.0" in problems
    assert "trl is in the bundle 2 times" in problems
    assert "vllm must not be in the bundle" in problems
    assert any(p.startswith("the bundle is ") and "over 24 MiB" in p for p in problems)
    assert not any("wandb" in p for p in problems)  # an extra nobody asked for
    assert bundle.closure_problems([w for w in lock if w["name"] != "dill"], image) == [
        "datasets needs dill<0.4.2,>=0.3.0: in neither bundle nor image",
        "multiprocess needs dill>=0.4.1: in neither bundle nor image"]


def test_the_script_stops_with_one_line_without_a_bundle_or_a_report_path(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    cases = {("--dry-run",): "give --json PATH (or set OUT)",
             ("--dry-run", "--json", str(tmp_path / "r.json")): "no wheels in"}
    for argv, message in cases.items():
        proc = subprocess.run(["bash", "bench/gpu_check.sh", *argv], cwd=ROOT, text=True,
                              env={**env, "GPU_BUNDLE": str(tmp_path / "none")},
                              capture_output=True, timeout=30)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert message in proc.stderr
    assert not (tmp_path / "r.json").exists()

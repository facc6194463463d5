"""The bench scripts exit non-zero when their bound is missed (run tiny, with a bound that no
measurement can meet, and with one that every measurement meets), write what they measured with
their command, and ``make bench``'s runner runs what applies to the machine and skips the rest
with a line saying why."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
Loader = Callable[[str], ModuleType]


@pytest.fixture
def bench_module(monkeypatch: pytest.MonkeyPatch) -> Loader:
    """Loads ``bench/<name>.py`` as its script would run: its folder first on ``sys.path``
    (and the module in ``sys.modules`` while the test runs, as dataclasses need)."""
    monkeypatch.syspath_prepend(str(BENCH))

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        return module

    return load


def test_keyframes_bench_exits_1_over_its_ratio(
    bench_module: Loader, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bench = bench_module("keyframes")
    assert bench.TARGET_RATIO == 1.3
    out = tmp_path / "kf.json"
    args = ["--frames", "3", "--repeat", "1", "--max-ratio", "0.01"]
    assert bench.main([*args, "--json", str(out)]) == 1
    assert "MISSED: bound 0.01" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["command"] == "bench/keyframes.py " + " ".join(args)
    assert record["settings"]["max_ratio"] == 0.01
    assert record["machine"]["cpus"] >= 1
    assert record["figures"]["missed"] is True
    assert set(record["figures"]["per_input"]) == {"640x480", "1280x720"}


def test_egomotion_bench_exits_1_below_its_accuracy(bench_module: Loader, tmp_path: Path) -> None:
    bench = bench_module("egomotion_accuracy")
    args = ["--seeds", "1", "--frames", "100", "--resolution", "320x240"]
    out = tmp_path / "ego.json"
    assert bench.main([*args, "--min-accuracy", "1.01", "--json", str(out)]) == 1
    summary = json.loads(out.read_text())["figures"]
    assert summary["missed"] == ["segment", "keyframe"]
    assert summary["config"]["min_accuracy"] == 1.01
    assert bench.main([*args, "--min-accuracy", "0.0", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["figures"]["missed"] == []


def test_the_runner_knows_every_benchmark_script(bench_module: Loader) -> None:
    """A new script in bench/ is a benchmark of ``make bench`` or a helper module (``_*.py``);
    every registered benchmark's script exists."""
    runner = bench_module("run_all")
    registered = {b.name for b in runner.BENCHMARKS}
    scripts = {p.stem for p in BENCH.glob("*.py") if not p.stem.startswith("_")} - {"run_all"}
    assert registered == scripts
    assert all(need in runner.REQUIREMENTS for b in runner.BENCHMARKS for need in b.needs)


def test_the_runner_skips_gpu_benchmarks_without_cuda(
    bench_module: Loader, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = bench_module("run_all")
    monkeypatch.setitem(runner.REQUIREMENTS, "cuda", (lambda: False, "a CUDA GPU"))
    monkeypatch.setitem(runner.REQUIREMENTS, "ros", (lambda: True, "ROS 2"))
    assert runner.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "skip grpo_gpu: needs a CUDA GPU" in lines
    assert "skip gpu_check: needs a CUDA GPU" in lines
    assert any(line.startswith("run  keyframes:") for line in lines)
    assert any(line.startswith("run  ros_ingest:") for line in lines)


def test_the_runner_runs_a_benchmark_and_fails_on_a_crash(
    bench_module: Loader, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A quick run writes the benchmark's figures under --out; a missed bound fails a full run,
    and only a crash fails a quick one."""
    runner = bench_module("run_all")
    assert runner.main(["--quick", "--only", "keyframes", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "keyframes.json").read_text())["bench"] == "keyframes"
    codes = iter([1, 1, 2])
    monkeypatch.setattr(runner, "run", lambda bench, quick, out: (next(codes), 0.0))
    assert runner.main(["--only", "keyframes", "--out", str(tmp_path)]) == 1
    assert runner.main(["--quick", "--only", "keyframes", "--out", str(tmp_path)]) == 0
    assert runner.main(["--quick", "--only", "keyframes", "--out", str(tmp_path)]) == 1
    with pytest.raises(SystemExit):
        runner.main(["--only", "no_such_bench"])


def test_the_horizon_bench_reads_a_count_per_horizon(bench_module: Loader) -> None:
    """``--reasoner short=5,long=-1``: five short questions spread over the categories, every
    long one, no medium one; a horizon it does not know is refused by name."""
    import argparse

    bench = bench_module("memory_horizons")
    counts = bench.reasoner_counts("short=2,long=-1")
    assert counts == {"short": 2, "medium": 0, "long": -1}
    assert bench.reasoner_counts("3") == {"short": 3, "medium": 3, "long": 3}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown horizon 'later'"):
        bench.reasoner_counts("later=2")
    rows = [{"id": f"{h}{i}", "horizon": h, "category": c}
            for h in ("short", "medium", "long") for i, c in enumerate("aabb")]
    assert bench.reasoner_subset(rows, counts) == {"short0", "short2", "long0", "long1",
                                                   "long2", "long3"}


def test_grounding_cost_bench_counts_each_way_of_asking(
    bench_module: Loader, tmp_path: Path, tiny_models_dir: Path
) -> None:
    bench = bench_module("grounding_cost")
    out = tmp_path / "grounding.json"
    assert bench.main(["--frames", "2", "--repeat", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())["figures"]
    modes = figures["modes"]
    assert [modes[m]["vlm_calls"] for m in ("off", "request", "reply")] == [2, 4, 2]
    # request sends each key frame once more; reply sends what off sends, with a longer prompt
    assert modes["request"]["images_sent"] == modes["off"]["images_sent"] + 2
    assert modes["reply"]["images_sent"] == modes["off"]["images_sent"]
    assert modes["off"]["longest_reply_tokens"] < modes["reply"]["longest_reply_tokens"]
    assert figures["image_tokens"] == {"tiny": 54, "qwen25": 391} and figures["ok"]


def test_the_quantisation_bench_sums_up_the_questions_answered_so_far(
        bench_module: Loader) -> None:
    import argparse

    bench = bench_module("quantization")
    rows = [{"solution": s} for s in "ABC"]
    out = {"float16": {"gguf": "F16", "latency_s": [1.0, 3.0], "answers": ["A", "B"]},
           "q4_0": {"gguf": "Q4_0", "latency_s": [0.5, 0.5], "answers": ["A", "C"]}}
    args = argparse.Namespace(max_lost=0, default="float16", threads=1)
    figures = bench.summarise(out, ["float16", "q4_0"], rows[:2], args)
    assert figures["questions"] == 2
    q4 = figures["builds"]["q4_0"]
    assert (q4["same_answers"], q4["lost"], q4["correct"], q4["fit_for_default"]) == (
        1, 1, 1, False)
    assert q4["p50_ratio"] == pytest.approx(0.25)
    assert figures["builds"]["float16"]["fit_for_default"] is True

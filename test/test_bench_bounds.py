"""The bench scripts exit non-zero when their bound is missed (run tiny, with a bound that no
measurement can meet, and with one that every measurement meets)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_keyframes_bench_exits_1_over_its_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench("keyframes")
    assert bench.TARGET_RATIO == 1.3
    assert bench.main(["--frames", "3", "--repeat", "1", "--max-ratio", "0.01"]) == 1
    assert "MISSED: bound 0.01" in capsys.readouterr().out


def test_egomotion_bench_exits_1_below_its_accuracy(tmp_path: Path) -> None:
    bench = _bench("egomotion_accuracy")
    args = ["--seeds", "1", "--frames", "100", "--resolution", "320x240"]
    out = tmp_path / "ego.json"
    assert bench.main([*args, "--min-accuracy", "1.01", "--json", str(out)]) == 1
    summary = json.loads(out.read_text())
    assert summary["missed"] == ["segment", "keyframe"]
    assert summary["config"]["min_accuracy"] == 1.01
    assert bench.main([*args, "--min-accuracy", "0.0", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["missed"] == []

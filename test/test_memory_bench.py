"""The memory benchmark exits 1 when a bound is missed and records what it ran (run tiny, with
an ingest bound no measurement can meet, and with the real bounds)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
TINY = ["--stores", "sqlite", "--ingest-frames", "5", "--hours", "0.02", "--repeat", "1",
        "--questions", "3", "--no-embedder"]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_memory_store", BENCH / "memory_store.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_memory_bench_exits_1_over_its_ingest_bound(
        bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert bench.main([*TINY, "--max-ingest", "1e-9", "--json", str(out)]) == 1
    assert "MISSED: bound" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["command"] == "bench/memory_store.py " + " ".join([*TINY, "--max-ingest",
                                                                     "1e-9"])
    figures = record["figures"]["sqlite"]
    assert figures["ingest_fts"]["frames"] == 5 and figures["0.02h"]["rows"] == 72
    assert figures["0.02h"]["fts"]["queries"] == 3 and figures["0.02h"]["bytes_on_disk"] > 0


def test_the_memory_bench_meets_its_bounds_on_a_small_memory(bench: ModuleType) -> None:
    assert bench.INGEST_BOUND == 0.02 and bench.P50_BOUNDS == {1.0: 0.1, 10.0: 0.3}
    assert bench.main(TINY) == 0

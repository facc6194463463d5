"""``embodied-r-train mix``: a training set of so many supported rows of each built dataset,
drawn evenly over categories and shuffled together (rehearsal while fine-tuning)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from embodied_r_ros.core.reasoning import parse_options
from embodied_r_training.cli import main
from embodied_r_training.data.dataset_files import load_manifest, load_rows, write_table
from embodied_r_training.data.rationales import rationale
from embodied_r_training.data.splits import Splits


@pytest.fixture(scope="module")
def dataset(world_12: Path) -> Path:
    """A small rendered world's questions, built by the real ``build``."""
    return world_12 / "d"


def _wrong(row: dict) -> dict:
    """``row`` with another option as its solution: its think text is then unsupported."""
    other = next(k for k, _ in parse_options(row["options"]) if k != row["solution"])
    return {**row, "solution": other}


def _part(dataset: Path, out: Path, tag: str, **manifest: object) -> Path:
    """Every row of ``dataset`` as the training split of a new dataset, ids tagged ``tag``;
    the first row's solution is made one its think text does not support."""
    rows = [{**r, "id": f"{tag}-{r['id']}"} for r in load_rows(dataset)]
    rows[0] = _wrong(rows[0])
    write_table(out, rows, Splits(train=[r["id"] for r in rows], val=[], test=[]),
                {**load_manifest(dataset), **manifest})
    return out


@pytest.fixture
def parts(dataset: Path, tmp_path: Path) -> tuple[Path, Path]:
    return _part(dataset, tmp_path / "a", "a"), _part(dataset, tmp_path / "b", "b")


def test_mix_takes_supported_rows_of_each_part_evenly_over_categories(
        parts: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = parts
    supported = [r for r in load_rows(a) if rationale(r).supported]
    categories = Counter(r["category"] for r in supported)
    unsupported = load_rows(a)[0]
    assert len(categories) >= 3 and not rationale(unsupported).supported
    n = len(categories)
    out = tmp_path / "mixed"
    assert main(["mix", "--data", f"A={a}", "--data", f"B={b}", "--rows", str(n),
                 "--out", str(out)]) == 0
    assert f"{2 * n} training rows mixed; A {n}, B {n}" in capsys.readouterr().out
    train = load_rows(out, "train")
    assert not load_rows(out, "val") and not load_rows(out, "test")
    for tag in ("a", "b"):
        mine = [r for r in train if r["id"].startswith(f"{tag}-")]
        # one row of each category: evenly, and only rows whose think text is supported
        assert Counter(r["category"] for r in mine) == Counter(dict.fromkeys(categories, 1))
        assert all(rationale(r).supported for r in mine)
    # shuffled together, not one part after the other
    assert [r["id"][0] for r in train] != sorted(r["id"][0] for r in train)
    manifest = load_manifest(out)
    assert manifest["kind"] == "mix" and [p["rows"] for p in manifest["parts"]] == [n, n]
    assert manifest["frame_layout"] == load_manifest(a)["frame_layout"]
    # the same seed draws the same rows in the same order; more rows than are supported: all
    again = tmp_path / "again"
    assert main(["mix", "--data", f"A={a}", "--data", f"B={b}", "--rows", str(n),
                 "--out", str(again)]) == 0
    assert (again / "train.jsonl").read_text() == (out / "train.jsonl").read_text()
    every = tmp_path / "every"
    assert main(["mix", "--data", str(a), "--rows", "1000", "--out", str(every)]) == 0
    taken = load_rows(every, "train")
    assert len(taken) == len(supported) and unsupported["id"] not in {r["id"] for r in taken}


def test_mix_refuses_bad_input_with_one_line(parts: tuple[Path, Path], dataset: Path,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = parts
    other = _part(dataset, tmp_path / "other", "c", frame_layout="plain")
    twin = _part(dataset, tmp_path / "twin", "a")  # the same ids as a
    cases = [
        (["--data", str(a), "--data", str(a), "--rows", "2"], "its own label"),
        (["--data", str(a), "--data", str(twin), "--rows", "2"], "row ids repeat"),
        (["--data", str(a), "--data", str(other), "--rows", "2"], "differ in frame_layout"),
        (["--data", str(a), "--rows", "0"], "--rows must be at least 1"),
        (["--data", str(a), "--rows", "2", "--out", str(a)], "already holds a dataset"),
    ]
    for k, (args, why) in enumerate(cases):
        if "--out" not in args:
            args = [*args, "--out", str(tmp_path / f"out{k}")]
        capsys.readouterr()
        assert main(["mix", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err
        assert not (tmp_path / f"out{k}" / "data.jsonl").exists()
    assert json.loads((a / "splits.json").read_text())["train"]  # the part is untouched

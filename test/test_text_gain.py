"""The memory's gain is paired by question across eval directories, per world and category,
and its pooled interval resamples worlds, whose questions share their few objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_r_ros.intervals import paired_difference
from lab.analysis.text_gain import (
    GainError,
    clustered_difference,
    load_hits,
    main,
    text_gains,
    world_of,
)


def _write(run: Path, text: str, model: str, answers: dict[str, tuple[str, bool]]) -> None:
    """Predictions as ``eval`` writes them for a dataset labelled ``text``."""
    run.mkdir(parents=True, exist_ok=True)
    with (run / f"predictions-{text}-{model}.jsonl").open("w", encoding="utf-8") as f:
        for question, (category, correct) in answers.items():
            f.write(json.dumps({"id": f"{question}-{text}", "category": category,
                                "answer": "A", "correct": correct}) + "\n")


@pytest.fixture
def two_runs(tmp_path: Path) -> list[Path]:
    """World 5 in one run: the memory right in 3 of 4, the window in 1 (both on q2). World 6
    in another: each text right once, on different questions."""
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "memory", "m", {"long-seed5-q1": ("closer", True), "long-seed5-q2": ("seen", True),
                              "long-seed5-q3": ("seen", True), "long-seed5-q4": ("seen", False)})
    _write(a, "window", "m", {"long-seed5-q1": ("closer", False), "long-seed5-q2": ("seen", True),
                              "long-seed5-q3": ("seen", False), "long-seed5-q4": ("seen", False)})
    _write(b, "memory", "m", {"long-seed6-q1": ("closer", True), "long-seed6-q2": ("seen", False)})
    _write(b, "window", "m", {"long-seed6-q1": ("closer", False), "long-seed6-q2": ("seen", True)})
    return [a, b]


def test_questions_pair_across_runs_and_group_by_world_and_category(two_runs: list[Path]) -> None:
    hits = load_hits(two_runs, "m", "memory", "window")
    assert [h.question for h in hits][:2] == ["long-seed5-q1", "long-seed5-q2"]
    gains = {g.group: g for g in text_gains(hits)}
    seed5, seed6, pooled = gains["long-seed5"], gains["long-seed6"], gains["pooled"]
    assert (seed5.n, seed5.a_pct, seed5.b_pct, seed5.gain) == (4, 75.0, 25.0, 50.0)
    assert (seed5.a_only, seed5.b_only) == (2, 0)
    assert (seed6.gain, seed6.a_only, seed6.b_only) == (0.0, 1, 1)
    assert gains["closer"].gain == 100.0 and gains["seen"].n == 4
    assert pooled.n == 6 and pooled.gain == pytest.approx(100.0 * 2 / 6)
    assert pooled.worlds == 2 and pooled.world_low is not None
    assert seed5.world_low is None  # only the pooled row resamples worlds


def test_resampling_worlds_widens_the_interval_when_a_world_decides_it() -> None:
    """Ten questions the memory wins in one world, ten it ties in another: over questions the
    gain looks settled near 0.5, over worlds it could be anything from 0 to 1."""
    a = [1.0] * 10 + [0.0] * 10
    b = [0.0] * 20
    worlds = ["w1"] * 10 + ["w2"] * 10
    _, q_low, q_high = paired_difference(a, b)
    diff, w_low, w_high = clustered_difference(a, b, worlds)
    assert diff == 0.5 and 0.2 < q_low < q_high < 0.8
    assert (w_low, w_high) == (0.0, 1.0)
    with pytest.raises(ValueError, match="differ in length"):
        clustered_difference(a, b, worlds[:-1])
    mixed = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    one_each = [f"q{i}" for i in range(len(mixed))]
    assert clustered_difference(mixed, b[:8], one_each) == paired_difference(mixed, b[:8])


def test_world_names_come_from_the_question_ids() -> None:
    assert world_of("long-seed23-q131") == "long-seed23"
    assert world_of("odd-id") == "odd-id"


def test_a_question_from_one_text_only_or_a_missing_model_is_a_one_line_error(
    two_runs: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _write(two_runs[1], "window", "m", {"long-seed6-q1": ("closer", False)})
    with pytest.raises(GainError, match="from one text only .*long-seed6-q2"):
        load_hits(two_runs, "m", "memory", "window")
    assert main([str(two_runs[0]), "--model", "other"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no predictions of model 'other' on text 'memory'" in err[0]
    assert main([str(two_runs[0]), "--model", "m", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[-1]["group"] == "pooled" and rows[-1]["gain"] == 50.0

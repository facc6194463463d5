"""Training rows from a long world: the replay through the robot's memory, the two texts, the
splits by world, and the cold-start think texts of memory questions."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from embodied_r_ros.core.reasoning import parse_options
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.rationales import rationale
from embodied_r_training.data.row_records import record_of
from embodied_r_training.evaluation.scoring import baseline_completions
from embodied_r_training.rewards import prompt_text
from lab.long_world import oracle as long_oracle
from lab.long_world.oracle import solve
from lab.long_world.rationales import answer_lines
from lab.long_world.rows import write_sets


@pytest.fixture(scope="module")
def rows(long_world_rows: list[dict]) -> list[dict]:
    """The session's rows, copied: a test here may change its rows."""
    return copy.deepcopy(long_world_rows)


def test_every_question_gives_a_memory_row_and_a_window_row(rows: list[dict]) -> None:
    by_question: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_question.setdefault(r["source"], {})[r["text_source"]] = r
    assert len(by_question) >= 20
    assert all(set(pair) == {"memory", "window"} for pair in by_question.values())
    for pair in by_question.values():
        memory, window = pair["memory"], pair["window"]
        assert memory["solution"] == window["solution"] and memory["id"] != window["id"]
        text = prompt_text(memory["prompt"])
        assert "s before the last key frame" in text and memory["question_block"] in text


def test_sets_split_by_world_and_horizon(rows: list[dict], tmp_path: Path) -> None:
    other = [{**r, "id": r["id"].replace("seed5", "seed9"), "scene": "long-seed9"} for r in rows]
    info = write_sets([*rows, *other], ["long-seed9"], tmp_path, test_horizons=["medium"])
    for source in ("memory", "window"):
        test = load_rows(tmp_path / source, "test")
        train = load_rows(tmp_path / source, "train")
        assert test and all(r["scene"] == "long-seed9" and r["horizon"] == "medium"
                            and r["text_source"] == source for r in test)
        assert train and all(r["scene"] == "long-seed5" for r in train)
        assert info[source] == {"train": len(train), "test": len(test)}
    manifest = json.loads((tmp_path / "memory" / "manifest.json").read_text())
    assert manifest["text_source"] == "memory" and manifest["test_horizons"] == ["medium"]


def test_a_memory_rationale_quotes_the_places_lines_it_rests_on_and_concludes_the_solution(
        rows: list[dict]) -> None:
    memory = [r for r in rows if r["text_source"] == "memory"]
    supported = 0
    for r in memory:
        why = rationale(r)
        text = dict(parse_options(r["options"]))[r["solution"]]
        assert why.think.startswith("Options: ")
        assert why.think.endswith(f"So: {text} = {r['solution']}.")
        assert why.answer == f"{r['solution']}. {text}"
        found = solve(r)
        assert why.supported == (found.letter == r["solution"])
        supported += why.supported
        # what the think text quotes is a line of the prompt, for the reasoner to copy
        lines = answer_lines(record_of(r), r["category"])
        assert lines and all(f"\n{line}\n" in prompt_text(r["prompt"]) for line in lines)
        assert all(line.removeprefix("- ") in why.think for line in lines)
    # an object seen along fewer than three agreeing rays is no place: on the small world the
    # memory text decides about two thirds of the memory rows
    assert supported >= 0.6 * len(memory)


def test_a_closer_rationale_puts_each_options_line_after_its_letter(rows: list[dict]) -> None:
    closer = [r for r in rows if r["text_source"] == "memory" and r["category"] == "closer"]
    assert closer
    for r in closer:
        why = rationale(r)
        for key, text in parse_options(r["options"]):
            colour = text.split()[1]  # "the red box ..."
            assert f" {key}: {colour}" in why.think, (key, why.think)  # its line or note
            if why.supported and key == r["solution"]:  # the closer one is placed
                assert f" {key}: {colour} object seen " in why.think, (key, why.think)
        if why.supported:
            assert f"away: {r['solution']} is closer. So: " in why.think


def test_the_oracle_baseline_reads_a_memory_row_with_the_long_reader(rows: list[dict]) -> None:
    memory = [r for r in rows if r["text_source"] == "memory"][:30]
    letters = [c.split("<answer>")[1][0] for c in baseline_completions("oracle", memory)]
    assert letters == [long_oracle.answer_letter(r["category"], record_of(r))
                       for r in memory]
    # well above a guess among four (7.5 of 30); the rows the text does not decide are wrong
    assert sum(a == r["solution"] for a, r in zip(letters, memory, strict=True)) >= 12

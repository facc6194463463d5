"""The rule reader on a built dataset row (:mod:`embodied_r_ros.reading.rule_reader`): the row's
answer from what its perception text states (what the question asks: the row's basis), and the
letter ``eval``'s ``oracle`` answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embodied_r_ros.reading.rule_reader import OracleAnswer, solve_text
from embodied_r_ros.sim import question_basis
from embodied_r_training.data.row_records import perception_of


def solve(row: Mapping[str, Any]) -> OracleAnswer:
    """The reader's answer to a built dataset row, from its perception text only."""
    stated = perception_of(row)
    return solve_text(str(row.get("category")), stated, question_basis.of_row(row, stated))


def answer_letter(row: Mapping[str, Any]) -> str:
    """A letter always: the reader's, else the first option (the text decides nothing)."""
    return solve(row).letter or "A"

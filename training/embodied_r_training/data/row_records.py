"""A dataset row's perception record, and the row as its text states it.

A row keeps the prompt the LM trains on and, since the typed record, the record it was rendered
from (``records``): the rule reader, the rationales and the question filters read that, and a
prompt shortened by dropping frames is rendered again from it. A row built before keeps only its
prompt: its stated view is read from the text by the one reader of old texts
(:mod:`embodied_r_ros.reading.legacy_text`); what needs the record itself asks for a rebuild.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embodied_r_ros.core.perception_text import PerceptionText, stated_view
from embodied_r_ros.core.records import PerceptionRecord
from embodied_r_ros.reading.legacy_text import parse_perception
from embodied_r_training.data.dataset_files import BuildError
from embodied_r_training.rewards import prompt_text


def has_record(row: Mapping[str, Any]) -> bool:
    return isinstance(row.get("records"), Mapping)


def record_of(row: Mapping[str, Any]) -> PerceptionRecord:
    """The record a row's prompt was rendered from; :class:`BuildError` for a row built before
    datasets kept records."""
    if not has_record(row):
        raise BuildError(f"row {row.get('id')} was built before datasets kept perception "
                         "records: rebuild the dataset (embodied-r-train build or import-*)")
    return PerceptionRecord.from_dict(row["records"], str(row["question"]),
                                      list(row["options"]), str(row["question_block"]))


def perception_of(row: Mapping[str, Any]) -> PerceptionText:
    """The row's perception as its text states it (its user message, for an older row)."""
    if has_record(row):
        return stated_view(record_of(row))
    return parse_perception(prompt_text(row["prompt"]))

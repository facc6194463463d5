"""The build journal ``OUT/.build/rows.jsonl``: one finished row per line, keyed by the sample and
a fingerprint of every setting that changes a row, so a killed build resumes where it stopped."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.perception import digest, reply_settings
from embodied_r_ros.core.prompts import prompts_from
from embodied_r_training.data.dataset_files import DATASET_VERSION
from embodied_r_training.data.samples import Sample

log = logging.getLogger(__name__)

JOURNAL_DIR = ".build"
JOURNAL = "rows.jsonl"


def fingerprint_settings(config: Config, model_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes a row besides its sample: key-frame and perception settings, the
    VLM and its generation settings (as the reply cache keys them), the prompts' wording.
    Recorded in the manifest; its digest keys the journal. The grounding prompts' wording
    counts where grounding is on (the prompt version leaves it out)."""
    grounding = config.perception.grounding.mode != "off"
    return {
        "version": DATASET_VERSION,
        "keyframes": config.keyframes.model_dump(),
        # how the calls are scheduled changes no row; the VLM's settings are in "vlm"
        "perception": config.perception.model_dump(
            exclude={"vlm", "concurrency", "streaming_queue"}
        ),
        "model": model_id,
        "vlm": reply_settings(config.perception.vlm),
        "prompts": prompts_from(config.prompts).version,  # derived from the file's text
        **({"grounding_prompts": prompts_from(config.prompts).grounding_version}
           if grounding else {}),
        "extra": extra,
    }


def settings_fingerprint(config: Config, model_id: str, extra: dict[str, Any]) -> str:
    """The digest of :func:`fingerprint_settings`."""
    return digest(json.dumps(fingerprint_settings(config, model_id, extra), sort_keys=True,
                             default=str))


def sample_key(sample: Sample, fingerprint: str) -> str:
    return digest(fingerprint, json.dumps(asdict(sample), sort_keys=True, default=str))


def read_journal(path: Path) -> dict[str, dict[str, Any]]:
    """Finished rows by key; a torn line (the build was killed mid-write) or one that is not
    UTF-8 JSON (a damaged disk, an editor) is skipped with a warning, and its row redone."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    with path.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            try:
                row = json.loads(line.decode("utf-8"))
            except ValueError:  # JSONDecodeError and UnicodeDecodeError
                log.warning("ignoring unreadable line %d of %s", number, path)
                continue
            if isinstance(row, dict) and "_key" in row:
                rows[row["_key"]] = row
    return rows


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None

    def append(self, row: dict[str, Any]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a torn last line must not glue onto the next row
            if self.path.is_file() and self.path.stat().st_size:
                with self.path.open("rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    torn = fh.read(1) != b"\n"
            else:
                torn = False
            self._fh = self.path.open("a")
            if torn:
                self._fh.write("\n")
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

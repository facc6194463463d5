"""Whether texts rendered from perception records are the texts written before records.

The typed record changed how the perception text is made, not what it says: a dataset built
now must give the LM, row for row, the very prompt the same build gave before (the shipped
adapters were trained on those), and what the rule reader and the rationales read from the
record (its stated view) must be what the reader of old texts reads from that prompt. This
compares datasets built from the same inputs by the code before records (``OLD``, prompts only)
and by today's (``NEW``, prompts and records), row by row:

``python -m lab.text_parity OLD NEW [OLD NEW ...] --json results/training/text_parity.json``

Exits 1 where a row differs (its id and the first differing line are printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_r_ros.core.perception_text import render, stated_view
from embodied_r_ros.core.prompts import prompts_from
from embodied_r_ros.reading.legacy_text import parse_perception
from embodied_r_training.data.dataset_files import load_manifest, load_rows
from embodied_r_training.data.row_records import record_of
from embodied_r_training.rewards import prompt_text


@dataclass
class Parity:
    """One pair of datasets compared."""

    old: str
    new: str
    rows: int = 0
    prompts_equal: int = 0
    rendered_equal: int = 0
    stated_equal: int = 0
    missing: list[str] = field(default_factory=list)
    differing: list[dict[str, str]] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.missing and not self.differing and self.rows > 0


def _first_difference(a: str, b: str) -> str:
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False)):
        if x != y:
            return f"line {i}: {x!r} != {y!r}"
    return f"lengths {len(a)} and {len(b)}"


def compare(old_dir: Path, new_dir: Path) -> Parity:
    """Row by row: the stored prompts, the new record rendered again, and its stated view
    against the old prompt read by the reader of old texts."""
    out = Parity(str(old_dir), str(new_dir))
    old = {r["id"]: r for r in load_rows(old_dir)}
    new = {r["id"]: r for r in load_rows(new_dir)}
    prompts = prompts_from(load_manifest(new_dir).get("prompts"))
    out.missing = sorted(set(old) ^ set(new))
    for key in sorted(set(old) & set(new)):
        a, b = old[key], new[key]
        out.rows += 1
        text_a, text_b = prompt_text(a["prompt"]), prompt_text(b["prompt"])
        same = a["prompt"] == b["prompt"]
        out.prompts_equal += same
        record = record_of(b)
        rendered = render(record, prompts) == text_b
        out.rendered_equal += rendered
        stated = stated_view(record) == parse_perception(text_a)
        out.stated_equal += stated
        if not (same and rendered and stated):
            why = ("prompt " + _first_difference(text_a, text_b) if not same else
                   "the record renders another text" if not rendered else
                   "the stated view differs from the old text's reading")
            out.differing.append({"id": key, "why": why})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.text_parity",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="OLD NEW pairs of dataset folders")
    parser.add_argument("--json", type=Path, help="also write the comparison there")
    args = parser.parse_args(argv)
    if len(args.dirs) % 2:
        print(f"{parser.prog}: error: give OLD NEW pairs", file=sys.stderr)
        return 2
    results = [compare(a, b) for a, b in zip(args.dirs[::2], args.dirs[1::2], strict=True)]
    for r in results:
        print(f"{r.new}: {r.rows} rows; prompts equal {r.prompts_equal}, records render "
              f"them {r.rendered_equal}, stated views equal {r.stated_equal}; "
              f"{len(r.missing)} ids in one only" + "".join(
                  f"\n  {d['id']}: {d['why']}" for d in r.differing[:5]))
    if args.json:
        summary: dict[str, Any] = {"pairs": [
            {k: v for k, v in vars(r).items()} | {"identical": r.identical} for r in results],
            "rows": sum(r.rows for r in results),
            "identical": all(r.identical for r in results)}
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(r.identical for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Where a reasoner's replies go wrong: the evidence it copies, or the conclusion it draws.

A reply in this project's rationale format has three steps: it copies the options
(``Options: text = A; ...``), walks the frames copying what the question needs (the evidence),
and concludes (``So: text = letter.``). Each step of a model's reply is compared with the gold
rationale of the same row (:func:`~embodied_r_training.data.rationales.rationale`, written from
the row's own perception text):

- ``options``: the reply opens with the gold options listing, character for character;
- ``evidence``: what follows it up to the last ``So:`` is the gold walk, character for character;
- ``notes``: the share of the gold walk's frame notes (``Frame 3: rotate left 25.``) the reply's
  walk holds word for word, and the share of the reply's frame notes that are not gold ones
  (a frame the question does not need, or one misread);
- ``right``: the answer the official evaluation reads is the row's solution.

Per category this gives the share of replies whose evidence is right, and of those, the share
whose conclusion is right: a model that copies the evidence but concludes wrongly fails at the
composition (adding up motions, planning a route), not at reading the text. Several models
(the shipped reasoner and its SFT checkpoint, say) run on the same rows, so the table also
shows what GRPO changed.

Run: ``.venv/bin/python -m lab.analysis.steps --data DIR --model
shipped=smollm2-135m-embodied-r --model sft=smollm2-135m-embodied-r-reference --out
results/training/reasoner_steps`` (``DIR``: a built dataset; its ``test`` split is read).
Replies come from the llama.cpp backend (float16 GGUF, greedy), the offline profile's engine.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.rationales import options_listing, rationale
from embodied_r_training.evaluation.scoring import answer_in

MAX_NEW_TOKENS = 320  # the evaluation's and the offline profile's reply budget
CONCLUSION = " So: "
_NOTE_RE = re.compile(r"Frame \d+: [^.]*(?:\.\d[^.]*)*\.")


@dataclass(frozen=True)
class Steps:
    """How far one reply follows the gold rationale of its row."""

    category: str
    options: bool
    evidence: bool
    right: bool
    notes_found: float = 0.0  # of the gold frame notes, the share the reply holds
    notes_wrong: float = 0.0  # of the reply's frame notes, the share that are not gold ones


def gold_parts(row: Mapping[str, Any]) -> tuple[str, str]:
    """The gold think text's options listing (with its full stop) and its walk."""
    listing = options_listing(row["options"])
    head, _, _ = rationale(row).think.rpartition(CONCLUSION)
    if not head.startswith(listing):
        raise ValueError(f"row {row.get('id')}: the gold think text does not open with the "
                         "options listing")
    return listing, head[len(listing):].strip()


def reply_steps(row: Mapping[str, Any], reply: str) -> Steps:
    """``reply``'s steps against the gold rationale of ``row``."""
    from embodied_r_ros.core.reasoning import extract_think

    listing, walk = gold_parts(row)
    think = (extract_think(reply) or "").strip()
    options = think.startswith(listing)
    head, sep, _ = think.rpartition(CONCLUSION)
    evidence = options and bool(sep) and head[len(listing):].strip() == walk
    right = answer_in(reply, row["options"], "official") == str(row["solution"]).strip()[:1]
    gold, said = frame_notes(walk), frame_notes(head)
    found = sum(n in said for n in gold) / len(gold) if gold else 1.0
    wrong = sum(n not in gold for n in said) / len(said) if said else 0.0
    return Steps(str(row.get("category", "")), options, evidence, right, found, wrong)


def frame_notes(text: str) -> list[str]:
    """The ``Frame N: ...`` notes of a walk, each up to its full stop."""
    return [m.group(0).strip() for m in _NOTE_RE.finditer(text)]


def summarise(steps: Sequence[Steps]) -> dict[str, dict[str, Any]]:
    """Per category and overall: accuracy, options and evidence copied, and the accuracy of
    the replies whose evidence is right (the conclusion step alone)."""
    groups: dict[str, list[Steps]] = defaultdict(list)
    for s in steps:
        groups[s.category].append(s)
    groups = {**dict(sorted(groups.items())), "overall": list(steps)}
    table: dict[str, dict[str, Any]] = {}
    for name, group in groups.items():
        n = len(group)
        copied = [s for s in group if s.evidence]
        table[name] = {
            "n": n,
            "accuracy": sum(s.right for s in group) / n,
            "options_copied": sum(s.options for s in group) / n,
            "evidence_copied": len(copied) / n,
            "evidence_copied_n": len(copied),
            "right_given_evidence": (sum(s.right for s in copied) / len(copied)
                                     if copied else None),
            "right_without_evidence": sum(s.right and not s.evidence for s in group) / n,
            "notes_found": sum(s.notes_found for s in group) / n,
            "notes_wrong": sum(s.notes_wrong for s in group) / n,
        }
    return table


def generate(model: str, prompts: Sequence[Any]) -> list[str]:
    """Greedy replies of the offline model ``model`` on llama.cpp (float16), one at a time."""
    from embodied_r_ros.backends.factory import create_backend
    from embodied_r_ros.core.config import ModelConfig

    cfg = ModelConfig(backend="llamacpp", model=model, device="cpu", quantization="float16",
                      max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, threads_per_reply=2)
    backend = create_backend(cfg, text_only=True)
    try:
        return [backend.complete([p], max_new_tokens=MAX_NEW_TOKENS)[0].text
                for p in tqdm(prompts, desc=model, unit="question")]
    finally:
        backend.close()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown(tables: Mapping[str, Mapping[str, Mapping[str, Any]]], data: str) -> str:
    lines = [
        "# Where the reasoner's replies go wrong: evidence or conclusion", "",
        f"Rows: the `test` split of {data}; replies greedy on llama.cpp (float16 GGUF), "
        f"{MAX_NEW_TOKENS} new tokens; answers read as the official evaluation reads them. "
        "Each reply is compared with the gold rationale of its row "
        "(`lab.analysis.steps`):", "",
        "- **options %**: replies that open with the gold options listing;",
        "- **walk exact %**: replies whose frame walk is the gold one, character for character;",
        "- **gold notes found %**: of the gold walk's frame notes (`Frame 3: rotate left 25.`), "
        "the share the reply holds word for word (mean over replies);",
        "- **notes not gold %**: of the reply's frame notes, the share that are not gold ones "
        "(a frame the question does not need, or a misread one);",
        "- **right given exact walk %**: of the replies with the gold walk, the share whose "
        "answer is right: the conclusion step alone.",
    ]
    for model, table in tables.items():
        lines += ["", f"## {model}", "",
                  "| Category | n | accuracy % | options % | walk exact % | gold notes found % | "
                  "notes not gold % | right given exact walk % |",
                  "|---|---|---|---|---|---|---|---|"]
        for category, t in table.items():
            name = f"**{category}**" if category == "overall" else category
            lines.append(
                f"| {name} | {t['n']} | {_pct(t['accuracy'])} | {_pct(t['options_copied'])} | "
                f"{_pct(t['evidence_copied'])} | {_pct(t['notes_found'])} | "
                f"{_pct(t['notes_wrong'])} | {_pct(t['right_given_evidence'])} "
                f"(of {t['evidence_copied_n']}) |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a built dataset directory")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", action="append", default=[],
                        help="LABEL=OFFLINE_MODEL, repeatable")
    parser.add_argument("--replies", type=Path, default=None,
                        help="score the replies of an earlier OUT.json again (no generation)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N rows (0: all)")
    parser.add_argument("--data-label", default=None,
                        help="how the report names the dataset (default: its path)")
    parser.add_argument("--out", type=Path, required=True,
                        help="writes OUT.md and OUT.json (the replies included)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    rows = load_rows(args.data, args.split)[: args.limit or None]
    earlier = json.loads(args.replies.read_text())["models"] if args.replies else {}
    models = [(label, m["model"]) for label, m in earlier.items()]
    for spec in args.model:
        label, sep, name = spec.partition("=")
        if not sep or not label or not name:
            parser.error(f"--model {spec!r}: expected LABEL=OFFLINE_MODEL")
        models.append((label, name))
    if not models:
        parser.error("name a --model or give --replies")
    record: dict[str, Any] = {"data": str(args.data), "split": args.split, "rows": len(rows),
                              "models": {}}
    tables = {}
    for label, name in models:
        start = time.perf_counter()
        if label in earlier:
            by_id = {r["id"]: r["reply"] for r in earlier[label]["replies"]}
            replies = [by_id[r.get("id")] for r in rows]
            seconds = earlier[label]["seconds"]
        else:
            replies = generate(name, [r["prompt"] for r in rows])
            seconds = round(time.perf_counter() - start, 1)
        steps = [reply_steps(r, reply) for r, reply in zip(rows, replies, strict=True)]
        tables[label] = summarise(steps)
        record["models"][label] = {
            "model": name, "seconds": seconds, "table": tables[label],
            "replies": [{"id": r.get("id"), "reply": reply, **asdict(s)}
                        for r, reply, s in zip(rows, replies, steps, strict=True)]}
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    report = markdown(tables, args.data_label or f"`{args.data}`")
    args.out.with_suffix(".md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

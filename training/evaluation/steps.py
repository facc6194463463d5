"""Where a reasoner's replies go wrong: the evidence it copies, or the conclusion it draws.

A reply in this project's rationale format has three steps: it copies the options
(``Options: text = A; ...``), walks the frames copying what the question needs (the evidence),
and concludes (``So: text = letter.``). Each step of a model's reply is compared with the gold
rationale of the same row (:func:`~embodied_r_training.data.rationales.rationale`, written from
the row's own perception text):

- ``options``: the reply opens with the gold options listing, character for character;
- ``evidence``: what follows it up to the last ``So:`` is the gold walk, character for character;
- ``right``: the answer the official evaluation reads is the row's solution.

Per category this gives the share of replies whose evidence is right, and of those, the share
whose conclusion is right: a model that copies the evidence but concludes wrongly fails at the
composition (adding up motions, planning a route), not at reading the text. Several models
(the shipped reasoner and its SFT checkpoint, say) run on the same rows, so the table also
shows what GRPO changed.

Run: ``.venv/bin/python -m embodied_r_training.evaluation.steps --data DIR --model
shipped=smollm2-135m-embodied-r --model sft=smollm2-135m-embodied-r-reference --out
results/training/reasoner_steps`` (``DIR``: a built dataset; its ``test`` split is read).
Replies come from the llama.cpp backend (float16 GGUF, greedy), the offline profile's engine.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.rationales import rationale
from embodied_r_training.evaluation.scoring import answer_in
from tqdm import tqdm

MAX_NEW_TOKENS = 320  # the evaluation's and the offline profile's reply budget
CONCLUSION = " So: "


@dataclass(frozen=True)
class Steps:
    """How far one reply follows the gold rationale of its row."""

    category: str
    options: bool
    evidence: bool
    right: bool


def gold_parts(row: Mapping[str, Any]) -> tuple[str, str]:
    """The gold think text's options listing (with its full stop) and its walk."""
    from embodied_r_ros.core.reasoning import parse_options

    listing = "Options: " + "; ".join(f"{text} = {key}" for key, text in
                                      parse_options(row["options"])) + "."
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
    body = think[len(listing):] if options else ""
    head, sep, _ = body.rpartition(CONCLUSION)
    evidence = options and bool(sep) and head.strip() == walk
    right = answer_in(reply, row["options"], "official") == str(row["solution"]).strip()[:1]
    return Steps(str(row.get("category", "")), options, evidence, right)


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
        }
    return table


def generate(model: str, prompts: Sequence[Any]) -> list[str]:
    """Greedy replies of the offline model ``model`` on llama.cpp (float16), one at a time."""
    from embodied_r_ros.core.backends.factory import create_backend
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
    models = list(tables)
    lines = [
        "# Where the reasoner's replies go wrong: evidence or conclusion", "",
        f"Rows: the `test` split of `{data}`; replies greedy on llama.cpp (float16 GGUF), "
        f"{MAX_NEW_TOKENS} new tokens; answers read as the official evaluation reads them. "
        "Each reply is compared with the gold rationale of its row "
        "(`embodied_r_training.evaluation.steps`).", "",
        "- **evidence %**: replies whose options listing and frame walk are the gold ones, "
        "character for character;",
        "- **right | evidence %**: of those, the share whose answer is right (the conclusion "
        "step alone);",
        "- **right, evidence wrong %**: right answers reached over a walk that is not the gold "
        "one (of all replies).", "",
        "| Category | n | " + " | ".join(
            f"{m} acc % | {m} evidence % | {m} right given evidence % | "
            f"{m} right, evidence wrong %" for m in models) + " |",
        "|---|---|" + "---|" * (4 * len(models)),
    ]
    for category in tables[models[0]]:
        cells = []
        for m in models:
            t = tables[m][category]
            cells += [_pct(t["accuracy"]), _pct(t["evidence_copied"]),
                      f"{_pct(t['right_given_evidence'])} (of {t['evidence_copied_n']})",
                      _pct(t["right_without_evidence"])]
        n = tables[models[0]][category]["n"]
        name = f"**{category}**" if category == "overall" else category
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a built dataset directory")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", action="append", required=True,
                        help="LABEL=OFFLINE_MODEL, repeatable")
    parser.add_argument("--limit", type=int, default=0, help="only the first N rows (0: all)")
    parser.add_argument("--out", type=Path, required=True,
                        help="writes OUT.md and OUT.json (the replies included)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    models = []
    for spec in args.model:
        label, sep, name = spec.partition("=")
        if not sep or not label or not name:
            parser.error(f"--model {spec!r}: expected LABEL=OFFLINE_MODEL")
        models.append((label, name))
    rows = load_rows(args.data, args.split)[: args.limit or None]
    record: dict[str, Any] = {"data": str(args.data), "split": args.split, "rows": len(rows),
                              "models": {}}
    tables = {}
    for label, name in models:
        start = time.perf_counter()
        replies = generate(name, [r["prompt"] for r in rows])
        steps = [reply_steps(r, reply) for r, reply in zip(rows, replies, strict=True)]
        tables[label] = summarise(steps)
        record["models"][label] = {
            "model": name, "seconds": round(time.perf_counter() - start, 1),
            "table": tables[label],
            "replies": [{"id": r.get("id"), "reply": reply, **asdict(s)}
                        for r, reply, s in zip(rows, replies, steps, strict=True)]}
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    args.out.with_suffix(".md").write_text(markdown(tables, str(args.data)))
    print(markdown(tables, str(args.data)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the embedder's cosine separates a question's word for an object from a label of it.

The memory names a VLM's labelled object for a question's word when, colours aside, the word is
the label's head noun or the offline embedder (all-MiniLM-L6-v2) puts the two closer than
``embodied_r_ros.memory.labels.MATCH_COSINE`` (:class:`~embodied_r_ros.memory.labels
.LabelMatcher`). This measures the cosine of word pairs that name one kind of object (a
question's "couch", a VLM's "sofa") and of pairs that name two related kinds ("chair" and
"table"), and how many of each the threshold matches. Exits 1 where a different pair would be
matched (the threshold admits a wrong line).

Run: ``.venv/bin/python bench/label_match.py [--threshold 0.7] --out results/bench/label_match``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _figures import add_json_option, write_figures

from embodied_r_ros.memory.embedder import load_embedder
from embodied_r_ros.memory.labels import MATCH_COSINE

#: a question's word and a label naming the same kind of object
SAME = (("couch", "sofa"), ("chair", "office chair"), ("bicycle", "bike"), ("tv", "television"),
        ("trash can", "garbage bin"), ("cup", "mug"), ("plant", "potted plant"),
        ("fridge", "refrigerator"), ("car", "automobile"), ("laptop", "notebook computer"),
        ("box", "cardboard box"), ("table", "desk"), ("person", "man"), ("bin", "trash can"),
        ("lamp", "floor lamp"), ("door", "doorway"), ("monitor", "computer screen"),
        ("rug", "carpet"), ("bottle", "water bottle"), ("backpack", "bag"))
#: a question's word and a label of another, related kind
DIFFERENT = (("chair", "table"), ("couch", "bed"), ("bicycle", "car"), ("cup", "bottle"),
             ("plant", "tree"), ("lamp", "chair"), ("door", "window"), ("box", "ball"),
             ("laptop", "phone"), ("fridge", "oven"), ("sofa", "chair"), ("person", "dog"),
             ("cat", "dog"), ("monitor", "keyboard"), ("rug", "door"), ("bottle", "glass"),
             ("backpack", "suitcase"), ("bench", "chair"), ("tv", "monitor"), ("sink", "toilet"),
             ("cone", "sphere"), ("box", "sphere"), ("cabinet", "shelf"), ("clock", "picture"),
             ("chair", "stool"))


def cosines(pairs: Sequence[tuple[str, str]]) -> list[float]:
    embedder = load_embedder("required")
    assert embedder is not None
    a = embedder.embed([w for w, _ in pairs], remember=False)
    b = embedder.embed([label for _, label in pairs], remember=False)
    return [round(float(x @ y), 4) for x, y in zip(a, b, strict=True)]


def measure(threshold: float) -> dict[str, Any]:
    same, different = cosines(SAME), cosines(DIFFERENT)
    return {
        "threshold": threshold,
        "same": [{"word": w, "label": lab, "cosine": c} for (w, lab), c in zip(SAME, same,
                                                                               strict=True)],
        "different": [{"word": w, "label": lab, "cosine": c}
                      for (w, lab), c in zip(DIFFERENT, different, strict=True)],
        "same_matched": sum(c >= threshold for c in same), "same_pairs": len(same),
        "different_matched": sum(c >= threshold for c in different),
        "different_pairs": len(different),
        "highest_different": max(different), "lowest_same": min(same),
    }


def markdown(f: dict[str, Any]) -> str:
    lines = [f"# Label matching: the embedder's cosine at {f['threshold']}", "",
             f"Same kind matched: {f['same_matched']} of {f['same_pairs']}; different kinds "
             f"matched: {f['different_matched']} of {f['different_pairs']} (highest "
             f"{f['highest_different']:.3f}).", "", "| pair | kind | cosine | matched |",
             "|---|---|---|---|"]
    for kind in ("same", "different"):
        for p in sorted(f[kind], key=lambda p: -p["cosine"]):
            lines.append(f"| {p['word']} / {p['label']} | {kind} | {p['cosine']:.3f} | "
                         f"{'yes' if p['cosine'] >= f['threshold'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=MATCH_COSINE)
    parser.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    add_json_option(parser)
    args = parser.parse_args(argv)
    figures = measure(args.threshold)
    text = markdown(figures)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        write_figures(args.out.with_suffix(".json"), "label_match", argv, args, figures)
    write_figures(args.json, "label_match", argv, args, figures)
    if figures["different_matched"]:
        print(f"MISSED: {figures['different_matched']} different pairs matched")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

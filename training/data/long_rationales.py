"""Cold-start think texts for the long world's memory questions.

A memory text is about 2,000 tokens of up to 32 frames minutes apart; what a question needs
from it is the frames that show the colours it names and how old they are. The think text
copies those frames, oldest first, as ``Frame 3 (1033 s ago): cyan 19 left.``, then states
what the rule reader of the text (:mod:`embodied_r_training.data.long_oracle`) derives from
them (where the object is now, how far, which option's colour stood nearest) and concludes as
the short clips' rationales do (:mod:`embodied_r_training.data.rationales`): the options as
``text = letter`` first, ``So: text = letter.`` last. The rationale is ``supported`` where the
rule reader reaches the row's solution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from embodied_r_training.data.long_oracle import SOLVERS
from embodied_r_training.data.oracle import perception_of

from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.core.perception_text import PerceptionText


def named_colours(row: Mapping[str, Any]) -> list[str]:
    """The colours the question and its options name, in order, each once."""
    words = " ".join([str(row["question"]), *map(str, row["options"])]).lower()
    words = words.replace(",", " ").replace("?", " ").replace(".", " ")
    return list(dict.fromkeys(w for w in words.split() if w in COLOUR_NAMES))


def colour_walk(p: PerceptionText, colours: Sequence[str]) -> str:
    """One note per frame that shows one of ``colours``: its age and their bearings."""
    notes = []
    for f in p.frames:
        seen = [f"{c} {round(abs(s.bearing_deg))} {'left' if s.bearing_deg >= 0 else 'right'}"
                for c in colours if (s := f.sightings.get(c)) is not None]
        if seen:
            age = f" ({f.age_s:.0f} s ago)" if f.age_s is not None else ""
            notes.append(f"Frame {f.index}{age}: {', '.join(seen)}.")
    return " ".join(notes) if notes else "No frame shows the colours named."


def long_think(row: Mapping[str, Any], choice: str) -> tuple[str, bool]:
    """The walk and the rule reader's conclusion for a long-world row, and whether that
    conclusion is ``choice``, the row's solution."""
    p = perception_of(row)
    solver = SOLVERS.get(str(row.get("category")))
    walk = colour_walk(p, named_colours(row))
    if solver is None:
        return walk, False
    found = solver(p)
    return f"{walk} {found.evidence[:1].upper()}{found.evidence[1:]}.", found.letter == choice

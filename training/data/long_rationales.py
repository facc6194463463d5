"""Cold-start think texts for the long world's memory questions.

A memory text is about 2,000 tokens of up to 32 frames minutes apart; a question's colour can
show in 20 of them. The think text notes only the frames its conclusion rests on, oldest first,
as ``Frame 3 (1033 s ago): cyan 19 left.``: the newest frame of a colour for "when did you last
see" and "did you see", the newest :data:`FRAMES_PER_OBJECT` frames of the object a direction,
distance or route question asks about (of the visit about the time it names), a frame of each
option's object for "which is next to" and "which is closer". It then states what the rule
reader of the text (:mod:`embodied_r_training.data.long_oracle`) derives from them and
concludes as the short clips' rationales do (:mod:`embodied_r_training.data.rationales`): the
options as ``text = letter`` first, ``So: text = letter.`` last. So a gold completion stays
within the offline profile's 320 new tokens, which a walk over every frame showing the colour
did not. The rationale is ``supported`` where the rule reader reaches the row's solution.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from embodied_r_training.data.long_oracle import (
    SOLVERS,
    Memory,
    Sighted,
    asked_colour,
    references,
)
from embodied_r_training.data.oracle import perception_of

from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.core.perception_text import FrameText, PerceptionText

#: frames noted for the object a direction, distance or route question asks about
FRAMES_PER_OBJECT = 3
#: frames noted for each option's object of a next-to or closer question
FRAMES_PER_OPTION = 1


def named_colours(row: Mapping[str, Any]) -> list[str]:
    """The colours the question and its options name, in order, each once."""
    words = " ".join([str(row["question"]), *map(str, row["options"])]).lower()
    words = words.replace(",", " ").replace("?", " ").replace(".", " ")
    return list(dict.fromkeys(w for w in words.split() if w in COLOUR_NAMES))


def _newest(ages: Iterable[float], k: int) -> list[float]:
    return sorted(ages)[:k]


def _option_colours(p: PerceptionText) -> list[str]:
    return [c for _, text in p.options if (c := text.split()[0].lower()) in COLOUR_NAMES]


def answer_ages(p: PerceptionText, category: str) -> list[float]:
    """The stated ages of the frames a ``category`` answer rests on, as the rule reader
    finds the objects the question and its options name."""
    memory = Memory(p)
    refs = references(p.question)
    ref = refs[0] if refs else None
    obj = memory.find(ref) if ref is not None else None
    if category in ("last_seen", "seen"):
        if category == "last_seen":
            colours = [ref.colour] if ref else []
        elif (asked := asked_colour(p.question)) is not None:
            colours = [asked]
        else:
            colours = _option_colours(p)
        return [a for c in colours if (a := memory.last_seen_s(c)) is not None]
    if category == "closer":
        ages: list[float] = []
        for _, text in p.options:
            option_refs = references(text)
            found = memory.find(option_refs[0]) if option_refs else None
            if found is not None:
                ages += _newest(memory.visit_ages(found, option_refs[0]), FRAMES_PER_OPTION)
        return ages
    if obj is None or ref is None:
        return []
    ages = _newest(memory.visit_ages(obj, ref), FRAMES_PER_OBJECT)
    if category == "next_to" and obj.position is not None:
        for colour in _option_colours(p):
            others = [o for o in memory.objects(colour)
                      if o is not obj and o.position is not None and o.triangulated]
            if others:
                nearest = min(others, key=lambda o: _distance(o, obj))
                ages += _newest(nearest.ages, FRAMES_PER_OPTION)
    return ages


def _distance(a: Sighted, b: Sighted) -> float:
    assert a.position is not None and b.position is not None
    return math.dist(a.position, b.position)


def frame_notes(p: PerceptionText, ages: Sequence[float], colours: Sequence[str]) -> str:
    """One note per frame of stated age in ``ages``, oldest first: its age and the bearings
    of ``colours`` in it."""
    notes = []
    for f in p.frames:
        if f.age_s is None or not any(abs(f.age_s - a) < 0.5 for a in ages):
            continue
        seen = [_bearing(c, f) for c in colours if c in f.sightings]
        if seen:
            notes.append(f"Frame {f.index} ({f.age_s:.0f} s ago): {', '.join(seen)}.")
    return " ".join(notes) if notes else "No frame shows the colours named."


def _bearing(colour: str, f: FrameText) -> str:
    deg = f.sightings[colour].bearing_deg
    return f"{colour} {round(abs(deg))} {'left' if deg >= 0 else 'right'}"


def long_think(row: Mapping[str, Any], choice: str) -> tuple[str, bool]:
    """The frames the answer rests on and the rule reader's conclusion for a long-world row,
    and whether that conclusion is ``choice``, the row's solution."""
    p = perception_of(row)
    category = str(row.get("category"))
    solver = SOLVERS.get(category)
    if solver is None:
        return frame_notes(p, [], named_colours(row)), False
    walk = frame_notes(p, answer_ages(p, category), named_colours(row))
    found = solver(p)
    return f"{walk} {found.evidence[:1].upper()}{found.evidence[1:]}.", found.letter == choice

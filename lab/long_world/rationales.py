"""Cold-start think texts for the long world's memory questions.

A memory text ends with where each object the question names is now
(:func:`embodied_r_ros.memory.places.place_notes`): the triangulation of every frame that showed
it, from the poses the memory stored, is done there. The think text quotes the lines its
conclusion rests on, as the text writes them (the object the question means; each option's
object of a "which is closer", after the option's letter, so that a reply compares the two lines
it quotes; the colour a "did you see" asks about), then states what the rule reader of the text
(:mod:`lab.long_world.oracle`) derives from them and concludes as the short clips' rationales do
(:mod:`embodied_r_training.data.rationales`): the options as ``text = letter`` first, ``So: text
= letter.`` last. The rationale is ``supported`` where the rule reader reaches the row's
solution.
"""

from __future__ import annotations

from embodied_r_ros.core.perception_text import place_line
from embodied_r_ros.core.records import ColourNote, PerceptionRecord
from embodied_r_ros.memory.places import named_colours
from lab.long_world.oracle import SOLVERS, Places, Reference, asked_colour, references


def _option_colours(places: Places) -> list[str]:
    return [c for _, text in places.options for c in named_colours(text)[:1]]


def answer_lines(record: PerceptionRecord, category: str) -> list[str]:
    """The places lines of ``record`` that a ``category`` answer rests on, as the rule reader
    finds the objects the question and its options name."""
    return [line for _, line in keyed_lines(Places(record), category)]


def keyed_lines(places: Places, category: str) -> list[tuple[str, str]]:
    """:func:`answer_lines` with the option letter each line belongs to (a "which is
    closer": the line of each option's object, in option order; otherwise ``""``)."""

    def line(ref: Reference) -> str:
        obj = places.find(ref)
        if obj is not None:
            return place_line(obj)
        return place_line(places.note(ref.colour) or ColourNote(ref.colour))

    if category == "closer":
        options = [(key, references(text)[:1]) for key, text in places.options]
        return [(key, line(r[0])) for key, r in options if r]
    if category == "seen":
        if (asked := asked_colour(places.question)) is not None:
            return [("", line(Reference(asked, "")))]
        return [("", line(Reference(c, ""))) for c in _option_colours(places)]
    refs = references(places.question)
    return [("", line(refs[0]))] if refs else []


def rule_reading(category: str, record: PerceptionRecord) -> dict[str, str | None]:
    """The places lines a ``category`` answer rests on and the rule reader's conclusion, with
    the letter it reaches (None: the text decides nothing): a row's ``rule_reading``, which
    :func:`embodied_r_training.data.rationales.rationale` walks."""
    places = Places(record)
    solver = SOLVERS.get(category)
    lines = " ".join(f"{key}: {s.removeprefix('- ')}" if key else s.removeprefix("- ")
                     for key, s in keyed_lines(places, category))
    quoted = lines or "No line places the objects named."
    if solver is None:
        return {"evidence": quoted, "letter": None}
    found = solver(places)
    return {"evidence": f"{quoted} {found.evidence[:1].upper()}{found.evidence[1:]}.",
            "letter": found.letter}

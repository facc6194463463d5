"""Cold-start reasoning texts: a walk through the frames that reaches the true answer.

DeepSeek-R1 (arXiv 2501.12948, section 2.3.1) starts RL from a model fine-tuned on a few thousand
readable reasoning traces; here the traces are written from a built row: its own perception text
(as it states it, read by :mod:`embodied_r_ros.reading.rule_reader`) for the evidence, what the
question asks from its basis (:mod:`embodied_r_ros.sim.question_basis`), and the row's solution
for the conclusion.

The think text walks through the key frames in order and copies, frame by frame, only what the
question needs (the motion, and where the question's objects are), then draws the conclusion
from those notes and names the answer. Copying one frame after another is what a small LM can
learn from a few hundred examples; finding "the first frame that shows yellow" anywhere in a
600-token prompt in one jump is not (a 135M model fine-tuned on 400 traces that stated the
evidence without the walk stayed at chance). The completion is
``<think>..</think>\n<answer>..</answer>`` with nothing after it; the answer is the option's
letter and text (``B. back-right``), or its text alone (the core's answer parsing reads either).

With the letter, the think text opens by copying the options as ``text = letter`` and concludes
``So: back-right = B.``: the conclusion's letter is then a copy of what follows the same text
earlier in the completion, not a look back from an option's text to the letter before it in the
prompt (a 135M model fine-tuned on walks that concluded ``So: B. back-right`` copied the
motions correctly and then named a wrong letter for most answers).

Where the text's evidence leads to the solution by the oracle's rules, the rationale is
``supported``. Where it does not (the text lacks the information, or a motion the sparse key
frames merged away), the walk is the same and the conclusion is the true answer; callers may drop
those rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.perception_text import FrameText, PerceptionText
from embodied_r_ros.core.reasoning import parse_options
from embodied_r_ros.reading.rule_reader import (
    Map,
    build_map,
    colour_of,
    first_sightings,
)
from embodied_r_ros.sim import question_basis
from embodied_r_ros.sim.question_basis import PATH_KINDS, QuestionBasis
from embodied_r_training.data.oracle import solve
from embodied_r_training.data.row_records import perception_of


@dataclass(frozen=True)
class Rationale:
    think: str
    answer: str  # the answer tag's contents: "B. option text" or "option text"
    supported: bool  # the walked-through evidence gives this answer by the oracle's rules

    @property
    def completion(self) -> str:
        return f"<think>{self.think}</think>\n<answer>{self.answer}</answer>"


def _side(bearing: float) -> str:
    return f"{round(abs(bearing))} {'left' if bearing >= 0 else 'right'}"


def _motion(f: FrameText, which: str) -> str | None:
    """``rotate right 30`` / ``move forward 1.2, rotate left 54`` (the prompt's units are
    implied): every component the line writes, or its one action."""
    if which == "none":
        return None
    parts = f.parts if len(f.parts) > 1 else ((f.action, f.amount),) if f.action else ()
    notes = []
    for action, amount in parts:
        if action not in ACTIONS or (which == "rotations" and not action.startswith("rotate")):
            continue
        value = f"{amount or 0.0:.1f}" if action.startswith("move") else f"{amount or 0.0:.0f}"
        notes.append(f"{action} {value}")
    return ", ".join(notes) or None


def _walk(p: PerceptionText, colours: Sequence[str] = (), *, motions: str = "all",
          bearings: bool = True, steps: Mapping[int, int] | None = None,
          start: int = 0) -> str:
    """One note per key frame from ``start`` on that has something the question needs: its
    motion (all, only rotations, or none) and where the given colours are in it; frames with
    neither are left out."""
    notes = []
    for f in p.frames[start:]:
        parts = []
        m = _motion(f, motions) if f.index > 0 else None
        if m is not None:
            parts.append(m + (f" (step {steps[f.index]})" if steps and f.index in steps else ""))
        for c in colours:
            if c in f.sightings:
                parts.append(f"{c} {_side(f.sightings[c].bearing_deg)}" if bearings else c)
        if parts:
            notes.append(f"Frame {f.index}: {', '.join(parts)}.")
    return " ".join(notes) if notes else "No frame shows anything the question needs."


def _now(world: Map, colour: str) -> str:
    """Where ``colour`` is at the last frame, by the text (dead reckoning when out of view)."""
    last = world.frames[-1]
    if colour in last.sightings:
        return f"Now {colour} is {_side(last.sightings[colour].bearing_deg)}."
    seen = world.sightings(colour)
    if not seen:
        return f"{colour} is never seen."
    i, s = seen[-1]
    turn = sum((f.amount or 0.0) * (1 if f.action == "rotate right" else -1)
               for f in world.frames[i + 1:] if f.action in ("rotate left", "rotate right"))
    now = world.bearing_now(colour)
    text = f"{colour} was {_side(s.bearing_deg)} in frame {i}"
    if round(turn):
        text += f", then I turned {round(abs(turn))} {'right' if turn > 0 else 'left'}"
    if now is not None:
        text += f": now about {_side(now)}"
    return text + "."


def _names(b: QuestionBasis) -> list[str]:
    """The object names ("red box") a question names, in the order it mentions them (a route
    names its start, the object it faces and its goal before the waypoint between)."""
    if b.kind in PATH_KINDS:
        return []
    names = [b.objects[i] for i in (0, 1, 3, 2)] if b.kind == "route" else list(b.objects)
    return list(dict.fromkeys(names))


# ---------------------------------------------------------------- per category


def _track(p: PerceptionText, colour: str) -> str:
    """From the first sighting of ``colour`` on: where it is and how I turned, then now."""
    world = build_map(p)
    seen = world.sightings(colour)
    if not seen:
        return _now(world, colour)
    walk = _walk(p, [colour], motions="rotations", start=seen[0][0])
    return f"{walk} {_now(world, colour)}"


def _action_generation(p: PerceptionText, b: QuestionBasis, answer: str) -> str:
    if b.kind == "navigate":
        names = _names(b)
        return _track(p, colour_of(names[0]) if names else "")
    return _walk(p)


def _relative_direction(p: PerceptionText, b: QuestionBasis, answer: str) -> str:
    colours = [colour_of(n) for n in _names(b)]
    if not colours:  # a place of the robot's own path: the motions locate it
        return _walk(p)
    if b.kind == "direction":
        return _track(p, colours[0])
    return _walk(p, colours, motions="none")


def _relative_distance(p: PerceptionText, b: QuestionBasis, answer: str) -> str:
    names = _names(b)
    if not names:  # places of the robot's own path: the motions locate them
        return _walk(p)
    target = names[-1]
    walk = _walk(p, [colour_of(n) for n in names], motions="none")
    a, b = colour_of(target), colour_of(answer)
    f = _last_shared(p, a, b)
    if f is None:
        return walk
    apart = round(abs(f.sightings[a].bearing_deg - f.sightings[b].bearing_deg))
    return f"{walk} In frame {f.index} {a} and {b} are {apart} apart."


def _last_shared(p: PerceptionText, a: str, b: str) -> FrameText | None:
    """The last frame that shows both colours: the freshest bearing gap between them."""
    return next((f for f in reversed(p.frames) if a in f.sightings and b in f.sightings), None)


def _appearance_order(p: PerceptionText, b: QuestionBasis, answer: str) -> str:
    colours = [colour_of(n) for n in _names(b)]
    first = first_sightings(p)
    order = sorted((c for c in colours if c in first), key=lambda c: first[c])
    missing = [c for c in colours if c not in first]
    seen = f"First: {', '.join(order)}." if order else "None of them is seen."
    if missing and order:
        seen += f" Never seen: {', '.join(missing)}."
    walk = _walk(p, colours, motions="none", bearings=False)
    return f"{walk} {seen}"


def _route_planning(p: PerceptionText, b: QuestionBasis, answer: str) -> str:
    colours = [colour_of(n) for n in _names(b)]
    if not colours:  # the way back to a place of the robot's own path
        return _walk(p)
    return _walk(p, colours, motions="none")


def _progress_evaluation(p: PerceptionText, b: QuestionBasis, answer: str) -> str:
    steps = b.plan
    mapping: dict[int, int] = {}
    current, done = 0, 0.0
    for f in p.frames[1:]:
        if f.action not in ACTIONS:
            continue
        ahead = [k for k in range(current, len(steps)) if steps[k][1] == f.action]
        if not ahead:
            continue
        if ahead[0] > current:
            current, done = ahead[0], 0.0
        mapping[f.index] = steps[current][0]
        done += f.amount or 0.0
        tolerance = 0.15 if f.action.startswith("move") else 6.0
        if done >= steps[current][2] - tolerance and current + 1 < len(steps):
            current, done = current + 1, 0.0
    return _walk(p, steps=mapping)


_WRITERS = {
    "action_generation": _action_generation,
    "relative_direction": _relative_direction,
    "relative_distance": _relative_distance,
    "appearance_order": _appearance_order,
    "route_planning": _route_planning,
    "progress_evaluation": _progress_evaluation,
}


def rationale(row: Mapping[str, Any], *, letter: bool = True) -> Rationale:
    """The cold-start completion of a built row; it always concludes the row's solution. A
    row whose builder knows more of its questions than this module's rule reader carries its
    own ``rule_reading`` (``{"evidence": text, "letter": the letter it reaches or None}``),
    which the think text walks instead.

    ``letter``: the conclusion and the answer tag read ``"B. option text"`` (else just the
    option text). A think text that names its letter is one any reference LM reads (the
    official local consistency reward even falls back to a regex for that letter:
    ``train/reward/consistency_reward_local.py`` of Embodied-R.code).
    """
    options = dict(parse_options(row["options"]))
    choice = str(row["solution"]).strip()[:1].upper()
    if choice not in options:
        raise ValueError(f"row {row.get('id')}: solution {row['solution']!r} is not an option")
    text = options[choice]
    if (reading := row.get("rule_reading")) is not None:  # written by the row's builder
        evidence, supported = str(reading["evidence"]), reading.get("letter") == choice
    else:
        writer = _WRITERS.get(str(row.get("category")))
        stated = perception_of(row)
        evidence = writer(stated, question_basis.of_row(row, stated), text) if writer else ""
        supported = solve(row).letter == choice
    if letter:
        notes = f"{options_listing(row['options'])} {evidence}".rstrip()
        return Rationale(f"{notes} So: {text} = {choice}.", f"{choice}. {text}", supported)
    think = f"{evidence} So: {text}" if evidence else f"So: {text}"
    return Rationale(think, text, supported)


def options_listing(options: Sequence[str]) -> str:
    """How a rationale with the letter opens: ``Options: text = A; ...; text = D.``"""
    listing = "; ".join(f"{text} = {key}" for key, text in parse_options(options))
    return f"Options: {listing}."


def completion(row: Mapping[str, Any], *, letter: bool = True) -> str:
    return rationale(row, letter=letter).completion

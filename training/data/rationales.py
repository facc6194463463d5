"""Cold-start reasoning texts: a walk through the frames that reaches the true answer.

DeepSeek-R1 starts RL from a model fine-tuned on a few thousand readable reasoning traces; here
the traces are written from a built row: its own perception text (parsed by
:mod:`embodied_r_training.data.oracle`) for the evidence, and the row's solution for the conclusion.

The think text walks through the key frames in order and copies, frame by frame, only what the
question needs (the motion, and where the question's objects are), then draws the conclusion
from those notes and names the answer. Copying one frame after another is what a small LM can
learn from a few hundred examples; finding "the first frame that shows yellow" anywhere in a
600-token prompt in one jump is not (measured: a 135M model fine-tuned on 400 traces that
stated the evidence without the walk stayed at chance). The completion is
``<think>..</think>\\n<answer>..</answer>`` with nothing after it; the conclusion and the answer
are the option's letter and text (``So: B. back-right``, or text first: ``So: back-right (B)``,
or the text and then the options walked to the one it names: ``So: back-right. A. left: no.
B. back-right: yes.``), or its text alone (the core's answer parsing reads either). With
``option_check``, the categories whose conclusion a small LM cannot draw in one jump check each
option by a local rule instead (appearance order: each object's first frame, then the options
whose numbers never fall; relative distance: each option's bearing gap to the target in the
last frame that shows both, then the smallest so far); the others walk the options.

Where the text's evidence leads to the solution by the oracle's rules, the rationale is
``supported``. Where it does not (the text lacks the information, or a motion the sparse key
frames merged away), the walk is the same and the conclusion is the true answer; callers may drop
those rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_training.data.oracle import (
    Map,
    appearance_key,
    build_map,
    colour_of,
    first_sightings,
    perception_of,
    plan_steps,
    solve,
)

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.core.perception_text import FrameText, PerceptionText
from embodied_r_ros.core.reasoning import parse_options


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
    """``rotate right 30`` / ``move forward 1.2`` (the prompt's units are implied)."""
    if f.action not in ACTIONS or which == "none":
        return None
    if which == "rotations" and not f.action.startswith("rotate"):
        return None
    amount = f.amount or 0.0
    value = f"{amount:.1f}" if f.action.startswith("move") else f"{amount:.0f}"
    return f"{f.action} {value}"


def _walk(p: PerceptionText, colours: Sequence[str] = (), *, motions: str = "all",
          bearings: bool = True, steps: Mapping[int, int] | None = None,
          start: int = 0, every: bool = False) -> str:
    """One note per key frame from ``start`` on that has something the question needs: its
    motion (all, only rotations, or none) and where the given colours are in it; frames with
    neither are left out.

    ``every`` (``sft.walk: every_frame``): a note for every frame, each opening with the
    frame's reported motion (``start`` for frame 0) and then, where colours are asked for,
    where they are or ``nothing``. A 135M model writing the sparse walk put a fifth of its
    sightings in a neighbouring frame (the prompt's "After <motion>, Observe: <what>" puts a
    frame's sightings just before the next frame's motion); copying the motion first anchors
    each note on its own line, and the frame numbers simply count up."""
    if every:
        return " ".join(_anchored_note(f, colours, bearings, steps) for f in p.frames[start:])
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


def _anchored_note(f: FrameText, colours: Sequence[str], bearings: bool,
                   steps: Mapping[int, int] | None) -> str:
    """``Frame 3: tilt upward 20: red 27 left.`` (see :func:`_walk`)."""
    anchor = "start" if f.index == 0 else (_motion(f, "all") or "no motion")
    if steps and f.index in steps:
        anchor += f" (step {steps[f.index]})"
    if not colours:
        return f"Frame {f.index}: {anchor}."
    seen = [f"{c} {_side(f.sightings[c].bearing_deg)}" if bearings else c
            for c in colours if c in f.sightings]
    return f"Frame {f.index}: {anchor}: {', '.join(seen) if seen else 'nothing'}."


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


def _names(question: str) -> list[str]:
    """Object names ("red box") in the order the question mentions them."""
    found = re.findall(rf"\b((?:{'|'.join(COLOUR_NAMES)}) [a-z]+)\b", question)
    out: list[str] = []
    for name in found:
        if name not in out:
            out.append(name)
    return out


# ---------------------------------------------------------------- per category


def _track(p: PerceptionText, colour: str, every: bool = False) -> str:
    """From the first sighting of ``colour`` on: where it is and how I turned, then now."""
    world = build_map(p)
    seen = world.sightings(colour)
    if not seen:
        return _now(world, colour)
    walk = _walk(p, [colour], motions="rotations", start=seen[0][0], every=every)
    return f"{walk} {_now(world, colour)}"


def _action_generation(p: PerceptionText, answer: str, every: bool = False) -> str:
    q = p.question
    if q.startswith("You are asked to navigate to the"):
        names = _names(q)
        return _track(p, colour_of(names[0]) if names else "", every)
    return _walk(p, every=every)


def _relative_direction(p: PerceptionText, answer: str, every: bool = False) -> str:
    colours = [colour_of(n) for n in _names(p.question)]
    if p.question.startswith("Where is the"):
        return _track(p, colours[0], every)
    return _walk(p, colours, motions="none", every=every)


def _relative_distance(p: PerceptionText, answer: str, every: bool = False) -> str:
    names = _names(p.question)
    target = names[-1] if names else ""
    walk = _walk(p, [colour_of(n) for n in names], motions="none", every=every)
    a, b = colour_of(target), colour_of(answer)
    f = _last_shared(p, a, b)
    if f is None:
        return walk
    apart = round(abs(f.sightings[a].bearing_deg - f.sightings[b].bearing_deg))
    return f"{walk} In frame {f.index} {a} and {b} are {apart} apart."


def _last_shared(p: PerceptionText, a: str, b: str) -> FrameText | None:
    """The last frame that shows both colours: the freshest bearing gap between them."""
    return next((f for f in reversed(p.frames) if a in f.sightings and b in f.sightings), None)


def _appearance_order(p: PerceptionText, answer: str, every: bool = False) -> str:
    colours = [colour_of(n) for n in _names(p.question)]
    first = first_sightings(p)
    order = sorted((c for c in colours if c in first), key=lambda c: first[c])
    missing = [c for c in colours if c not in first]
    seen = f"First: {', '.join(order)}." if order else "None of them is seen."
    if missing and order:
        seen += f" Never seen: {', '.join(missing)}."
    walk = _walk(p, colours, motions="none", bearings=False, every=every)
    return f"{walk} {seen}"


def _route_planning(p: PerceptionText, answer: str, every: bool = False) -> str:
    colours = [colour_of(n) for n in _names(p.question)]
    return _walk(p, colours, motions="none", every=every)


def _progress_evaluation(p: PerceptionText, answer: str, every: bool = False) -> str:
    steps = plan_steps(p.question)
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
    return _walk(p, steps=mapping, every=every)


def _appearance_check(p: PerceptionText, options: Mapping[str, str], choice: str,
                      every: bool = False) -> tuple[str, bool]:
    """The objects' first frames in the question's order (``magenta cylinder 5``), then each
    option with those numbers, ``yes`` at the first whose numbers never fall. Each number is
    one forward lookup (name -> the number after it) and each verdict compares neighbours,
    where matching a permutation against a conclusion text is not something a 135M LM learns
    (3 of 18 such option walks named their own conclusion's letter)."""
    names = _names(p.question)
    first = first_sightings(p)

    def seen(name: str) -> str:
        hit = first.get(colour_of(name))
        return f"{name} {hit[0]}" if hit else f"{name} never"

    def rank(name: str) -> int:  # the frame only: the text shows no tie-break
        return appearance_key(first, name)[0]

    walk = _walk(p, [colour_of(n) for n in names], motions="none", bearings=False,
                 every=every)
    checks, reached = [], None
    for key, option in options.items():
        items = [n.strip() for n in option.rstrip(".").split(",")]
        ranks = [rank(n) for n in items]
        rising = all(a <= b for a, b in zip(ranks, ranks[1:], strict=False))
        checks.append(f"{key}. {', '.join(seen(n) for n in items)}: {'yes' if rising else 'no'}.")
        if rising:
            reached = key
            break
    think = f"{walk} First: {', '.join(seen(n) for n in names)}. So: {' '.join(checks)}"
    return think, reached == choice


def _distance_check(p: PerceptionText, options: Mapping[str, str], choice: str,
                    every: bool = False) -> tuple[str, bool]:
    """Each option's bearing gap to the target in the last frame that shows both, copied
    from that frame before it is subtracted, and the smallest gap so far marked; the last
    option so marked is the answer. The gap stands in for the distance (on the ID test set it
    picks the solution in 17 of 30 rows, the oracle's triangulation in 18) and each step is
    local; no frame walk comes first (``every`` has nothing to change), as the checks copy
    the frames they need (the walk made the OOD texts run past 256 tokens)."""
    names = _names(p.question)
    target = colour_of(names[-1]) if names else ""
    checks, best = [], None
    for key, option in options.items():
        colour = colour_of(option.strip())
        f = _last_shared(p, target, colour)
        name = option.rstrip(".")
        if f is None:
            checks.append(f"{key}. {name}: never seen with {target}.")
            continue
        a, b = (round(f.sightings[c].bearing_deg) for c in (target, colour))
        gap = abs(a - b)
        note = (f"{key}. {name}: frame {f.index}, {target} {_side(a)}, {colour} {_side(b)}: "
                f"{gap} apart")
        if best is None or gap < best[0]:
            best = (gap, key)
            note += ", closest so far"
        checks.append(note + ".")
    reached = best[1] if best else None
    said = f"{reached}. {options[reached].rstrip('.')}" if reached else "none"
    return f"{' '.join(checks)} So: {said}.", reached == choice


_CHECKS = {
    "appearance_order": _appearance_check,
    "relative_distance": _distance_check,
}

_WRITERS = {
    "action_generation": _action_generation,
    "relative_direction": _relative_direction,
    "relative_distance": _relative_distance,
    "appearance_order": _appearance_order,
    "route_planning": _route_planning,
    "progress_evaluation": _progress_evaluation,
}


def rationale(row: Mapping[str, Any], *, letter: bool = True,
              conclusion: str = "letter_first", walk: str = "needed") -> Rationale:
    """The cold-start completion of a built row; it always concludes the row's solution.

    ``letter``: the conclusion and the answer tag read ``"B. option text"`` (else just the
    option text). A think text that names its letter is one any reference LM reads (the
    official local consistency reward even falls back to a regex for that letter).
    ``conclusion`` (``sft.conclusion``; with ``letter``): ``text_first`` reads
    ``"back-right (B)"``, the option text the walk leads to before the letter; ``option_walk``
    reads ``"back-right. A. left: no. B. back-right: yes."``, the text, then the options in
    order, each copied and compared with it, up to the one it names; ``option_check`` is the
    option walk except in the categories of ``_CHECKS``, whose think text checks each option by
    a local rule and is ``supported`` when that rule reaches the solution. The answer tag is
    the same for all four. ``walk`` (``sft.walk``): ``needed`` notes only the frames with
    something the question needs; ``every_frame`` notes every frame, anchored on its motion.
    """
    if walk not in ("needed", "every_frame"):
        raise ValueError(f"walk must be 'needed' or 'every_frame', not {walk!r}")
    every = walk == "every_frame"
    options = dict(parse_options(row["options"]))
    choice = str(row["solution"]).strip()[:1].upper()
    if choice not in options:
        raise ValueError(f"row {row.get('id')}: solution {row['solution']!r} is not an option")
    text = options[choice]
    answer = f"{choice}. {text}" if letter else text
    p = perception_of(row)
    check = _CHECKS.get(str(row.get("category")))
    checked = letter and conclusion == "option_check" and check is not None
    if checked:
        think, supported = check(p, options, choice, every)
        if supported:
            return Rationale(think, answer, True)
        # the check reaches another option: walk the options to the solution, unsupported
    writer = _WRITERS.get(str(row.get("category")))
    evidence = writer(p, text, every) if writer else ""
    said = _conclusion(options, choice, letter=letter, conclusion=conclusion)
    think = f"{evidence} So: {said}" if evidence else f"So: {said}"
    supported = not checked and solve(row).letter == choice
    return Rationale(think, answer, supported)


def _conclusion(options: Mapping[str, str], choice: str, *, letter: bool,
                conclusion: str) -> str:
    """What follows "So:" (see :func:`rationale`)."""
    text = options[choice]
    if not letter:
        return text
    if conclusion == "text_first":
        return f"{text} ({choice})"
    if conclusion in ("option_walk", "option_check"):
        def bare(t: str) -> str:
            return t.rstrip(".")

        walk = []
        for key, option in options.items():
            walk.append(f"{key}. {bare(option)}: {'yes' if key == choice else 'no'}.")
            if key == choice:
                break
        return f"{bare(text)}. {' '.join(walk)}"
    return f"{choice}. {text}"


def completion(row: Mapping[str, Any], *, letter: bool = True,
               conclusion: str = "letter_first", walk: str = "needed") -> str:
    return rationale(row, letter=letter, conclusion=conclusion, walk=walk).completion

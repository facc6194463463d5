"""The long world's memory questions answered from their perception record alone: the ceiling.

A memory question (``python -m lab.long_world``) is answered from the frames a memory retrieved
and the places block the memory writes after them: where each object the question names is now
(distance, bearing, how sure), when it was seen, the spot it was last seen from, and the named
objects nearest it, placed by the memory from the poses of every frame that showed it
(:mod:`embodied_r_ros.memory.places`). This reader uses exactly those notes, the record's
``places`` (a record without them, a window's, is placed from its own frames the same way:
:func:`record_places`), never the world's ground truth. Its
accuracy is what the text allows at best.

Its evidence states each step in the words of the places lines (where an object is now, how
far, when it was last seen), then the comparison that picks the option, so a think text built
on it is a chain a reasoner can copy and check. What the notes cannot carry is answered
``None`` and says why in its evidence. The question generator (:mod:`lab.long_world.questions`)
asks only what the text can decide; the reader still has to find it:

- the geometric perception names **colours**, not shapes: "the red box" is read as a red
  object, the one seen about the time the question names ("the red box you saw about 20
  minutes ago"), else the one seen last; a guess along one bearing is no ``next_to`` answer
  (the notes list only placed objects as nearest). A grounding VLM's objects are named by
  their labels: "the red box" is an object whose label's head noun is "box" and whose colour,
  where the label states one, is red (:func:`names`), chosen by time the same way;
- it names **no rooms and no doorways**: "the red box in room 3" reads as the red box, and the
  route back is the first turn towards the spot the object was last seen from.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.core.perception_text import bearing_words
from embodied_r_ros.core.poses import Pose, quadrant
from embodied_r_ros.core.reasoning import parse_options
from embodied_r_ros.core.records import (
    ColourNote,
    FrameRecord,
    ObjectPlace,
    PerceptionRecord,
    PlaceNote,
)
from embodied_r_ros.memory.labels import head_word, label_words, singular
from embodied_r_ros.memory.placements import place_frames
from embodied_r_ros.memory.places import Now, place_notes
from embodied_r_ros.reading.rule_reader import OracleAnswer, letter_where
from embodied_r_training.data.row_records import record_of
from lab.long_world.question_rules import AGE_BANDS, DISTANCE_BANDS, nearest_turn

#: "the red box", "the red box in room 3", "the red box you saw about 20 minutes ago"
_REF_RE = re.compile(r"the (\w+) (\w+)(?: in ((?:room \d+)|(?:the corridor)))?"
                     r"(?: you saw about (\d+) minutes? ago)?")
_WINDOW_RE = re.compile(r"in the last (?:(\d+) minutes|minute)|at all so far")


@dataclass(frozen=True)
class Reference:
    """An object as a question names it; the text can use the colour and the time only."""

    colour: str
    shape: str
    area: str | None = None
    minutes_ago: float | None = None


def references(text: str) -> list[Reference]:
    """Every object ``text`` names, in order."""
    return [Reference(m.group(1), m.group(2), m.group(3),
                      float(m.group(4)) if m.group(4) else None)
            for m in _REF_RE.finditer(text)]


def _band(number: float, written: str,
          bands: Sequence[tuple[float, float, str]]) -> tuple[str, str]:
    """The band of ``number`` (written ``written``), and the comparison that puts it there,
    edge by edge: ``14.2 is over 10, so more than 10 m``."""
    lo, hi, words = next(b for b in bands if b[0] <= number < b[1])
    edges = [f"over {lo:g}" if lo > 0 else "", f"under {hi:g}" if math.isfinite(hi) else ""]
    return words, f"{written} is {' and '.join(e for e in edges if e)}, so {words}"


def names(ref: Reference, note: ObjectPlace) -> bool:
    """Whether ``note`` is of the object ``ref`` names: a colour region of its colour, or a
    labelled object whose label's head noun is its shape and which states no other colour."""
    if note.colour is not None:
        return note.colour == ref.colour
    stated = {w for w in label_words(note.name) if w in COLOUR_NAMES}
    return head_word(note.name) == singular(ref.shape) and (not stated or ref.colour in stated)


def _before(pose: Pose, motion: Motion) -> Pose:
    """The pose a metric ``motion`` (in the earlier pose's heading frame) ended at ``pose``
    from."""
    yaw = pose.yaw_deg - motion.yaw_deg
    c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    return Pose(pose.x - (c * motion.forward - s * motion.left),
                pose.y - (s * motion.forward + c * motion.left), pose.z - motion.up, yaw,
                pose.pitch_deg - motion.pitch_deg)


def frame_poses(frames: Sequence[FrameRecord]) -> list[Pose | None]:
    """Each frame's camera pose: the record's own where every frame has one, else the
    measured metric motions composed back from the last frame (at the origin, facing +x); a
    frame before an unknown motion has none."""
    if all(f.pose is not None for f in frames):
        return [f.pose for f in frames]
    out: list[Pose | None] = [None] * len(frames)
    if frames:
        out[-1] = Pose()
    for i in range(len(frames) - 1, 0, -1):
        motion, pose = frames[i].motion, out[i]
        if pose is None or motion is None or not motion.metric:
            break
        out[i - 1] = _before(pose, motion)
    return out


def record_places(record: PerceptionRecord) -> tuple[PlaceNote, ...]:
    """The places a record carries, else those its own frames place (from their poses, or the
    motions it measured, by the memory's placements): a window's record read as a memory's
    would be."""
    if record.places is not None:
        return record.places
    poses = frame_poses(record.frames)
    newest = next((p for p in reversed(poses) if p is not None), None)
    if newest is None:
        return ()
    placements = place_frames(zip(record.frames, poses, strict=True))
    return place_notes(placements, record.question, record.options,
                       Now.at(record.frames[-1].stamp, newest))


class Places:
    """The places notes of a record (its question's named objects), as the reader looks
    objects up in them."""

    def __init__(self, record: PerceptionRecord) -> None:
        self.notes: tuple[PlaceNote, ...] = record_places(record)
        self.question = record.question.strip()
        self.options = parse_options(list(record.options))

    def objects(self, ref: Reference) -> list[ObjectPlace]:
        return [n for n in self.notes if isinstance(n, ObjectPlace) and names(ref, n)]

    def find(self, ref: Reference) -> ObjectPlace | None:
        """The object ``ref`` names seen about the minutes it states, else the one seen
        last."""
        found = self.objects(ref)
        if not found:
            return None
        if ref.minutes_ago is not None:
            want = ref.minutes_ago * 60.0
            return min(found, key=lambda n: min(abs(a - want) for a in n.visits_s))
        return min(found, key=lambda n: n.last_s)

    def note(self, colour: str) -> ColourNote | None:
        return next((n for n in self.notes if isinstance(n, ColourNote) and n.colour == colour),
                    None)

    def last_seen_s(self, ref: Reference) -> float | None:
        """How long ago a frame last showed the object ``ref`` names (or its colour)."""
        ages = [n.last_s for n in self.objects(ref)]
        note = self.note(ref.colour)
        if note is not None and note.last_seen_s is not None:
            ages.append(note.last_seen_s)
        return min(ages) if ages else None


def _placed(places: Places, ref: Reference) -> tuple[ObjectPlace | None, str]:
    """The object ``ref`` means with a place, or None and why not."""
    obj = places.find(ref)
    if obj is None:
        return None, f"no {ref.colour} object in the text"
    if obj.now is None:
        return None, f"the {obj.name} cannot be placed from the text"
    return obj, ""


def _first_ref(places: Places) -> Reference | None:
    refs = references(places.question)
    return refs[0] if refs else None


def solve_object_direction(places: Places) -> OracleAnswer:
    ref = _first_ref(places)
    if ref is None:
        return OracleAnswer(None, "no object named")
    obj, why = _placed(places, ref)
    if obj is None or obj.now is None:
        return OracleAnswer(None, why)
    bearing = obj.now[1]
    where = quadrant(bearing)
    return OracleAnswer(letter_where(places.options, lambda t: t == where),
                        f"the {obj.name} is now {bearing_words(bearing)}")


def solve_object_distance(places: Places) -> OracleAnswer:
    ref = _first_ref(places)
    if ref is None:
        return OracleAnswer(None, "no object named")
    obj, why = _placed(places, ref)
    if obj is None or obj.now is None:
        return OracleAnswer(None, why)
    d = float(f"{obj.now[0]:.1f}")  # as the line writes it
    band, step = _band(d, f"{d:.1f}", DISTANCE_BANDS)
    return OracleAnswer(letter_where(places.options, lambda t: t == band),
                        f"the {obj.name} is now {d:.1f} m away: {step}")


def solve_last_seen(places: Places) -> OracleAnswer:
    ref = _first_ref(places)
    if ref is None:
        return OracleAnswer(None, "no object named")
    age = places.last_seen_s(ref)
    if age is None:
        return OracleAnswer(None, f"no {ref.colour} object in the text")
    band, step = _band(age, f"{age:.0f} s", AGE_BANDS)
    found = places.objects(ref)
    called = (f"the {ref.colour} {ref.shape}" if found and all(n.colour is None for n in found)
              else f"the {ref.colour} object")
    return OracleAnswer(letter_where(places.options, lambda t: t == band),
                        f"{called} was last seen {age:.0f} s ago: {step}")


def solve_next_to(places: Places) -> OracleAnswer:
    ref = _first_ref(places)
    if ref is None:
        return OracleAnswer(None, "no object named")
    obj, why = _placed(places, ref)
    if obj is None:
        return OracleAnswer(None, why)
    # one bearing places nothing: the notes list only triangulated objects as nearest (a
    # colour region by its colour, a labelled object by its label)
    if obj.colour is None:
        labels = {text for _, text in places.options}
        near = [(name, d) for name, d in obj.nearby if name in labels]
        if not near:
            return OracleAnswer(None, "no option's object placed")
        other, d = near[0]
        return OracleAnswer(letter_where(places.options, lambda t: t == other),
                            f"of the options, the {other} is nearest the {obj.name}: "
                            f"{d:.1f} m")
    colours = {text.split()[0] for _, text in places.options}
    near = [(name, d) for name, d in obj.nearby if name in colours]
    if not near:
        return OracleAnswer(None, "no option's object placed")
    other, d = near[0]
    letter = letter_where(places.options, lambda t: t.split()[0] == other)
    return OracleAnswer(letter, f"of the options' colours, {other} is nearest the "
                                f"{ref.colour} object: {d:.1f} m")


def window_s(question: str) -> float | None:
    """The window of "did you see ... in the last N minutes" (infinite: "at all so far")."""
    m = _WINDOW_RE.search(question)
    if m is None:
        return None
    if m.group(0) == "at all so far":
        return math.inf
    return 60.0 * (float(m.group(1)) if m.group(1) else 1.0)


def asked_colour(question: str) -> str | None:
    """The colour a "did you see a red box ..." question asks about (None: another question,
    or none named)."""
    m = re.match(r"Did you see an? (\w+) ", question)
    return m.group(1) if m else None


def _named(text: str) -> Reference:
    """The object an option or a did-you-see question names ("red box")."""
    words = text.split()
    return Reference(words[0], words[1] if len(words) > 1 else "")


def solve_seen(places: Places) -> OracleAnswer:
    """Whether the object a question or an option names was last seen within the window
    (a colour region by its colour: the evidence names the colour)."""
    window = window_s(places.question)
    if window is None:
        return OracleAnswer(None, "no time window")
    last_seen_s = functools.cache(lambda name: places.last_seen_s(_named(name)))

    def seen(name: str) -> bool:
        age = last_seen_s(name)
        return age is not None and age <= window

    def when(name: str) -> str:
        """When ``name``'s colour was last seen, against the window's edge in seconds."""
        age, colour = last_seen_s(name), name.split()[0]
        if age is None:
            return f"{colour} is in none of these frames"
        edge = "" if math.isinf(window) else (
            f" ({age:.0f} is {'under' if age <= window else 'over'} {window:.0f})")
        return f"{colour} was last seen {age:.0f} s ago{edge}"

    if places.question.startswith("Did you see"):
        asked = re.match(r"Did you see an? (\w+(?: \w+)?)", places.question)
        if asked is None:
            return OracleAnswer(None, "no object named")
        word = "yes" if seen(asked.group(1)) else "no"
        return OracleAnswer(letter_where(places.options, lambda t: t == word),
                            f"{when(asked.group(1))}: {word}")
    letter = letter_where(places.options, seen)
    shown = next((t for key, t in places.options if key == letter), None)
    return OracleAnswer(letter, when(shown) if shown else "no option's colour in the window")


def solve_route_back(places: Places) -> OracleAnswer:
    """The first turn towards the spot the camera last saw the object (the one the question
    names) from."""
    ref = _first_ref(places)
    if ref is None:
        return OracleAnswer(None, "no object named")
    obj = places.find(ref)
    if obj is None:
        return OracleAnswer(None, f"no {ref.colour} object in the text")
    if obj.seen_from is None:
        return OracleAnswer(None, "the frame cannot be placed")
    bearing = obj.seen_from[1]
    turn = nearest_turn(bearing)
    return OracleAnswer(letter_where(places.options, lambda t: t.rstrip(".").lower() == turn),
                        f"the spot the frame {obj.last_s:.0f} s old was taken from is now "
                        f"{bearing_words(bearing)}: {turn}")


def solve_closer(places: Places) -> OracleAnswer:
    placed: list[tuple[float, str]] = []
    for letter, text in places.options:
        refs = references(text)
        if not refs:
            continue
        obj, _ = _placed(places, refs[0])
        if obj is None or obj.now is None:
            continue
        placed.append((obj.now[0], letter))
    if not placed:
        return OracleAnswer(None, "neither object placed")
    # by letter, not colour: two options may name objects of one colour
    distances = " and ".join(f"{key} {x:.1f} m" for x, key in sorted(placed, key=lambda p: p[1]))
    letter = min(placed)[1]
    return OracleAnswer(letter, f"{distances} away: {letter} is closer")


SOLVERS: dict[str, Callable[[Places], OracleAnswer]] = {
    "object_direction": solve_object_direction,
    "object_distance": solve_object_distance,
    "last_seen": solve_last_seen,
    "next_to": solve_next_to,
    "seen": solve_seen,
    "route_back": solve_route_back,
    "closer": solve_closer,
}


def solve_record(category: str, record: PerceptionRecord) -> OracleAnswer:
    """The oracle's answer to a long-world question of ``category`` from its record's
    places."""
    solver = SOLVERS.get(category)
    if solver is None:
        return OracleAnswer(None, "unknown category")
    return solver(Places(record))


def solve(row: Mapping[str, Any]) -> OracleAnswer:
    """The oracle's answer to a built dataset row of the long world (from its record)."""
    return solve_record(str(row.get("category")), record_of(row))


def answer_letter(category: str, record: PerceptionRecord) -> str:
    """A letter always: the oracle's, else the first option (the text decides nothing), as
    :func:`embodied_r_training.data.oracle.answer_letter` scores it."""
    return solve_record(category, record).letter or "A"

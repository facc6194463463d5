"""The long world's memory questions answered from their perception text alone: the ceiling.

A memory question (``embodied-r world --long``) is answered from the frames a memory retrieved,
written as the robot route writes them: each frame's age before the last one, the whole motion
from the previous selected frame, and what the frame shows. This reader uses exactly that text,
never the world's ground truth: dead reckoning of the written motions (``dead_reckoning``), the
stated ages, and the sightings of each colour. Its accuracy is what the text allows at best.

What the text cannot carry is answered ``None`` and says why in its evidence. The question
generator (:mod:`embodied_r_ros.sim.long_questions`) asks only what the text can decide; the
reader still has to find it:

- the geometric perception names **colours**, not shapes: "the red box" is read as a red
  object. A colour's bearing rays are grouped into objects by where they cross (a group
  grows while its rays still cross at one place, or while a ray only runs along its last
  one: the camera turned in place or walked towards the object; within a visit: stated ages
  less than :data:`VISIT_GAP_S` apart), groups placed about one spot are one object, and rays
  from a single viewpoint join an object they pass through or stay a guess along the ray,
  which no ``next_to`` answer uses. The object meant is the one seen about the time the
  question names ("the red box you saw about 20 minutes ago"), else the one seen last;
- it names **no rooms and no doorways**: "the red box in room 3" reads as the red box, and the
  route back is the first turn towards the pose of the frame that last showed the object.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_training.data.dead_reckoning import Pose2D, poses
from embodied_r_training.data.oracle import OracleAnswer, _letter_where, perception_of

from embodied_r_ros.core.perception_text import FrameText, PerceptionText, parse_perception
from embodied_r_ros.core.poses import heading_deg, quadrant, wrap_deg
from embodied_r_ros.sim.long_question_rules import (
    AGE_BANDS,
    DISTANCE_BANDS,
    crossing_deg,
    nearest_turn,
)

#: sightings of a colour whose stated ages are closer than this may belong to one visit
VISIT_GAP_S = 45.0
#: places closer than this are taken for one object
SAME_OBJECT_M = 2.0
#: a bearing ray passing this near a place is a sighting of the object there
RAY_GAP_M = 0.8
#: rays of one place must cross at least this angle for it to be triangulated (the text rounds
#: bearings to a degree: a narrower crossing would place it metres off)
MIN_CROSSING_DEG = 6.0
#: a place where no triangulation reaches: this far along the bearing ray
ASSUMED_RANGE_M = 3.5
MAX_RANGE_M = 15.0

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


@dataclass(frozen=True)
class Sighted:
    """One object as the text shows it: where (frame 0's floor frame, or None where the text
    cannot place it), whether that place was triangulated (else guessed along one bearing),
    and the stated ages of the frames that show it."""

    colour: str
    position: tuple[float, float] | None
    ages: tuple[float, ...]
    triangulated: bool = True


#: one bearing ray: the camera's place, the ray's direction (radians), and the frame
Ray = tuple[tuple[float, float], float, FrameText]


def triangulate(rays: Sequence[Ray]) -> tuple[float, float] | None:
    """The least-squares crossing of ``rays``, where they cross wide enough to place it (in
    front of every camera, within range, every ray within :data:`RAY_GAP_M`), else None."""
    if len(rays) < 2:
        return None
    if crossing_deg([a for _, a, _ in rays]) < MIN_CROSSING_DEG:
        return None
    a11 = a12 = a22 = b1 = b2 = 0.0
    for (ox, oy), ang, _ in rays:
        nx, ny = -math.sin(ang), math.cos(ang)
        c = nx * ox + ny * oy
        a11, a12, a22 = a11 + nx * nx, a12 + nx * ny, a22 + ny * ny
        b1, b2 = b1 + nx * c, b2 + ny * c
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-6:
        return None
    q = ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det)
    return q if all(_fits(q, r) for r in rays) else None


def _fits(q: tuple[float, float], ray: Ray) -> bool:
    """Whether place ``q`` lies in front of ``ray``'s camera, in range, near the ray."""
    (ox, oy), ang, _ = ray
    ahead = (q[0] - ox) * math.cos(ang) + (q[1] - oy) * math.sin(ang)
    aside = abs(-(q[0] - ox) * math.sin(ang) + (q[1] - oy) * math.cos(ang))
    return 0.3 < ahead < MAX_RANGE_M and aside < RAY_GAP_M


class Memory:
    """The objects of one perception text: each colour's bearing rays grouped into places."""

    def __init__(self, p: PerceptionText) -> None:
        self.p = p
        self.path: list[Pose2D] = poses(p.frames)
        self.now = self.path[-1]
        self._objects: dict[str, list[Sighted]] = {}

    def objects(self, colour: str) -> list[Sighted]:
        """The objects of ``colour``, seen last first."""
        if colour not in self._objects:
            self._objects[colour] = self._locate(colour)
        return self._objects[colour]

    def rays(self, colour: str) -> list[Ray]:
        out = []
        for i, f in enumerate(self.p.frames):
            if colour in f.sightings:
                pose = self.path[i]
                out.append(((pose.x, pose.y),
                            math.radians(pose.yaw + f.sightings[colour].bearing_deg), f))
        return out

    def _locate(self, colour: str) -> list[Sighted]:
        """Rays in time order join a group while the group's crossing stays consistent (a
        visit: stated ages less than :data:`VISIT_GAP_S` apart; the same colour seen in
        another room a few seconds later starts a new group); groups whose places agree, or
        a lone viewpoint's rays passing through a placed group, are one object."""
        groups: list[list[Ray]] = []
        for ray in self.rays(colour):
            last = groups[-1] if groups else None
            if last is not None and _age(last[-1][2]) - _age(ray[2]) <= VISIT_GAP_S and (
                    triangulate([*last, ray]) is not None
                    or (triangulate(last) is None and _along(last, ray))):
                last.append(ray)
                continue
            groups.append([ray])
        placed: list[list[Ray]] = []
        lone: list[list[Ray]] = []
        for g in groups:
            q = triangulate(g)
            if q is None:
                lone.append(g)
                continue
            near = next((m for m in placed
                         if math.dist(triangulate(m) or q, q) < SAME_OBJECT_M
                         and triangulate([*m, *g]) is not None), None)
            if near is None:
                placed.append(g)
            else:
                near.extend(g)
        out = []
        for g in lone:  # one viewpoint: a sighting of a placed object its rays pass through
            home = next((m for m in placed if triangulate([*m, *g]) is not None), None)
            if home is not None:
                home.extend(g)
            else:
                (ox, oy), ang, _ = g[-1]
                out.append(Sighted(colour, (ox + ASSUMED_RANGE_M * math.cos(ang),
                                            oy + ASSUMED_RANGE_M * math.sin(ang)),
                                   tuple(sorted(_age(r[2]) for r in g)), triangulated=False))
        for g in placed:
            q = triangulate(g)
            out.append(Sighted(colour, q, tuple(sorted(_age(r[2]) for r in g))))
        return sorted(out, key=lambda s: min(s.ages))

    def find(self, ref: Reference) -> Sighted | None:
        """The object ``ref`` means, as far as the text tells: seen about the time it names,
        else seen last; a triangulated place before a guessed one seen as late."""
        found = self.objects(ref.colour)
        if not found:
            return None
        if ref.minutes_ago is not None:
            want = ref.minutes_ago * 60.0
            return min(found, key=lambda s: min(abs(a - want) for a in s.ages))
        return found[0]

    def visit_ages(self, obj: Sighted, ref: Reference) -> tuple[float, ...]:
        """The stated ages of ``obj``'s frames that ``ref`` points at: the visit about the
        time it names (ages within :data:`VISIT_GAP_S` of the nearest one), else all."""
        if ref.minutes_ago is None:
            return obj.ages
        want = ref.minutes_ago * 60.0
        near = min(obj.ages, key=lambda a: abs(a - want))
        return tuple(a for a in obj.ages if abs(a - near) <= VISIT_GAP_S)

    def last_seen_s(self, colour: str) -> float | None:
        """The stated age of the newest frame showing ``colour``."""
        ages = [a for s in self.objects(colour) for a in s.ages]
        return min(ages) if ages else None

    def bearing_now(self, pos: tuple[float, float]) -> float:
        return wrap_deg(heading_deg((self.now.x, self.now.y), pos) - self.now.yaw)

    def distance_now(self, pos: tuple[float, float]) -> float:
        return math.dist((self.now.x, self.now.y), pos)

    def pose_at(self, age: float) -> Pose2D | None:
        """The camera's pose at the frame of stated age ``age``."""
        return next((pose for f, pose in zip(self.p.frames, self.path, strict=True)
                     if f.age_s is not None and abs(f.age_s - age) < 0.5), None)


def _along(group: Sequence[Ray], ray: Ray) -> bool:
    """Whether ``ray`` adds no crossing yet but contradicts nothing: from about the group's
    last viewpoint, pointing about the same way (the camera turned in place, keeping the
    object in view), or from a place on the last ray, pointing along it (the camera moved
    towards or away from the object)."""
    (ox, oy), ang, _ = group[-1]
    (px, py), b, _ = ray
    turn = abs(wrap_deg(math.degrees(b - ang)))
    if math.dist((ox, oy), (px, py)) < 0.3:
        return turn < 45.0
    aside = abs(-(px - ox) * math.sin(ang) + (py - oy) * math.cos(ang))
    return turn < MIN_CROSSING_DEG and aside < RAY_GAP_M


def _age(f: FrameText) -> float:
    return f.age_s if f.age_s is not None else 0.0


def _mean(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return (sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points))


def _band(value: float, bands: Sequence[tuple[float, float, str]]) -> str:
    return next(words for lo, hi, words in bands if lo <= value < hi)


def _placed(memory: Memory, ref: Reference) -> tuple[Sighted | None, str]:
    """The object ``ref`` means with a position, or None and why not."""
    obj = memory.find(ref)
    if obj is None:
        return None, f"no {ref.colour} object in the text"
    if obj.position is None:
        return None, f"the {ref.colour} object cannot be placed from the text"
    return obj, ""


def _first_ref(p: PerceptionText) -> Reference | None:
    refs = references(p.question)
    return refs[0] if refs else None


def solve_object_direction(p: PerceptionText) -> OracleAnswer:
    ref = _first_ref(p)
    if ref is None:
        return OracleAnswer(None, "no object named")
    memory = Memory(p)
    obj, why = _placed(memory, ref)
    if obj is None or obj.position is None:
        return OracleAnswer(None, why)
    bearing = memory.bearing_now(obj.position)
    where = quadrant(bearing)
    return OracleAnswer(_letter_where(p.options, lambda t: t == where),
                        f"{ref.colour} at about {bearing:.0f} degrees: {where}")


def solve_object_distance(p: PerceptionText) -> OracleAnswer:
    ref = _first_ref(p)
    if ref is None:
        return OracleAnswer(None, "no object named")
    memory = Memory(p)
    obj, why = _placed(memory, ref)
    if obj is None or obj.position is None:
        return OracleAnswer(None, why)
    d = memory.distance_now(obj.position)
    band = _band(d, DISTANCE_BANDS)
    return OracleAnswer(_letter_where(p.options, lambda t: t == band),
                        f"{ref.colour} about {d:.1f} m away: {band}")


def solve_last_seen(p: PerceptionText) -> OracleAnswer:
    ref = _first_ref(p)
    if ref is None:
        return OracleAnswer(None, "no object named")
    age = Memory(p).last_seen_s(ref.colour)
    if age is None:
        return OracleAnswer(None, f"no {ref.colour} object in the text")
    band = _band(age, AGE_BANDS)
    return OracleAnswer(_letter_where(p.options, lambda t: t == band),
                        f"{ref.colour} last in a frame {age:.0f} s old: {band}")


def solve_next_to(p: PerceptionText) -> OracleAnswer:
    ref = _first_ref(p)
    if ref is None:
        return OracleAnswer(None, "no object named")
    memory = Memory(p)
    obj, why = _placed(memory, ref)
    if obj is None or obj.position is None:
        return OracleAnswer(None, why)
    best: tuple[float, str] | None = None
    for letter, text in p.options:
        colour = text.split()[0]
        for other in memory.objects(colour):
            if other is obj or other.position is None:
                continue
            if not other.triangulated:  # one bearing places nothing: not a candidate
                continue
            d = math.dist(other.position, obj.position)
            best = min(best, (d, letter)) if best else (d, letter)
    if best is None:
        return OracleAnswer(None, "no option's object placed")
    return OracleAnswer(best[1], f"an option's colour {best[0]:.1f} m from the {ref.colour}")


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


def solve_seen(p: PerceptionText) -> OracleAnswer:
    window = window_s(p.question)
    if window is None:
        return OracleAnswer(None, "no time window")
    memory = Memory(p)

    def seen(colour: str) -> bool:
        age = memory.last_seen_s(colour)
        return age is not None and age <= window

    if p.question.startswith("Did you see"):
        colour = asked_colour(p.question)
        if colour is None:
            return OracleAnswer(None, "no object named")
        word = "yes" if seen(colour) else "no"
        return OracleAnswer(_letter_where(p.options, lambda t: t == word),
                            f"{colour} {'' if word == 'yes' else 'not '}in the window")
    letter = _letter_where(p.options, lambda t: seen(t.split()[0]))
    return OracleAnswer(letter, "the first option whose colour the window shows" if letter
                        else "no option's colour in the window")


def solve_route_back(p: PerceptionText) -> OracleAnswer:
    """The first turn towards where the camera was when it last saw the object (or saw it
    about the time the question names): that frame's pose, dead reckoned from the text."""
    ref = _first_ref(p)
    if ref is None:
        return OracleAnswer(None, "no object named")
    memory = Memory(p)
    obj = memory.find(ref)
    if obj is None:
        return OracleAnswer(None, f"no {ref.colour} object in the text")
    age = min(memory.visit_ages(obj, ref))
    spot = memory.pose_at(age)
    if spot is None:
        return OracleAnswer(None, "the frame cannot be placed")
    bearing = memory.bearing_now((spot.x, spot.y))
    turn = nearest_turn(bearing)
    return OracleAnswer(_letter_where(p.options, lambda t: t.rstrip(".").lower() == turn),
                        f"the spot of the frame {age:.0f} s old at about {bearing:.0f} degrees: "
                        f"{turn}")


def solve_closer(p: PerceptionText) -> OracleAnswer:
    memory = Memory(p)
    best: tuple[float, str] | None = None
    for letter, text in p.options:
        refs = references(text)
        if not refs:
            continue
        obj, _ = _placed(memory, refs[0])
        if obj is None or obj.position is None:
            continue
        d = memory.distance_now(obj.position)
        best = min(best, (d, letter)) if best else (d, letter)
    return OracleAnswer(best[1] if best else None,
                        f"about {best[0]:.1f} m" if best else "neither object placed")


SOLVERS: dict[str, Callable[[PerceptionText], OracleAnswer]] = {
    "object_direction": solve_object_direction,
    "object_distance": solve_object_distance,
    "last_seen": solve_last_seen,
    "next_to": solve_next_to,
    "seen": solve_seen,
    "route_back": solve_route_back,
    "closer": solve_closer,
}


def solve_text(category: str, user_text: str) -> OracleAnswer:
    """The oracle's answer to a long-world question of ``category`` from its user message."""
    solver = SOLVERS.get(category)
    if solver is None:
        return OracleAnswer(None, "unknown category")
    return solver(parse_perception(user_text))


def solve(row: Mapping[str, Any]) -> OracleAnswer:
    """The oracle's answer to a built dataset row of the long world (its user message only)."""
    solver = SOLVERS.get(str(row.get("category")))
    if solver is None:
        return OracleAnswer(None, "unknown category")
    return solver(perception_of(row))


def answer_letter(category: str, user_text: str) -> str:
    """A letter always: the oracle's, else the first option (the text decides nothing), as
    :func:`embodied_r_training.data.oracle.answer_letter` scores it."""
    return solve_text(category, user_text).letter or "A"

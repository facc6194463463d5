"""Where the objects a question names are now, as the frames of a perception text place them.

A memory text holds up to 32 frames spread over an hour: an object seen twenty minutes ago
shows in a few of them, and where it is from the robot *now* follows only from dead reckoning
every written motion since and crossing the bearings of the frames that show it. That
geometry is the memory's work, not the reasoner's: :func:`place_notes` places, for the renderer
to write after the frames, each object of a colour the question names, relative to the last key
frame. It reads the frames as their text states them (:func:`~embodied_r_ros.core.perception_text
.stated_view` of the records: ages, motions and bearings as rounded there), so it states exactly
what the frames above it imply.

:class:`ObjectMap` groups a colour's bearing rays into objects by where they cross (a group
grows while its rays still cross at one place, or while a ray only runs along its last one:
the camera turned in place or walked towards the object; within a visit: stated ages at most
:data:`VISIT_GAP_S` apart); groups placed about one spot are one object, and rays from a
single viewpoint join an object they pass through or stay a guess along the ray. Only colours
are read: the geometric perception names colours, not shapes, and a VLM's free text gives no
bearings, so no line is written for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.core.dead_reckoning import Pose2D, poses
from embodied_r_ros.core.perception_text import FrameText, PerceptionText
from embodied_r_ros.core.poses import crossing_deg, heading_deg, wrap_deg
from embodied_r_ros.core.records import ColourNote, ObjectPlace, PlaceNote
from embodied_r_ros.memory.errors import SpatialMemoryError
from embodied_r_ros.memory.time_phrases import parse_time_phrases

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
#: objects a line is written for, per colour the question names (the newest first)
OBJECTS_PER_COLOUR = 3
#: other named objects a line lists as near an object
NEARBY_PER_OBJECT = 3
_WORD_RE = re.compile(r"[a-z]+")


@dataclass(frozen=True, eq=False)
class Sighted:
    """One object as the text shows it: where (frame 0's floor frame), whether that place was
    triangulated (else guessed along one bearing), and the stated ages of the frames that
    show it. Two are the same object only if they are one instance."""

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


class ObjectMap:
    """The objects of one perception text: each colour's bearing rays grouped into places,
    in frame 0's floor frame, with the camera's dead-reckoned path."""

    def __init__(self, p: PerceptionText) -> None:
        self.p = p
        self.path: list[Pose2D] = poses(p.frames)
        self.now = self.path[-1] if self.path else Pose2D(0.0, 0.0, 0.0)
        self._objects: dict[str, list[Sighted]] = {}

    def objects(self, colour: str) -> list[Sighted]:
        """The objects of ``colour``, seen last first."""
        if colour not in self._objects:
            self._objects[colour] = self._locate(colour)
        return self._objects[colour]

    def rays(self, colour: str) -> list[Ray]:
        out: list[Ray] = []
        for i, f in enumerate(self.p.frames):
            if colour in f.sightings:
                pose = self.path[i]
                out.append(((pose.x, pose.y),
                            math.radians(pose.yaw + f.sightings[colour].bearing_deg), f))
        return out

    def _locate(self, colour: str) -> list[Sighted]:
        """Rays in time order join a group while the group's crossing stays consistent (a
        visit: the same colour seen in another room a few seconds later starts a new group);
        groups whose places agree, or a lone viewpoint's rays passing through a placed group,
        are one object."""
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
        out: list[Sighted] = []
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

    def find(self, colour: str, minutes_ago: float | None = None) -> Sighted | None:
        """The object of ``colour`` seen about ``minutes_ago``, else the one seen last."""
        found = self.objects(colour)
        if not found:
            return None
        if minutes_ago is not None:
            want = minutes_ago * 60.0
            return min(found, key=lambda s: min(abs(a - want) for a in s.ages))
        return found[0]

    def visit_ages(self, obj: Sighted, minutes_ago: float | None = None) -> tuple[float, ...]:
        """The stated ages of ``obj``'s frames of the visit about ``minutes_ago`` (ages within
        :data:`VISIT_GAP_S` of the nearest one), else all of them."""
        if minutes_ago is None:
            return obj.ages
        want = minutes_ago * 60.0
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

    def nearby(self, obj: Sighted, colours: Sequence[str]) -> list[tuple[float, Sighted]]:
        """The triangulated objects of ``colours`` other than ``obj``, nearest first, with
        their distance from it (none where ``obj`` has no place)."""
        if obj.position is None:
            return []
        others = [(math.dist(o.position, obj.position), o)
                  for c in dict.fromkeys(colours) for o in self.objects(c)
                  if o is not obj and o.position is not None and o.triangulated]
        return sorted(others, key=lambda t: t[0])


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


# -- writing ------------------------------------------------------------------------------------

def named_colours(text: str) -> list[str]:
    """The colour words of ``text``, in order, each once."""
    return list(dict.fromkeys(w for w in _WORD_RE.findall(text.lower()) if w in COLOUR_NAMES))


def question_colours(question: str, options: Sequence[str]) -> list[str]:
    """The colours a question and its options name, in order, each once: the objects the
    places block writes lines for, and those a line lists as near."""
    return named_colours(" ".join([question, *options]))


def visits(ages: Sequence[float]) -> list[float]:
    """The newest stated age of each visit among ``ages`` (ages less than
    :data:`VISIT_GAP_S` apart are one visit), newest first."""
    ordered = sorted(ages)
    return [a for i, a in enumerate(ordered) if i == 0 or a - ordered[i - 1] > VISIT_GAP_S]


def object_place(m: ObjectMap, obj: Sighted, colours: Sequence[str]) -> ObjectPlace:
    """``obj`` placed: when it was seen (each visit), where it is now, the spot it was seen
    from last, and the other objects of ``colours`` nearest it."""
    now = None
    if obj.position is not None:
        now = (m.distance_now(obj.position), m.bearing_now(obj.position))
    spot = m.pose_at(min(obj.ages))
    seen_from = None
    if spot is not None:
        seen_from = (m.distance_now((spot.x, spot.y)), m.bearing_now((spot.x, spot.y)))
    near = m.nearby(obj, colours)[:NEARBY_PER_OBJECT]
    return ObjectPlace(obj.colour, tuple(visits(obj.ages)), min(obj.ages), now,
                       obj.triangulated, seen_from, tuple((o.colour, d) for d, o in near))


def colour_note(m: ObjectMap, colour: str) -> ColourNote:
    """A colour only the options name: when a frame last showed it, or that none did."""
    return ColourNote(colour, m.last_seen_s(colour))


def _moments(text: str) -> list[tuple[str, float]]:
    """The moments that phrases such as "about 10 minutes ago" in ``text`` name, each with the
    phrase, in seconds before now: not ranges ("in the last 10 minutes", "between 1 and 5
    minutes ago", a last-seen question's options), not a moment so recent that its tolerance
    reaches now, and none where a phrase cannot be read (retrieval refuses such a question)."""
    try:
        specs = parse_time_phrases(text)
    except SpatialMemoryError:
        return []
    return [(s.phrase, s.moment_s) for s in specs if s.moment_s is not None and s.hi_s < 0.0]


def colour_times(texts: Sequence[str]) -> dict[str, list[float]]:
    """The moments each colour is named at: in each of ``texts`` (a question, its options), a
    time phrase belongs to the colour named last before it ("the cyan cone you saw about 18
    minutes ago or the red sphere you saw about 1 minute ago": cyan 1080 s, red 60 s)."""
    out: dict[str, list[float]] = {}
    for text in texts:
        low = " ".join(text.lower().split())
        colours = [(m.start(), m.group(0)) for m in _WORD_RE.finditer(low)
                   if m.group(0) in COLOUR_NAMES]
        for phrase, age in _moments(text):
            at = low.find(phrase)
            before = [c for pos, c in colours if pos < at]
            if at >= 0 and before:
                out.setdefault(before[-1], []).append(age)
    return out


def place_list(m: ObjectMap, question: str, options: Sequence[str]) -> list[PlaceNote]:
    """What :func:`place_notes` places: up to :data:`OBJECTS_PER_COLOUR` objects for each
    colour the question names (or that it is in no frame): those seen nearest a time the
    question names first (the object it asks about leads), and always the one seen last;
    without a time, the newest first. When each colour only the options name was last seen."""
    asked = named_colours(question)
    named = question_colours(question, options)
    times = colour_times([question, *options])

    def relevance(obj: Sighted) -> float:
        return min((abs(a - t) for a in obj.ages for t in times.get(obj.colour, [])),
                   default=min(obj.ages))

    notes: list[PlaceNote] = []
    for colour in named:
        found = m.objects(colour)
        if colour not in asked or not found:
            notes.append(colour_note(m, colour))
            continue
        chosen = sorted(found, key=relevance)[:OBJECTS_PER_COLOUR - 1]
        chosen += [found[0]] if found[0] not in chosen else []
        chosen += sorted((o for o in found if o not in chosen), key=relevance)
        notes += [object_place(m, obj, named) for obj in chosen[:OBJECTS_PER_COLOUR]]
    return notes


def reckonable(p: PerceptionText) -> bool:
    """Whether the text states every frame's age and every motion between its frames: a frame
    after "an unknown motion" (a row without a pose) or without an age (the ``paper`` layout)
    or an action without its amount leaves where the robot is now, or when it saw what,
    unknown."""
    return all(f.age_s is not None for f in p.frames) and all(
        f.parts or (f.action is not None and f.amount is not None) for f in p.frames[1:])


def place_notes(p: PerceptionText) -> tuple[PlaceNote, ...]:
    """Where the objects ``p``'s question names are now, for the places block after its
    frames: none where neither the question nor its options name a colour, where its frames
    carry no bearings, or where they are not :func:`reckonable`."""
    if not any(f.sightings for f in p.frames):  # free text: no bearings to place anything by
        return ()
    if not reckonable(p):
        return ()
    return tuple(place_list(ObjectMap(p), p.question, [text for _, text in p.options]))

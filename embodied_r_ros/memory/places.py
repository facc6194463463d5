"""Where the objects a question names are now: the places block, from the memory's placements.

A memory text holds up to 32 frames spread over an hour: an object seen twenty minutes ago
shows in a few of them, and where it is from the robot *now* follows only from crossing the
bearings of the frames that show it, from the poses they were taken at. That geometry is the
memory's work, not the reasoner's: the memory places every object as its frames are stored
(:mod:`~embodied_r_ros.memory.placements`), and :func:`place_notes` writes, for the renderer to
put after the frames, each placed object the question names relative to the robot's pose now,
with how sure that is.

What a question names: a **colour** (the geometric perception's objects are colour regions:
"the red box" names the red objects), or a **label** of a VLM's grounded object that a word of
the question names (:mod:`~embodied_r_ros.memory.labels`). For each named thing the question
asks about, up to :data:`OBJECTS_PER_COLOUR` objects are written: those seen nearest a time
the question names for it first, and always the one seen last; a thing only the options name
gets when it was last seen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from embodied_r_ros.core.colors import COLOUR_NAMES
from embodied_r_ros.core.poses import Pose, StampedPose, heading_deg, wrap_deg
from embodied_r_ros.core.records import (
    ColourNote,
    ObjectPlace,
    PlaceNote,
)
from embodied_r_ros.memory.errors import SpatialMemoryError
from embodied_r_ros.memory.labels import LabelMatcher, singular
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.query_terms import question_terms
from embodied_r_ros.memory.time_phrases import parse_time_phrases

#: objects a line is written for, per colour or label the question names (the newest first)
OBJECTS_PER_COLOUR = 3
#: other named objects a line lists as near an object
NEARBY_PER_OBJECT = 3
_WORD_RE = re.compile(r"[a-z]+")


#: the live pose counts as "now" only this long after the memory's newest posed frame: later
#: the memory may have stopped being written (a restart with a fresh odometry origin), while
#: its newest frame's pose is in its own frame for sure
LIVE_POSE_MAX_GAP_S = 120.0


@dataclass(frozen=True)
class Now:
    """The robot now, as the places block counts from it: a stamp and the camera's floor pose
    then."""

    stamp: float
    x: float
    y: float
    yaw_deg: float

    @classmethod
    def at(cls, stamp: float, pose: Pose) -> Now:
        return cls(stamp, pose.x, pose.y, pose.yaw_deg)

    @classmethod
    def counted_from(cls, newest: StampedPose, live: StampedPose | None) -> Now:
        """The robot's live pose (the frame buffer's, at the ask) where it is from the memory's
        timeline, else its newest posed frame's. A robot turns between key frames: a question
        asked 30 degrees of turn after the newest one is about where things are from where it
        faces now. The live pose is not taken when older than that frame (another timeline: a
        bag replayed from its start) or more than :data:`LIVE_POSE_MAX_GAP_S` newer."""
        if live is not None and 0.0 <= live.stamp - newest.stamp <= LIVE_POSE_MAX_GAP_S:
            return cls.at(live.stamp, live.pose)
        return cls.at(newest.stamp, newest.pose)

    def distance(self, q: tuple[float, float]) -> float:
        return math.dist((self.x, self.y), q)

    def bearing(self, q: tuple[float, float]) -> float:
        """The bearing of ``q`` from here, degrees, left > 0."""
        return wrap_deg(heading_deg((self.x, self.y), q) - self.yaw_deg)


@dataclass(frozen=True)
class Named:
    """A thing a question or its options name: a colour or a label's word, whether the
    question itself asks about it, and its placed objects seen up to now (newest first)."""

    word: str
    asked: bool
    objects: tuple[Placement, ...]
    at: int  # where the text names it first


# -- naming -------------------------------------------------------------------------------------

def named_colours(text: str) -> list[str]:
    """The colour words of ``text``, in order, each once."""
    return list(dict.fromkeys(w for w in _WORD_RE.findall(text.lower()) if w in COLOUR_NAMES))


def question_colours(question: str, options: Sequence[str]) -> list[str]:
    """The colours a question and its options name, in order, each once."""
    return named_colours(" ".join([question, *options]))


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


def word_times(texts: Sequence[str], words: Sequence[str]) -> dict[str, list[float]]:
    """The moments each of ``words`` (colours, labels' words; singular) is named at: in each
    of ``texts`` (a question, its options), a time phrase belongs to the word named last
    before it ("the cyan cone you saw about 18 minutes ago or the red sphere you saw about 1
    minute ago": cyan 1080 s, red 60 s)."""
    wanted = set(words)
    out: dict[str, list[float]] = {}
    for text in texts:
        low = " ".join(text.lower().split())
        named = [(m.start(), singular(m.group(0))) for m in _WORD_RE.finditer(low)
                 if singular(m.group(0)) in wanted]
        for phrase, age in _moments(text):
            at = low.find(phrase)
            before = [w for pos, w in named if pos < at]
            if at >= 0 and before:
                out.setdefault(before[-1], []).append(age)
    return out


def colour_times(texts: Sequence[str]) -> dict[str, list[float]]:
    """:func:`word_times` of the colours."""
    return word_times(texts, COLOUR_NAMES)


def named_things(placements: Sequence[Placement], question: str, options: Sequence[str],
                 now: float, matcher: LabelMatcher | None = None) -> list[Named]:
    """The colours and labels ``question`` and its ``options`` name, in the order the text
    names them, each with its objects seen up to ``now`` (newest first)."""
    text = " ".join([question, *options]).lower()
    seen = sorted((p for p in placements if p.first <= now + 1e-6), key=lambda p: -p.last)
    asked_words = {singular(w) for w in question_terms(question)}
    out = [Named(c, c in named_colours(question),
                 tuple(p for p in seen if p.colour == c), text.find(c))
           for c in question_colours(question, options)]
    labelled = [p for p in seen if p.colour is None]
    by_word: dict[str, list[str]] = {}
    for word, label in (matcher or LabelMatcher()).named(
            question_terms(question, options), [p.label for p in labelled]):
        by_word.setdefault(word, []).append(label)
    for word, labels in by_word.items():
        first = next((m.start() for m in _WORD_RE.finditer(text) if singular(m.group(0)) == word),
                     len(text))
        out.append(Named(word, word in asked_words,
                         tuple(p for p in labelled if p.label in labels), first))
    return sorted(out, key=lambda n: n.at)


# -- writing ------------------------------------------------------------------------------------

def _short(p: Placement) -> str:
    """How a line names ``p`` among the nearest: its colour, else its label."""
    return p.colour or p.label


def object_place(p: Placement, now: Now, others: Sequence[Placement]) -> ObjectPlace:
    """``p`` placed relative to ``now``: when it was seen (each visit), where it is now and how
    sure that is, the spot it was seen from last, and the triangulated ``others`` nearest it."""
    visits = [min(b, now.stamp) for a, b in p.visits if a <= now.stamp + 1e-6]
    spot = p.seen_from
    near = sorted(((math.dist(o.position, p.position), o) for o in others
                   if (o.robot, o.id) != (p.robot, p.id) and o.triangulated), key=lambda t: t[0])
    return ObjectPlace(
        name=p.label, colour=p.colour,
        visits_s=tuple(now.stamp - b for b in reversed(visits)), last_s=now.stamp - visits[-1],
        now=(now.distance(p.position), now.bearing(p.position)), triangulated=p.triangulated,
        seen_from=(now.distance(spot), now.bearing(spot)),
        nearby=tuple((_short(o), d) for d, o in near[:NEARBY_PER_OBJECT]),
        uncertainty_m=p.uncertainty_m)


def _relevance(p: Placement, times: Sequence[float], now: float) -> float:
    """How far (seconds) ``p``'s visits are from the moments named for it; without one, how
    long ago it was seen last."""
    if not times:
        return now - p.last
    return min(max(now - b - t, t - (now - a), 0.0) for a, b in p.visits for t in times)


def place_notes(placements: Sequence[Placement], question: str, options: Sequence[str],
                now: Now, matcher: LabelMatcher | None = None) -> tuple[PlaceNote, ...]:
    """The places block's notes (see the module notes); none where nothing is placed at all
    (free-text descriptions carry no bearings to place anything by)."""
    if not placements:
        return ()
    named = named_things(placements, question, options, now.stamp, matcher)
    times = word_times([question, *options], [n.word for n in named])
    others = [p for n in named for p in n.objects]
    notes: list[PlaceNote] = []
    for n in named:
        if not n.asked or not n.objects:
            last = max((p.last for p in n.objects), default=None)
            notes.append(ColourNote(n.word, None if last is None else now.stamp - min(last,
                                                                                   now.stamp)))
            continue
        found = list(n.objects)
        near = times.get(n.word, [])
        chosen = sorted(found, key=lambda p: _relevance(p, near, now.stamp))
        chosen = chosen[:OBJECTS_PER_COLOUR - 1]
        chosen += [found[0]] if found[0] not in chosen else []
        chosen += sorted((o for o in found if o not in chosen),
                         key=lambda p: _relevance(p, near, now.stamp))
        notes += [object_place(p, now, others) for p in chosen[:OBJECTS_PER_COLOUR]]
    return tuple(notes)

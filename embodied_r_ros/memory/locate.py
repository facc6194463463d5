"""Where the memory placed the objects some words name, as places a robot can drive to.

A ROS program told "go to the red chair you saw ten minutes ago" needs a pose, not the places
block's prose. :func:`locate` reads the stored placements (this robot's, or with ``fleet``
every robot's of the store, as ``memory.share_placements`` does for questions), keeps those
the words name (the places block's naming: :func:`~embodied_r_ros.memory.places
.named_things`, the label matcher included) and, where a time is asked, those seen then, and
returns them newest sighting first, each with an *approach pose*: where the camera stood when
it last saw the object, facing it. That spot was free and the object was in view from it; the
object's centre is not a goal (it lies inside the obstacle).

The ROS service (``memory/locate``) and the command line (``embodied-r memory locate``) are
adapters of this module: a request is checked once, by :meth:`LocateRequest.checked`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from embodied_r_ros.core.poses import Pose, heading_deg
from embodied_r_ros.memory.errors import BAD_REQUEST, BAD_TIME_PHRASE, SpatialMemoryError
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.places import named_things
from embodied_r_ros.memory.query_terms import question_terms
from embodied_r_ros.memory.store import MemoryStore
from embodied_r_ros.memory.time_phrases import TimeRange, TimeSpec, parse_time_phrases

#: objects a lookup returns when the request does not say
DEFAULT_RESULTS = 10
#: the most objects a lookup returns
MAX_RESULTS = 100
#: the longest object words (or time phrase) a request may carry
MAX_CHARS = 200


def _bad(message: str) -> SpatialMemoryError:
    return SpatialMemoryError(BAD_REQUEST, message)


def _text(name: str, value: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{name} must be text")
    text = " ".join(value.split())
    if len(text) > MAX_CHARS:
        raise _bad(f"{name} is {len(text)} characters long, at most {MAX_CHARS} are read")
    return text


@dataclass(frozen=True)
class LocateRequest:
    """A lookup as checked (:meth:`checked`): the words it searches (``terms``), the object
    words as given, the time phrases read from them and from the time phrase, the stamps
    (None: open), every robot's placements or only the asker's, and the most results."""

    words: str
    terms: tuple[str, ...]
    times: tuple[TimeSpec, ...] = ()
    start: float | None = None
    end: float | None = None
    fleet: bool = False
    max_results: int = DEFAULT_RESULTS

    @classmethod
    def checked(cls, words: str, time_phrase: str = "", start: float | None = None,
                end: float | None = None, fleet: bool = False,
                max_results: int | None = None) -> LocateRequest:
        """The request, or :class:`SpatialMemoryError`: ``BAD_TIME_PHRASE`` for a time phrase
        that cannot be read, ``BAD_REQUEST`` for words that name no object, stamps that are
        not finite or out of order or given beside a time phrase, or a result count out of
        1..:data:`MAX_RESULTS` (None: :data:`DEFAULT_RESULTS`)."""
        words, phrase = _text("the object words", words), _text("the time phrase", time_phrase)
        times = parse_time_phrases(words)
        plain = words.lower()
        for spec in times:
            plain = plain.replace(spec.phrase, " ")
        if phrase:
            read = parse_time_phrases(phrase)
            if not read:
                raise SpatialMemoryError(BAD_TIME_PHRASE, f'cannot read the time phrase '
                                         f'"{phrase}"; say e.g. "10 minutes ago", "in the last '
                                         '5 minutes", "at the start"')
            times += read
        terms = tuple(question_terms(plain))
        if not terms:
            raise _bad(f'the object words "{words}" name no object; say e.g. "red chair"')
        for name, stamp in (("start", start), ("end", end)):
            if stamp is not None and not (isinstance(stamp, int | float)
                                          and math.isfinite(stamp)):
                raise _bad(f"the {name} stamp must be a finite number of seconds, got {stamp!r}")
        if start is not None and end is not None and start > end:
            raise _bad(f"the start stamp {start} is after the end stamp {end}")
        if times and (start is not None or end is not None):
            raise _bad("give a time phrase or start and end stamps, not both")
        count = DEFAULT_RESULTS if max_results is None else max_results
        if isinstance(count, bool) or not isinstance(count, int) or not \
                1 <= count <= MAX_RESULTS:
            raise _bad(f"the most results wanted must be 1 to {MAX_RESULTS}, got {count!r}")
        return cls(plain.strip(), terms, tuple(times), start, end, bool(fleet), count)

    def ranges(self, first: float, now: float) -> list[TimeRange]:
        """The times asked, on a timeline from ``first`` to ``now`` (none: any time)."""
        if self.start is not None or self.end is not None:
            lo = -math.inf if self.start is None else self.start
            hi = math.inf if self.end is None else self.end
            return [TimeRange(lo, hi, f"{lo:g} .. {hi:g} s")]
        return [spec.resolve(first, now) for spec in self.times]


@dataclass(frozen=True)
class Located:
    """A placed object the words name, and the pose to approach it from (floor pose in the
    placement's world frame, facing the object)."""

    placement: Placement
    approach: Pose


def approach_pose(p: Placement) -> Pose:
    """Where ``p`` was last seen from, facing it (facing +x where the two coincide)."""
    sx, sy = p.seen_from
    yaw = heading_deg((sx, sy), p.position) if math.dist((sx, sy), p.position) > 1e-6 else 0.0
    return Pose(sx, sy, 0.0, yaw, 0.0)


def seen_during(p: Placement, ranges: Sequence[TimeRange]) -> bool:
    """Whether a visit of ``p`` overlaps one of ``ranges`` (no ranges: any time does)."""
    return not ranges or any(a <= r.end and b >= r.start for a, b in p.visits for r in ranges)


def find(placements: Sequence[Placement], request: LocateRequest,
         timeline: tuple[float, float] | None, matcher: LabelMatcher | None = None
         ) -> list[Located]:
    """The placements ``request`` names, seen when it asks, newest sighting first, at most its
    ``max_results``. ``timeline``: the asking robot's first and newest stamps, which time
    phrases count from (None: the placements' own span)."""
    if not placements:
        return []
    if timeline is None:
        timeline = (min(p.first for p in placements), max(p.last for p in placements))
    ranges = request.ranges(*timeline)
    named = named_things(placements, request.words, (), math.inf, matcher)
    chosen = {(p.robot, p.id): p for n in named for p in n.objects if seen_during(p, ranges)}
    newest = sorted(chosen.values(), key=lambda p: (-p.last, p.robot, p.id))
    return [Located(p, approach_pose(p)) for p in newest[:request.max_results]]


def locate(store: MemoryStore, robot: str, request: LocateRequest,
           matcher: LabelMatcher | None = None) -> list[Located]:
    """:func:`find` on ``store``'s placements of ``robot`` (with ``request.fleet``, of every
    robot), time phrases counted on ``robot``'s timeline. Raises :class:`SpatialMemoryError`
    where the store cannot be read."""
    placements = store.placements(None if request.fleet else [robot])
    return find(placements, request, store.bounds(robot), matcher)

"""How a long-world question names an object, and whether a perception's records tell it apart.

Names: several objects may share a name ("red box"), so a question names an instance by its
place ("the red box in room 3") or by when it was seen ("the red box you saw about 20 minutes
ago", only when no other object the records cannot tell from it was seen around then); a name
used once in the world is named plainly. A reference that would give the answer away is not
used (the time, for how long ago).

What the records can state depends on the perception (:data:`PERCEPTIONS`):

- ``colour``: the geometric perception's records name **colours**, not shapes (colour regions),
  and no rooms: another object of the colour in the memory (shown by then) is a *rival* the
  text cannot tell from the asked one by name;
- ``label``: a grounding VLM's records name each object by its **label** ("red box"), which
  tells apart objects sharing a colour; only another object of the same name is a rival.

A rival is told apart only by the time of a reference, when it was not seen within a minute of
it (the text states ages in seconds, the reference whole minutes); a room in a reference does
not, as the text names none. The text places an object only where bearings to it, stated to a
degree, cross wide enough (:data:`MIN_CROSSING_DEG`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Literal

import numpy as np

from embodied_r_ros.core.poses import crossing_deg
from lab.long_world.question_rules import minutes_phrase
from lab.long_world.sightings import Sightings
from lab.long_world.world import LongWorld

Perception = Literal["colour", "label"]
#: what a perception's records name an object by: its colour, or its label (the whole name)
PERCEPTIONS: tuple[Perception, ...] = ("colour", "label")
SHARED_COLOUR = "shared colour"
SHARED_LABEL = "shared label"
TIME_REF_GAP_S = 60.0  # a sighting ends after a minute unseen
#: a time reference tells an object from a rival when the rival was not seen within this many
#: minutes of the referenced one's sighting window (of +- half a minute)
TIME_REF_SLACK_MIN = 1.0
#: the bearings the text states (to a degree) place an object only where the camera saw it
#: from places whose rays to it cross at least this wide (the reader's own limit is 6)
MIN_CROSSING_DEG = 12.0

NAME, AREA, TIME = "name", "area", "time"
ANY_REF = frozenset({NAME, AREA, TIME})


def kind_of(name: str, perception: Perception) -> str:
    """What ``perception``'s records call an object named ``name``: its colour (the name's
    first word) or the name itself."""
    return name.split()[0] if perception == "colour" else name


class Referrer:
    """Names the objects of ``world`` in questions, for records of ``perception``."""

    def __init__(self, world: LongWorld, sightings: Sightings,
                 perception: Perception = "colour") -> None:
        if perception not in PERCEPTIONS:
            raise ValueError(f"perception must be one of {', '.join(PERCEPTIONS)}, "
                             f"got {perception!r}")
        self.world = world
        self.s = sightings
        self.perception = perception
        self.rate = world.spec.rate_hz
        #: the skip reason of a candidate a rival leaves undecided
        self.shared_reason = SHARED_COLOUR if perception == "colour" else SHARED_LABEL
        counts = Counter(o.name for o in world.objects)
        self.shared = {name for name, n in counts.items() if n > 1}
        self.by_kind: dict[str, list[int]] = defaultdict(list)
        for k in range(len(world.objects)):
            self.by_kind[self.kind(k)].append(k)
        shares = sightings.visibility.shares
        self._shown = [np.flatnonzero(shares[:, k] > 0.0) for k in range(len(world.objects))]

    def kind(self, k: int) -> str:
        return kind_of(self.world.objects[k].name, self.perception)

    def name_kind(self, name: str) -> str:
        return kind_of(name, self.perception)

    def rivals(self, k: int, t: int) -> list[int]:
        """The other objects of ``k``'s kind that the memory holds by frame ``t`` (shown at
        all): the records cannot tell them from ``k`` by what they name."""
        return [j for j in self.by_kind[self.kind(k)] if j != k and self.s.any_in(j, 0, t)]

    def last_shown(self, k: int, t: int) -> int | None:
        """The latest frame up to ``t`` with any pixel of ``k``: an object the records may
        state, clear or not."""
        frames = self._shown[k]
        i = int(np.searchsorted(frames, t, side="right"))
        return int(frames[i - 1]) if i > 0 else None

    def last_visit(self, k: int, t: int) -> tuple[int, int] | None:
        """(first, last) clear frame of ``k``'s latest sighting up to ``t``."""
        visits = [v for v in self.s.visits(k, round(TIME_REF_GAP_S * self.rate)) if v[0] <= t]
        last = self.s.last_clear(k, t)
        return (visits[-1][0], min(visits[-1][1], last)) if visits and last is not None \
            else None

    def placeable(self, k: int, t: int) -> bool:
        """Whether the frames of ``k``'s latest sighting up to ``t`` saw it from places
        whose bearings cross wide enough for the text to place it."""
        visit = self.last_visit(k, t)
        if visit is None:
            return False
        obj = self.world.objects[k]
        rays = [math.atan2(obj.y - p.y, obj.x - p.x)
                for p in (self.world.poses[f] for f in self.s.clear_frames(k, *visit))]
        return crossing_deg(rays) >= MIN_CROSSING_DEG

    def time_ref(self, k: int, t: int, others: Sequence[int]) -> str | None:
        """"the X you saw about N minutes ago", when none of ``others`` was shown within
        :data:`TIME_REF_SLACK_MIN` of the minute it names."""
        visit = self.last_visit(k, t)
        if visit is None:
            return None
        first, last = visit
        minutes = round((t - (first + last) / 2.0) / self.rate / 60.0)
        if minutes < 1:
            return None
        r = self.rate * 60.0
        if not self.s.clear_in(k, math.ceil(t - (minutes + 0.5) * r),
                               math.floor(t - (minutes - 0.5) * r)):
            return None
        slack = 0.5 + TIME_REF_SLACK_MIN
        lo = math.floor(t - (minutes + slack) * r)
        hi = min(t, math.ceil(t - (minutes - slack) * r))
        if any(self.s.any_in(j, lo, hi) for j in others):
            return None
        name = self.world.objects[k].name
        return f"the {name} you saw about {minutes_phrase(minutes)} ago"

    def refer(self, k: int, t: int, allowed: frozenset[str],
              rng: np.random.Generator) -> tuple[str | None, str]:
        """How a question names object ``k`` at frame ``t`` (module notes), or None and why.

        With a rival in the memory, only a time the text can check sets it apart; otherwise a
        shared name is told apart by its room or its time."""
        obj = self.world.objects[k]
        rivals = self.rivals(k, t)
        if rivals:
            when = self.time_ref(k, t, rivals) if TIME in allowed else None
            return (when, "") if when else (None, self.shared_reason)
        if obj.name not in self.shared:
            return (f"the {obj.name}", "") if NAME in allowed else (None, "no reference")
        phrases = []
        if AREA in allowed:
            area = self.world.plan.areas[self.world.object_areas[k]]
            phrases.append(f"the {obj.name} in {area.name}")
        if TIME in allowed and (when := self.time_ref(k, t, self.world.instances(
                obj.name))) is not None:
            phrases.append(when)
        if not phrases:
            return None, "only its room tells it apart"
        return phrases[int(rng.integers(0, len(phrases)))], ""

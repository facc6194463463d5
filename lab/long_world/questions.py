"""Long-horizon memory questions about the long world, labelled by how far back they reach.

Kinds follow NaVQA (where is X relative to me now, how far is it, how long ago did I last see
it, what stood next to it, did I see one) and Embodied-R (the route back to X, which of two
is closer). Each question is asked at a frame ``T`` of the tour, about what the camera saw up
to ``T``; answers come from the floor plan, the object positions, the true poses and the
renderer's visibility (:mod:`lab.long_world.sightings`), never from perception.

Horizon: the age, at ``T``, of the oldest memory a question needs: for a question about
objects, the time since the last frame that showed each of them clearly (the oldest of
those); for "did you see a ... in the last N minutes", the window. Labels: ``short`` (under 2
minutes), ``medium`` (2 to 15), ``long`` (over 15); questions within 10 s of an edge are
skipped, like answers near a decision boundary, and every skip is counted by reason.

Names: several objects may share a name ("red box"), so a question names an instance by its
place ("the red box in room 3") or by when it was seen ("the red box you saw about 20 minutes
ago", only when no other red box was seen around then); a name used once in the world is
named plainly. A reference that would give the answer away is not used (the time, for how long
ago).

What the text can state: the memory is read as perception text (each retrieved frame's age,
the motion between frames from odometry, the colour regions a frame shows), which names
colours, not shapes, and no rooms. A question is asked only where that text can decide it
(as :mod:`embodied_r_training.data.text_check` does for the short clips); the rest is
skipped and counted by reason:

- **shared colour**: another object of the same colour is in the memory (shown by then) and
  nothing the text states tells the two apart: only the time of a reference can, when no
  other object of the colour was seen within a minute of it (the text states ages in
  seconds, the reference whole minutes). A room in a reference does not, as the text names
  none. "How long ago" names no time (it would give the answer away): it is kept where every
  object of the colour was last shown in the same band;
- **near a boundary**: a distance, age or bearing within its band's margin
  (:data:`~lab.long_world.question_rules.DISTANCE_MARGIN`, ``AGE_MARGIN``, the
  quadrant margin), each wider than the text's rounding (a decimetre, a second, a degree);
- **the text cannot place it**: the text places an object only where bearings to it, stated
  to a degree, cross wide enough (:data:`MIN_CROSSING_DEG`), which ``next_to`` needs for
  both of its objects;
- the **route back** through doorways is not in the text (no rooms, no doorways): it is asked
  as the first turn towards the spot the robot last saw the object from, which the text
  carries as the poses of its frames.

Did-you-see questions ask about a name, whose answer is the same for every instance; the text
answers for the colour, so a name whose colour was seen in the window by another object is
skipped.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from embodied_r_ros.core.poses import crossing_deg
from embodied_r_ros.sim import question_rows
from embodied_r_ros.sim.question_rows import Draft, draft_rows
from embodied_r_ros.sim.question_rules import QUADRANTS, bearing_deg, clear_quadrant
from embodied_r_ros.sim.scene import COLOURS, SHAPES
from lab.long_world.question_rules import (
    AGE_BANDS,
    AGE_MARGIN,
    DISTANCE_BANDS,
    DISTANCE_MARGIN,
    TURNS,
    band_of,
    clearly_closer,
    first_turn,
    horizon_of,
    minutes_phrase,
)
from lab.long_world.sightings import Sightings
from lab.long_world.world import LongWorld

CATEGORIES: tuple[str, ...] = (
    "object_direction",
    "object_distance",
    "last_seen",
    "next_to",
    "seen",
    "route_back",
    "closer",
)
SOURCES: dict[str, str] = {
    "object_direction": "navqa", "object_distance": "navqa", "last_seen": "navqa",
    "next_to": "navqa", "seen": "navqa", "route_back": "embodied_r", "closer": "embodied_r",
}
FIRST_ASK_S = 60.0
ASK_STEP_S = 15.0
MIN_DIRECTION_M = 1.0  # nearer than this, a step changes the direction
NEXT_TO_M = 2.5
NEXT_TO_MARGIN_M = 0.5
WINDOWS_S: tuple[float, ...] = (60.0, 300.0, 600.0, 1200.0)
WINDOW_MARGIN = (5.0, 0.05)  # seconds, and a share of the window
TIME_REF_GAP_S = 60.0  # a sighting ends after a minute unseen
#: a time reference tells an object from another of its colour when the other was not seen
#: within this many minutes of the referenced one's sighting window (of +- half a minute)
TIME_REF_SLACK_MIN = 1.0
#: nearer than this to where the object was last seen from, the turn towards it is unclear
NEAR_SPOT_M = 1.5
#: the bearings the text states (to a degree) place an object only where the camera saw it
#: from places whose rays to it cross at least this wide (the reader's own limit is 6)
MIN_CROSSING_DEG = 12.0
SHARED_COLOUR = "shared colour"
UNPLACED = "the text cannot place it"
CLOSER_PAIRS_PER_ASK = 30

NAME, AREA, TIME = "name", "area", "time"
_ANY_REF = frozenset({NAME, AREA, TIME})


def parse_counts(spec: str | int | Mapping[str, int]) -> dict[str, int]:
    """Per-category counts of the long world's questions (a total or ``cat=N,...``)."""
    return question_rows.parse_counts(spec, CATEGORIES)


def _article(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def ask_frames(world: LongWorld) -> list[int]:
    """Frames questions are asked at: every 15 s from the first minute, and the last."""
    rate = world.spec.rate_hz
    last = world.n_frames - 1
    frames = {round(t * rate) for t in np.arange(FIRST_ASK_S, last / rate + 1e-9, ASK_STEP_S)}
    frames.add(last)
    return sorted(f for f in frames if f <= last)


class _Generator:
    def __init__(self, world: LongWorld, sightings: Sightings) -> None:
        self.world = world
        self.s = sightings
        self.rate = world.spec.rate_hz
        self.asks = ask_frames(world)
        self.skipped: Counter[tuple[str, str]] = Counter()
        counts = Counter(o.name for o in world.objects)
        self.shared = {name for name, n in counts.items() if n > 1}
        self.names = [f"{c} {s}" for c in COLOURS for s in SHAPES]
        self._seen_by = {t: sightings.seen_by(t) for t in self.asks}
        self.by_colour: dict[str, list[int]] = defaultdict(list)
        for k, o in enumerate(world.objects):
            self.by_colour[o.colour].append(k)
        shares = sightings.visibility.shares
        self._shown = [np.flatnonzero(shares[:, k] > 0.0) for k in range(len(world.objects))]

    # ---------------------------------------------------------------- helpers
    def skip(self, category: str, reason: str) -> None:
        self.skipped[(category, reason)] += 1

    def age(self, k: int, t: int) -> float:
        last = self.s.last_clear(k, t)
        if last is None:
            raise ValueError(f"object {k} was not seen by frame {t}")
        return (t - last) / self.rate

    def distance(self, k: int, t: int) -> float:
        pose, obj = self.world.poses[t], self.world.objects[k]
        return math.hypot(obj.x - pose.x, obj.y - pose.y)

    def rivals(self, k: int, t: int) -> list[int]:
        """The other objects of ``k``'s colour that the memory holds by frame ``t`` (shown at
        all): the text names colours, not shapes, so it cannot tell them from ``k`` by name."""
        colour = self.world.objects[k].colour
        return [j for j in self.by_colour[colour] if j != k and self.s.any_in(j, 0, t)]

    def last_shown(self, k: int, t: int) -> int | None:
        """The latest frame up to ``t`` with any pixel of ``k``: a colour region the text may
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

    def _time_ref(self, k: int, t: int, others: Sequence[int]) -> str | None:
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

        With another object of its colour in the memory, only a time the text can check sets
        it apart; otherwise a shared name is told apart by its room or its time."""
        obj = self.world.objects[k]
        rivals = self.rivals(k, t)
        if rivals:
            when = self._time_ref(k, t, rivals) if TIME in allowed else None
            return (when, "") if when else (None, SHARED_COLOUR)
        if obj.name not in self.shared:
            return (f"the {obj.name}", "") if NAME in allowed else (None, "no reference")
        phrases = []
        if AREA in allowed:
            area = self.world.plan.areas[self.world.object_areas[k]]
            phrases.append(f"the {obj.name} in {area.name}")
        if TIME in allowed and (when := self._time_ref(k, t, self.world.instances(
                obj.name))) is not None:
            phrases.append(when)
        if not phrases:
            return None, "only its room tells it apart"
        return phrases[int(rng.integers(0, len(phrases)))], ""

    def target(self, k: int, t: int, reference: str | None, first: int = 0) -> dict[str, Any]:
        obj = self.world.objects[k]
        return {"object": k, "name": obj.name,
                "area": self.world.plan.areas[self.world.object_areas[k]].name,
                "reference": reference, "frames": self.s.clear_frames(k, first, t)}

    def draft(self, category: str, question: str, choices: Sequence[str], t: int,
              horizon_s: float, targets: list[dict[str, Any]], variant: str,
              why: dict[str, Any]) -> Draft | None:
        label = horizon_of(horizon_s)
        if label is None:
            self.skip(category, "horizon near a band edge")
            return None
        basis = {"source": SOURCES[category], "variant": variant, "horizon": label,
                 "horizon_s": round(horizon_s, 3), "targets": targets, "why": why}
        return Draft(category, question, tuple(choices), 0, t, basis)

    @staticmethod
    def pools(drafts: Sequence[Draft | None]) -> list[list[Draft]]:
        """Drafts grouped by (horizon, variant), so picking round-robin balances both."""
        groups: dict[tuple[str, str], list[Draft]] = defaultdict(list)
        for d in drafts:
            if d is not None:
                groups[(d.basis["horizon"], d.basis["variant"])].append(d)
        return [groups[key] for key in sorted(groups)]

    # ---------------------------------------------------------------- NaVQA
    def object_direction(self, rng: np.random.Generator) -> list[list[Draft]]:
        c = "object_direction"
        out = []
        for t in self.asks:
            pose = self.world.poses[t]
            for k in self._seen_by[t]:
                obj = self.world.objects[k]
                if self.distance(k, t) < MIN_DIRECTION_M:
                    self.skip(c, "too near to have a direction")
                    continue
                angle = bearing_deg(pose, obj.centre)
                answer = clear_quadrant(angle)
                if answer is None:
                    self.skip(c, "near a quadrant edge")
                    continue
                ref, why = self.refer(k, t, _ANY_REF, rng)
                if ref is None:
                    self.skip(c, why)
                    continue
                out.append(self.draft(
                    c, f"Where is {ref} relative to you now: to your front-left, front-right, "
                    "back-left, or back-right?",
                    (answer, *[q for q in QUADRANTS if q != answer]), t, self.age(k, t),
                    [self.target(k, t, ref)], "quadrant", {"bearing_deg": round(angle, 2)}))
        return self.pools(out)

    def object_distance(self, rng: np.random.Generator) -> list[list[Draft]]:
        c = "object_distance"
        out = []
        for t in self.asks:
            for k in self._seen_by[t]:
                dist = self.distance(k, t)
                answer = band_of(dist, DISTANCE_BANDS, DISTANCE_MARGIN)
                if answer is None:
                    self.skip(c, "near a distance band edge")
                    continue
                ref, why = self.refer(k, t, _ANY_REF, rng)
                if ref is None:
                    self.skip(c, why)
                    continue
                out.append(self.draft(
                    c, f"How far is {ref} from you now, in a straight line to its centre "
                    "(through walls)?",
                    (answer, *[b[2] for b in DISTANCE_BANDS if b[2] != answer]), t,
                    self.age(k, t), [self.target(k, t, ref)], "band",
                    {"distance_m": round(dist, 3)}))
        return self.pools(out)

    def last_seen(self, rng: np.random.Generator) -> list[list[Draft]]:
        """How long ago: the text states the age of the newest frame showing the colour, so
        with others of the colour in the memory the question is kept only when every one of
        them was last shown in the same band (clear of its edges)."""
        c = "last_seen"
        out = []
        for t in self.asks:
            for k in self._seen_by[t]:
                if self.s.any_in(k, t, t):
                    self.skip(c, "in view now")
                    continue
                last = self.s.last_clear(k, t)
                assert last is not None
                if self.s.any_in(k, last + 1, t):
                    self.skip(c, "glimpsed after its last clear sighting")
                    continue
                age = (t - last) / self.rate
                answer = band_of(age, AGE_BANDS, AGE_MARGIN)
                if answer is None:
                    self.skip(c, "near a time band edge")
                    continue
                rivals = self.rivals(k, t)
                if any(band_of((t - (self.last_shown(j, t) or 0)) / self.rate, AGE_BANDS,
                               AGE_MARGIN) != answer for j in rivals):
                    self.skip(c, SHARED_COLOUR)
                    continue
                obj = self.world.objects[k]
                if rivals:  # every object of the colour gives this answer: name it as usual
                    area = self.world.plan.areas[self.world.object_areas[k]].name
                    ref: str | None = (f"the {obj.name} in {area}" if obj.name in self.shared
                                       else f"the {obj.name}")
                else:
                    ref, why = self.refer(k, t, frozenset({NAME, AREA}), rng)
                    if ref is None:
                        self.skip(c, why)
                        continue
                out.append(self.draft(
                    c, f"How long ago did you last see {ref}?",
                    (answer, *[b[2] for b in AGE_BANDS if b[2] != answer]), t, age,
                    [self.target(k, t, ref)], "band", {"last_seen_frame": last}))
        return self.pools(out)

    def _neighbour(self, k: int) -> tuple[int | None, str | None]:
        """The object clearly nearest to ``k`` in its area, or why there is none."""
        objs = self.world.objects
        dist = sorted((objs[k].distance_to(objs[j]), j) for j in range(len(objs)) if j != k)
        near = [(d, j) for d, j in dist if self.world.object_areas[j] == self.world.object_areas[k]]
        if not near or near[0][0] > NEXT_TO_M:
            return None, "nothing next to it"
        d1, j1 = near[0]
        if any(d < d1 + NEXT_TO_MARGIN_M for d, j in dist if j != j1):
            return None, "two objects about as near"
        if objs[j1].colour == objs[k].colour:
            return None, SHARED_COLOUR
        return j1, None

    def next_to(self, rng: np.random.Generator) -> list[list[Draft]]:
        """Which object stood next to X: the text locates the options by their colours, so
        a wrong option's colour must have no object in the memory about as near to X as the
        neighbour, and the options' colours differ."""
        c = "next_to"
        objs = self.world.objects
        neighbours = {k: self._neighbour(k) for k in range(len(objs))}
        out = []
        for t in self.asks:
            seen = self._seen_by[t]
            for k in seen:
                j, why = neighbours[k]
                if j is None:
                    self.skip(c, why or "no neighbour")
                    continue
                if j not in seen:
                    self.skip(c, "its neighbour not seen yet")
                    continue
                if not (self.placeable(k, t) and self.placeable(j, t)):
                    self.skip(c, UNPLACED)
                    continue
                near = objs[k].distance_to(objs[j]) + NEXT_TO_MARGIN_M
                close = {o.colour for i, o in enumerate(objs) if i != k
                         and self.s.any_in(i, 0, t) and objs[k].distance_to(o) < near}
                banned = close | {objs[j].colour}
                # wrong options: names seen by now first, then names of nothing seen; one a
                # colour, each of a colour with nothing in the memory as near to X
                seen_wrong = sorted({objs[i].name for i in seen} - {objs[j].name})
                other_wrong = sorted(set(self.names) - set(seen_wrong) - {objs[j].name})
                picks: list[str] = []
                for pool in (seen_wrong, other_wrong):
                    for i in rng.permutation(len(pool)):
                        colour = pool[i].split()[0]
                        if len(picks) < 3 and colour not in banned:
                            picks.append(pool[i])
                            banned = banned | {colour}
                if len(picks) < 3:
                    self.skip(c, "too few colours far from it")
                    continue
                ref, why = self.refer(k, t, _ANY_REF, rng)
                if ref is None:
                    self.skip(c, why)
                    continue
                out.append(self.draft(
                    c, f"Which object stood next to {ref} (the nearest to it)?",
                    (objs[j].name, *picks), t, max(self.age(k, t), self.age(j, t)),
                    [self.target(k, t, ref), self.target(j, t, None)], "nearest",
                    {"neighbour": j, "gap_m": round(objs[k].distance_to(objs[j]), 3)}))
        return self.pools(out)

    def seen(self, rng: np.random.Generator) -> list[list[Draft]]:
        """Did you see an X in a window: the text states the colours it saw, so a name is
        asked only where its colour gives the same answer (seen clearly in the window, or no
        object of the colour shown near it at all)."""
        c = "seen"
        out: list[Draft | None] = []
        present = {o.name for o in self.world.objects}
        for t in self.asks:
            now_s = t / self.rate
            windows = [w for w in WINDOWS_S if w < now_s] + [now_s]
            for window in windows:
                whole = window == now_s
                margin = 0.0 if whole else max(WINDOW_MARGIN[0], WINDOW_MARGIN[1] * window)
                start_yes = t - round((window - margin) * self.rate)
                start_no = t - round((window + margin) * self.rate)
                colour_no = {colour for colour in COLOURS
                             if not any(self.s.any_in(j, start_no, t)
                                        for j in self.by_colour.get(colour, ()))}
                yes, no = [], []
                for name in self.names:
                    inst = self.world.instances(name)
                    if any(self.s.clear_in(j, start_yes, t) for j in inst):
                        yes.append(name)
                    elif not any(self.s.any_in(j, start_no, t) for j in inst):
                        if name.split()[0] in colour_no:
                            no.append(name)
                        else:
                            self.skip(c, SHARED_COLOUR)
                    else:
                        self.skip(c, "seen only near the window's start")
                minutes = round(window / 60.0)
                when = ("at all so far" if whole else "in the last minute" if minutes == 1
                        else f"in the last {minutes_phrase(minutes)}")
                first = max(0, start_yes)

                def evidence(name: str, first: int = first, t: int = t) -> list[dict[str, Any]]:
                    return [self.target(j, t, None, first) for j in self.world.instances(name)
                            if self.s.clear_in(j, first, t)]

                why = {"window_s": round(window, 3)}
                for name in yes:
                    out.append(self.draft(c, f"Did you see {_article(name)} {when}?",
                                          ("yes", "no"), t, window, evidence(name), "yes", why))
                for name in no:
                    variant = "no, elsewhere" if name in present else "no, nowhere"
                    out.append(self.draft(c, f"Did you see {_article(name)} {when}?",
                                          ("no", "yes"), t, window, [], variant, why))
                wrong = sorted(no, key=lambda n: (n not in present, n))
                in_world = [n for n in wrong if n in present]
                for name in yes:
                    pool = in_world if len(in_world) >= 3 else wrong
                    if len(pool) < 3:
                        self.skip(c, "too few names not seen")
                        continue
                    picks = [pool[i] for i in rng.permutation(len(pool))[:3]]
                    out.append(self.draft(c, f"Which of these objects did you see {when}?",
                                          (name, *picks), t, window, evidence(name), "which",
                                          why))
        return self.pools(out)

    # ---------------------------------------------------------------- Embodied-R
    def route_back(self, rng: np.random.Generator) -> list[list[Draft]]:
        """The way back to an object, as far as the text carries it: the first turn towards
        the spot the robot last saw it from (the text places its frames by the motions it
        states; rooms and doorways it does not name). Every frame of that last sighting must
        call for the same turn, so whichever of them the memory keeps decides it."""
        c = "route_back"
        out = []
        for t in self.asks:
            pose = self.world.poses[t]
            for k in self._seen_by[t]:
                visit = self.last_visit(k, t)
                assert visit is not None
                if self.s.any_in(k, visit[1] + 1, t):
                    self.skip(c, "glimpsed after its last clear sighting")
                    continue
                spots = [self.world.poses[f] for f in self.s.clear_frames(k, *visit)]
                if min(math.hypot(p.x - pose.x, p.y - pose.y) for p in spots) < NEAR_SPOT_M:
                    self.skip(c, "too near the spot")
                    continue
                turns = {first_turn(bearing_deg(pose, (p.x, p.y))) for p in spots}
                if len(turns) != 1 or None in turns:
                    self.skip(c, "first turn near a boundary")
                    continue
                (turn,) = turns
                assert turn is not None
                ref, why = self.refer(k, t, frozenset({NAME, TIME}), rng)
                if ref is None:
                    self.skip(c, why)
                    continue
                words = [f"{x[0].upper()}{x[1:]}." for x in TURNS]
                right = words[TURNS.index(turn)]
                angle = bearing_deg(pose, (spots[-1].x, spots[-1].y))
                out.append(self.draft(
                    c, f"You want to go back to where you were when you last saw {ref}. "
                    "Which way do you turn first to face that spot?",
                    (right, *[w for w in words if w != right]), t, self.age(k, t),
                    [self.target(k, t, ref)], "first turn",
                    {"bearing_to_spot_deg": round(angle, 2), "spot_frames": list(visit)}))
        return self.pools(out)

    def closer(self, rng: np.random.Generator) -> list[list[Draft]]:
        c = "closer"
        out = []
        for t in self.asks:
            pairs = list(itertools.combinations(self._seen_by[t], 2))
            for i in rng.permutation(len(pairs))[:CLOSER_PAIRS_PER_ASK]:
                k1, k2 = pairs[i]
                d1, d2 = self.distance(k1, t), self.distance(k2, t)
                first = clearly_closer(d1, d2)
                if first is None:
                    self.skip(c, "about as far")
                    continue
                (r1, why1), (r2, why2) = (self.refer(k1, t, _ANY_REF, rng),
                                          self.refer(k2, t, _ANY_REF, rng))
                if r1 is None or r2 is None:
                    self.skip(c, why1 or why2)
                    continue
                if r1 == r2:
                    self.skip(c, "the two read the same")
                    continue
                near, far = (r1, r2) if first == 0 else (r2, r1)
                out.append(self.draft(
                    c, f"Which is closer to you now, in a straight line: {r1} or {r2}?",
                    (near, far), t, max(self.age(k1, t), self.age(k2, t)),
                    [self.target(k1, t, r1), self.target(k2, t, r2)], "pair",
                    {"distances_m": [round(d1, 3), round(d2, 3)]}))
        return self.pools(out)


def generate_long_questions(world: LongWorld, sightings: Sightings,
                            counts: Mapping[str, int]
                            ) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """Question rows for ``world`` (schema in the module notes of ``long_generate``) and the
    candidates skipped, per category and reason; fewer rows when geometry allows fewer."""
    gen = _Generator(world, sightings)
    seed = world.spec.seed
    rate = world.spec.rate_hz

    def row(d: Draft, fields: dict[str, Any], number: int) -> dict[str, Any]:
        t = int(d.end)
        basis = d.basis
        targets = [{**tg, "stamps_ns": [world.stamp_ns(i) for i in tg["frames"]]}
                   for tg in basis["targets"]]
        return {
            "id": f"long-seed{seed}-q{number:03d}",
            "scene_seed": seed,
            "world": "long",
            **fields,
            "source": basis["source"],
            "variant": basis["variant"],
            "horizon": basis["horizon"],
            "horizon_s": basis["horizon_s"],
            "frame": t,
            "t_ask": round(t / rate, 3),
            "stamp_ns": world.stamp_ns(t),
            "t_start": 0.0,
            "t_end": round(t / rate, 3),
            "stamp_start_ns": world.stamp_ns(0),
            "stamp_end_ns": world.stamp_ns(t),
            "targets": targets,
            "why": basis["why"],
        }

    rows = draft_rows(lambda category, rng: getattr(gen, category)(rng), CATEGORIES, counts,
                      seed, row)
    skipped: dict[str, dict[str, int]] = defaultdict(dict)
    for (category, reason), n in sorted(gen.skipped.items()):
        skipped[category][reason] = n
    return rows, dict(skipped)

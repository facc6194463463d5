"""How each kind of long-world question is decided at a frame of the tour, or skipped and why.

Kinds follow NaVQA (where is X relative to me now, how far is it, how long ago did I last see
it, what stood next to it, did I see one) and Embodied-R (the route back to X, which of two
is closer); :class:`Drafter` drafts every candidate of a kind, answered from the floor plan,
the object positions, the true poses and the renderer's visibility, never from perception.

Names, and what the records can state (:mod:`lab.long_world.references`): a question names an
instance by its place or by when it was seen, and is asked only where the perception's records
can decide it (as :mod:`embodied_r_training.data.text_check` does for the short clips): the
geometric perception names colours (``perception="colour"``, the world's questions), a
grounding VLM labels (``"label"``). The rest is skipped and counted by reason:

- **shared colour** (**shared label**): another object the records name alike is in the memory
  (shown by then) and nothing the text states tells the two apart: only the time of a
  reference can. "How long ago" names no time (it would give the answer away): it is kept
  where every such object was last shown in the same band;
- **near a boundary**: a distance, age or bearing within its band's margin
  (:data:`~lab.long_world.question_rules.DISTANCE_MARGIN`, ``AGE_MARGIN``, the
  quadrant margin), each wider than the text's rounding (a decimetre, a second, a degree);
- **the text cannot place it**: bearings that do not cross wide enough
  (:data:`~lab.long_world.references.MIN_CROSSING_DEG`), which ``next_to`` needs for both of
  its objects;
- the **route back** through doorways is not in the text (no rooms, no doorways): it is asked
  as the first turn towards the spot the robot last saw the object from, which the text
  carries as the poses of its frames.

Did-you-see questions ask about a name, whose answer is the same for every instance; colour
records answer for the colour, so a name whose colour was seen in the window by another object
is skipped.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from embodied_r_ros.sim.question_rows import Draft
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
from lab.long_world.references import ANY_REF, AREA, NAME, TIME, Perception, Referrer
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
#: nearer than this to where the object was last seen from, the turn towards it is unclear
NEAR_SPOT_M = 1.5
UNPLACED = "the text cannot place it"
CLOSER_PAIRS_PER_ASK = 30


def _article(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def ask_frames(world: LongWorld) -> list[int]:
    """Frames questions are asked at: every 15 s from the first minute, and the last."""
    rate = world.spec.rate_hz
    last = world.n_frames - 1
    frames = {round(t * rate) for t in np.arange(FIRST_ASK_S, last / rate + 1e-9, ASK_STEP_S)}
    frames.add(last)
    return sorted(f for f in frames if f <= last)


class Drafter(Referrer):
    """Drafts every candidate of each kind (a method per category) for ``perception``'s
    records, counting the skipped by reason."""

    def __init__(self, world: LongWorld, sightings: Sightings,
                 perception: Perception = "colour") -> None:
        super().__init__(world, sightings, perception)
        self.asks = ask_frames(world)
        self.skipped: Counter[tuple[str, str]] = Counter()
        self.names = [f"{c} {s}" for c in COLOURS for s in SHAPES]
        self._seen_by = {t: sightings.seen_by(t) for t in self.asks}

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
                ref, why = self.refer(k, t, ANY_REF, rng)
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
                ref, why = self.refer(k, t, ANY_REF, rng)
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
        """How long ago: the text states the age of the newest frame showing the object's
        kind, so with rivals in the memory the question is kept only when every one of them
        was last shown in the same band (clear of its edges)."""
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
                    self.skip(c, self.shared_reason)
                    continue
                obj = self.world.objects[k]
                if rivals:  # every object of the kind gives this answer: name it as usual
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
        if self.kind(j1) == self.kind(k):
            return None, self.shared_reason
        return j1, None

    def next_to(self, rng: np.random.Generator) -> list[list[Draft]]:
        """Which object stood next to X: the text locates the options by what the records
        name them (colour or label), so a wrong option's kind must have no object in the
        memory about as near to X as the neighbour, and the options' kinds differ."""
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
                close = {self.kind(i) for i, o in enumerate(objs) if i != k
                         and self.s.any_in(i, 0, t) and objs[k].distance_to(o) < near}
                banned = close | {self.kind(j)}
                # wrong options: names seen by now first, then names of nothing seen; one a
                # kind, each of a kind with nothing in the memory as near to X
                seen_wrong = sorted({objs[i].name for i in seen} - {objs[j].name})
                other_wrong = sorted(set(self.names) - set(seen_wrong) - {objs[j].name})
                picks: list[str] = []
                for pool in (seen_wrong, other_wrong):
                    for i in rng.permutation(len(pool)):
                        kind = self.name_kind(pool[i])
                        if len(picks) < 3 and kind not in banned:
                            picks.append(pool[i])
                            banned = banned | {kind}
                if len(picks) < 3:
                    self.skip(c, "too few colours far from it")
                    continue
                ref, why = self.refer(k, t, ANY_REF, rng)
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
        """Did you see an X in a window: the records state the kinds they saw, so a name is
        asked only where its kind gives the same answer (seen clearly in the window, or no
        object of the kind shown near it at all)."""
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
                kind_no = {kind for kind in {self.name_kind(n) for n in self.names}
                           if not any(self.s.any_in(j, start_no, t)
                                      for j in self.by_kind.get(kind, ()))}
                yes, no = [], []
                for name in self.names:
                    inst = self.world.instances(name)
                    if any(self.s.clear_in(j, start_yes, t) for j in inst):
                        yes.append(name)
                    elif not any(self.s.any_in(j, start_no, t) for j in inst):
                        if self.name_kind(name) in kind_no:
                            no.append(name)
                        else:
                            self.skip(c, self.shared_reason)
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
                (r1, why1), (r2, why2) = (self.refer(k1, t, ANY_REF, rng),
                                          self.refer(k2, t, ANY_REF, rng))
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



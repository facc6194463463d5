"""Long-horizon memory questions about the long world, labelled by how far back they reach.

Kinds follow NaVQA (where is X relative to me now, how far is it, how long ago did I last see
it, what stood next to it, did I see one) and Embodied-R (the route back to X, which of two
is closer). Each question is asked at a frame ``T`` of the tour, about what the camera saw up
to ``T``; answers come from the floor plan, the object positions, the true poses and the
renderer's visibility (:mod:`embodied_r_ros.sim.sightings`), never from perception.

Horizon: the age, at ``T``, of the oldest memory a question needs: for a question about
objects, the time since the last frame that showed each of them clearly (the oldest of
those); for "did you see a ... in the last N minutes", the window. Labels: ``short`` (under 2
minutes), ``medium`` (2 to 15), ``long`` (over 15); questions within 10 s of an edge are
skipped, like answers near a decision boundary, and every skip is counted by reason.

Names: several objects may share a name ("red box"), so a question names an instance by its
place ("the red box in room 3") or by when it was seen ("the red box you saw about 20 minutes
ago", only when no other red box was seen around then); a name used once in the world is
named plainly. A reference that would give the answer away is not used (the room, for the
route back; the time, for how long ago). Did-you-see questions ask about a name, whose
answer is the same for every instance.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from embodied_r_ros.sim import question_rows
from embodied_r_ros.sim.long_question_rules import (
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
from embodied_r_ros.sim.long_world import LongWorld
from embodied_r_ros.sim.question_rows import Draft, draft_rows
from embodied_r_ros.sim.question_rules import QUADRANTS, bearing_deg, clear_quadrant
from embodied_r_ros.sim.scene import COLOURS, SHAPES
from embodied_r_ros.sim.sightings import Sightings

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
DOORWAY_M = 1.0  # this near a doorway, which area "here" is and the first turn are unclear
WINDOWS_S: tuple[float, ...] = (60.0, 300.0, 600.0, 1200.0)
WINDOW_MARGIN = (5.0, 0.05)  # seconds, and a share of the window
TIME_REF_GAP_S = 60.0  # a sighting ends after a minute unseen
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

    def _time_ref(self, k: int, t: int) -> str | None:
        """"the X you saw about N minutes ago", when no other X was seen around then."""
        visits = [v for v in self.s.visits(k, round(TIME_REF_GAP_S * self.rate)) if v[0] <= t]
        if not visits:
            return None
        first, last = visits[-1][0], min(visits[-1][1], t)
        minutes = round((t - (first + last) / 2.0) / self.rate / 60.0)
        if minutes < 1:
            return None
        r = self.rate * 60.0
        if not self.s.clear_in(k, math.ceil(t - (minutes + 0.5) * r),
                               math.floor(t - (minutes - 0.5) * r)):
            return None
        slack = max(1.0, 0.25 * minutes)
        lo = math.floor(t - (minutes + 0.5 + slack) * r)
        hi = min(t, math.ceil(t - (minutes - 0.5 - slack) * r))
        name = self.world.objects[k].name
        if any(self.s.any_in(j, lo, hi) for j in self.world.instances(name) if j != k):
            return None
        return f"the {name} you saw about {minutes_phrase(minutes)} ago"

    def refer(self, k: int, t: int, allowed: frozenset[str],
              rng: np.random.Generator) -> str | None:
        """How a question names object ``k`` at frame ``t`` (module notes), or None."""
        obj = self.world.objects[k]
        if obj.name not in self.shared:
            return f"the {obj.name}" if NAME in allowed else None
        phrases = []
        if AREA in allowed:
            area = self.world.plan.areas[self.world.object_areas[k]]
            phrases.append(f"the {obj.name} in {area.name}")
        if TIME in allowed and (when := self._time_ref(k, t)) is not None:
            phrases.append(when)
        return phrases[int(rng.integers(0, len(phrases)))] if phrases else None

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
                ref = self.refer(k, t, _ANY_REF, rng)
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
                ref = self.refer(k, t, _ANY_REF, rng)
                out.append(self.draft(
                    c, f"How far is {ref} from you now, in a straight line to its centre "
                    "(through walls)?",
                    (answer, *[b[2] for b in DISTANCE_BANDS if b[2] != answer]), t,
                    self.age(k, t), [self.target(k, t, ref)], "band",
                    {"distance_m": round(dist, 3)}))
        return self.pools(out)

    def last_seen(self, rng: np.random.Generator) -> list[list[Draft]]:
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
                ref = self.refer(k, t, frozenset({NAME, AREA}), rng)
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
        return j1, None

    def next_to(self, rng: np.random.Generator) -> list[list[Draft]]:
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
                near = objs[k].distance_to(objs[j]) + NEXT_TO_MARGIN_M
                close = {o.name for o in objs if objs[k].distance_to(o) < near}
                banned = close | {objs[k].name, objs[j].name}
                # wrong options: names seen by now first, then names of nothing seen
                seen_wrong = sorted({objs[i].name for i in seen} - banned)
                other_wrong = sorted(set(self.names) - banned - set(seen_wrong))
                picks = [seen_wrong[i] for i in rng.permutation(len(seen_wrong))[:3]]
                picks += [other_wrong[i]
                          for i in rng.permutation(len(other_wrong))[:3 - len(picks)]]
                ref = self.refer(k, t, _ANY_REF, rng)
                out.append(self.draft(
                    c, f"Which object stood next to {ref} (the nearest to it)?",
                    (objs[j].name, *picks), t, max(self.age(k, t), self.age(j, t)),
                    [self.target(k, t, ref), self.target(j, t, None)], "nearest",
                    {"neighbour": j, "gap_m": round(objs[k].distance_to(objs[j]), 3)}))
        return self.pools(out)

    def seen(self, rng: np.random.Generator) -> list[list[Draft]]:
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
                yes, no = [], []
                for name in self.names:
                    inst = self.world.instances(name)
                    if any(self.s.clear_in(j, start_yes, t) for j in inst):
                        yes.append(name)
                    elif not any(self.s.any_in(j, start_no, t) for j in inst):
                        no.append(name)
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
    def _route_words(self, turn: str, here: int, goal: int) -> str:
        plan = self.world.plan
        names, area = [], here
        for k in plan.route(here, goal):
            area = plan.doors[k].other(area)
            names.append(plan.areas[area].name)
        head = turn[0].upper() + turn[1:]
        if len(names) == 1:
            return f"{head} towards the doorway and go through it into {names[0]}."
        return (f"{head} towards the doorway, go along {', then '.join(names[:-1])} and into "
                f"{names[-1]}.")

    def route_back(self, rng: np.random.Generator) -> list[list[Draft]]:
        c = "route_back"
        plan = self.world.plan
        out = []
        for t in self.asks:
            pose = self.world.poses[t]
            here = plan.area_at(pose.x, pose.y)
            if here is None or any(math.hypot(d.x - pose.x, d.y - pose.y) < DOORWAY_M
                                   for d in plan.doors):
                self.skip(c, "in a doorway")
                continue
            for k in self._seen_by[t]:
                goal = self.world.object_areas[k]
                if goal == here:
                    self.skip(c, "already in its area")
                    continue
                door = plan.doors[plan.route(here, goal)[0]]
                angle = bearing_deg(pose, (door.x, door.y))
                turn = first_turn(angle)
                if turn is None:
                    self.skip(c, "first turn near a boundary")
                    continue
                ref = self.refer(k, t, frozenset({NAME, TIME}), rng)
                if ref is None:
                    self.skip(c, "only its room tells it apart")
                    continue
                right = self._route_words(turn, here, goal)
                wrong_turn = [self._route_words(x, here, goal) for x in TURNS if x != turn]
                elsewhere = [a for a in range(len(plan.areas)) if a not in (here, goal)]
                wrong_goal = [self._route_words(turn, here, a) for a in elsewhere]
                order = rng.permutation(len(wrong_turn))
                picks = [wrong_turn[i] for i in order[:1]]
                picks += [wrong_goal[i] for i in rng.permutation(len(wrong_goal))[:2]]
                picks += [wrong_turn[i] for i in order[1:]]
                picks = list(dict.fromkeys(p for p in picks if p != right))[:3]
                out.append(self.draft(
                    c, f"You want to go back to {ref}. Which way gets you there from here?",
                    (right, *picks), t, self.age(k, t), [self.target(k, t, ref)], "route",
                    {"bearing_to_doorway_deg": round(angle, 2), "goal_area": goal}))
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
                r1, r2 = self.refer(k1, t, _ANY_REF, rng), self.refer(k2, t, _ANY_REF, rng)
                if r1 is None or r2 is None or r1 == r2:
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

"""The rule reader: answers a question from what its perception text states alone, the LM's
ceiling, and says whether that text decides the answer clearly.

What the question asks comes from its structured basis
(:class:`~embodied_r_ros.sim.question_basis.QuestionBasis`: the objects and places it names and
what each option says), never from its wording.

The reasoning LM sees only the perception text (key-frame actions with odometry amounts and the
colour-region observations of :mod:`embodied_r_ros.core.colors`) and the question. This reader
takes exactly what that text states (the records' stated view,
:func:`~embodied_r_ros.core.perception_text.stated_view`), never the world's ground truth, and
answers each question category by explicit rules: dead reckoning of the camera from the reported
motions, the bearing (and, when the text gives one, the distance) of every coloured region, a
rough map of the objects from those sightings, and the geometry each question asks about. Its
accuracy per category measures what the text allows at best, and whether the text carries each
category's information at all.

Objects are named ``"<colour> <shape>"`` with one object per colour, so a sighting of a colour is
a sighting of that object. Whether the text decides a question clearly is
:mod:`embodied_r_ros.reading.text_margins`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.perception_text import FrameText, PerceptionText, Sighting
from embodied_r_ros.core.poses import heading_deg, quadrant, wrap_deg
from embodied_r_ros.reading.dead_reckoning import Pose2D, pose_at_age, poses
from embodied_r_ros.sim.question_basis import PATH_KINDS, Option, QuestionBasis, place_age
from embodied_r_ros.sim.question_rules import DISTANCE_BANDS

#: where the text gives no range and one viewpoint only, objects are put this far away
ASSUMED_RANGE_M: float | None = 3.5
MAX_RANGE_M = 15.0  # a triangulated position farther than this is not believed


def colour_of(name: str) -> str:
    """The colour of an object name ("red box" -> "red"): one object per colour."""
    return name.split()[0]


@dataclass
class Map:
    """Object positions in frame 0's floor frame, from the sightings of the text."""

    poses: list[Pose2D]
    frames: Sequence[FrameText]

    def sightings(self, colour: str) -> list[tuple[int, Sighting]]:
        return [(f.index, f.sightings[colour]) for f in self.frames if colour in f.sightings]

    def position(self, colour: str) -> tuple[float, float] | None:
        """Mean of ranged sightings, else the least-squares crossing of the bearing rays."""
        seen = self.sightings(colour)
        ranged = [(i, s) for i, s in seen if s.distance_m is not None]
        if ranged:
            pts = []
            for i, s in ranged:
                p = self.poses[i]
                a = math.radians(p.yaw + s.bearing_deg)
                d = float(s.distance_m or 0.0)
                pts.append((p.x + d * math.cos(a), p.y + d * math.sin(a)))
            return (sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts))
        rays = [(self.poses[i], math.radians(self.poses[i].yaw + s.bearing_deg)) for i, s in seen]
        if not rays:
            return None
        origins = {(round(p.x, 2), round(p.y, 2)) for p, _ in rays}
        if len(origins) < 2:
            if ASSUMED_RANGE_M is None:
                return None
            # one viewpoint and no range: put the object at a typical distance on its ray
            p, ang = rays[-1]
            return (p.x + ASSUMED_RANGE_M * math.cos(ang), p.y + ASSUMED_RANGE_M * math.sin(ang))
        # least squares: sum over rays of (n . (q - o))^2, n the ray's normal
        a11 = a12 = a22 = b1 = b2 = 0.0
        for p, ang in rays:
            nx, ny = -math.sin(ang), math.cos(ang)
            c = nx * p.x + ny * p.y
            a11, a12, a22 = a11 + nx * nx, a12 + nx * ny, a22 + ny * ny
            b1, b2 = b1 + nx * c, b2 + ny * c
        det = a11 * a22 - a12 * a12
        if abs(det) > 1e-6:
            q = ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det)
            ahead = [(q[0] - p.x) * math.cos(ang) + (q[1] - p.y) * math.sin(ang)
                     for p, ang in rays]
            if min(ahead) > 0.3 and max(ahead) < MAX_RANGE_M:  # in front of every view
                return q
        if ASSUMED_RANGE_M is None:
            return None
        p, ang = rays[-1]  # nearly parallel rays: a typical distance on the last one
        return (p.x + ASSUMED_RANGE_M * math.cos(ang), p.y + ASSUMED_RANGE_M * math.sin(ang))

    def bearing_now(self, colour: str) -> float | None:
        """The object's bearing from the last frame's pose (left > 0)."""
        last = self.poses[-1]
        f_last = self.frames[-1]
        if colour in f_last.sightings:
            return f_last.sightings[colour].bearing_deg
        pos = self.position(colour)
        if pos is not None:
            return wrap_deg(heading_deg((last.x, last.y), pos) - last.yaw)
        seen = self.sightings(colour)
        if not seen:
            return None
        i, s = seen[-1]
        return wrap_deg(self.poses[i].yaw + s.bearing_deg - last.yaw)


def build_map(p: PerceptionText) -> Map:
    return Map(poses(p.frames), p.frames)


# ---------------------------------------------------------------- solvers


@dataclass(frozen=True)
class OracleAnswer:
    letter: str | None  # None: the text decides nothing (the caller may guess)
    evidence: str  # one line: what in the text decided it


def letter_where(options: Sequence[tuple[str, Any]], pred: Any) -> str | None:
    for letter, text in options:
        if pred(text):
            return letter
    return None


def lettered(p: PerceptionText, b: QuestionBasis) -> list[tuple[str, Option]]:
    """The options' letters with what each says (the basis's options, in letter order)."""
    return [(letter, said) for (letter, _), said in zip(p.options, b.options, strict=False)]


def _motions(p: PerceptionText) -> list[tuple[int, str, float]]:
    return [(f.index, f.action, f.amount or 0.0) for f in p.frames[1:]
            if f.action in ACTIONS]


def _runs(p: PerceptionText) -> list[tuple[str, float, list[int]]]:
    """Consecutive frames with the same action merged: ``(action, total, frame indices)``."""
    runs: list[tuple[str, float, list[int]]] = []
    for i, action, amount in _motions(p):
        if runs and runs[-1][0] == action:
            runs[-1] = (action, runs[-1][1] + amount, [*runs[-1][2], i])
        else:
            runs.append((action, amount, [i]))
    return runs


def solve_action_generation(p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    options = lettered(p, b)
    if b.kind == "navigate":
        colour = colour_of(b.objects[0]) if b.objects else ""
        bearing = build_map(p).bearing_now(colour)
        if bearing is None:
            return OracleAnswer(None, f"the {colour} object is never seen")
        move = ("move forward" if abs(bearing) <= 12.0 else
                "rotate left" if bearing > 0 else "rotate right")
        return OracleAnswer(
            letter_where(options, lambda said: said == (move,)),
            f"the {colour} object is about {abs(bearing):.0f} degrees "
            f"{'left' if bearing > 0 else 'right'} now: {move}")
    runs = _runs(p)
    if not runs:
        return OracleAnswer(None, "no motion reported")
    if b.kind == "sequence":
        # the two longest runs in time order (short runs straddle a boundary)
        by_size = sorted(runs, key=lambda r: -len(r[2]))
        chosen = sorted(by_size[:2], key=lambda r: r[2][0]) if len(runs) > 1 else runs * 2
        pair = [r[0] for r in chosen]
        letter = letter_where(options, lambda said: list(said) == pair)
        if letter is None:  # the order within the text first
            firsts = [r[0] for r in runs[:2]]
            letter = letter_where(options, lambda said: list(said) == firsts)
        return OracleAnswer(letter, f"{pair[0]}, then {pair[1]}")
    totals: dict[str, int] = {}
    for action, _, idx in runs:
        totals[action] = totals.get(action, 0) + len(idx)
    best = max(totals, key=lambda a: totals[a])
    return OracleAnswer(letter_where(options, lambda said: said == (best,)), best)


# ------------------------------------------------- places of the robot's own path (odometry)

def place_of(p: PerceptionText, path: Sequence[Pose2D], place: str) -> Pose2D | None:
    """The pose of a place of the path (:func:`~embodied_r_ros.sim.question_basis.place_age`):
    frame 0's, or the one its age locates."""
    age = place_age(place)
    if age is None:
        return path[0]
    return pose_at_age(p.frames, path, age)


def bearing_from_last(path: Sequence[Pose2D], place: Pose2D) -> float:
    """The bearing of ``place`` from the last pose of ``path`` (left > 0)."""
    last = path[-1]
    return wrap_deg(heading_deg((last.x, last.y), (place.x, place.y)) - last.yaw)


def solve_path_question(p: PerceptionText, b: QuestionBasis) -> OracleAnswer | None:
    """Questions about places of the robot's own path (``embodied-r-train questions``): the
    written motions dead-reckoned, the places located by their stated ages; None when the
    question is not one of them."""
    if b.kind not in PATH_KINDS:
        return None
    path = poses(p.frames)
    last = path[-1]
    options = lettered(p, b)
    if b.kind in ("place_direction", "way_back"):
        place = place_of(p, path, b.places[0])
        if place is None:
            return OracleAnswer(None, "no such age")
        bearing = bearing_from_last(path, place)
        if b.kind == "place_direction":
            where = quadrant(bearing)
            return OracleAnswer(letter_where(options, lambda said: said == (where,)),
                                f"the place at about {bearing:.0f} degrees: {where}")
        a = abs(bearing)
        first = ("Go forward" if a <= 27.5 else "Turn Back" if a >= 135.0
                 else "Turn Left" if bearing > 0 else "Turn Right")
        return OracleAnswer(letter_where(options, lambda said: said == (first,)),
                            f"the place at about {bearing:.0f} degrees: {first}")
    if b.kind == "nearer_place":
        best: tuple[float, str] | None = None
        for letter, said in options:
            place = place_of(p, path, str(said[0])) if said else None
            if place is not None:
                d = math.dist((last.x, last.y), (place.x, place.y))
                best = min(best, (d, letter)) if best else (d, letter)
        return OracleAnswer(best[1] if best else None,
                            f"about {best[0]:.1f} m" if best else "no place located")
    d = math.dist((last.x, last.y), (path[0].x, path[0].y))
    band = next(text for lo, hi, text in DISTANCE_BANDS if lo <= d < hi)
    return OracleAnswer(letter_where(options, lambda said: said == (band,)),
                        f"about {d:.1f} m: {band}")


def solve_relative_direction(p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    on_path = solve_path_question(p, b)
    if on_path is not None:
        return on_path
    world = build_map(p)
    options = lettered(p, b)
    if b.kind == "direction":
        colour = colour_of(b.objects[0])
        bearing = world.bearing_now(colour)
        if bearing is None:
            return OracleAnswer(None, f"the {colour} object is never seen")
        where = quadrant(bearing)
        return OracleAnswer(letter_where(options, lambda said: said == (where,)),
                            f"{colour} at about {bearing:.0f} degrees: {where}")
    if b.kind != "allocentric":
        return OracleAnswer(None, "unknown question")
    angle = allocentric_angle(b, world)
    if angle is None:
        return OracleAnswer(None, "an object's position is unknown")
    side = "back" if abs(angle) >= 135.0 else "left" if angle > 0 else "right"
    return OracleAnswer(letter_where(options, lambda said: said == (side,)),
                        f"turn {angle:.0f} degrees: {side}")


def allocentric_angle(b: QuestionBasis, world: Map) -> float | None:
    """Standing by the first object facing the second, the turn to the third (left > 0), as
    the text places them; None where one cannot be placed (or another question)."""
    if b.kind != "allocentric":
        return None
    pa, pb, pc = (world.position(colour_of(n)) for n in b.objects)
    if pa is None or pb is None or pc is None:
        return None
    return wrap_deg(heading_deg(pa, pc) - heading_deg(pa, pb))


def route_angles(b: QuestionBasis, world: Map) -> tuple[float, float] | None:
    """The two turns of an object route (at its second and third waypoints, left > 0), as the
    text places the objects; None where one cannot be placed (or another question)."""
    if b.kind != "route":
        return None
    pts = [world.position(colour_of(n)) for n in b.objects]
    if any(pt is None for pt in pts):
        return None
    a, b, c, d = pts  # type: ignore[misc]
    return (wrap_deg(heading_deg(b, c) - heading_deg(a, b)),
            wrap_deg(heading_deg(c, d) - heading_deg(b, c)))


def solve_relative_distance(p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    on_path = solve_path_question(p, b)
    if on_path is not None:
        return on_path
    if b.kind != "closest":
        return OracleAnswer(None, "unknown question")
    world = build_map(p)
    target = world.position(colour_of(b.objects[-1]))
    if target is None:
        return OracleAnswer(None, "the target's position is unknown")
    best: tuple[float, str] | None = None
    for letter, said in lettered(p, b):
        pos = world.position(colour_of(str(said[0])))
        if pos is None:
            continue
        d = math.dist(pos, target)
        if best is None or d < best[0]:
            best = (d, letter)
    if best is None:
        return OracleAnswer(None, "no candidate's position is known")
    return OracleAnswer(best[1], f"about {best[0]:.1f} m")


def first_sightings(p: PerceptionText) -> dict[str, tuple[int, float]]:
    """First frame of each colour and a tie-break key (earlier entering regions first)."""
    first: dict[str, tuple[int, float]] = {}
    for f in p.frames:
        turn = 0.0
        if f.action == "rotate right":
            turn = 1.0  # the view sweeps right: regions further left entered earlier
        elif f.action == "rotate left":
            turn = -1.0
        for colour, s in f.sightings.items():
            if colour not in first:
                first[colour] = (f.index, -turn * s.bearing_deg)
    return first


def appearance_key(first: Mapping[str, tuple[int, float]], name: str) -> tuple[int, float]:
    """An object's place in the order of first sightings (:func:`first_sightings`); one never
    seen comes after every seen one."""
    return first.get(colour_of(name), (10**6, 0.0))


def solve_appearance_order(p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    first = first_sightings(p)

    def key(name: str) -> tuple[int, float]:
        return appearance_key(first, name)

    best: tuple[tuple[int, ...], str] | None = None
    for letter, said in lettered(p, b):
        names = [str(n) for n in said]
        if [key(n) for n in names] == sorted(key(n) for n in names):
            return OracleAnswer(letter, ", ".join(f"{n} in frame {key(n)[0]}" for n in names))
        # else keep the option with the fewest inversions
        inv = sum(1 for i in range(len(names)) for j in range(i + 1, len(names))
                  if key(names[i]) > key(names[j]))
        if best is None or (inv,) < best[0]:
            best = ((inv,), letter)
    return OracleAnswer(best[1] if best else None, "closest order")


def _turn(angle: float) -> str:
    a = abs(angle)
    if a >= 135.0:
        return "Turn Back"
    return "Turn Left" if angle > 0 else "Turn Right"


def solve_route_planning(p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    on_path = solve_path_question(p, b)
    if on_path is not None:
        return on_path
    if b.kind != "route":
        return OracleAnswer(None, "unknown question")
    angles = route_angles(b, build_map(p))
    if angles is None:
        return OracleAnswer(None, "an object's position is unknown")
    t1, t2 = (_turn(a) for a in angles)
    want = f"{t1}, {t2}"
    options = lettered(p, b)
    exact = letter_where(options, lambda said: said == (t1, t2))
    if exact is not None:
        return OracleAnswer(exact, want)
    # rough positions often make a side turn look like a turn back: the option sharing a turn
    best = max(options, key=lambda o: (o[1][:1] == (t1,)) + (o[1][-1:] == (t2,)))
    return OracleAnswer(best[0], f"{want} (nearest option)")


def progress_step(p: PerceptionText, b: QuestionBasis) -> int | None:
    """The plan step the last frame is in: the reported motions consume the plan in order.

    A motion counts towards the nearest step ahead with its action; a step whose amount has
    been reached is finished, so the next one is under way. Key frames are sparse, so a step
    may get no motion of its own (it is skipped over) and a mixed motion counts as its main
    action only.
    """
    steps = b.plan
    if not steps:
        return None
    current, done = 0, 0.0
    for _, action, amount in _motions(p):
        ahead = [k for k in range(current, len(steps))
                 if steps[k][1] == action]
        if not ahead:
            continue
        if ahead[0] > current:
            current, done = ahead[0], 0.0
        done += amount
        planned = steps[current][2]
        tolerance = 0.15 if action.startswith("move") else 6.0
        if done >= planned - tolerance and current + 1 < len(steps):
            current, done = current + 1, 0.0
    return steps[current][0]


def solve_progress_evaluation(p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    number = progress_step(p, b)
    if number is None:
        return OracleAnswer(None, "the motions do not follow the plan")
    return OracleAnswer(letter_where(lettered(p, b), lambda said: said == (number,)),
                        f"step {number}")


#: a solver answers a question of its category from the text and the question's basis
Solver = Callable[[PerceptionText, QuestionBasis], OracleAnswer]
SOLVERS: dict[str, Solver] = {
    "action_generation": solve_action_generation,
    "relative_direction": solve_relative_direction,
    "relative_distance": solve_relative_distance,
    "appearance_order": solve_appearance_order,
    "route_planning": solve_route_planning,
    "progress_evaluation": solve_progress_evaluation,
}


def solve_text(category: str, p: PerceptionText, b: QuestionBasis) -> OracleAnswer:
    """The reader's answer to a question of ``category`` (asking ``b``) from what its text
    states."""
    solver = SOLVERS.get(category)
    if solver is None:
        return OracleAnswer(None, "unknown category")
    return solver(p, b)

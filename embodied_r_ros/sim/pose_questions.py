"""Multiple-choice questions that need nothing but poses: the rules the synthetic world's
questions (``sim/questions.py``) and the questions from a recording's odometry
(``embodied-r-train questions``) share.

Shared: the decision rules with their margins (bearings, quadrants, turns, sides), drafting and
picking (round-robin over question variants, duplicates skipped), balanced answer letters, and
the lettered row. On top of them, :class:`OdometryQuestions` asks what odometry alone decides
about a recording: what the robot did between two moments (``action_generation``), where a
place it passed is now (``relative_direction``), which of two places is nearer or how far it
went (``relative_distance``), how to get back (``route_planning``) and which step of its own
route it is on (``progress_evaluation``). The route is recovered from the poses by
:func:`steps_of`. Cases near a decision boundary are skipped and counted.

Times are seconds on the recording's clock; "the first frame" and "the last frame" are the
first and last camera frames of a question's window, so a question is about what its clip
shows.
"""

from __future__ import annotations

import bisect
import itertools
import math
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_r_ros.core.actions import ACTIONS, ActionThresholds, primary_action
from embodied_r_ros.core.odometry import pose_near
from embodied_r_ros.core.poses import Pose, heading_deg, quadrant, relative_motion, wrap_deg
from embodied_r_ros.sim.trajectory import OPPOSITE

# Margins that keep answers away from decision boundaries.
DIRECTION_MARGIN_DEG = 15.0
DISTANCE_MARGIN_M = 0.3
MIN_CLIP_S = 1.0
QUADRANTS = ("front-left", "front-right", "back-left", "back-right")
TURNS = ("Turn Left", "Turn Right", "Turn Back")

#: the categories odometry decides (appearance order needs to see objects)
ODOMETRY_CATEGORIES: tuple[str, ...] = (
    "action_generation",
    "relative_direction",
    "relative_distance",
    "route_planning",
    "progress_evaluation",
)


@dataclass(frozen=True)
class Draft:
    """A question before its options are lettered; ``choices[0]`` is the correct one.

    ``start``/``end`` delimit its clip in the caller's units (frame indices for the synthetic
    world, seconds for a recording); ``basis`` says what the answer was computed from.
    """

    category: str
    question: str
    choices: tuple[str, ...]
    start: float
    end: float
    basis: dict[str, Any] = field(default_factory=dict, compare=False)


def parse_counts(spec: str | int | Mapping[str, int],
                 categories: Sequence[str]) -> dict[str, int]:
    """Per-category counts from a total (split evenly) or ``"cat=N,cat=N"`` / a mapping.

    Raises ``ValueError`` naming an unknown category or a bad number.
    """
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        total = int(spec)
        if total < 0:
            raise ValueError(f"question count must be >= 0, got {total}")
        base, extra = divmod(total, len(categories))
        return {c: base + (1 if i < extra else 0) for i, c in enumerate(categories)}
    else:
        items = []
        for part in str(spec).split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(
                    f"bad question count {part.strip()!r}: use a total (30) or category=N pairs"
                )
            items.append((name.strip(), value.strip()))
    counts = {c: 0 for c in categories}
    for name, value in items:
        if name not in counts:
            raise ValueError(
                f"unknown question category {name!r}; known: {', '.join(categories)}"
            )
        try:
            n = int(value)
        except (TypeError, ValueError):
            msg = f"question count for {name} must be an integer, got {value!r}"
            raise ValueError(msg) from None
        if n < 0:
            raise ValueError(f"question count for {name} must be >= 0, got {n}")
        counts[name] = n
    return counts


# ---------------------------------------------------------------- decision rules


def bearing_deg(pose: Pose, point: Sequence[float]) -> float:
    """Horizontal angle of ``point`` from the camera's heading; positive to the left."""
    return wrap_deg(heading_deg((pose.x, pose.y), point) - pose.yaw_deg)


def boundary_distance(angle: float, boundaries: Sequence[float]) -> float:
    return min(abs(wrap_deg(angle - b)) for b in boundaries)


def clear_quadrant(angle: float) -> str | None:
    """The quadrant of a bearing at least the margin from every quadrant edge, else None."""
    if boundary_distance(angle, (0.0, 90.0, -90.0, 180.0)) < DIRECTION_MARGIN_DEG:
        return None
    return quadrant(angle)


def side_of(angle: float) -> str | None:
    """VSI 'left/right/back' (back: a turn of at least 135 degrees); None when ambiguous."""
    a = abs(angle)
    if a >= 135.0 + DIRECTION_MARGIN_DEG:
        return "back"
    if 20.0 <= a <= 135.0 - DIRECTION_MARGIN_DEG:
        return "left" if angle > 0 else "right"
    return None


def turn_of(angle: float) -> str | None:
    """Route-planning turn at a waypoint: Turn Left / Turn Right / Turn Back; None if unclear."""
    a = abs(angle)
    if a >= 150.0:
        return "Turn Back"
    if 40.0 <= a <= 120.0:
        return "Turn Left" if angle > 0 else "Turn Right"
    return None


def sentence(action: str) -> str:
    return f"I {action}."


def action_choices(action: str, rng: np.random.Generator) -> tuple[str, ...]:
    """"What did you do" options: the action, its opposite and two others at random."""
    others = [a for a in ACTIONS if a not in (action, OPPOSITE[action])]
    picks = [OPPOSITE[action], *rng.choice(others, 2, replace=False).tolist()]
    return tuple(sentence(a) for a in [action, *picks])


def sequence_choices(first: str, second: str, rng: np.random.Generator) -> tuple[str, ...]:
    """"Which sequence" options: the right order and three wrong variants of it."""
    right = (first, second)
    wrong = {(second, first), (OPPOSITE[first], second), (first, OPPOSITE[second]),
             (OPPOSITE[first], OPPOSITE[second])}
    wrong.discard(right)
    wrong_list = sorted(wrong)
    chosen = [wrong_list[i] for i in rng.permutation(len(wrong_list))[:3]]
    return tuple(f"I {x}, then I {y}." for x, y in [right, *chosen])


def progress_choices(k: int, described: Sequence[str], rng: np.random.Generator
                     ) -> tuple[str, ...] | None:
    """"Which step are you on" options (step ``k`` of ``described``): neighbours first."""
    near = [j for j in (k - 1, k + 1) if 0 <= j < len(described)]
    far = [j for j in rng.permutation(len(described)).tolist() if j not in (k, *near)]
    picks = (near + far)[:3]
    if len(picks) < 2:
        return None
    return tuple(f"I am on step {j + 1}: {described[j]}." for j in [k, *picks])


def progress_question(described: Sequence[str]) -> str:
    plan = "; ".join(f"{j + 1}. {s}" for j, s in enumerate(described))
    return (f"Navigation instruction given at initial position: [{plan}]. You move according "
            "to this series of instructions. What are you doing now (at the last frame of the "
            "video)?")


ACTION_QUESTION = "What did you do between the first frame and the last frame of the video?"
SEQUENCE_QUESTION = ("Which sequence of actions did you perform from the first frame to the last "
                     "frame of the video?")


# ---------------------------------------------------------------- picking and lettering


def pick(pools: list[list[Draft]], n: int, rng: np.random.Generator) -> list[Draft]:
    """Round-robin over shuffled pools (question variants), skipping duplicates."""
    queues = [[pool[j] for j in rng.permutation(len(pool))] for pool in pools]
    out: list[Draft] = []
    keys: set[tuple[str, float, float]] = set()
    while len(out) < n and any(queues):
        for q in queues:
            while q:
                d = q.pop(0)
                key = (d.question, d.start, d.end)
                if key not in keys:
                    keys.add(key)
                    out.append(d)
                    break
            if len(out) >= n:
                break
    return out


class Letters:
    """Balanced answer positions: consecutive random permutations per option count."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.queues: dict[int, list[int]] = {}

    def next(self, n: int) -> int:
        q = self.queues.setdefault(n, [])
        if not q:
            q.extend(self.rng.permutation(n).tolist())
        return q.pop(0)


def lettered(d: Draft, position: int, rng: np.random.Generator) -> dict[str, Any]:
    """The row fields of a draft with its answer at ``position``: category, question,
    options (``"A. text"``), answer and answer_text."""
    wrong = [d.choices[j] for j in 1 + rng.permutation(len(d.choices) - 1)]
    ordered = wrong[:position] + [d.choices[0]] + wrong[position:]
    letters = string.ascii_uppercase
    return {
        "category": d.category,
        "question": d.question,
        "options": [f"{letters[j]}. {text}" for j, text in enumerate(ordered)],
        "answer": letters[position],
        "answer_text": d.choices[0],
    }


def draft_rows(pools_of: Callable[[str, np.random.Generator], list[list[Draft]]],
               categories: Sequence[str], counts: Mapping[str, int], seed: int,
               row: Callable[[Draft, dict[str, Any], int], dict[str, Any]]) -> list[dict]:
    """Rows for every category: its own random stream (changing one count leaves the other
    categories' questions unchanged), drafts picked, sorted by clip and lettered evenly;
    ``row(draft, lettered_fields, number)`` completes each row."""
    rows: list[dict] = []
    for ci, category in enumerate(categories):
        n = int(counts.get(category, 0))
        if n <= 0:
            continue
        rng = np.random.default_rng([seed, 0x9E5, ci])
        drafts = pick(pools_of(category, rng), n, rng)
        drafts.sort(key=lambda d: (d.end, d.start, d.question))
        letters = Letters(rng)
        for d in drafts:
            fields = lettered(d, letters.next(len(d.choices)), rng)
            rows.append(row(d, fields, len(rows)))
    return rows


# ---------------------------------------------------------------- a recording's odometry


@dataclass(frozen=True)
class Track:
    """Poses of a recording and the stamps of its camera frames (seconds, sorted)."""

    stamps: Sequence[float]
    poses: Sequence[Pose]
    frames: Sequence[float]
    tolerance_sec: float = 0.2

    def at(self, t: float) -> Pose | None:
        """The pose at ``t`` by the core's odometry rule (nearest within the tolerance)."""
        return pose_near(self.stamps, self.poses, t, self.tolerance_sec)

    def frame_at_or_before(self, t: float) -> float | None:
        i = bisect.bisect_right(self.frames, t + 1e-9) - 1
        return self.frames[i] if i >= 0 else None

    def frame_at_or_after(self, t: float) -> float | None:
        i = bisect.bisect_left(self.frames, t - 1e-9)
        return self.frames[i] if i < len(self.frames) else None


@dataclass(frozen=True)
class Step:
    """One stretch of a single action recovered from odometry."""

    action: str
    t0: float
    t1: float
    amount: float  # metres, or degrees for rotations and tilts

    @property
    def duration(self) -> float:
        return self.t1 - self.t0

    def describe(self) -> str:
        """Instruction-style phrase, as the synthetic world's segments describe themselves."""
        if self.action.startswith("move"):
            return f"{self.action} about {self.amount:.1f} m"
        return f"{self.action} about {self.amount:.0f} degrees"


#: per-tick thresholds of :func:`steps_of`: 5 deg/s and 0.1 m/s count as moving
TICK_SEC = 0.5
TICK_THRESHOLDS = ActionThresholds(rotation_deg=5.0 * TICK_SEC, translation_m=0.1 * TICK_SEC)


def _amount(action: str, a: Pose, b: Pose) -> float:
    m = relative_motion(a, b)
    if action.startswith("rotate"):
        return abs(m.yaw_deg)
    if action.startswith("tilt"):
        return abs(m.pitch_deg)
    return m.translation


def steps_of(track: Track, t0: float, t1: float) -> list[Step]:
    """The route between ``t0`` and ``t1`` as single-action steps: each half second labelled
    with its dominant action (or none: standing still, or no pose), equal neighbours merged."""
    ticks = np.arange(t0, t1 + 1e-9, TICK_SEC)
    labels: list[str | None] = []
    for a, b in itertools.pairwise(ticks):
        pa, pb = track.at(float(a)), track.at(float(b))
        labels.append(None if pa is None or pb is None
                      else primary_action(relative_motion(pa, pb), TICK_THRESHOLDS))
    steps: list[Step] = []
    for label, group in itertools.groupby(range(len(labels)), key=lambda i: labels[i]):
        idx = list(group)
        if label is None:
            continue
        s0, s1 = float(ticks[idx[0]]), float(ticks[idx[-1] + 1])
        pa, pb = track.at(s0), track.at(s1)
        assert pa is not None and pb is not None
        steps.append(Step(label, s0, s1, _amount(label, pa, pb)))
    return steps


class OdometryQuestions:
    """Question drafts from a recording's poses (see the module notes); ``skipped`` counts the
    candidates left out per category because they were too close to a decision boundary."""

    def __init__(self, track: Track) -> None:
        if len(track.frames) < 2 or not track.stamps:
            raise ValueError("a recording needs camera frames and odometry poses")
        self.track = track
        self.first, self.last = track.frames[0], track.frames[-1]
        self.steps = steps_of(track, self.first, self.last)
        self.skipped: Counter[str] = Counter()

    # helpers --------------------------------------------------------------------------
    def _clip(self, t0: float, t1: float) -> tuple[float, float] | None:
        """The frames' stamps nearest inside [t0, t1], if the clip is long enough."""
        a, b = self.track.frame_at_or_after(t0), self.track.frame_at_or_before(t1)
        if a is None or b is None or b - a < MIN_CLIP_S:
            return None
        return a, b

    def _nows(self, start: float, step: float) -> list[float]:
        out = []
        t = self.first + start
        while t <= self.last + 1e-9:
            now = self.track.frame_at_or_before(t)
            if now is not None and (not out or now > out[-1]):
                out.append(now)
            t += step
        return out

    def _skip(self, category: str) -> None:
        self.skipped[category] += 1

    def _places(self, now: float) -> list[tuple[str, str, float]]:
        """Earlier places to ask about at ``now``: (in a question, in an option, time)."""
        out = [("the point where you started (at the first frame of the video)",
                "the point where I started", self.first)]
        for ago in (5, 10, 20):
            t = self.track.frame_at_or_before(now - ago)
            if t is not None and t - self.first >= 2.0:
                out.append((f"the place where you were {ago} seconds before the last frame",
                            f"where I was {ago} seconds ago", t))
        return out

    # categories -----------------------------------------------------------------------
    def action_generation(self, rng: np.random.Generator) -> list[list[Draft]]:
        single, double = [], []
        for step in self.steps:
            clip = self._clip(step.t0 + 0.5, step.t1 - 0.5)
            if clip is None:
                continue
            pa, pb = self.track.at(clip[0]), self.track.at(clip[1])
            if pa is None or pb is None or primary_action(relative_motion(pa, pb)) != step.action:
                self._skip("action_generation")
                continue
            single.append(Draft("action_generation", ACTION_QUESTION,
                                action_choices(step.action, rng), *clip,
                                {"steps": [step.action]}))
        for a, b in itertools.pairwise(self.steps):
            if b.t0 - a.t1 > TICK_SEC + 1e-9 or a.duration < 1.5 or b.duration < 1.5:
                continue
            clip = self._clip(a.t0 + 0.5, b.t1 - 0.5)
            if clip is None:
                continue
            double.append(Draft("action_generation", SEQUENCE_QUESTION,
                                sequence_choices(a.action, b.action, rng), *clip,
                                {"steps": [a.action, b.action]}))
        return [single, double]

    def relative_direction(self, rng: np.random.Generator) -> list[list[Draft]]:
        out = []
        for now in self._nows(4.0, 2.0):
            cur = self.track.at(now)
            for said, _, t in self._places(now):
                ref = self.track.at(t)
                if cur is None or ref is None or math.dist((cur.x, cur.y), (ref.x, ref.y)) < 1.0:
                    continue
                answer = clear_quadrant(bearing_deg(cur, (ref.x, ref.y)))
                if answer is None:
                    self._skip("relative_direction")
                    continue
                out.append(Draft(
                    "relative_direction",
                    f"Where is {said} relative to you now (at the last frame of the video): to "
                    "your front-left, front-right, back-left, or back-right?",
                    (answer, *[q for q in QUADRANTS if q != answer]), self.first, now,
                    {"place_t": t}))
        return [out]

    def relative_distance(self, rng: np.random.Generator) -> list[list[Draft]]:
        nearer, how_far = [], []
        buckets = ((0.0, 1.0, "less than 1 m"), (1.0, 2.0, "between 1 and 2 m"),
                   (2.0, 4.0, "between 2 and 4 m"), (4.0, math.inf, "more than 4 m"))
        for now in self._nows(4.0, 2.0):
            cur = self.track.at(now)
            if cur is None:
                continue
            places = self._places(now)
            dist = {}
            for said, short, t in places:
                ref = self.track.at(t)
                if ref is not None:
                    dist[t] = (math.dist((cur.x, cur.y), (ref.x, ref.y)), said, short)
            for (ta, a), (tb, b) in itertools.combinations(dist.items(), 2):
                if abs(a[0] - b[0]) < DISTANCE_MARGIN_M:
                    self._skip("relative_distance")
                    continue
                close, far = (a, b) if a[0] < b[0] else (b, a)
                nearer.append(Draft(
                    "relative_distance",
                    f"Which is closer to you now (at the last frame of the video): {a[1]}, or "
                    f"{b[1]}?", (close[2], far[2]), self.first, now,
                    {"places_t": [ta, tb]}))
            if self.first in dist:
                d = dist[self.first][0]
                edges = [e for lo, hi, _ in buckets for e in (lo, hi) if 0 < e < math.inf]
                if min(abs(d - e) for e in edges) < 0.25:
                    self._skip("relative_distance")
                    continue
                answer = next(text for lo, hi, text in buckets if lo <= d < hi)
                how_far.append(Draft(
                    "relative_distance",
                    "How far are you now (at the last frame of the video) from the point where "
                    "you started (at the first frame), in a straight line?",
                    (answer, *[t for _, _, t in buckets if t != answer]), self.first, now,
                    {"place_t": self.first}))
        return [nearer, how_far]

    def route_planning(self, rng: np.random.Generator) -> list[list[Draft]]:
        out = []
        options = (*TURNS, "Go forward")
        for now in self._nows(4.0, 2.0):
            cur = self.track.at(now)
            for said, _, t in self._places(now):
                ref = self.track.at(t)
                if cur is None or ref is None or math.dist((cur.x, cur.y), (ref.x, ref.y)) < 1.0:
                    continue
                bearing = bearing_deg(cur, (ref.x, ref.y))
                answer = "Go forward" if abs(bearing) <= 15.0 else turn_of(bearing)
                if answer is None:
                    self._skip("route_planning")
                    continue
                out.append(Draft(
                    "route_planning",
                    f"You want to go back to {said}. What should you do first, from where you "
                    "are now (the last frame of the video)?",
                    (answer, *[o for o in options if o != answer]), self.first, now,
                    {"place_t": t}))
        return [out]

    def progress_evaluation(self, rng: np.random.Generator) -> list[list[Draft]]:
        out = []
        margin = 0.8  # seconds from either end of the step, so "now" is clearly inside it
        for k, step in enumerate(self.steps):
            if k == 0 or step.duration < 2.0 * margin:
                continue
            times = np.arange(step.t0 + margin, min(step.t1 - margin, self.last) + 1e-9, 1.0)
            if len(times) == 0:
                continue
            now = self.track.frame_at_or_before(float(rng.choice(times)))
            if now is None or not step.t0 + margin - 0.2 <= now:
                self._skip("progress_evaluation")
                continue
            steps = self.steps[: min(len(self.steps), k + 3)]
            described = [s.describe() for s in steps]
            choices = progress_choices(k, described, rng)
            if choices is None:
                continue
            out.append(Draft("progress_evaluation", progress_question(described), choices,
                             self.first, now, {"step": k + 1, "action": step.action}))
        return [out]

"""Multiple-choice questions that odometry alone decides about a recording.

:class:`OdometryQuestions` asks what the poses decide: what the robot did between two moments
(``action_generation``), where a place it passed is now (``relative_direction``), which of two
places is nearer or how far it went (``relative_distance``), how to get back
(``route_planning``) and which step of its own route it is on (``progress_evaluation``). The
route is recovered from the poses by :func:`steps_of`. The answers follow the rules of
``sim/question_rules.py``, the synthetic world's own; cases near a decision boundary are skipped
and counted. ``embodied-r-train questions`` letters the drafts with ``sim/question_rows.py``.

Times are seconds on the recording's clock; "the first frame" and "the last frame" are the
first and last camera frames of a question's window, so a question is about what its clip
shows.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_r_ros.core.actions import ActionThresholds, primary_action
from embodied_r_ros.core.odometry import PoseTrack
from embodied_r_ros.core.poses import Pose, relative_motion
from embodied_r_ros.sim.question_basis import START, QuestionBasis
from embodied_r_ros.sim.question_rows import Draft
from embodied_r_ros.sim.question_rules import (
    ACTION_QUESTION,
    DISTANCE_BANDS,
    DISTANCE_MARGIN_M,
    MIN_CLIP_S,
    QUADRANTS,
    SEQUENCE_QUESTION,
    TURNS,
    action_choices,
    action_picks,
    bearing_deg,
    clear_quadrant,
    progress_choices,
    progress_picks,
    progress_question,
    sequence_choices,
    sequence_picks,
    turn_of,
)


def _basis(kind: str, options: Sequence[Sequence[str | int]], places: Sequence[str] = (),
           plan: Sequence[tuple[int, str, float]] = (), **truth: Any) -> dict[str, Any]:
    """A draft's basis: what it asks (its options in the draft's order), then the times and
    steps its answer was computed from."""
    asks = QuestionBasis(kind, places=tuple(places), plan=tuple(plan),
                         options=tuple(tuple(o) for o in options))
    return {**asks.to_dict(), **truth}


#: the categories odometry decides (appearance order needs to see objects)
ODOMETRY_CATEGORIES: tuple[str, ...] = (
    "action_generation",
    "relative_direction",
    "relative_distance",
    "route_planning",
    "progress_evaluation",
)


@dataclass(frozen=True)
class Track:
    """Poses of a recording (odometry or the tf tree) and the stamps of its camera frames
    (seconds, sorted)."""

    poses: PoseTrack
    frames: Sequence[float]
    tolerance_sec: float = 0.2

    def at(self, t: float) -> Pose | None:
        """The pose at ``t`` by the core's pose rule (``core/odometry.py``)."""
        return self.poses.at(t, self.tolerance_sec)

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
        """Instruction-style phrase, as the synthetic world's segments describe themselves. The
        amount is rounded to a millionth first: poses read through different float arithmetic
        (an odometry quaternion, a chain of transforms) differ by far less, and must not turn
        7.5 degrees into "7" one way and "8" the other."""
        amount = round(self.amount, 6)
        if self.action.startswith("move"):
            return f"{self.action} about {amount:.1f} m"
        return f"{self.action} about {amount:.0f} degrees"

    @property
    def stated_amount(self) -> float:
        """The amount as :meth:`describe` states it."""
        amount = round(self.amount, 6)
        return float(f"{amount:.1f}" if self.action.startswith("move") else f"{amount:.0f}")


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
        if len(track.frames) < 2 or not len(track.poses):
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

    def _places(self, now: float) -> list[tuple[str, str, float, str]]:
        """Earlier places to ask about at ``now``: (in a question, in an option, time, the
        place in a question's basis)."""
        out = [("the point where you started (at the first frame of the video)",
                "the point where I started", self.first, START)]
        for ago in (5, 10, 20):
            t = self.track.frame_at_or_before(now - ago)
            if t is not None and t - self.first >= 2.0:
                out.append((f"the place where you were {ago} seconds before the last frame",
                            f"where I was {ago} seconds ago", t, str(ago)))
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
            picks = action_picks(step.action, rng)
            single.append(Draft("action_generation", ACTION_QUESTION, action_choices(picks),
                                *clip, _basis("motion", [(a,) for a in picks],
                                              steps=[step.action])))
        for a, b in itertools.pairwise(self.steps):
            if b.t0 - a.t1 > TICK_SEC + 1e-9 or a.duration < 1.5 or b.duration < 1.5:
                continue
            clip = self._clip(a.t0 + 0.5, b.t1 - 0.5)
            if clip is None:
                continue
            pairs = sequence_picks(a.action, b.action, rng)
            double.append(Draft("action_generation", SEQUENCE_QUESTION, sequence_choices(pairs),
                                *clip, _basis("sequence", pairs, steps=[a.action, b.action])))
        return [single, double]

    def relative_direction(self, rng: np.random.Generator) -> list[list[Draft]]:
        out = []
        for now in self._nows(4.0, 2.0):
            cur = self.track.at(now)
            for said, _, t, place in self._places(now):
                ref = self.track.at(t)
                if cur is None or ref is None or math.dist((cur.x, cur.y), (ref.x, ref.y)) < 1.0:
                    continue
                answer = clear_quadrant(bearing_deg(cur, (ref.x, ref.y)))
                if answer is None:
                    self._skip("relative_direction")
                    continue
                quadrants = (answer, *[q for q in QUADRANTS if q != answer])
                out.append(Draft(
                    "relative_direction",
                    f"Where is {said} relative to you now (at the last frame of the video): to "
                    "your front-left, front-right, back-left, or back-right?",
                    quadrants, self.first, now,
                    _basis("place_direction", [(q,) for q in quadrants], (place,), place_t=t)))
        return [out]

    def relative_distance(self, rng: np.random.Generator) -> list[list[Draft]]:
        nearer, how_far = [], []
        buckets = DISTANCE_BANDS
        for now in self._nows(4.0, 2.0):
            cur = self.track.at(now)
            if cur is None:
                continue
            places = self._places(now)
            dist = {}
            for said, short, t, place in places:
                ref = self.track.at(t)
                if ref is not None:
                    dist[t] = (math.dist((cur.x, cur.y), (ref.x, ref.y)), said, short, place)
            for (ta, a), (tb, b) in itertools.combinations(dist.items(), 2):
                if abs(a[0] - b[0]) < DISTANCE_MARGIN_M:
                    self._skip("relative_distance")
                    continue
                close, far = (a, b) if a[0] < b[0] else (b, a)
                nearer.append(Draft(
                    "relative_distance",
                    f"Which is closer to you now (at the last frame of the video): {a[1]}, or "
                    f"{b[1]}?", (close[2], far[2]), self.first, now,
                    _basis("nearer_place", [(close[3],), (far[3],)], places_t=[ta, tb])))
            if self.first in dist:
                d = dist[self.first][0]
                edges = [e for lo, hi, _ in buckets for e in (lo, hi) if 0 < e < math.inf]
                if min(abs(d - e) for e in edges) < 0.25:
                    self._skip("relative_distance")
                    continue
                answer = next(text for lo, hi, text in buckets if lo <= d < hi)
                bands = (answer, *[t for _, _, t in buckets if t != answer])
                how_far.append(Draft(
                    "relative_distance",
                    "How far are you now (at the last frame of the video) from the point where "
                    "you started (at the first frame), in a straight line?",
                    bands, self.first, now,
                    _basis("how_far", [(b,) for b in bands], (START,), place_t=self.first)))
        return [nearer, how_far]

    def route_planning(self, rng: np.random.Generator) -> list[list[Draft]]:
        out = []
        options = (*TURNS, "Go forward")
        for now in self._nows(4.0, 2.0):
            cur = self.track.at(now)
            for said, _, t, place in self._places(now):
                ref = self.track.at(t)
                if cur is None or ref is None or math.dist((cur.x, cur.y), (ref.x, ref.y)) < 1.0:
                    continue
                bearing = bearing_deg(cur, (ref.x, ref.y))
                answer = "Go forward" if abs(bearing) <= 15.0 else turn_of(bearing)
                if answer is None:
                    self._skip("route_planning")
                    continue
                moves = (answer, *[o for o in options if o != answer])
                out.append(Draft(
                    "route_planning",
                    f"You want to go back to {said}. What should you do first, from where you "
                    "are now (the last frame of the video)?",
                    moves, self.first, now,
                    _basis("way_back", [(o,) for o in moves], (place,), place_t=t)))
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
            picks = progress_picks(k, len(described), rng)
            if picks is None:
                continue
            plan = [(j + 1, s.action, s.stated_amount) for j, s in enumerate(steps)]
            out.append(Draft("progress_evaluation", progress_question(described),
                             progress_choices(picks, described), self.first, now,
                             _basis("progress", [(j + 1,) for j in picks], plan=plan,
                                    step=k + 1, action=step.action)))
        return [out]

"""Multiple-choice questions whose answers follow from the world's geometry.

Categories and wording follow the tasks Embodied-R trains on (VSI-Bench: relative direction,
relative distance, appearance order, route planning; UrbanVideo-Bench: action generation,
progress evaluation). Every question refers to a clip of the video, ``[t_start, t_end]``;
"now" and "the last frame" mean ``t_end``. Only objects truly seen in the clip (by the
renderer's visibility) are asked about, and cases near a decision boundary (an object almost
straight ahead, two nearly equal distances, ...) are skipped so every answer is unambiguous.

Each category draws from its own random stream, so changing one category's count leaves the
other categories' questions unchanged; answer letters are balanced per category.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.actions import ACTIONS, primary_action
from embodied_r_ros.core.poses import Pose, heading_deg, quadrant, relative_motion, wrap_deg
from embodied_r_ros.sim.trajectory import OPPOSITE
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import World

CATEGORIES: tuple[str, ...] = (
    "action_generation",
    "relative_direction",
    "relative_distance",
    "appearance_order",
    "route_planning",
    "progress_evaluation",
)

# Margins that keep answers away from decision boundaries.
DIRECTION_MARGIN_DEG = 15.0
DISTANCE_MARGIN_M = 0.3
APPEARANCE_GAP_S = 1.0
MIN_CLIP_S = 1.0


@dataclass(frozen=True)
class Draft:
    """A question before its options are lettered; ``choices[0]`` is the correct one."""

    category: str
    question: str
    choices: tuple[str, ...]
    i_start: int
    i_end: int


def parse_counts(spec: str | int | Mapping[str, int]) -> dict[str, int]:
    """Per-category counts from a total (split evenly) or ``"cat=N,cat=N"`` / a mapping.

    Raises ``ValueError`` naming an unknown category or a bad number.
    """
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        total = int(spec)
        base, extra = divmod(total, len(CATEGORIES))
        return {c: base + (1 if i < extra else 0) for i, c in enumerate(CATEGORIES)}
    else:
        items = []
        for part in str(spec).split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(
                    f"bad question count {part.strip()!r}: use a total (30) or category=N pairs"
                )
            items.append((name.strip(), value.strip()))
    counts = {c: 0 for c in CATEGORIES}
    for name, value in items:
        if name not in counts:
            raise ValueError(
                f"unknown question category {name!r}; known: {', '.join(CATEGORIES)}"
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


# ---------------------------------------------------------------- geometry


def bearing_deg(pose: Pose, point: Sequence[float]) -> float:
    """Horizontal angle of ``point`` from the camera's heading; positive to the left."""
    return wrap_deg(heading_deg((pose.x, pose.y), point) - pose.yaw_deg)


def _boundary_distance(angle: float, boundaries: Sequence[float]) -> float:
    return min(abs(wrap_deg(angle - b)) for b in boundaries)


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


def _sentence(action: str) -> str:
    return f"I {action}."


# ---------------------------------------------------------------- generators


class _Generator:
    def __init__(self, world: World, vis: Visibility) -> None:
        self.world = world
        self.vis = vis
        self.rate = world.spec.rate_hz
        self.last = world.n_frames - 1
        self.first_seen = vis.first_seen()

    def _every(self, start_s: float, step_s: float = 1.0) -> list[int]:
        start = round(start_s * self.rate)
        step = max(1, round(step_s * self.rate))
        return list(range(start, self.last + 1, step))

    def _clip(self, t0: float, t1: float) -> tuple[int, int] | None:
        """Frames strictly inside [t0, t1] (so the clip shows one motion), if long enough."""
        i0 = math.ceil(t0 * self.rate - 1e-9)
        i1 = min(self.last, math.floor(t1 * self.rate + 1e-9))
        if i1 - i0 < MIN_CLIP_S * self.rate:
            return None
        return i0, i1

    # action_generation -----------------------------------------------------------------
    def action_generation(self, rng: np.random.Generator) -> list[list[Draft]]:
        single, double, nxt = [], [], []
        segs = self.world.trajectory.segments
        for seg in segs:
            clip = self._clip(seg.t0, seg.t1)
            if clip is None:
                continue
            motion = relative_motion(self.world.poses[clip[0]], self.world.poses[clip[1]])
            if primary_action(motion) != seg.action:
                continue
            others = [a for a in ACTIONS if a not in (seg.action, OPPOSITE[seg.action])]
            picks = [OPPOSITE[seg.action], *rng.choice(others, 2, replace=False).tolist()]
            single.append(Draft(
                "action_generation",
                "What did you do between the first frame and the last frame of the video?",
                tuple(_sentence(a) for a in [seg.action, *picks]),
                *clip,
            ))
        for a, b in itertools.pairwise(segs):
            i0 = math.ceil(a.t0 * self.rate - 1e-9)
            i1 = min(self.last, math.floor(b.t1 * self.rate + 1e-9))
            if (a.t1 - a.t0) < MIN_CLIP_S or (min(b.t1, self.world.duration) - b.t0) < MIN_CLIP_S:
                continue
            right = (a.action, b.action)
            wrong = {(b.action, a.action), (OPPOSITE[a.action], b.action),
                     (a.action, OPPOSITE[b.action]), (OPPOSITE[a.action], OPPOSITE[b.action])}
            wrong.discard(right)
            wrong_list = sorted(wrong)
            chosen = [wrong_list[i] for i in rng.permutation(len(wrong_list))[:3]]
            double.append(Draft(
                "action_generation",
                "Which sequence of actions did you perform from the first frame to the last "
                "frame of the video?",
                tuple(f"I {x}, then I {y}." for x, y in [right, *chosen]),
                i0, i1,
            ))
        for i in self._every(3.0, 1.5):
            pose = self.world.poses[i]
            for k in self.vis.seen_by(i):
                obj = self.world.scene.objects[k]
                if obj.distance_to_point(pose.x, pose.y) < 1.0:
                    continue
                angle = bearing_deg(pose, obj.centre)
                if 35.0 <= abs(angle) <= 150.0:
                    answer = "rotate left" if angle > 0 else "rotate right"
                elif abs(angle) <= 12.0:
                    answer = "move forward"
                else:
                    continue
                rest = [a for a in ("rotate left", "rotate right", "move forward") if a != answer]
                extra = rng.choice(["move backward", "move upward", "move downward",
                                    "tilt upward", "tilt downward"])
                nxt.append(Draft(
                    "action_generation",
                    f"You are asked to navigate to the {obj.name}. At your current position "
                    "(the last frame of the video), what is your next move?",
                    tuple(_sentence(a) for a in [answer, *rest, str(extra)]),
                    0, i,
                ))
        return [single, nxt, double]

    # relative_direction ----------------------------------------------------------------
    def relative_direction(self, rng: np.random.Generator) -> list[list[Draft]]:
        ego, allo = [], []
        for i in self._every(4.0, 2.0):
            pose = self.world.poses[i]
            for k in self.vis.seen_by(i):
                obj = self.world.scene.objects[k]
                if obj.distance_to_point(pose.x, pose.y) < 0.8:
                    continue
                angle = bearing_deg(pose, obj.centre)
                if _boundary_distance(angle, (0.0, 90.0, -90.0, 180.0)) < DIRECTION_MARGIN_DEG:
                    continue
                answer = quadrant(angle)
                rest = [q for q in ("front-left", "front-right", "back-left", "back-right")
                        if q != answer]
                ego.append(Draft(
                    "relative_direction",
                    f"Where is the {obj.name} relative to you now (at the last frame of the "
                    "video): to your front-left, front-right, back-left, or back-right?",
                    (answer, *rest),
                    0, i,
                ))
        seen = self.vis.seen_by(self.last)
        objs = self.world.scene.objects
        for a, b, c in itertools.permutations(seen, 3):
            pa, pb, pc = (np.array([objs[k].x, objs[k].y]) for k in (a, b, c))
            if np.linalg.norm(pb - pa) < 1.0 or np.linalg.norm(pc - pa) < 1.0:
                continue
            answer = side_of(wrap_deg(heading_deg(pa, pc) - heading_deg(pa, pb)))
            if answer is None:
                continue
            allo.append(Draft(
                "relative_direction",
                f"If I am standing by the {objs[a].name} and facing the {objs[b].name}, is the "
                f"{objs[c].name} to my left, right, or back? An object is to my back if I would "
                "have to turn at least 135 degrees in order to face it.",
                (answer, *[s for s in ("left", "right", "back") if s != answer]),
                0, self.last,
            ))
        return [ego, allo]

    # relative_distance -----------------------------------------------------------------
    def relative_distance(self, rng: np.random.Generator) -> list[list[Draft]]:
        seen = self.vis.seen_by(self.last)
        return [self._distance_pool(rng, seen, n_choices) for n_choices in (4, 3)]

    def _distance_pool(self, rng: np.random.Generator, seen: list[int],
                       n_choices: int) -> list[Draft]:
        objs = self.world.scene.objects
        out: list[Draft] = []
        for target in seen:
            others = [k for k in seen if k != target]
            for combo in itertools.combinations(others, n_choices):
                dist = sorted((objs[target].distance_to(objs[k]), k) for k in combo)
                if dist[1][0] - dist[0][0] < DISTANCE_MARGIN_M:
                    continue
                listed = [objs[k].name for k in rng.permutation(combo)]
                out.append(Draft(
                    "relative_distance",
                    "Measuring from the closest point of each object, which of these objects "
                    f"({', '.join(listed)}) is the closest to the {objs[target].name}?",
                    (objs[dist[0][1]].name, *[objs[k].name for _, k in dist[1:]]),
                    0, self.last,
                ))
        return out

    # appearance_order ------------------------------------------------------------------
    def appearance_order(self, rng: np.random.Generator) -> list[list[Draft]]:
        # Only objects whose very first sighting is a sustained one: a glimpse followed by a
        # later, longer sighting would make "first appearance" depend on the frame rate.
        first_visible = self.vis.first_visible()
        seen = [k for k in self.vis.seen_by(self.last) if first_visible[k] == self.first_seen[k]]
        return [self._order_pool(rng, seen, size) for size in (4, 3)]

    def _order_pool(self, rng: np.random.Generator, seen: list[int], size: int) -> list[Draft]:
        objs = self.world.scene.objects
        out: list[Draft] = []
        gap = APPEARANCE_GAP_S * self.rate
        for combo in itertools.combinations(seen, size):
            order = sorted(combo, key=lambda k: self.first_seen[k] or 0)
            firsts = [self.first_seen[k] or 0 for k in order]
            if any(b - a < gap for a, b in itertools.pairwise(firsts)):
                continue
            listed = [objs[k].name for k in rng.permutation(combo)]
            right = tuple(order)
            perms = [p for p in itertools.permutations(combo) if p != right]
            wrong = [perms[j] for j in rng.permutation(len(perms))[:3]]
            out.append(Draft(
                "appearance_order",
                "What will be the first-time appearance order of the following objects in the "
                f"video: {', '.join(listed)}?",
                tuple(", ".join(objs[k].name for k in p) for p in [right, *wrong]),
                0, self.last,
            ))
        return out

    # route_planning --------------------------------------------------------------------
    def route_planning(self, rng: np.random.Generator) -> list[list[Draft]]:
        seen = self.vis.seen_by(self.last)
        objs = self.world.scene.objects
        pos = {k: np.array([objs[k].x, objs[k].y]) for k in seen}
        turns = ("Turn Left", "Turn Right", "Turn Back")
        out = []
        note = ("(Note: for each [please fill in], choose either 'turn back,' 'turn left,' or "
                "'turn right.')")
        for a, b, c, d in itertools.permutations(seen, 4):
            t1 = turn_of(wrap_deg(heading_deg(pos[b], pos[c]) - heading_deg(pos[a], pos[b])))
            t2 = turn_of(wrap_deg(heading_deg(pos[c], pos[d]) - heading_deg(pos[b], pos[c])))
            if t1 is None or t2 is None:
                continue
            right = (t1, t2)
            combos = [p for p in itertools.product(turns, repeat=2) if p != right]
            wrong = [combos[j] for j in rng.permutation(len(combos))[:3]]
            out.append(Draft(
                "route_planning",
                f"You are a robot beginning at the {objs[a].name} and facing the "
                f"{objs[b].name}. You want to navigate to the {objs[d].name}. You will perform "
                f"the following actions {note}: 1. Go forward until the {objs[b].name} "
                f"2. [please fill in] 3. Go forward until the {objs[c].name} 4. [please fill "
                f"in] 5. Go forward until the {objs[d].name}. You have reached the final "
                "destination.",
                tuple(", ".join(p) for p in [right, *wrong]),
                0, self.last,
            ))
        return [out]

    # progress_evaluation ---------------------------------------------------------------
    def progress_evaluation(self, rng: np.random.Generator) -> list[list[Draft]]:
        segs = self.world.trajectory.segments
        out = []
        margin = 0.8  # seconds from either end of the step, so "now" is clearly inside it
        for k, seg in enumerate(segs):
            if k == 0 or seg.duration < 2.0 * margin:
                continue
            last_t = min(seg.t1 - margin, self.last / self.rate)
            times = np.arange(seg.t0 + margin, last_t + 1e-9, 1.0)
            if len(times) == 0:
                continue
            i = round(float(rng.choice(times)) * self.rate)
            steps = segs[: min(len(segs), k + 3)]
            plan = "; ".join(f"{j + 1}. {s.describe()}" for j, s in enumerate(steps))
            near = [j for j in (k - 1, k + 1) if 0 <= j < len(steps)]
            far = [j for j in rng.permutation(len(steps)).tolist() if j not in (k, *near)]
            picks = (near + far)[:3]
            if len(picks) < 2:
                continue
            out.append(Draft(
                "progress_evaluation",
                f"Navigation instruction given at initial position: [{plan}]. You move "
                "according to this series of instructions. What are you doing now (at the "
                "last frame of the video)?",
                tuple(f"I am on step {j + 1}: {steps[j].describe()}." for j in [k, *picks]),
                0, i,
            ))
        return [out]


def _pick(pools: list[list[Draft]], n: int, rng: np.random.Generator) -> list[Draft]:
    """Round-robin over shuffled pools (question variants), skipping duplicates."""
    queues = [[pool[j] for j in rng.permutation(len(pool))] for pool in pools]
    out: list[Draft] = []
    keys: set[tuple[str, int, int]] = set()
    while len(out) < n and any(queues):
        for q in queues:
            while q:
                d = q.pop(0)
                key = (d.question, d.i_start, d.i_end)
                if key not in keys:
                    keys.add(key)
                    out.append(d)
                    break
            if len(out) >= n:
                break
    return out


class _Letters:
    """Balanced answer positions: consecutive random permutations per option count."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.queues: dict[int, list[int]] = {}

    def next(self, n: int) -> int:
        q = self.queues.setdefault(n, [])
        if not q:
            q.extend(self.rng.permutation(n).tolist())
        return q.pop(0)


def generate_questions(world: World, vis: Visibility, counts: Mapping[str, int]) -> list[dict]:
    """Question rows (see the module notes) for ``world``; fewer when geometry allows fewer."""
    gen = _Generator(world, vis)
    seed = world.spec.seed
    rows: list[dict] = []
    for ci, category in enumerate(CATEGORIES):
        n = int(counts.get(category, 0))
        if n <= 0:
            continue
        rng = np.random.default_rng([seed, 0x9E5, ci])
        drafts = _pick(getattr(gen, category)(rng), n, rng)
        drafts.sort(key=lambda d: (d.i_end, d.i_start, d.question))
        letters = _Letters(rng)
        for d in drafts:
            qid = f"seed{seed}-q{len(rows):03d}"
            rows.append(_row(world, d, letters.next(len(d.choices)), rng, qid))
    return rows


def _row(world: World, d: Draft, position: int, rng: np.random.Generator, qid: str) -> dict:
    wrong = [d.choices[j] for j in 1 + rng.permutation(len(d.choices) - 1)]
    ordered = wrong[:position] + [d.choices[0]] + wrong[position:]
    letters = string.ascii_uppercase
    rate = world.spec.rate_hz
    return {
        "id": qid,
        "scene_seed": world.spec.seed,
        "category": d.category,
        "question": d.question,
        "options": [f"{letters[j]}. {text}" for j, text in enumerate(ordered)],
        "answer": letters[position],
        "answer_text": d.choices[0],
        "t_start": round(d.i_start / rate, 3),
        "t_end": round(d.i_end / rate, 3),
        "stamp_start_ns": world.stamp_ns(d.i_start),
        "stamp_end_ns": world.stamp_ns(d.i_end),
    }


"""Multiple-choice questions whose answers follow from the world's geometry.

Categories and wording follow the tasks Embodied-R trains on (VSI-Bench: relative direction,
relative distance, appearance order, route planning; UrbanVideo-Bench: action generation,
progress evaluation). Every question refers to a clip of the video, ``[t_start, t_end]``;
"now" and "the last frame" mean ``t_end``. Only objects truly seen in the clip (by the
renderer's visibility) are asked about, and cases near a decision boundary (an object almost
straight ahead, two nearly equal distances, ...) are skipped so every answer is unambiguous.

Each category draws from its own random stream, so changing one category's count leaves the
other categories' questions unchanged; answer letters are balanced per category. Every draft
carries what it asks (:class:`~embodied_r_ros.sim.question_basis.QuestionBasis`), and so does
its row: what reads a question later reads that, not the wording.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from embodied_r_ros.core.actions import primary_action
from embodied_r_ros.core.poses import heading_deg, relative_motion, wrap_deg
from embodied_r_ros.sim import question_rows
from embodied_r_ros.sim.question_basis import QuestionBasis
from embodied_r_ros.sim.question_rows import Draft, Keep, draft_rows
from embodied_r_ros.sim.question_rules import (
    ACTION_QUESTION,
    DISTANCE_MARGIN_M,
    MIN_CLIP_S,
    QUADRANTS,
    SEQUENCE_QUESTION,
    action_choices,
    action_picks,
    bearing_deg,
    clear_quadrant,
    progress_choices,
    progress_picks,
    progress_question,
    sentence,
    sequence_choices,
    sequence_picks,
    side_of,
    turn_of,
)
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

APPEARANCE_GAP_S = 1.0


def _basis(kind: str, options: Sequence[Sequence[str | int]], objects: Sequence[str] = (),
           plan: Sequence[tuple[int, str, float]] = ()) -> dict:
    """A draft's basis (its options in the draft's order, the correct one first)."""
    return QuestionBasis(kind, tuple(objects), plan=tuple(plan),
                         options=tuple(tuple(o) for o in options)).to_dict()


def parse_counts(spec: str | int | Mapping[str, int]) -> dict[str, int]:
    """Per-category counts of the world's questions (see :func:`question_rows.parse_counts`)."""
    return question_rows.parse_counts(spec, CATEGORIES)


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
            picks = action_picks(seg.action, rng)
            single.append(Draft("action_generation", ACTION_QUESTION, action_choices(picks),
                                *clip, _basis("motion", [(a,) for a in picks])))
        for a, b in itertools.pairwise(segs):
            i0 = math.ceil(a.t0 * self.rate - 1e-9)
            i1 = min(self.last, math.floor(b.t1 * self.rate + 1e-9))
            if (a.t1 - a.t0) < MIN_CLIP_S or (min(b.t1, self.world.duration) - b.t0) < MIN_CLIP_S:
                continue
            pairs = sequence_picks(a.action, b.action, rng)
            double.append(Draft("action_generation", SEQUENCE_QUESTION, sequence_choices(pairs),
                                i0, i1, _basis("sequence", pairs)))
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
                moves = [answer, *rest, str(extra)]
                nxt.append(Draft(
                    "action_generation",
                    f"You are asked to navigate to the {obj.name}. At your current position "
                    "(the last frame of the video), what is your next move?",
                    tuple(sentence(a) for a in moves),
                    0, i, _basis("navigate", [(a,) for a in moves], [obj.name]),
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
                answer = clear_quadrant(angle)
                if answer is None:
                    continue
                said = (answer, *[q for q in QUADRANTS if q != answer])
                ego.append(Draft(
                    "relative_direction",
                    f"Where is the {obj.name} relative to you now (at the last frame of the "
                    "video): to your front-left, front-right, back-left, or back-right?",
                    said,
                    0, i, _basis("direction", [(q,) for q in said], [obj.name]),
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
            sides = (answer, *[s for s in ("left", "right", "back") if s != answer])
            allo.append(Draft(
                "relative_direction",
                f"If I am standing by the {objs[a].name} and facing the {objs[b].name}, is the "
                f"{objs[c].name} to my left, right, or back? An object is to my back if I would "
                "have to turn at least 135 degrees in order to face it.",
                sides,
                0, self.last,
                _basis("allocentric", [(s,) for s in sides], [objs[k].name for k in (a, b, c)]),
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
                names = (objs[dist[0][1]].name, *[objs[k].name for _, k in dist[1:]])
                out.append(Draft(
                    "relative_distance",
                    "Measuring from the closest point of each object, which of these objects "
                    f"({', '.join(listed)}) is the closest to the {objs[target].name}?",
                    names,
                    0, self.last,
                    _basis("closest", [(n,) for n in names], [*listed, objs[target].name]),
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
            orders = [[objs[k].name for k in p] for p in [right, *wrong]]
            out.append(Draft(
                "appearance_order",
                "What will be the first-time appearance order of the following objects in the "
                f"video: {', '.join(listed)}?",
                tuple(", ".join(names) for names in orders),
                0, self.last, _basis("order", orders, listed),
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
                _basis("route", [right, *wrong], [objs[k].name for k in (a, b, c, d)]),
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
            described = [s.describe() for s in steps]
            picks = progress_picks(k, len(described), rng)
            if picks is None:
                continue
            plan = [(j + 1, s.action, s.stated_amount) for j, s in enumerate(steps)]
            out.append(Draft("progress_evaluation", progress_question(described),
                             progress_choices(picks, described), 0, i,
                             _basis("progress", [(j + 1,) for j in picks], plan=plan)))
        return [out]


def generate_questions(world: World, vis: Visibility, counts: Mapping[str, int],
                       keep: Keep | None = None) -> list[dict]:
    """Question rows (see the module notes) for ``world``; fewer when geometry allows fewer.
    ``keep``: asks only the drafts it allows (those the world's own perception text decides:
    :data:`~embodied_r_ros.sim.generate.DecidesFor`)."""
    gen = _Generator(world, vis)
    seed = world.spec.seed
    rate = world.spec.rate_hz

    def row(d: Draft, fields: dict, number: int) -> dict:
        start, end = int(d.start), int(d.end)
        basis = fields.pop("basis")
        return {
            "id": f"seed{seed}-q{number:03d}",
            "scene_seed": seed,
            **fields,
            "t_start": round(start / rate, 3),
            "t_end": round(end / rate, 3),
            "stamp_start_ns": world.stamp_ns(start),
            "stamp_end_ns": world.stamp_ns(end),
            "basis": basis,
        }

    return draft_rows(lambda category, rng: getattr(gen, category)(rng), CATEGORIES, counts,
                      seed, row, keep)

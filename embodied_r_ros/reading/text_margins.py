"""Whether a perception text decides a question clearly: the rule reader
(:mod:`embodied_r_ros.reading.rule_reader`) reaches its answer from what the text states, away from
the decision boundaries the question generators keep (a quadrant edge, two nearly equal
distances, a turn between a side turn and a turn back). The synthetic world's generator asks
only such questions, and a dataset's builder leaves the others out.
"""

from __future__ import annotations

import math

from embodied_r_ros.core.perception_text import PerceptionText
from embodied_r_ros.reading.rule_reader import (
    SOLVERS,
    Solver,
    allocentric_angle,
    build_map,
    colour_of,
    route_angles,
)
from embodied_r_ros.sim.question_basis import QuestionBasis
from embodied_r_ros.sim.question_rules import DISTANCE_MARGIN_M, clear_quadrant, side_of, turn_of

UNDECIDED = "the text decides nothing"
UNSEEN = "the text does not locate an object"
NEAR = "near a boundary in the text"
DISAGREES = "the text decides another answer"


def _object_margin(category: str, p: PerceptionText, b: QuestionBasis) -> str | None:
    """Near a decision boundary in the quantities the text states (objects' bearings,
    distances and turns as the text places them: the margins of the generators' own rules),
    or an object the text cannot place."""
    if category == "relative_direction" and b.kind == "direction":
        bearing = build_map(p).bearing_now(colour_of(b.objects[0]))
        if bearing is None:
            return UNSEEN
        return NEAR if clear_quadrant(bearing) is None else None
    if category == "relative_direction" and b.kind == "allocentric":
        angle = allocentric_angle(b, build_map(p))
        if angle is None:
            return UNSEEN
        return NEAR if side_of(angle) is None else None
    if category == "route_planning" and b.kind == "route":
        angles = route_angles(b, build_map(p))
        if angles is None:
            return UNSEEN
        return NEAR if any(turn_of(a) is None for a in angles) else None
    if category == "relative_distance" and b.kind == "closest":
        world = build_map(p)
        target = world.position(colour_of(b.objects[-1]))
        if target is None:
            return UNSEEN
        dist = sorted(math.dist(pos, target) for said in b.options
                      if (pos := world.position(colour_of(str(said[0])))) is not None)
        if len(dist) < len(b.options):
            return UNSEEN
        return NEAR if dist[1] - dist[0] < DISTANCE_MARGIN_M else None
    return None


def reason_to_skip(category: str, p: PerceptionText, b: QuestionBasis,
                   solution: str) -> str | None:
    """None when the text decides the question's answer (``solution``, a letter) clearly:
    the reader reaches it from the text alone, away from the boundaries the question's own
    rules keep; otherwise why not (:data:`UNDECIDED`, :data:`DISAGREES`, :data:`NEAR`,
    :data:`UNSEEN`)."""
    solver: Solver | None = SOLVERS.get(category)
    if solver is None:
        return UNDECIDED
    answer = solver(p, b)
    if answer.letter is None:
        return UNDECIDED
    if answer.letter != solution.strip()[:1].upper():
        return DISAGREES
    return _object_margin(category, p, b)

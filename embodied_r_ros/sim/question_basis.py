"""What a multiple-choice question asks, as its generator knew it: the typed basis a row carries.

The generator words a question for the LM once; everything after it (the rule reader, the
margins of what a text decides, the cold-start rationales) reads this record instead of the
wording. A :class:`QuestionBasis` names the question's ``kind``, the objects it names (in the
order the question names them, except a route: its waypoints in order), the places of the
robot's own path it names, a progress question's plan, and what each option says, in letter
order. A draft holds it with its choices in draft order (the correct one first);
:func:`~embodied_r_ros.sim.question_rows.lettered` puts its options in the row's letter order.

Rows written before the basis existed carry only the wording: :func:`from_wording` reads the
wording of this project's question generators back into the same record (the one place that
does; no other stage reads the wording).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from embodied_r_ros.core.actions import ACTIONS
from embodied_r_ros.core.perception_text import PerceptionText

#: what an option of each kind says (a tuple per option)
KINDS: dict[str, str] = {
    "motion": "the action (one)",
    "sequence": "the two actions in order",
    "navigate": "the next move's action; objects: the target",
    "direction": "the quadrant; objects: the target",
    "allocentric": "the side (left/right/back); objects: standing by, facing, the one asked",
    "closest": "the object's name; objects: the listed ones, then the target",
    "order": "the names in the order the option gives them; objects: as the question lists",
    "route": "the two turns; objects: the four waypoints in route order",
    "progress": "the step's number; plan: (number, action, amount as the question states it)",
    "place_direction": "the quadrant; places: the place asked about",
    "way_back": "the first move (a turn, or 'Go forward'); places: the place asked about",
    "nearer_place": "the place the option names (none: it names none)",
    "how_far": "the distance band's words; places: the start",
    "unknown": "nothing (a question of no known kind)",
}
#: kinds about places of the robot's own path (odometry), whatever their category
PATH_KINDS = ("place_direction", "way_back", "nearer_place", "how_far")
#: a place of the path: where the clip started, or an age in seconds before its last frame
START = "start"

Option = tuple[str | int, ...]


@dataclass(frozen=True)
class QuestionBasis:
    """The structured question (see the module notes); ``options`` in the row's letter order
    (a draft's: in its choices' order)."""

    kind: str
    objects: tuple[str, ...] = ()
    places: tuple[str, ...] = ()
    plan: tuple[tuple[int, str, float], ...] = ()
    options: tuple[Option, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown question kind {self.kind!r}; known: {', '.join(KINDS)}")

    def reordered(self, order: Sequence[int]) -> QuestionBasis:
        """The basis with its options in ``order`` (indices into the current options)."""
        return replace(self, options=tuple(self.options[j] for j in order))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.objects:
            out["objects"] = list(self.objects)
        if self.places:
            out["places"] = list(self.places)
        if self.plan:
            out["plan"] = [list(s) for s in self.plan]
        out["options"] = [list(o) for o in self.options]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> QuestionBasis:
        return cls(str(d["kind"]), tuple(str(o) for o in d.get("objects", ())),
                   tuple(str(p) for p in d.get("places", ())),
                   tuple((int(n), str(a), float(v)) for n, a, v in d.get("plan", ())),
                   tuple(tuple(o) for o in d.get("options", ())))


def place_age(place: str) -> float | None:
    """The age (seconds before the last frame) a place names; None for the start."""
    return None if place == START else float(place)


def of_row(row: Mapping[str, Any], stated: PerceptionText) -> QuestionBasis:
    """A row's basis: the one its generator wrote, else read from the wording of the question
    its text ``stated`` (an older row, or a question file written by hand)."""
    basis = row.get("basis")
    if isinstance(basis, Mapping) and "kind" in basis:
        return QuestionBasis.from_dict(basis)
    texts = [text for _, text in stated.options]
    return from_wording(str(row.get("category")), stated.question, texts)


# ------------------------------------------------------------ the wording of older rows

_NAME = r"(\w+ \w+)"
_NAVIGATE_RE = re.compile(rf"navigate to the {_NAME}\.")
_DIRECTION_RE = re.compile(rf"Where is the {_NAME} relative to you now")
_ALLOCENTRIC_RE = re.compile(rf"If I am standing by the {_NAME} and facing the {_NAME}, is the "
                             rf"{_NAME}")
_CLOSEST_RE = re.compile(rf"objects \((.*)\) is the closest to the {_NAME}\?")
_ROUTE_RE = re.compile(rf"You are a robot beginning at the {_NAME} and facing the {_NAME}\..*"
                       rf"Go forward until the {_NAME} 4\..*Go forward until the {_NAME}\.",
                       re.DOTALL)
_PLACE_RE = re.compile(r"the point where (?:you|I) started|"
                       r"(?:the place where you were|where I was) (\d+) seconds (?:before|ago)")
_STEP_RE = re.compile(r"(\d+)\. ([a-z ]+?) about (\d+(?:\.\d+)?) (m|degrees)")
_ON_STEP_RE = re.compile(r"I am on step (\d+):")


def _actions_in(text: str) -> Option:
    """The actions an option names, in the order it names them."""
    low = text.lower()
    return tuple(a for _, a in sorted((low.find(a), a) for a in ACTIONS if a in low))


def _place(text: str) -> tuple[str, ...]:
    m = _PLACE_RE.search(text)
    if m is None:
        return ()
    return (START,) if m.group(1) is None else (m.group(1),)


def _plan(question: str) -> tuple[tuple[int, str, float], ...]:
    inside = question[question.find("[") + 1 : question.find("]")]
    return tuple((int(n), a.strip(), float(v)) for n, a, v, _ in _STEP_RE.findall(inside))


def _path_basis(question: str, texts: Sequence[str]) -> QuestionBasis | None:
    if question.startswith(("Where is", "You want to go back to")) and _place(question):
        kind = "place_direction" if question.startswith("Where is") else "way_back"
        return QuestionBasis(kind, places=_place(question), options=tuple((t,) for t in texts))
    if question.startswith("Which is closer to you now"):
        return QuestionBasis("nearer_place", options=tuple(_place(t) for t in texts))
    if question.startswith("How far are you now") and _place(question):
        return QuestionBasis("how_far", places=_place(question),
                             options=tuple((t,) for t in texts))
    return None


def from_wording(category: str, question: str, texts: Sequence[str]) -> QuestionBasis:
    """The basis of a question read from the wording this project's generators write
    (``sim/questions.py``, ``sim/pose_questions.py``); kind ``unknown`` for other wording."""
    q = question
    if category == "action_generation":
        if q.startswith("You are asked to navigate to the"):
            m = _NAVIGATE_RE.search(q)
            firsts = [tuple(a for a in ACTIONS if t.lower().startswith(f"i {a}"))[:1]
                      for t in texts]
            return QuestionBasis("navigate", m.groups() if m else (), options=tuple(firsts))
        kind = "sequence" if q.startswith("Which sequence") else "motion"
        return QuestionBasis(kind, options=tuple(_actions_in(t) for t in texts))
    if category == "appearance_order":
        listed = q.split(": ", 1)[-1].rstrip("?").split(", ")
        return QuestionBasis("order", tuple(listed),
                             options=tuple(tuple(n.strip() for n in t.split(",")) for t in texts))
    if category == "progress_evaluation":
        steps = [_ON_STEP_RE.match(t) for t in texts]
        return QuestionBasis("progress", plan=_plan(q),
                             options=tuple((int(m.group(1)),) if m else () for m in steps))
    if category not in ("relative_direction", "relative_distance", "route_planning"):
        return QuestionBasis("unknown")
    path = _path_basis(q, texts)
    if path is not None:
        return path
    words = tuple((t,) for t in texts)
    if category == "relative_direction":
        if m := _DIRECTION_RE.match(q):
            return QuestionBasis("direction", m.groups(), options=words)
        if m := _ALLOCENTRIC_RE.match(q):
            return QuestionBasis("allocentric", m.groups(), options=words)
    elif category == "relative_distance":
        if m := _CLOSEST_RE.search(q):
            listed = tuple(n.strip() for n in m.group(1).split(","))
            return QuestionBasis("closest", (*listed, m.group(2)), options=words)
    elif m := _ROUTE_RE.match(q):
        return QuestionBasis("route", m.groups(), options=tuple(tuple(t.split(", "))
                                                                for t in texts))
    return QuestionBasis("unknown", options=words)

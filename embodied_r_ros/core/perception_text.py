"""The perception text the reasoning LM reads: rendered from the typed records, in one place.

Perception writes, per key frame, ``Frame i: After <action>, Observe: <view>`` (the shape of
``derive_video_content_str`` in ``train/conver_format/VLM_perception_API.py`` of
EmbodiedCity/Embodied-R.code). That is all the benchmark (official) route writes. On the robot
route, where motion is measured (odometry or visual ego-motion), each line also states how long
before the last key frame it was taken, and the action is the whole planar motion since the
previous key frame in the paper's action words with amounts: ``Frame 3 (12 s before the last
key frame): After move forward about 0.7 m and move left about 0.4 m, then rotate left about 54
degrees, Observe: ...``. The moves are along the axes of the previous key frame's pose and come
before the turn, so dead reckoning the written amounts recomputes every pose. How amounts are
rounded and which are written at all is :data:`TEXT_PRECISION`. A geometric observation reads
``I see a small red object to the left (25 degrees left, about 3.1 m away); ...``. A memory's
text adds, after the frames, where the objects the question names are now (:data:`PLACES_HEADING`).

:func:`render` writes a :class:`~embodied_r_ros.core.records.PerceptionRecord`; nothing else
writes this prose, and nothing parses it back. Readers that must see exactly what the LM sees
(the rule reader, the rationales, the memory's places) take :func:`stated_view`: the same
records with every amount as the text rounds it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from embodied_r_ros.core.actions import ActionThresholds, Motion, action_of, primary_action
from embodied_r_ros.core.poses import quadrant
from embodied_r_ros.core.prompts import PromptSet, default_prompts
from embodied_r_ros.core.reasoning import parse_options
from embodied_r_ros.core.records import (
    ColourNote,
    FrameLayout,
    FrameRecord,
    MotionSource,
    ObjectPlace,
    PerceptionRecord,
    SeenObject,
    TextStyle,
)

#: the observation written when no colour region is found
NOTHING_IN_VIEW = "no distinctly coloured object in view."
#: the first line of the notes a memory writes after the frames: where the named objects are now
#: (placed from every frame it stored, not only those above)
PLACES_HEADING = "Named objects, placed from the memory's frames, relative to you now:"
#: what a frame whose motion nobody knows says (a memory row without a pose, the geometric
#: perception without one); a VLM's frame without an action says "None", as the official code
UNKNOWN_MOTION = "an unknown motion"
#: a spot nearer than this is "here": its bearing says nothing
HERE_M = 0.5


@dataclass(frozen=True)
class TextPrecision:
    """How the robot route writes amounts, in one place for the writers, the question
    generators and the readers: amounts are rounded to these steps, and a component of a motion
    is written only when its rounded amount reaches the threshold."""

    degrees: float = 1.0
    metres: float = 0.1
    seconds: float = 1.0
    min_rotation_deg: float = 5.0
    min_translation_m: float = 0.2


TEXT_PRECISION = TextPrecision()
#: one motion component as the text states it: a vocabulary action and its amount (degrees or
#: metres; None where monocular vision knows the direction of travel but not its length)
MotionPart = tuple[str, float | None]

_AXES = (("forward", "move forward", "move backward"), ("left", "move left", "move right"),
         ("up", "move upward", "move downward"))


def rounded(value: float, step: float) -> float:
    """A non-negative ``value`` to the nearest multiple of ``step``, halves up, as the text
    writes it (``0.15`` m is ``0.2``, not the ``0.1`` that binary floating point would give)."""
    return round(math.floor(value / step + 0.5 + 1e-9) * step, 6)


def written_age(age_s: float, precision: TextPrecision = TEXT_PRECISION) -> float:
    """A frame's age as its line states it."""
    return rounded(max(age_s, 0.0), precision.seconds)


def motion_parts(motion: Motion, precision: TextPrecision = TEXT_PRECISION) -> list[MotionPart]:
    """The components of ``motion`` the text states, moves (along the earlier pose's axes)
    before turns, each rounded; empty when nothing reaches its threshold.

    Monocular motion has no metric length: it is named by its one primary action, as before.
    """
    if not motion.metric:
        part = _primary_part(motion, ActionThresholds(rotation_deg=precision.min_rotation_deg))
        if part is None:
            return []
        action, amount = part  # a turn's degrees; a move has no length
        return [(action, None if amount is None else rounded(amount, precision.degrees))]
    parts: list[MotionPart] = []
    for axis, positive, negative in _AXES:
        value = float(getattr(motion, axis))
        amount = rounded(abs(value), precision.metres)
        if amount >= precision.min_translation_m:
            parts.append((positive if value > 0 else negative, amount))
    for value, positive, negative in ((motion.yaw_deg, "rotate left", "rotate right"),
                                      (motion.pitch_deg, "tilt upward", "tilt downward")):
        amount = rounded(abs(value), precision.degrees)
        if amount >= precision.min_rotation_deg:
            parts.append((positive if value > 0 else negative, amount))
    return parts


def _primary_part(motion: Motion, thresholds: ActionThresholds | None = None
                  ) -> MotionPart | None:
    """The one action that names ``motion`` (:func:`primary_action`) with its unrounded
    amount: degrees of a turn or tilt, metres of a metric move, None for a monocular move."""
    action = primary_action(motion, thresholds)
    if action is None:
        return None
    if action.startswith("rotate"):
        return action, abs(motion.yaw_deg)
    if action.startswith("tilt"):
        return action, abs(motion.pitch_deg)
    return action, motion.translation if motion.metric else None


def primary_part(parts: Sequence[MotionPart], thresholds: ActionThresholds | None = None
                 ) -> MotionPart | None:
    """The component that names the motion alone (the weighting of
    :func:`~embodied_r_ros.core.actions.primary_action`: a turn of ``deg_per_metre`` degrees
    outweighs a metre of travel)."""
    th = thresholds or ActionThresholds()

    def weight(part: MotionPart) -> float:
        action, amount = part
        scale = 1.0 if action.startswith(("rotate", "tilt")) else th.deg_per_metre
        return (amount if amount is not None else th.rotation_deg) * scale

    return max(parts, key=weight) if parts else None


# -- writing ------------------------------------------------------------------------------------


def describe_part(action: str, amount: float | None) -> str:
    if amount is None:
        return action
    if action.startswith(("rotate", "tilt")):
        return f"{action} about {amount:.0f} degrees"
    return f"{action} about {amount:.1f} m"


def describe_parts(parts: Sequence[MotionPart]) -> str:
    """``move forward about 0.7 m and move left about 0.4 m, then rotate left about 54
    degrees``; ``stay still`` when there is nothing to state."""
    moves = [describe_part(a, x) for a, x in parts if a.startswith("move")]
    turns = [describe_part(a, x) for a, x in parts if not a.startswith("move")]
    if not moves and not turns:
        return "stay still"
    return ", then ".join(" and ".join(group) for group in (moves, turns) if group)


def describe_motion(motion: Motion, layout: FrameLayout = "timed",
                    precision: TextPrecision = TEXT_PRECISION) -> str:
    """The measured motion between two key frames as the robot route writes it: every
    component (timed), or the primary action alone, ``rotate left, about 30 degrees`` (paper)."""
    if layout == "timed":
        return describe_parts(motion_parts(motion, precision))
    part = _primary_part(motion)
    if part is None:
        return "stay still"
    action, amount = part
    if amount is None:
        return action
    if action.startswith(("rotate", "tilt")):
        return f"{action}, about {amount:.0f} degrees"
    return f"{action}, about {amount:.1f} m"


def _stated_bearing(bearing: float) -> float:
    """A bearing as an observation writes it: whole degrees, the side kept."""
    return float(round(abs(bearing))) * (1.0 if bearing >= 0 else -1.0)


def describe_object(obj: SeenObject) -> str:
    """``a small red object to the left (25 degrees left, about 3.1 m away)``."""
    bearing = obj.bearing_deg or 0.0
    side = "left" if bearing >= 0 else "right"
    degrees = round(abs(bearing))
    geometry = f"{degrees} degree{'' if degrees == 1 else 's'} {side}"
    if obj.distance_m is not None:
        geometry += f", about {obj.distance_m:.1f} m away"
    return f"a {obj.size} {obj.colour} object {obj.direction} ({geometry})"


def describe_objects(objects: Sequence[SeenObject]) -> str:
    """The geometric observation of one frame from its colour regions (largest first)."""
    if not objects:
        return NOTHING_IN_VIEW
    return "I see " + "; ".join(describe_object(o) for o in objects) + "."


def observation(record: FrameRecord) -> str:
    """What a frame's line says it shows: the VLM's own text, else its objects."""
    return record.vlm_text if record.vlm_text is not None else describe_objects(record.objects)


def lm_action(
    vlm_action: str | None, measured: str | None, source: MotionSource | None
) -> str | None:
    """The action the LM reads: odometry beats the VLM, the VLM beats visual ego-motion.

    Odometry is a measurement of the robot itself; visual ego-motion is only reported beside
    the VLM's action, and stands in for it when the VLM named none (or there is no VLM).
    """
    if source == "odometry" and measured:
        return measured
    return vlm_action or measured


def _action(record: FrameRecord, style: TextStyle) -> str:
    """The ``After <action>`` of a frame line (not frame 0's)."""
    measured = describe_motion(record.motion, style.layout) if record.motion else None
    source = record.motion_source if measured else None
    vlm = record.vlm_action
    if style.report_motion and measured and vlm:
        if source == "odometry":
            return f"{measured} (VLM: {vlm})"
        return f"{vlm} (measured: {measured})"
    if style.report_motion or not record.described_by_vlm:
        action = lm_action(vlm, measured, source)
    else:  # the official route: the VLM's own action
        action = vlm
    if action:
        return action
    if style.unknown_motion is not None:
        return style.unknown_motion
    return "None" if record.described_by_vlm else UNKNOWN_MOTION


def timed_route(frames: Sequence[FrameRecord], style: TextStyle) -> bool:
    """Whether the lines state their frames' ages: the timed layout of the robot route, where
    measured motion is present and reported."""
    return (style.layout == "timed" and style.report_motion
            and any(f.motion is not None for f in frames))


def frame_line(index: int, record: FrameRecord, style: TextStyle,
               age_s: float | None = None) -> str:
    """One frame's line; ``age_s``: how long before the last key frame it was taken (the robot
    route states it, the benchmark route does not)."""
    head = f"Frame {index}"
    if age_s is not None:
        head += f" ({written_age(age_s):.0f} s before the last key frame)"
    if index == 0:
        return f"{head}: Observe: {observation(record)}"
    return f"{head}: After {_action(record, style)}, Observe: {observation(record)}"


def frame_lines(frames: Sequence[FrameRecord], style: TextStyle) -> list[str]:
    timed = timed_route(frames, style)
    last = frames[-1].stamp if frames else 0.0
    return [frame_line(i, f, style, last - f.stamp if timed else None)
            for i, f in enumerate(frames)]


def _ago(age_s: float) -> str:
    return f"{age_s:.0f} s" if age_s < 60.0 else f"{age_s / 60.0:.0f} min"


def bearing_words(bearing: float) -> str:
    """How a line states a bearing: ``back-left (113 degrees left)``."""
    side = "left" if bearing >= 0 else "right"
    return f"{quadrant(bearing)} ({abs(bearing):.0f} degrees {side})"


def place_line(note: ObjectPlace | ColourNote) -> str:
    """One line of the places block: where an object is now and how sure that is, or when a
    colour was seen: ``- red object seen 16 min ago (last 990 s ago); now 4.5 m away,
    front-right (27 degrees right), within about 0.4 m; seen from a spot now 3.1 m away, ...``.
    """
    if isinstance(note, ColourNote):
        if note.last_seen_s is None:
            return f"- {note.colour}: in none of these frames."
        return f"- {note.colour} last seen {note.last_seen_s:.0f} s ago."
    seen = ", ".join(_ago(a) for a in note.visits_s)
    parts = [f"{note.name} seen {seen} ago (last {note.last_s:.0f} s ago)"]
    if note.now is not None:
        distance, bearing = note.now
        where = f"now {distance:.1f} m away, {bearing_words(bearing)}"
        if not note.triangulated:
            where += ", guessed from one view"
        if note.uncertainty_m is not None:
            where += f", within about {max(note.uncertainty_m, 0.1):.1f} m"
        parts.append(where)
    if note.seen_from is not None:
        distance, bearing = note.seen_from
        parts.append("seen from about here" if distance < HERE_M else
                     f"seen from a spot now {distance:.1f} m away, {bearing_words(bearing)}")
    if note.nearby:
        parts.append("nearest named: " + ", ".join(f"{c} {d:.1f} m" for c, d in note.nearby))
    return "- " + "; ".join(parts) + "."


def places_block(notes: Sequence[ObjectPlace | ColourNote]) -> str:
    """The block a memory writes after the frames; empty without a line."""
    return "\n".join([PLACES_HEADING, *(place_line(n) for n in notes)]) if notes else ""


def render(record: PerceptionRecord, prompts: PromptSet | None = None) -> str:
    """The reasoning LM's user message in the official code's shape: the instruction, the
    frame lines wrapped in ``<`` and ``>`` after ``Video content:``, a memory's places block,
    then the question (``VLM_perception_API.py`` of Embodied-R.code)."""
    p = prompts or default_prompts()
    lines = "\n".join(frame_lines(record.frames, record.style))
    video = f"{p.lm_instruction}\nVideo content:\n<\n{p.preamble}\n{lines}\n>\n"
    notes = places_block(record.places or ())
    return f"{video}{notes}\n{record.question_block}" if notes else (
        f"{video}{record.question_block}")


# -- the stated view ------------------------------------------------------------------------------

#: bearing of a region's centre that each coarse direction stands for (degrees, left > 0): the
#: middle of its third of an image of the default 70-degree field of view
_THIRD_DEG = math.degrees(math.atan(math.tan(math.radians(70.0 / 2)) * 2 / 3))
COARSE_BEARING = {"left": _THIRD_DEG, "right": -_THIRD_DEG, "ahead": 0.0}
_AMOUNT_RE = re.compile(r"about (-?\d+(?:\.\d+)?) (m|degrees)")
_PART_SPLIT_RE = re.compile(r",? then | and ")


@dataclass(frozen=True)
class Sighting:
    """One coloured object of one frame, as the text states it."""

    colour: str
    size: str
    direction: str  # the coarse words, e.g. "to the left, below"
    bearing_deg: float  # left > 0; exact when the text gives degrees, else the third's centre
    distance_m: float | None = None
    exact_bearing: bool = False


@dataclass(frozen=True)
class FrameText:
    """One frame as its line states it."""

    index: int
    action: str | None  # the primary vocabulary action, "stay still" or None (frame 0, unknown)
    amount: float | None  # its metres or degrees as written
    sightings: dict[str, Sighting] = field(default_factory=dict)
    #: every component of the motion as written, moves before turns (robot route)
    parts: tuple[MotionPart, ...] = ()
    #: seconds before the last key frame, where the line states it
    age_s: float | None = None


@dataclass(frozen=True)
class PerceptionText:
    """A perception text as the LM reads it: its frames, question and options."""

    frames: tuple[FrameText, ...]
    question: str
    options: tuple[tuple[str, str], ...]


def action_words(text: str | None) -> tuple[MotionPart, ...]:
    """The components a VLM's action names (``rotate right, about 38 degrees``), in order."""
    if not text:
        return ()
    parts = []
    for piece in _PART_SPLIT_RE.split(text.strip().lower()):
        action = action_of(piece)
        if action is not None:
            m = _AMOUNT_RE.search(piece)
            parts.append((action, float(m.group(1)) if m else None))
    return tuple(parts)


def first_action(text: str | None) -> tuple[str | None, float | None]:
    """The action a phrase starts with and the first amount it names: ``stay still`` is 0."""
    if not text:
        return None, None
    low = text.strip().lower()
    if low.startswith("stay still"):
        return "stay still", 0.0
    m = _AMOUNT_RE.search(low)
    return action_of(low), float(m.group(1)) if m else None


def _stated_motion(motion: Motion, layout: FrameLayout) -> tuple[MotionPart, ...]:
    """The components a measured motion's words state, amounts as written."""
    if layout == "timed":
        return tuple(motion_parts(motion))
    part = _primary_part(motion)
    if part is None:
        return ()
    action, amount = part
    if amount is None:
        return ((action, None),)
    written = f"{amount:.0f}" if action.startswith(("rotate", "tilt")) else f"{amount:.1f}"
    return ((action, float(written)),)


def _stated_frame(index: int, record: FrameRecord, style: TextStyle,
                  age_s: float | None) -> FrameText:
    sightings: dict[str, Sighting] = {}
    for obj in record.objects if not record.described_by_vlm else ():
        if obj.colour and obj.colour not in sightings and obj.bearing_deg is not None:
            distance = None if obj.distance_m is None else float(f"{obj.distance_m:.1f}")
            sightings[obj.colour] = Sighting(obj.colour, obj.size or "", obj.direction or "",
                                             _stated_bearing(obj.bearing_deg), distance, True)
    age = written_age(age_s) if age_s is not None else None
    if index == 0:
        return FrameText(0, None, None, sightings, (), age)
    # the line states the measured motion wherever it shows it (beside a VLM's action too)
    states_measured = style.report_motion or not record.described_by_vlm
    if record.motion is not None and states_measured:
        parts = _stated_motion(record.motion, style.layout)
        if not parts:
            return FrameText(index, "stay still", 0.0, sightings, (), age)
        action, amount = primary_part(parts) if len(parts) > 1 else parts[0]
        return FrameText(index, action, amount, sightings, parts, age)
    words = record.vlm_action  # the VLM's own words name the motion
    parts = action_words(words)
    if len(parts) > 1:
        action, amount = primary_part(parts) or (None, None)
    else:
        action, amount = first_action(words)
    return FrameText(index, action, amount, sightings, parts, age)


def stated_view(record: PerceptionRecord) -> PerceptionText:
    """The record as its text states it: ages, motions and bearings as written (what a reader
    of the text can know), the question and its options."""
    frames = record.frames
    timed = timed_route(frames, record.style)
    last = frames[-1].stamp if frames else 0.0
    stated = tuple(_stated_frame(i, f, record.style, last - f.stamp if timed else None)
                   for i, f in enumerate(frames))
    return PerceptionText(stated, record.question.strip(),
                          tuple(parse_options(list(record.options))))

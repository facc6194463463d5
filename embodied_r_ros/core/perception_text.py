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
rounded, how many decimals each amount is written with and which are written at all is
:data:`~embodied_r_ros.core.text_format.TEXT_PRECISION` (:mod:`~embodied_r_ros.core.text_format`:
the words and precisions the stated view and the reader of old texts share). A geometric
observation reads
``I see a small red object to the left (25 degrees left, about 3.1 m away); ...``. A memory's
text adds, after the frames, where the objects the question names are now (:data:`PLACES_HEADING`).

:func:`render` writes a :class:`~embodied_r_ros.core.records.PerceptionRecord`; nothing else
writes this prose, and nothing parses it back. Readers that must see exactly what the LM sees
(the rule reader, the rationales, the memory's places) take :func:`stated_view`: the same
records with every amount as the text rounds it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from embodied_r_ros.core.action_words import MotionPart, action_words, first_action
from embodied_r_ros.core.actions import ActionThresholds, Motion, primary_action
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
from embodied_r_ros.core.text_format import (
    ABOUT,
    AGE_WORDS,
    AWAY,
    DEGREES,
    METRES,
    TEXT_PRECISION,
    TextPrecision,
    rounded,
)

__all__ = ["TEXT_PRECISION", "MotionPart", "TextPrecision", "action_words", "first_action",
           "rounded"]

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


_AXES = (("forward", "move forward", "move backward"), ("left", "move left", "move right"),
         ("up", "move upward", "move downward"))


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


def _amount(action: str, amount: float, precision: TextPrecision) -> str:
    """``54 degrees`` / ``0.7 m``: a turn's or tilt's degrees, a move's metres."""
    if action.startswith(("rotate", "tilt")):
        return f"{precision.degrees_text(amount)} {DEGREES}"
    return f"{precision.metres_text(amount)} {METRES}"


def _stated_amount(action: str, amount: float, precision: TextPrecision) -> float:
    if action.startswith(("rotate", "tilt")):
        return precision.stated_degrees(amount)
    return precision.stated_metres(amount)


def describe_part(action: str, amount: float | None,
                  precision: TextPrecision = TEXT_PRECISION) -> str:
    if amount is None:
        return action
    return f"{action} {ABOUT} {_amount(action, amount, precision)}"


def describe_parts(parts: Sequence[MotionPart], precision: TextPrecision = TEXT_PRECISION
                   ) -> str:
    """``move forward about 0.7 m and move left about 0.4 m, then rotate left about 54
    degrees``; ``stay still`` when there is nothing to state."""
    moves = [describe_part(a, x, precision) for a, x in parts if a.startswith("move")]
    turns = [describe_part(a, x, precision) for a, x in parts if not a.startswith("move")]
    if not moves and not turns:
        return "stay still"
    return ", then ".join(" and ".join(group) for group in (moves, turns) if group)


def describe_motion(motion: Motion, layout: FrameLayout = "timed",
                    precision: TextPrecision = TEXT_PRECISION) -> str:
    """The measured motion between two key frames as the robot route writes it: every
    component (timed), or the primary action alone, ``rotate left, about 30 degrees`` (paper)."""
    if layout == "timed":
        return describe_parts(motion_parts(motion, precision), precision)
    part = _primary_part(motion)
    if part is None:
        return "stay still"
    action, amount = part
    if amount is None:
        return action
    return f"{action}, {ABOUT} {_amount(action, amount, precision)}"


def _stated_bearing(bearing: float, precision: TextPrecision) -> float:
    """A bearing as an observation writes it: its degrees as written, the side kept."""
    return precision.stated_degrees(abs(bearing)) * (1.0 if bearing >= 0 else -1.0)


def describe_object(obj: SeenObject, precision: TextPrecision = TEXT_PRECISION) -> str:
    """``a small red object to the left (25 degrees left, about 3.1 m away)``."""
    bearing = obj.bearing_deg or 0.0
    side = "left" if bearing >= 0 else "right"
    degrees = precision.degrees_text(abs(bearing))
    geometry = f"{degrees} {DEGREES if float(degrees) != 1 else DEGREES[:-1]} {side}"
    if obj.distance_m is not None:
        geometry += f", {ABOUT} {precision.metres_text(obj.distance_m)} {METRES} {AWAY}"
    return f"a {obj.size} {obj.colour} object {obj.direction} ({geometry})"


def describe_objects(objects: Sequence[SeenObject],
                     precision: TextPrecision = TEXT_PRECISION) -> str:
    """The geometric observation of one frame from its colour regions (largest first)."""
    if not objects:
        return NOTHING_IN_VIEW
    return "I see " + "; ".join(describe_object(o, precision) for o in objects) + "."


def observation(record: FrameRecord, precision: TextPrecision = TEXT_PRECISION) -> str:
    """What a frame's line says it shows: the VLM's own text, else its objects."""
    if record.vlm_text is not None:
        return record.vlm_text
    return describe_objects(record.objects, precision)


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


def _action(record: FrameRecord, style: TextStyle, precision: TextPrecision) -> str:
    """The ``After <action>`` of a frame line (not frame 0's)."""
    measured = (describe_motion(record.motion, style.layout, precision) if record.motion
                else None)
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
               age_s: float | None = None, precision: TextPrecision = TEXT_PRECISION) -> str:
    """One frame's line; ``age_s``: how long before the last key frame it was taken (the robot
    route states it, the benchmark route does not)."""
    head = f"Frame {index}"
    if age_s is not None:
        head += f" ({precision.seconds_text(written_age(age_s, precision))} {AGE_WORDS})"
    seen = observation(record, precision)
    if index == 0:
        return f"{head}: Observe: {seen}"
    return f"{head}: After {_action(record, style, precision)}, Observe: {seen}"


def frame_lines(frames: Sequence[FrameRecord], style: TextStyle,
                precision: TextPrecision = TEXT_PRECISION) -> list[str]:
    timed = timed_route(frames, style)
    last = frames[-1].stamp if frames else 0.0
    return [frame_line(i, f, style, last - f.stamp if timed else None, precision)
            for i, f in enumerate(frames)]


def _ago(age_s: float, precision: TextPrecision) -> str:
    if age_s < 60.0:
        return f"{precision.seconds_text(age_s)} s"
    return f"{age_s / 60.0:.0f} min"


def bearing_words(bearing: float, precision: TextPrecision = TEXT_PRECISION) -> str:
    """How a line states a bearing: ``back-left (113 degrees left)``."""
    side = "left" if bearing >= 0 else "right"
    return f"{quadrant(bearing)} ({precision.degrees_text(abs(bearing))} {DEGREES} {side})"


def place_line(note: ObjectPlace | ColourNote, precision: TextPrecision = TEXT_PRECISION
               ) -> str:
    """One line of the places block: where an object is now and how sure that is, or when a
    colour was seen: ``- red object seen 16 min ago (last 990 s ago); now 4.5 m away,
    front-right (27 degrees right), within about 0.4 m; seen from a spot now 3.1 m away, ...``.
    """
    s, m = precision.seconds_text, precision.metres_text
    if isinstance(note, ColourNote):
        if note.last_seen_s is None:
            return f"- {note.colour}: in none of these frames."
        return f"- {note.colour} last seen {s(note.last_seen_s)} s ago."
    seen = ", ".join(_ago(a, precision) for a in note.visits_s)
    parts = [f"{note.name} seen {seen} ago (last {s(note.last_s)} s ago)"]
    if note.now is not None:
        distance, bearing = note.now
        where = f"now {m(distance)} {METRES} {AWAY}, {bearing_words(bearing, precision)}"
        if not note.triangulated:
            where += ", guessed from one view"
        if note.uncertainty_m is not None:
            where += f", within {ABOUT} {m(max(note.uncertainty_m, precision.metres))} {METRES}"
        parts.append(where)
    if note.seen_from is not None:
        distance, bearing = note.seen_from
        parts.append("seen from about here" if distance < HERE_M else
                     f"seen from a spot now {m(distance)} {METRES} {AWAY}, "
                     f"{bearing_words(bearing, precision)}")
    if note.nearby:
        parts.append("nearest named: " + ", ".join(f"{c} {m(d)} {METRES}"
                                                   for c, d in note.nearby))
    return "- " + "; ".join(parts) + "."


def places_block(notes: Sequence[ObjectPlace | ColourNote],
                 precision: TextPrecision = TEXT_PRECISION) -> str:
    """The block a memory writes after the frames; empty without a line."""
    lines = [place_line(n, precision) for n in notes]
    return "\n".join([PLACES_HEADING, *lines]) if notes else ""


def render(record: PerceptionRecord, prompts: PromptSet | None = None,
           precision: TextPrecision = TEXT_PRECISION) -> str:
    """The reasoning LM's user message in the official code's shape: the instruction, the
    frame lines wrapped in ``<`` and ``>`` after ``Video content:``, a memory's places block,
    then the question (``VLM_perception_API.py`` of Embodied-R.code); amounts as
    ``precision`` writes them."""
    p = prompts or default_prompts()
    lines = "\n".join(frame_lines(record.frames, record.style, precision))
    video = f"{p.lm_instruction}\nVideo content:\n<\n{p.preamble}\n{lines}\n>\n"
    notes = places_block(record.places or (), precision)
    return f"{video}{notes}\n{record.question_block}" if notes else (
        f"{video}{record.question_block}")


# -- the stated view ------------------------------------------------------------------------------

#: bearing of a region's centre that each coarse direction stands for (degrees, left > 0): the
#: middle of its third of an image of the default 70-degree field of view
_THIRD_DEG = math.degrees(math.atan(math.tan(math.radians(70.0 / 2)) * 2 / 3))
COARSE_BEARING = {"left": _THIRD_DEG, "right": -_THIRD_DEG, "ahead": 0.0}


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


def _stated_motion(motion: Motion, layout: FrameLayout, precision: TextPrecision
                   ) -> tuple[MotionPart, ...]:
    """The components a measured motion's words state, amounts as written."""
    if layout == "timed":
        return tuple((a, None if x is None else _stated_amount(a, x, precision))
                     for a, x in motion_parts(motion, precision))
    part = _primary_part(motion)
    if part is None:
        return ()
    action, amount = part
    if amount is None:
        return ((action, None),)
    return ((action, _stated_amount(action, amount, precision)),)


def _stated_frame(index: int, record: FrameRecord, style: TextStyle,
                  age_s: float | None, precision: TextPrecision) -> FrameText:
    sightings: dict[str, Sighting] = {}
    for obj in record.objects if not record.described_by_vlm else ():
        if obj.colour and obj.colour not in sightings and obj.bearing_deg is not None:
            distance = (None if obj.distance_m is None
                        else precision.stated_metres(obj.distance_m))
            sightings[obj.colour] = Sighting(obj.colour, obj.size or "", obj.direction or "",
                                             _stated_bearing(obj.bearing_deg, precision),
                                             distance, True)
    age = (float(precision.seconds_text(written_age(age_s, precision))) if age_s is not None
           else None)
    if index == 0:
        return FrameText(0, None, None, sightings, (), age)
    # the line states the measured motion wherever it shows it (beside a VLM's action too)
    states_measured = style.report_motion or not record.described_by_vlm
    if record.motion is not None and states_measured:
        parts = _stated_motion(record.motion, style.layout, precision)
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


def stated_view(record: PerceptionRecord, precision: TextPrecision = TEXT_PRECISION
                ) -> PerceptionText:
    """The record as its text (rendered with ``precision``) states it: ages, motions and
    bearings as written (what a reader of the text can know), the question and its options."""
    frames = record.frames
    timed = timed_route(frames, record.style)
    last = frames[-1].stamp if frames else 0.0
    stated = tuple(_stated_frame(i, f, record.style, last - f.stamp if timed else None,
                                 precision) for i, f in enumerate(frames))
    return PerceptionText(stated, record.question.strip(),
                          tuple(parse_options(list(record.options))))

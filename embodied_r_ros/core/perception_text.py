"""The perception text the reasoning LM reads: written and read back in one place.

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
``I see a small red object to the left (25 degrees left, about 3.1 m away); ...``.

The oracle, the rationales, the question generators and the tests read that text back; keeping
the writers and the parsers side by side (round-trip tested) stops the two from drifting apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from embodied_r_ros.core.actions import ActionThresholds, Motion, action_of, primary_action
from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.prompts import PromptSet, default_prompts
from embodied_r_ros.core.reasoning import parse_options, question_from_prompt

if TYPE_CHECKING:
    from embodied_r_ros.core.colors import Region
    from embodied_r_ros.core.perception import FrameDescription

#: the observation written when no colour region is found
NOTHING_IN_VIEW = "no distinctly coloured object in view."
#: the first line of the notes a memory writes after the frames: where the named objects are now
PLACES_HEADING = "Named objects, placed from the frames above, relative to you now:"
#: horizontal field of view the coarse directions are read against: the config's default guess,
#: which colors uses when no intrinsics are given
_HFOV_DEG = CameraConfig.model_fields["hfov_deg"].default

# -- writing ------------------------------------------------------------------------------------


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


#: how the robot route writes its frame lines (``perception.frame_layout``)
FrameLayout = Literal["timed", "paper"]


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


def describe_region(region: Region) -> str:
    """``a small red object to the left (25 degrees left, about 3.1 m away)``."""
    side = "left" if region.bearing_deg >= 0 else "right"
    degrees = round(abs(region.bearing_deg))
    geometry = f"{degrees} degree{'' if degrees == 1 else 's'} {side}"
    if region.distance_m is not None:
        geometry += f", about {region.distance_m:.1f} m away"
    return f"a {region.size} {region.colour} object {region.direction} ({geometry})"


def describe_regions(regions: Sequence[Region]) -> str:
    """The observation of one frame from its colour regions (largest first)."""
    if not regions:
        return NOTHING_IN_VIEW
    return "I see " + "; ".join(describe_region(r) for r in regions) + "."


def frame_line(index: int, desc: FrameDescription, report_motion: bool = True,
               age_s: float | None = None) -> str:
    """One frame's line; ``age_s``: how long before the last key frame it was taken (the robot
    route states it, the benchmark route does not)."""
    head = f"Frame {index}"
    if age_s is not None:
        head += f" ({written_age(age_s):.0f} s before the last key frame)"
    if index == 0:
        return f"{head}: Observe: {desc.observation}"
    action = desc.action or "None"
    if report_motion and desc.measured_motion and desc.vlm_action:
        if desc.motion_source == "odometry":
            action = f"{desc.measured_motion} (VLM: {desc.vlm_action})"
        else:
            action = f"{desc.vlm_action} (measured: {desc.measured_motion})"
    return f"{head}: After {action}, Observe: {desc.observation}"


def robot_route(frames: Sequence[FrameDescription], report_motion: bool) -> bool:
    """Whether the text is the robot route's: measured motion is present and reported."""
    return report_motion and any(f.motion_source for f in frames)


def assemble(
    frames: Sequence[FrameDescription],
    question_block: str,
    report_motion: bool = True,
    prompts: PromptSet | None = None,
    layout: FrameLayout = "timed",
    notes: str = "",
) -> str:
    """The reasoning LM's user message in the official code's shape: the instruction, the
    frame lines wrapped in ``<`` and ``>`` after ``Video content:``, then the question
    (``VLM_perception_API.py`` of Embodied-R.code). On the robot route of the timed layout each
    line states its frame's age. ``notes`` (what a memory derives from the frames) go between
    the frames and the question."""
    p = prompts or default_prompts()
    timed = layout == "timed" and robot_route(frames, report_motion)
    last = frames[-1].stamp if frames else 0.0
    lines = "\n".join(frame_line(i, f, report_motion, last - f.stamp if timed else None)
                      for i, f in enumerate(frames))
    video = f"{p.lm_instruction}\nVideo content:\n<\n{p.preamble}\n{lines}\n>\n"
    return f"{video}{notes}\n{question_block}" if notes else f"{video}{question_block}"


# -- reading ------------------------------------------------------------------------------------


def has_places(user_text: str) -> bool:
    """Whether ``user_text`` carries a memory's places block after its frames (the text a
    memory reader is trained on: ``reasoning.memory_model``)."""
    return f"\n>\n{PLACES_HEADING}\n" in user_text


_FRAME_RE = re.compile(
    r"^Frame (\d+)(?: \((\d+(?:\.\d+)?) s before the last key frame\))?: "
    r"(?:After (.*?), )?Observe: (.*)$", re.MULTILINE)
_AMOUNT_RE = re.compile(r"about (-?\d+(?:\.\d+)?) (m|degrees)")
_PART_SPLIT_RE = re.compile(r",? then | and ")
_SIGHTING_RE = re.compile(
    r"an? (small|medium|large) (\w+) object (.*?)(?: \((\d+) degrees? (left|right)"
    r"(?:, about (\d+(?:\.\d+)?) m away)?\))?$"
)
#: bearing of a region's centre that each coarse direction stands for (degrees, left > 0): the
#: middle of its third of the image
_THIRD_DEG = math.degrees(math.atan(math.tan(math.radians(_HFOV_DEG / 2)) * 2 / 3))
_COARSE_BEARING = {"left": _THIRD_DEG, "right": -_THIRD_DEG, "ahead": 0.0}


@dataclass(frozen=True)
class Sighting:
    """One coloured region of one frame, as the text describes it."""

    colour: str
    size: str
    direction: str  # the coarse words, e.g. "to the left, below"
    bearing_deg: float  # left > 0; exact when the text gives degrees, else the third's centre
    distance_m: float | None = None
    exact_bearing: bool = False


@dataclass(frozen=True)
class FrameText:
    """One ``Frame i: After <action>, Observe: <view>`` line, read back."""

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
    """An LM user message read back: its frames, question and options."""

    frames: tuple[FrameText, ...]
    question: str
    options: tuple[tuple[str, str], ...]


def parse_sighting(part: str) -> Sighting | None:
    """One ``a small red object ... (25 degrees left, about 3.1 m away)``, else None."""
    m = _SIGHTING_RE.match(part.strip())
    if not m:
        return None
    size, colour, direction, deg, side, dist = m.groups()
    direction = direction.strip()
    if deg is not None:
        bearing = float(deg) * (1.0 if side == "left" else -1.0)
    else:
        horiz = "left" if "left" in direction else "right" if "right" in direction else "ahead"
        bearing = _COARSE_BEARING[horiz]
    return Sighting(colour, size, direction, bearing, float(dist) if dist else None,
                    deg is not None)


def parse_observation(view: str) -> dict[str, Sighting]:
    """``"I see a small red object to the left; ..."`` -> sightings by colour."""
    view = view.strip().rstrip(".")
    if not view.startswith("I see "):
        return {}
    out: dict[str, Sighting] = {}
    for part in view[len("I see "):].split("; "):
        s = parse_sighting(part)
        if s is not None and s.colour not in out:
            out[s.colour] = s
    return out


def parse_motion(text: str | None) -> tuple[str | None, float | None]:
    """``"rotate right about 38 degrees"`` (or a VLM's ``"rotate right, about 38 degrees"``)
    -> ``("rotate right", 38.0)``: the first action named and its amount."""
    if not text:
        return None, None
    low = text.strip().lower()
    if low.startswith("stay still"):
        return "stay still", 0.0
    action = action_of(low)
    m = _AMOUNT_RE.search(low)
    return action, float(m.group(1)) if m else None


def parse_parts(text: str | None) -> tuple[MotionPart, ...]:
    """The components of a written motion (:func:`describe_parts`), in order. Of an action
    written beside another source's, the measured one: ``<odometry> (VLM: ...)`` or
    ``<VLM action> (measured: <visual>)``."""
    if not text:
        return ()
    low = text.strip().lower()
    measured = re.search(r"\(measured: (.*)\)$", low)
    low = measured.group(1) if measured else re.sub(r" \(vlm: .*\)$", "", low)
    parts = []
    for piece in _PART_SPLIT_RE.split(low):
        action = action_of(piece)
        if action is not None:
            m = _AMOUNT_RE.search(piece)
            parts.append((action, float(m.group(1)) if m else None))
    return tuple(parts)


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


def parse_perception(user_text: str) -> PerceptionText:
    """The frames, question and options of an LM user message written by :func:`assemble`."""
    video, _, _ = user_text.partition("\n>\n")
    frames = []
    for m in _FRAME_RE.finditer(video):
        index, age, motion, view = m.groups()
        parts = parse_parts(motion)
        if len(parts) > 1:
            action, amount = primary_part(parts) or (None, None)
        else:
            action, amount = parse_motion(motion)
        frames.append(FrameText(int(index), action, amount, parse_observation(view), parts,
                                float(age) if age is not None else None))
    block = question_from_prompt(user_text)
    question, _, choices = block.partition("\nChoices:\n")
    options = parse_options([c for c in choices.splitlines() if c.strip()])
    return PerceptionText(tuple(frames), question.removeprefix("Question:").strip(),
                          tuple(options))

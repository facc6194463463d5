"""The perception text the reasoning LM reads: written and read back in one place.

Perception writes, per key frame, ``Frame i: After <action>, Observe: <view>`` (the shape of
``derive_video_content_str`` in ``train/conver_format/VLM_perception_API.py`` of
EmbodiedCity/Embodied-R.code). The action of a measured motion reads ``rotate left, about 30
degrees`` or ``move forward, about 2.0 m``; a geometric observation reads ``I see a small red
object to the left (25 degrees left, about 3.1 m away); ...``. The oracle, the rationales and the
tests read that text back; keeping the writers and the parsers side by side (round-trip tested)
is what stops the two from drifting apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embodied_r_ros.core.actions import ActionThresholds, Motion, action_of, primary_action
from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.prompts import PromptSet, default_prompts
from embodied_r_ros.core.reasoning import parse_options, question_from_prompt

if TYPE_CHECKING:
    from embodied_r_ros.core.colors import Region
    from embodied_r_ros.core.perception import FrameDescription

#: the observation written when no colour region is found
NOTHING_IN_VIEW = "no distinctly coloured object in view."
#: horizontal field of view the coarse directions are read against: the config's default guess,
#: which colors uses when no intrinsics are given
_HFOV_DEG = CameraConfig.model_fields["hfov_deg"].default

# -- writing ------------------------------------------------------------------------------------


def describe_motion(motion: Motion, thresholds: ActionThresholds | None = None) -> str:
    """Action phrase with its magnitude, e.g. ``"rotate left, about 30 degrees"``.

    Returns ``"stay still"`` when no component passes its threshold.
    """
    action = primary_action(motion, thresholds)
    if action is None:
        return "stay still"
    if action.startswith("rotate"):
        return f"{action}, about {abs(motion.yaw_deg):.0f} degrees"
    if action.startswith("tilt"):
        return f"{action}, about {abs(motion.pitch_deg):.0f} degrees"
    if motion.metric:
        return f"{action}, about {motion.translation:.1f} m"
    return action


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


def frame_line(index: int, desc: FrameDescription, report_motion: bool = True) -> str:
    if index == 0:
        return f"Frame 0: Observe: {desc.observation}"
    action = desc.action or "None"
    if report_motion and desc.measured_motion and desc.vlm_action:
        if desc.motion_source == "odometry":
            action = f"{desc.measured_motion} (VLM: {desc.vlm_action})"
        else:
            action = f"{desc.vlm_action} (measured: {desc.measured_motion})"
    return f"Frame {index}: After {action}, Observe: {desc.observation}"


def assemble(
    frames: Sequence[FrameDescription],
    question_block: str,
    report_motion: bool = True,
    prompts: PromptSet | None = None,
) -> str:
    """The reasoning LM's user message in the official code's shape: the instruction, the
    frame lines wrapped in ``<`` and ``>`` after ``Video content:``, then the question
    (``VLM_perception_API.py`` of Embodied-R.code)."""
    p = prompts or default_prompts()
    lines = "\n".join(frame_line(i, f, report_motion) for i, f in enumerate(frames))
    return f"{p.lm_instruction}\nVideo content:\n<\n{p.preamble}\n{lines}\n>\n{question_block}"


# -- reading ------------------------------------------------------------------------------------

_FRAME_RE = re.compile(r"^Frame (\d+): (?:After (.*?), )?Observe: (.*)$", re.MULTILINE)
_AMOUNT_RE = re.compile(r"about (-?\d+(?:\.\d+)?) (m|degrees)")
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
    action: str | None  # a vocabulary action, "stay still" or None (frame 0, unknown)
    amount: float | None  # metres or degrees as written
    sightings: dict[str, Sighting] = field(default_factory=dict)


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
    """``"rotate right, about 38 degrees"`` -> ``("rotate right", 38.0)``."""
    if not text:
        return None, None
    low = text.strip().lower()
    if low.startswith("stay still"):
        return "stay still", 0.0
    action = action_of(low)
    m = _AMOUNT_RE.search(low)
    return action, float(m.group(1)) if m else None


def parse_perception(user_text: str) -> PerceptionText:
    """The frames, question and options of an LM user message written by :func:`assemble`."""
    video, _, _ = user_text.partition("\n>\n")
    frames = []
    for m in _FRAME_RE.finditer(video):
        action, amount = parse_motion(m.group(2))
        frames.append(FrameText(int(m.group(1)), action, amount, parse_observation(m.group(3))))
    block = question_from_prompt(user_text)
    question, _, choices = block.partition("\nChoices:\n")
    options = parse_options([c for c in choices.splitlines() if c.strip()])
    return PerceptionText(tuple(frames), question.removeprefix("Question:").strip(),
                          tuple(options))

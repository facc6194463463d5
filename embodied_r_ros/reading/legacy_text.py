"""Perception texts written before the typed record: read back, for old data only.

Datasets and memories written before :mod:`embodied_r_ros.core.records` keep only the rendered
text (a dataset row's prompt, a memory row's description). This module reads such a text into
the stated view (:class:`~embodied_r_ros.core.perception_text.PerceptionText`) and a geometric
observation into its objects, so an old dataset still trains and scores and an old memory
still places its objects. It is the only reader of the prose: everything written since carries
its records. Its words and the amounts it accepts are the renderer's
(:mod:`embodied_r_ros.core.text_format`), so it reads any precision the renderer writes.
"""

from __future__ import annotations

import re

from embodied_r_ros.core.action_words import action_words, first_action
from embodied_r_ros.core.perception_text import (
    COARSE_BEARING,
    FrameText,
    PerceptionText,
    Sighting,
    primary_part,
)
from embodied_r_ros.core.reasoning import parse_options, question_from_prompt
from embodied_r_ros.core.records import SeenObject
from embodied_r_ros.core.text_format import ABOUT, AGE_WORDS, AWAY, DEGREES, METRES, NUMBER

_FRAME_RE = re.compile(
    rf"^Frame (\d+)(?: \(({NUMBER}) {re.escape(AGE_WORDS)}\))?: "
    r"(?:After (.*?), )?Observe: (.*)$", re.MULTILINE)
_SIGHTING_RE = re.compile(
    rf"an? (small|medium|large) (\w+) object (.*?)(?: \(({NUMBER}) {DEGREES[:-1]}s? "
    rf"(left|right)(?:, {ABOUT} ({NUMBER}) {METRES} {AWAY})?\))?$"
)


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
        bearing = COARSE_BEARING[horiz]
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


def observed_objects(view: str) -> tuple[SeenObject, ...]:
    """The colour objects of a geometric observation (an old memory row's description)."""
    return tuple(SeenObject(f"{s.colour} object", colour=s.colour, size=s.size,
                            direction=s.direction, bearing_deg=s.bearing_deg,
                            distance_m=s.distance_m)
                 for s in parse_observation(view).values())


def _motion_words(text: str | None) -> str | None:
    """Of an action written beside another source's, the measured one: ``<odometry> (VLM:
    ...)`` or ``<VLM action> (measured: <visual>)``."""
    if not text:
        return text
    low = text.strip().lower()
    measured = re.search(r"\(measured: (.*)\)$", low)
    return measured.group(1) if measured else re.sub(r" \(vlm: .*\)$", "", low)


def parse_perception(user_text: str) -> PerceptionText:
    """The stated view of an LM user message written before the typed record."""
    video, _, _ = user_text.partition("\n>\n")
    frames = []
    for m in _FRAME_RE.finditer(video):
        index, age, motion, view = m.groups()
        parts = action_words(_motion_words(motion))
        if len(parts) > 1:
            action, amount = primary_part(parts) or (None, None)
        else:
            action, amount = first_action(motion)
        frames.append(FrameText(int(index), action, amount, parse_observation(view), parts,
                                float(age) if age is not None else None))
    block = question_from_prompt(user_text)
    question, _, choices = block.partition("\nChoices:\n")
    options = parse_options([c for c in choices.splitlines() if c.strip()])
    return PerceptionText(tuple(frames), question.removeprefix("Question:").strip(),
                          tuple(options))

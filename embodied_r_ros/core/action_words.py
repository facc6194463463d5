"""The motion a VLM's action words name: vocabulary actions with the amounts they state.

A VLM writes its action as words (``rotate right, about 38 degrees``; ``move forward about
0.7 m and rotate left about 54 degrees``); the stated view and the reader of old texts read
them into :data:`MotionPart` components here, in the renderer's words
(:mod:`embodied_r_ros.core.text_format`) and whatever its precision.
"""

from __future__ import annotations

import re

from embodied_r_ros.core.actions import action_of
from embodied_r_ros.core.text_format import ABOUT, DEGREES, METRES, NUMBER

#: one motion component as the text states it: a vocabulary action and its amount (degrees or
#: metres; None where monocular vision knows the direction of travel but not its length)
MotionPart = tuple[str, float | None]

_AMOUNT_RE = re.compile(rf"{ABOUT} (-?{NUMBER}) ({METRES}|{DEGREES})")
_PART_SPLIT_RE = re.compile(r",? then | and ")


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

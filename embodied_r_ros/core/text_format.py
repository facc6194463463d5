"""How the perception text writes its amounts: the words and precisions, in one definition.

The renderer (:mod:`embodied_r_ros.core.perception_text`), its stated view (the same amounts
as the text writes them) and the reader of old texts (:mod:`embodied_r_ros.reading.legacy_text`)
all take the unit words and each quantity's rounding from here, so a changed precision changes
what is written and what is read alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the words around an amount: ``about 0.7 m``, ``about 54 degrees``, ``3.1 m away``
ABOUT = "about"
METRES = "m"
DEGREES = "degrees"
AWAY = "away"
#: how a frame line states its age: ``Frame 3 (12 s before the last key frame)``
AGE_WORDS = "s before the last key frame"
#: a written amount, whatever its decimals
NUMBER = r"\d+(?:\.\d+)?"


def rounded(value: float, step: float) -> float:
    """A non-negative ``value`` to the nearest multiple of ``step``, halves up, as the text
    writes it (``0.15`` m is ``0.2``, not the ``0.1`` that binary floating point would give)."""
    return round(math.floor(value / step + 0.5 + 1e-9) * step, 6)


def decimals(step: float) -> int:
    """The decimals a step's multiples need (``1`` -> 0, ``0.1`` -> 1, ``0.05`` -> 2)."""
    return next(d for d in range(7) if abs(round(step, d) - step) < 1e-9)


@dataclass(frozen=True)
class TextPrecision:
    """How the text writes amounts, in one place for the writers, the question generators
    and the readers: the robot route's motions and ages are rounded to these steps, every
    amount is written with the decimals its step needs, and a component of a motion is written
    only when its rounded amount reaches the threshold."""

    degrees: float = 1.0
    metres: float = 0.1
    seconds: float = 1.0
    min_rotation_deg: float = 5.0
    min_translation_m: float = 0.2

    def degrees_text(self, value: float) -> str:
        return f"{value:.{decimals(self.degrees)}f}"

    def metres_text(self, value: float) -> str:
        return f"{value:.{decimals(self.metres)}f}"

    def seconds_text(self, value: float) -> str:
        return f"{value:.{decimals(self.seconds)}f}"

    def stated_degrees(self, value: float) -> float:
        """``value`` as the text states it (what a reader of the text gets back)."""
        return float(self.degrees_text(value))

    def stated_metres(self, value: float) -> float:
        return float(self.metres_text(value))


TEXT_PRECISION = TextPrecision()

"""Decision rules of the long world's questions: horizons, bands, turns, and their margins.

Each rule returns None near its decision boundary, with the reason the caller counts, so
every kept answer is clear of it (as :mod:`embodied_r_ros.sim.question_rules` does for the
short worlds, whose quadrant rule is reused here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: (label, from, to) in seconds between the question and the oldest sighting it needs
HORIZONS: tuple[tuple[str, float, float], ...] = (
    ("short", 0.0, 120.0), ("medium", 120.0, 900.0), ("long", 900.0, math.inf))
HORIZON_MARGIN_S = 10.0
#: options of "how far is X from you now", straight-line metres to its centre
DISTANCE_BANDS: tuple[tuple[float, float, str], ...] = (
    (0.0, 2.0, "less than 2 m"), (2.0, 5.0, "between 2 and 5 m"),
    (5.0, 10.0, "between 5 and 10 m"), (10.0, math.inf, "more than 10 m"))
#: options of "how long ago did you last see X", seconds
AGE_BANDS: tuple[tuple[float, float, str], ...] = (
    (0.0, 60.0, "less than 1 minute ago"), (60.0, 300.0, "between 1 and 5 minutes ago"),
    (300.0, 900.0, "between 5 and 15 minutes ago"), (900.0, math.inf, "more than 15 minutes ago"))
DISTANCE_MARGIN = (0.3, 0.1)  # metres, and a share of the edge: whichever is larger
AGE_MARGIN = (10.0, 0.1)  # seconds, and a share of the edge
CLOSER_MARGIN = (0.5, 0.1)  # metres, and a share of the larger distance
#: the first turn of a route: straight ahead, left/right, or around (degrees of bearing)
TURNS: tuple[str, ...] = ("go straight ahead", "turn left", "turn right", "turn around")
_STRAIGHT_DEG, _SIDE_DEG, _AROUND_DEG = 20.0, (40.0, 130.0), 155.0


def horizon_of(age_s: float) -> str | None:
    """The horizon label of a question needing memories ``age_s`` old; None near an edge."""
    for _, lo, _hi in HORIZONS[1:]:
        if abs(age_s - lo) < HORIZON_MARGIN_S:
            return None
    for label, lo, hi in HORIZONS:
        if lo <= age_s < hi:
            return label
    return None


def _margin(edge: float, margin: tuple[float, float]) -> float:
    return max(margin[0], margin[1] * edge)


def band_of(value: float, bands: Sequence[tuple[float, float, str]],
            margin: tuple[float, float]) -> str | None:
    """The band's words for ``value``; None within the margin of an inner edge."""
    for lo, _hi, _words in bands[1:]:
        if abs(value - lo) < _margin(lo, margin):
            return None
    for lo, hi, words in bands:
        if lo <= value < hi:
            return words
    return None


def clearly_closer(d1: float, d2: float) -> int | None:
    """0 if the first distance is clearly the smaller, 1 if the second, None if close."""
    if abs(d1 - d2) < _margin(max(d1, d2), CLOSER_MARGIN):
        return None
    return 0 if d1 < d2 else 1


def first_turn(bearing_deg: float) -> str | None:
    """The turn that faces a bearing (left > 0), or None between the clear cases."""
    a = abs(bearing_deg)
    if a <= _STRAIGHT_DEG:
        return TURNS[0]
    if _SIDE_DEG[0] <= a <= _SIDE_DEG[1]:
        return TURNS[1] if bearing_deg > 0 else TURNS[2]
    if a >= _AROUND_DEG:
        return TURNS[3]
    return None


def nearest_turn(bearing_deg: float) -> str:
    """The turn whose clear range of :func:`first_turn` is nearest a bearing: how a reader
    decides a bearing that falls between two of them."""
    a = abs(bearing_deg)
    if a <= (_STRAIGHT_DEG + _SIDE_DEG[0]) / 2.0:
        return TURNS[0]
    if a < (_SIDE_DEG[1] + _AROUND_DEG) / 2.0:
        return TURNS[1] if bearing_deg > 0 else TURNS[2]
    return TURNS[3]


def minutes_phrase(minutes: int) -> str:
    return "1 minute" if minutes == 1 else f"{minutes} minutes"

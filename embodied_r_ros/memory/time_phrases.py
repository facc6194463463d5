"""Time phrases of a question ("10 minutes ago", "at the start") as ranges of the memory.

A phrase is read into a :class:`TimeSpec` without knowing the memory, then placed on one
robot's timeline with :meth:`TimeSpec.resolve` (its first stamp and "now", the newest). Times
count back from now, as the perception text does ("12 s before the last key frame"), or forward
from the first frame. A phrase that looks like a time but cannot be placed ("5 blorps ago",
"20 seconds before I turned") raises ``BAD_TIME_PHRASE`` rather than being ignored: a question
about a time the robot cannot find should fail loudly, not answer about another time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from embodied_r_ros.memory.errors import BAD_TIME_PHRASE, SpatialMemoryError

Anchor = Literal["now", "start", "middle"]

_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "forty-five": 45, "fifty": 50,
    "sixty": 60, "ninety": 90, "a couple of": 2, "a few": 3, "few": 3, "several": 5,
    "half an": 0.5, "half a": 0.5,
}
_UNITS = {"second": 1.0, "sec": 1.0, "s": 1.0, "minute": 60.0, "min": 60.0, "hour": 3600.0,
          "hr": 3600.0, "h": 3600.0}
_NUM_WORDS = "|".join(sorted((re.escape(w) for w in _WORDS), key=len, reverse=True))
_UNIT = r"(?:seconds?|secs?|s|minutes?|mins?|hours?|hrs?|h)"
_EXAMPLES = '"10 minutes ago", "in the last 5 minutes", "at the start", "2 minutes after the start"'


def _num(name: str) -> str:
    return rf"(?<![-\w.])(?P<{name}>\d+(?:\.\d+)?|{_NUM_WORDS})"


def _unit(name: str) -> str:
    return rf"(?P<{name}>{_UNIT})\b(?P<{name}_half> and a half)?"


_BETWEEN = re.compile(
    rf"\bbetween {_num('a')}(?: {_unit('ua')})? and {_num('b')} {_unit('ub')} ago\b")
#: "more than 15 minutes ago" (from the start up to then), "less than a minute ago" (since then)
_MORE = re.compile(rf"\b(?:more|longer) than {_num('a')} {_unit('ua')} ago\b")
_LESS = re.compile(rf"\b(?:less|fewer) than {_num('a')} {_unit('ua')} ago\b")
#: a question about a time ("how long ago did you see it?") names none
_ASKS_TIME = re.compile(r"\bhow (?:long|many (?:seconds|minutes|hours)|much time) ago\b")
_LAST = re.compile(rf"\b(?:in|during|over|within|for) the (?:last|past|previous) "
                   rf"(?:{_num('a')} )?{_unit('ua')}")
_AGO = re.compile(rf"{_num('a')} {_unit('ua')} (?:ago|back|earlier|before now|before the last "
                  rf"(?:key )?frame|before(?=\s*(?:[.,;:?!)]|$)))")
_EVENT = re.compile(rf"{_num('a')} {_unit('ua')} (?:before|after) (?!the (?:start|beginning))")
_AFTER_START = re.compile(rf"{_num('a')} {_unit('ua')} (?:(?:after|into|from) the "
                          rf"(?:very )?(?:start|beginning)|in(?=\s*(?:[.,;:?!)]|$)))")
_START = re.compile(r"\b(?:(?:at|near|in|from) the (?:very )?(?:start|beginning)|at first|"
                    r"when i (?:started|began|set off))\b")
_RECENT = re.compile(r"\b(?:just now|a moment ago|moments ago|(?:most )?recently|a (?:little|"
                     r"short) while ago|at the (?:very )?end)\b")
_MIDDLE = re.compile(r"\b(?:(?:in|around|near) the middle|halfway)\b")
#: what is left of a time phrase none of the patterns read
_LEFTOVER = re.compile(rf"\S+(?: \S+)? ago\b|\b(?:last|past) \S+ {_UNIT}\b")


@dataclass(frozen=True)
class TimeRange:
    """Stamps ``start <= stamp <= end`` of one memory that a phrase stands for."""

    start: float
    end: float
    phrase: str

    @property
    def centre(self) -> float:
        return (self.start + self.end) / 2.0


@dataclass(frozen=True)
class TimeSpec:
    """A time phrase as read: offsets in seconds from its anchor (back from ``now``, forward
    from ``start``, either way from ``middle``), widened by ``share`` of the memory's span
    (for "at the start", whose width depends on how long the memory is). ``moment_s``: the
    one moment an "N ago" phrase names, seconds back from now (a range names none)."""

    phrase: str
    anchor: Anchor
    lo_s: float
    hi_s: float
    share: float = 0.0
    moment_s: float | None = None

    def resolve(self, first: float, now: float) -> TimeRange:
        """The range on a memory whose first stamp is ``first`` and newest is ``now``."""
        extra = self.share * max(now - first, 0.0)
        if self.anchor == "start":
            return TimeRange(first + self.lo_s, first + self.hi_s + extra, self.phrase)
        if self.anchor == "middle":
            mid = (first + now) / 2.0
            return TimeRange(mid - self.hi_s - extra / 2, mid + self.hi_s + extra / 2,
                             self.phrase)
        # "more than 15 minutes ago" reaches back to the first frame
        start = first if math.isinf(self.lo_s) else now + self.lo_s - extra
        return TimeRange(start, now + self.hi_s, self.phrase)


def _seconds(match: re.Match[str], num: str | None, unit: str) -> float:
    text = match.group(num) if num else None
    value = 1.0 if text is None else float(_WORDS[text] if text in _WORDS else text)
    name = match.group(unit)
    scale = _UNITS[name.rstrip("s") if len(name) > 1 else name]
    if match.group(f"{unit}_half"):
        value += 0.5
    return value * scale


def _tolerance(seconds: float) -> float:
    """How far around "N ago" to look: a fifth of N, at least 10 s (the text states whole
    seconds, the robot's sense of "10 minutes" is rough)."""
    return max(0.2 * seconds, 10.0)


def _bad(phrase: str, why: str = "") -> SpatialMemoryError:
    return SpatialMemoryError(BAD_TIME_PHRASE, f'cannot read the time phrase "{phrase.strip()}"'
                              f'{why}; say e.g. {_EXAMPLES}')


def parse_time_phrases(text: str) -> list[TimeSpec]:
    """Every time phrase of ``text``, in order; empty when it names no time. Raises
    :class:`SpatialMemoryError` (``BAD_TIME_PHRASE``) for one that cannot be read."""
    low = " ".join(text.lower().split())
    low = _ASKS_TIME.sub(lambda m: " " * len(m.group(0)), low)  # asks for a time, names none
    found: list[tuple[int, TimeSpec]] = []

    def take(pattern: re.Pattern[str], make: Callable[[re.Match[str]], TimeSpec]) -> None:
        nonlocal low
        for m in list(pattern.finditer(low)):
            found.append((m.start(), make(m)))
        low = pattern.sub(lambda m: " " * len(m.group(0)), low)

    for m in _EVENT.finditer(low):
        if not _AGO.match(low, m.start()) and not _AFTER_START.match(low, m.start()):
            raise _bad(low[m.start():m.end() + 20].split(",")[0],
                       " (a time relative to an event cannot be placed on the timeline)")

    def between(m: re.Match[str]) -> TimeSpec:
        older = _seconds(m, "b", "ub")
        newer = _seconds(m, "a", "ua" if m.group("ua") else "ub")
        lo, hi = sorted((newer, older))
        return TimeSpec(m.group(0), "now", -hi, -lo)

    def ago(m: re.Match[str]) -> TimeSpec:
        back = _seconds(m, "a", "ua")
        return TimeSpec(m.group(0), "now", -back - _tolerance(back), -back + _tolerance(back),
                        moment_s=back)

    def after_start(m: re.Match[str]) -> TimeSpec:
        fwd = _seconds(m, "a", "ua")
        return TimeSpec(m.group(0), "start", fwd - _tolerance(fwd), fwd + _tolerance(fwd))

    take(_BETWEEN, between)
    take(_MORE, lambda m: TimeSpec(m.group(0), "now", -math.inf, -_seconds(m, "a", "ua")))
    take(_LESS, lambda m: TimeSpec(m.group(0), "now", -_seconds(m, "a", "ua"), 0.0))
    take(_LAST, lambda m: TimeSpec(m.group(0), "now", -_seconds(m, "a", "ua"), 0.0))
    take(_AGO, ago)
    take(_AFTER_START, after_start)
    take(_START, lambda m: TimeSpec(m.group(0), "start", 0.0, 60.0, 0.05))
    take(_RECENT, lambda m: TimeSpec(m.group(0), "now", -60.0, 0.0, 0.02))
    take(_MIDDLE, lambda m: TimeSpec(m.group(0), "middle", 0.0, 30.0, 0.05))
    if m := _LEFTOVER.search(low):
        raise _bad(m.group(0))
    for _, spec in found:
        if spec.hi_s - spec.lo_s <= 0 and spec.share == 0:
            raise _bad(spec.phrase, " (an empty range)")
    return [spec for _, spec in sorted(found, key=lambda f: f[0])]

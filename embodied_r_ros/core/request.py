"""One spatial question's contract: the limits a request keeps, and the code each violation gets.

Every entry point checks a request here before any work, against the limits configured for it,
so the same request is refused the same way wherever it arrives: the query runner (the
``SpatialQuery`` service and action, its limits settable on the query server), the perception
and reasoning nodes' internal goals, the frame buffer's ``GetWindow``, ``embodied-r ask`` and
the training-data builder. A checked question is a :class:`Question`, which carries the limits
it passed; what is called with one checks nothing again. A violation is a :class:`QueryError`:
a code of :mod:`~embodied_r_ros.core.error_codes` and one line of text naming what was wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from embodied_r_ros.core.error_codes import (
    BAD_OPTIONS,
    BAD_REQUEST,
    BAD_WINDOW,
    EMPTY_QUESTION,
    MEMORY_UNAVAILABLE,
    QUESTION_TOO_LONG,
    UNKNOWN_CAMERA,
    UNKNOWN_SCOPE,
)
from embodied_r_ros.core.reasoning import LETTERS, OptionsError, parse_options

#: characters of a question and of each option (the query server's ``max_question_chars`` and
#: ``max_option_chars`` start here); bounded before any work: a 200,000-character option once
#: pinned both cores for minutes
MAX_QUESTION_CHARS = 2000
MAX_OPTION_CHARS = 500
#: options are lettered ``A.`` to ``H.``
MAX_OPTIONS = len(LETTERS)
#: the perception text a reasoning request carries (and one perception may make)
MAX_PERCEPTION_CHARS = 500_000
#: the most a query server's ``max_question_chars`` and ``max_option_chars`` may be set to
MAX_SETTABLE_CHARS = 100_000
#: an internal ``Perceive`` goal's key frames (a window's, after the clamp: far more is a
#: malformed goal) and each one's JPEG bytes
MAX_GOAL_FRAMES = 256
MAX_JPEG_BYTES = 16 * 2**20
#: an image's pixels (a camera frame or a request's picture), read from its header before it
#: is decoded: a 1 MB PNG of 16000 x 16000 is refused undecoded
MAX_IMAGE_PIXELS = 4096 * 4096
#: partial text in action feedback is for humans: kept small
MAX_FEEDBACK_CHARS = 2000
#: an error line (errors go into ROS strings and HTTP bodies)
MAX_ERROR_CHARS = 500
#: ``SpatialQuery.scope``: the camera buffer's window (the default), or the spatial memory
SCOPE_WINDOW = "window"
SCOPE_MEMORY = "memory"
SCOPES = (SCOPE_WINDOW, SCOPE_MEMORY)


@dataclass(frozen=True)
class RequestLimits:
    """The sizes an entry accepts: the longest question and the longest option."""

    max_question_chars: int = MAX_QUESTION_CHARS
    max_option_chars: int = MAX_OPTION_CHARS


#: an entry's limits unless it is configured otherwise (``embodied-r ask``, the training data)
DEFAULT_LIMITS = RequestLimits()
#: the internal ``Perceive`` and ``Reason`` goals: whatever a query server may be set to accept
GOAL_LIMITS = RequestLimits(MAX_SETTABLE_CHARS, MAX_SETTABLE_CHARS)


@dataclass(frozen=True)
class Question:
    """A question as :func:`validate_query` passed it: stripped text, options in ``"A. text"``
    form, and the limits it was checked against. Made at an entry; below it nothing checks the
    question again."""

    text: str
    options: tuple[str, ...] = ()
    limits: RequestLimits = DEFAULT_LIMITS


class QueryError(Exception):
    """A question that cannot be answered; ``code`` is machine-readable, the message one line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def one_line(text: object, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def validate_options(
    options: Sequence[str], limits: RequestLimits = DEFAULT_LIMITS
) -> tuple[str, ...]:
    """Stripped options in ``"A. text"`` form, bounded in count and length, or QueryError."""
    max_option_chars = limits.max_option_chars
    if len(options) > MAX_OPTIONS:
        raise QueryError(
            BAD_OPTIONS, f"{len(options)} options given; at most {MAX_OPTIONS} are supported"
        )
    for i, option in enumerate(options):
        if not isinstance(option, str):
            raise QueryError(BAD_OPTIONS, f"option {i + 1} is not text")
        if len(option) > max_option_chars:
            raise QueryError(
                BAD_OPTIONS,
                f"option {i + 1} has {len(option)} characters; at most {max_option_chars} "
                "are allowed",
            )
    opts = tuple(o.strip() for o in options)
    try:
        parse_options(opts)
    except OptionsError as exc:
        raise QueryError(BAD_OPTIONS, str(exc)) from None
    return opts


def validate_query(
    question: str, options: Sequence[str], limits: RequestLimits = DEFAULT_LIMITS
) -> Question:
    """The :class:`Question` of a request's text and options under ``limits``, or
    :class:`QueryError`; cheap, before any work."""
    max_question_chars = limits.max_question_chars
    if not isinstance(question, str):
        raise QueryError(EMPTY_QUESTION, "the question is not text")
    if len(question) > max_question_chars + 1000:  # surrounding whitespace aside
        raise QueryError(
            QUESTION_TOO_LONG,
            f"the question has {len(question)} characters; at most {max_question_chars} are "
            "allowed",
        )
    text = question.strip()
    if not text:
        raise QueryError(EMPTY_QUESTION, "the question is empty")
    if len(text) > max_question_chars:
        raise QueryError(
            QUESTION_TOO_LONG,
            f"the question has {len(text)} characters; at most {max_question_chars} are allowed",
        )
    return Question(text, validate_options(options, limits), limits)


def check_window_sec(window_sec: float) -> float:
    """A request's ``window_sec`` (0 = the whole buffer; longer than the buffer is the whole
    buffer too); raises QueryError(BAD_WINDOW)."""
    if not math.isfinite(window_sec) or window_sec < 0:
        raise QueryError(BAD_WINDOW, f"window_sec must be >= 0, got {window_sec}")
    return window_sec


def check_camera(camera: str, cameras: Sequence[str], default: str) -> str:
    """The camera a request names (empty: ``default``), one of ``cameras``, or QueryError."""
    name = (camera or "").strip() or default
    if name not in cameras:
        raise QueryError(
            UNKNOWN_CAMERA,
            f"unknown camera {one_line(name, 80)!r}; known: {', '.join(cameras)}",
        )
    return name


def check_scope(scope: str, has_memory: bool) -> str:
    """A request's scope (empty: ``SCOPE_WINDOW``), or QueryError: ``UNKNOWN_SCOPE``, or
    ``MEMORY_UNAVAILABLE`` for ``SCOPE_MEMORY`` where no memory is kept."""
    name = (scope or "").strip() or SCOPE_WINDOW
    if name not in SCOPES:
        raise QueryError(UNKNOWN_SCOPE, f"unknown scope {one_line(name, 80)!r}; known: "
                         f"{', '.join(SCOPES)}")
    if name == SCOPE_MEMORY and not has_memory:
        raise QueryError(MEMORY_UNAVAILABLE, "this server keeps no spatial memory "
                         "(memory.enabled is false)")
    return name


def check_key_frames(jpeg_sizes: Sequence[int], motions: int) -> None:
    """A ``Perceive`` goal's key frames, given each one's JPEG size: at most
    ``MAX_GOAL_FRAMES`` of at most ``MAX_JPEG_BYTES``, with one motion between consecutive
    ones; raises QueryError(BAD_REQUEST)."""
    frames = len(jpeg_sizes)
    if frames > MAX_GOAL_FRAMES:
        raise QueryError(BAD_REQUEST, f"{frames} key frames; at most {MAX_GOAL_FRAMES} are "
                         "accepted")
    if motions != max(frames - 1, 0):
        raise QueryError(BAD_REQUEST, f"{frames} key frames came with {motions} motions")
    for i, size in enumerate(jpeg_sizes):
        if size > MAX_JPEG_BYTES:
            raise QueryError(BAD_REQUEST, f"key frame {i} is {size} bytes; at most "
                             f"{MAX_JPEG_BYTES} are accepted")


def validate_perception(text: str, max_chars: int = MAX_PERCEPTION_CHARS) -> str:
    """The perception text a reasoning request carries: non-empty and bounded."""
    if not isinstance(text, str) or not text.strip():
        raise QueryError(BAD_REQUEST, "the perception text is empty")
    if len(text) > max_chars:
        raise QueryError(
            BAD_REQUEST,
            f"the perception text has {len(text)} characters; at most {max_chars} are allowed",
        )
    return text

"""The error codes a question can fail with, as plain strings.

The interface definitions own them (the constants of ``srv/SpatialQuery.srv`` and of
``action/SpatialQuery.action``'s result); the core is ROS-free, so this module mirrors them,
and every layer (core, backends, nodes, the HTTP server, the command line) takes its codes from
here. ``test/test_interfaces.py`` checks that the mirror and the interfaces agree.
"""

from __future__ import annotations

#: the question is empty
EMPTY_QUESTION = "EMPTY_QUESTION"
#: longer than the query server's ``max_question_chars``
QUESTION_TOO_LONG = "QUESTION_TOO_LONG"
#: options not ``A. ...``, ``B. ...`` in order, more than 8, or one too long
BAD_OPTIONS = "BAD_OPTIONS"
#: ``camera`` is not one the query server answers for
UNKNOWN_CAMERA = "UNKNOWN_CAMERA"
#: ``window_sec`` negative or not a finite number
BAD_WINDOW = "BAD_WINDOW"
#: any other malformed field, or a peer node refused what it was sent
BAD_REQUEST = "BAD_REQUEST"
#: no frames in the window
NO_FRAMES = "NO_FRAMES"
#: a frame's stamp is off the stream's timeline (the window is empty for that reason)
BAD_STAMP = "BAD_STAMP"
#: a frame's encoding is not a colour picture (the window is empty for that reason)
UNSUPPORTED_ENCODING = "UNSUPPORTED_ENCODING"
#: a frame could not be decoded (the window is empty for that reason)
CORRUPT_FRAME = "CORRUPT_FRAME"
#: ``max_concurrent_queries`` are running; answered at once
BUSY = "BUSY"
#: the goal was cancelled, or the node is stopping
CANCELLED = "CANCELLED"
#: no model loaded, a node inactive, or a peer process gone
BACKEND_DOWN = "BACKEND_DOWN"
#: a model's time-out, or the query's whole time budget
BACKEND_TIMEOUT = "BACKEND_TIMEOUT"
#: the model call failed
BACKEND_FAILED = "BACKEND_FAILED"
#: an unexpected exception (logged with its traceback); the node keeps serving
INTERNAL = "INTERNAL"
#: ``scope`` is neither ``window`` nor ``memory``
UNKNOWN_SCOPE = "UNKNOWN_SCOPE"
#: scope memory: a time phrase of the question or its options that cannot be placed
BAD_TIME_PHRASE = "BAD_TIME_PHRASE"
#: scope memory (or the memory services): the memory is off, missing, damaged, of another
#: schema or unreachable
MEMORY_UNAVAILABLE = "MEMORY_UNAVAILABLE"

#: every code a server answers with, in the order the interfaces list them
SERVER_CODES: tuple[str, ...] = (
    EMPTY_QUESTION, QUESTION_TOO_LONG, BAD_OPTIONS, UNKNOWN_CAMERA, BAD_WINDOW, BAD_REQUEST,
    NO_FRAMES, BAD_STAMP, UNSUPPORTED_ENCODING, CORRUPT_FRAME, BUSY, CANCELLED, BACKEND_DOWN,
    BACKEND_TIMEOUT, BACKEND_FAILED, INTERNAL, UNKNOWN_SCOPE, BAD_TIME_PHRASE,
    MEMORY_UNAVAILABLE,
)

#: the client's own code for an action goal the server did not accept (no result exists)
REJECTED = "REJECTED"

"""Every bad request, without ROS: the query runner refuses each with its error code and one line
naming what was wrong, before any frame is read or any model is asked; the internal goals'
bounds likewise. The DDS tests keep one case per code (test_ros_robustness.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from media import pan_frames
from scripted import ScriptedVLM

from embodied_r_ros.agent.frame_store import FrameStore, Window
from embodied_r_ros.agent.in_process_engine import LocalEngine
from embodied_r_ros.agent.query_runner import QueryRequest, QueryRunner
from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.config import KeyframeConfig
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
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.request import (
    GOAL_LIMITS,
    MAX_ERROR_CHARS,
    MAX_GOAL_FRAMES,
    MAX_JPEG_BYTES,
    MAX_OPTION_CHARS,
    MAX_OPTIONS,
    MAX_PERCEPTION_CHARS,
    MAX_QUESTION_CHARS,
    MAX_SETTABLE_CHARS,
    QueryError,
    check_key_frames,
    validate_perception,
    validate_query,
)

OPTIONS = ["A. left", "B. right"]
REPLY = "<think>The view panned right.</think><answer>B</answer>"


@pytest.fixture(scope="module")
def store() -> FrameStore:
    """A panning camera's frames (the runner only reads its windows)."""
    store = FrameStore(KeyframeConfig(sample_fps=2.0))
    for i, image in enumerate(pan_frames(20, 16)):
        t = 100.0 + i / 2.0
        if store.wants(t):
            store.add(image, t)
    return store


class Robot:
    """A query runner over a real frame store and the real pipeline with geometric perception;
    the reasoner is scripted. Counts window reads and LM calls."""

    def __init__(self, store: FrameStore) -> None:
        self.store = store
        self.lm = ScriptedVLM([REPLY])
        self.pipeline = load_pipeline(load_config("offline"), lm=self.lm, perception=False)
        self.windows: list[float] = []
        self.runner = QueryRunner(
            LocalEngine({"front": self._window}, lambda: self.pipeline, self.pipeline.reason),
            ["front"],
        )

    def _window(self, window_sec: float) -> Window:
        self.windows.append(window_sec)
        return self.store.window(window_sec)

    def ask(self, **fields: Any) -> Any:
        request = {"question": "Which way did I turn?", "options": OPTIONS, **fields}
        return self.runner.run(QueryRequest(**request))


@pytest.fixture
def robot(store: FrameStore) -> Iterator[Robot]:
    r = Robot(store)
    yield r
    r.runner.close()


def test_a_good_request_is_answered_normalised(robot: Robot) -> None:
    r = robot.ask(question="  Which way did I turn?\n", options=[" A. left ", "B. right "],
                  camera=" front ", window_sec=0.0)
    assert r.success and r.error_code == "" and r.answer == "B", r.error
    assert robot.windows == [0.0] and len(robot.lm.seen) == 1
    # the question and options the perception and reasoner got: stripped
    assert r.perception.endswith("Question: Which way did I turn?\nChoices:\nA. left\nB. right")


@pytest.mark.parametrize("window_sec", [0.0, 5.0, 1e30])
def test_any_finite_window_from_zero_up_is_accepted(robot: Robot, window_sec: float) -> None:
    """No upper bound: a window longer than the buffer is the whole buffer."""
    r = robot.ask(window_sec=window_sec)
    assert r.success, r.error
    assert robot.windows == [window_sec]


def test_the_longest_question_and_option_pass(robot: Robot) -> None:
    longest = "x" * (MAX_QUESTION_CHARS - 1) + "?"
    option = "A. " + "y" * (MAX_OPTION_CHARS - 3)
    r = robot.ask(question="  " * 400 + longest + "  " * 40, options=[option, "B. right"])
    assert r.success, r.error


BAD: list[tuple[dict[str, Any], str, str]] = [
    # (fields of the request, the error code, what the one line says)
    ({"question": ""}, EMPTY_QUESTION, "the question is empty"),
    ({"question": " \t\n "}, EMPTY_QUESTION, "the question is empty"),
    ({"question": None}, EMPTY_QUESTION, "the question is not text"),
    ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, QUESTION_TOO_LONG,
     f"the question has {MAX_QUESTION_CHARS + 1} characters; at most {MAX_QUESTION_CHARS} are "
     "allowed"),
    ({"question": "x" * 300_000}, QUESTION_TOO_LONG, "the question has 300000 characters"),
    ({"options": [f"{c}. x" for c in "ABCDEFGHI"]}, BAD_OPTIONS,
     f"9 options given; at most {MAX_OPTIONS} are supported"),
    ({"options": ["A. " + "x" * MAX_OPTION_CHARS]}, BAD_OPTIONS,
     f"option 1 has {MAX_OPTION_CHARS + 3} characters; at most {MAX_OPTION_CHARS}"),
    ({"options": ["A. " + "x" * 200_000]}, BAD_OPTIONS, "option 1 has 200003 characters"),
    ({"options": ["A. left", 7]}, BAD_OPTIONS, "option 2 is not text"),
    ({"options": ["A. left", b"B. right"]}, BAD_OPTIONS, "option 2 is not text"),
    ({"options": ["B. out of order"]}, BAD_OPTIONS, "should start with 'A.'"),
    ({"options": ["A. left", "A. right"]}, BAD_OPTIONS, "option 2 'A. right' should start "
     "with 'B.'"),
    ({"options": ["no letter at all"]}, BAD_OPTIONS, "option 1"),
    ({"options": ["A."]}, BAD_OPTIONS, "option 1"),
    ({"options": ["left", "right"]}, BAD_OPTIONS, "option 1"),
    ({"camera": "rear"}, UNKNOWN_CAMERA, "unknown camera 'rear'; known: front"),
    ({"camera": "../front"}, UNKNOWN_CAMERA, "unknown camera '../front'"),
    ({"camera": "x" * 10_000}, UNKNOWN_CAMERA, "unknown camera 'xxx"),
    ({"camera": "fr\nont"}, UNKNOWN_CAMERA, "unknown camera 'fr ont'"),
    ({"window_sec": -1.0}, BAD_WINDOW, "window_sec must be >= 0, got -1.0"),
    ({"window_sec": -1e-9}, BAD_WINDOW, "window_sec must be >= 0"),
    ({"window_sec": math.nan}, BAD_WINDOW, "got nan"),
    ({"window_sec": math.inf}, BAD_WINDOW, "got inf"),
    ({"window_sec": -math.inf}, BAD_WINDOW, "got -inf"),
    ({"scope": "past"}, UNKNOWN_SCOPE, "unknown scope 'past'; known: window, memory"),
    ({"scope": "../memory"}, UNKNOWN_SCOPE, "unknown scope '../memory'"),
    ({"scope": "x" * 10_000}, UNKNOWN_SCOPE, "unknown scope 'xxx"),
    # this runner keeps no memory: refused before any model, whatever the question says
    ({"scope": "memory"}, MEMORY_UNAVAILABLE,
     "this server keeps no spatial memory (memory.enabled is false)"),
    ({"scope": " memory ", "question": "Where was I 5 blorps ago?"}, MEMORY_UNAVAILABLE,
     "keeps no spatial memory"),
]


@pytest.mark.parametrize(("fields", "code", "says"), BAD,
                         ids=[f"{c}-{i}" for i, (_, c, _) in enumerate(BAD)])
def test_a_bad_request_gets_its_code_and_one_line(robot: Robot, fields: dict[str, Any],
                                                  code: str, says: str) -> None:
    r = robot.ask(**fields)
    assert (r.success, r.error_code) == (False, code), r.error
    assert says in r.error and "\n" not in r.error and len(r.error) <= MAX_ERROR_CHARS
    assert (r.answer, r.perception) == ("", "")
    assert robot.windows == [] and robot.lm.seen == []  # refused before any work
    stats = robot.runner.stats
    assert (stats.failed, stats.last_error_code, stats.in_flight) == (1, code, 0)


def test_the_runner_checks_in_order_question_options_camera_window_scope(robot: Robot) -> None:
    """A request wrong in every field is answered with the first check's code."""
    fields: dict[str, Any] = {"question": "", "options": ["B. x"], "camera": "rear",
                              "window_sec": math.nan, "scope": "past"}
    for key, code in (("question", EMPTY_QUESTION), ("options", BAD_OPTIONS),
                      ("camera", UNKNOWN_CAMERA), ("window_sec", BAD_WINDOW),
                      ("scope", UNKNOWN_SCOPE)):
        assert robot.ask(**fields).error_code == code
        del fields[key]
    assert robot.ask(**fields).success


def test_the_limits_are_read_as_each_request_arrives(robot: Robot) -> None:
    """The query server's settable ``max_question_chars`` and ``max_option_chars``."""
    robot.runner.max_question_chars = 10
    long = robot.ask(question="Which way did I turn?")
    assert long.error_code == QUESTION_TOO_LONG and "at most 10 are allowed" in long.error
    assert robot.ask(question="Which way?").success
    robot.runner.max_option_chars = 7  # "A. left" fits
    wide = robot.ask(question="Which way?")
    assert wide.error_code == BAD_OPTIONS and "option 2 has 8 characters; at most 7" in wide.error


def test_a_limit_set_above_the_default_holds_to_the_answer(robot: Robot) -> None:
    """The runner's limits travel with the question: a server set to 2,000-character options
    answers one of 1,500, perceived and reasoned over, with nothing below checking it again."""
    robot.runner.max_option_chars = 2000
    long = "A. " + "a turn to the left " * 78
    assert MAX_OPTION_CHARS < len(long.strip()) <= 1500
    r = robot.ask(options=[long, "B. right"])
    assert r.success, r.error
    assert r.answer == "B" and len(robot.lm.seen) == 1
    assert r.perception.endswith(f"Choices:\n{long.strip()}\nB. right")
    robot.runner.max_option_chars = len(long.strip()) - 1
    refused = robot.ask(options=[long, "B. right"])
    assert refused.error_code == BAD_OPTIONS and f"at most {len(long.strip()) - 1}" in refused.error


# -- the internal goals' bounds (the perception and reasoning nodes check them) ----------------

@pytest.mark.parametrize(("sizes", "motions", "says"), [
    ([100] * (MAX_GOAL_FRAMES + 1), MAX_GOAL_FRAMES,
     f"{MAX_GOAL_FRAMES + 1} key frames; at most {MAX_GOAL_FRAMES} are accepted"),
    ([100, 100], 0, "2 key frames came with 0 motions"),
    ([100], 1, "1 key frames came with 1 motions"),
    ([], 1, "0 key frames came with 1 motions"),
    ([100, MAX_JPEG_BYTES + 1], 1, f"key frame 1 is {MAX_JPEG_BYTES + 1} bytes"),
])
def test_a_perceive_goals_bad_key_frames_are_a_bad_request(sizes: list[int], motions: int,
                                                           says: str) -> None:
    with pytest.raises(QueryError) as err:
        check_key_frames(sizes, motions)
    assert err.value.code == BAD_REQUEST and says in str(err.value)


def test_a_perceive_goals_frames_within_bounds_pass() -> None:
    check_key_frames([MAX_JPEG_BYTES] * MAX_GOAL_FRAMES, MAX_GOAL_FRAMES - 1)
    check_key_frames([], 0)  # no frames: the perception answers NO_FRAMES, not this check


def test_an_internal_goal_takes_whatever_a_server_may_be_set_to_take() -> None:
    question, option = "x" * MAX_SETTABLE_CHARS, "A. " + "y" * (MAX_SETTABLE_CHARS - 3)
    checked = validate_query(question, [option], GOAL_LIMITS)
    assert (checked.text, checked.options, checked.limits) == (question, (option,), GOAL_LIMITS)
    for text, options, code in ((question + "x", [option], QUESTION_TOO_LONG),
                                (question, [option + "y"], BAD_OPTIONS)):
        with pytest.raises(QueryError) as err:
            validate_query(text, options, GOAL_LIMITS)
        assert err.value.code == code


@pytest.mark.parametrize(("text", "says"), [
    ("", "the perception text is empty"),
    (" \n ", "the perception text is empty"),
    (None, "the perception text is empty"),
    ("x" * (MAX_PERCEPTION_CHARS + 1),
     f"has {MAX_PERCEPTION_CHARS + 1} characters; at most {MAX_PERCEPTION_CHARS}"),
])
def test_a_reason_goals_bad_perception_text_is_a_bad_request(text: Any, says: str) -> None:
    with pytest.raises(QueryError) as err:
        validate_perception(text)
    assert err.value.code == BAD_REQUEST and says in str(err.value)
    assert validate_perception("x" * MAX_PERCEPTION_CHARS)

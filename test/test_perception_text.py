"""The perception text is rendered from typed records by one module, and never parsed back: what
the rule reader, the rationales and the memory read is the records' stated view, which states
exactly what the text does (the reader of texts written before records agrees with it), and the
geometry they share agrees at its boundaries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from embodied_r_ros.core import perception_text
from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.perception_text import (
    describe_motion,
    describe_objects,
    render,
    stated_view,
)
from embodied_r_ros.core.poses import heading_deg, quadrant, wrap_deg
from embodied_r_ros.core.prompts import default_prompts
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord, SeenObject, TextStyle
from embodied_r_ros.core.text_format import TextPrecision
from embodied_r_ros.reading import rule_reader as oracle
from embodied_r_ros.reading.legacy_text import parse_perception
from embodied_r_ros.sim import question_rules
from embodied_r_ros.sim import questions as sim_questions

ROOT = Path(__file__).resolve().parents[1]
OBJECTS = [
    SeenObject("red object", "red", "small", "to the left", 25.4, 3.14),
    SeenObject("blue object", "blue", "large", "ahead, below", -3.0, None),
    SeenObject("green object", "green", "medium", "to the right, above", -1.0, 12.0),
]
MOTIONS = [
    (Motion(yaw_deg=38.2), ("rotate left", 38.0)),
    (Motion(yaw_deg=-91.0), ("rotate right", 91.0)),
    (Motion(pitch_deg=-12.0), ("tilt downward", 12.0)),
    (Motion(forward=2.04), ("move forward", 2.0)),
    (Motion(left=-0.5), ("move right", 0.5)),
    (Motion(up=0.3), ("move upward", 0.3)),
    (Motion(), ("stay still", 0.0)),
]
QUESTION, OPTIONS = "Where is the red box relative to you now?", ("A. front-left", "B. back-right")


def _record(frames: list[FrameRecord], style: TextStyle | None = None) -> PerceptionRecord:
    return PerceptionRecord(tuple(frames), QUESTION, OPTIONS,
                            format_question(QUESTION, OPTIONS), style or TextStyle())


@pytest.mark.parametrize(("motion", "expected"), MOTIONS)
def test_a_motion_is_stated_as_written(motion: Motion, expected: tuple[str, float]) -> None:
    record = _record([FrameRecord(0.0), FrameRecord(1.0, motion=motion, motion_source="odometry")])
    frame = stated_view(record).frames[1]
    assert (frame.action, frame.amount) == expected
    assert describe_motion(motion) in render(record)


def test_objects_are_written_and_stated_with_bearings_and_ranges() -> None:
    text = describe_objects(OBJECTS)
    assert text.startswith("I see a small red object to the left (25 degrees left, about 3.1 m")
    seen = stated_view(_record([FrameRecord(0.0, objects=tuple(OBJECTS))])).frames[0].sightings
    assert list(seen) == ["red", "blue", "green"]
    assert (seen["red"].size, seen["red"].direction) == ("small", "to the left")
    assert seen["red"].bearing_deg == 25.0 and seen["red"].exact_bearing
    assert seen["red"].distance_m == pytest.approx(3.1)
    assert seen["blue"].bearing_deg == -3.0 and seen["blue"].distance_m is None
    assert seen["green"].bearing_deg == -1.0 and seen["green"].distance_m == 12.0
    assert describe_objects([]) == perception_text.NOTHING_IN_VIEW


def test_a_vlm_text_is_written_verbatim_and_states_no_sightings() -> None:
    # a VLM wrote the geometric stand-in's words: still the VLM's text, not objects
    vlm = FrameRecord(0.0, vlm_text="I see a small red object to the left (3 degrees left).")
    assert "Observe: I see a small red object to the left (3 degrees left)." in render(
        _record([vlm]))
    assert stated_view(_record([vlm])).frames[0].sightings == {}


def test_a_rendered_record_states_itself_frame_by_frame() -> None:
    frames = [FrameRecord(0.0, objects=tuple(OBJECTS[:1]))]
    for i, (motion, _) in enumerate(MOTIONS[:4], 1):
        frames.append(FrameRecord(float(i), motion=motion, motion_source="odometry",
                                  objects=tuple(OBJECTS[i % 3:])))
    read = stated_view(_record(frames))
    assert [f.index for f in read.frames] == list(range(5))
    assert [(f.action, f.amount) for f in read.frames[1:]] == [e for _, e in MOTIONS[:4]]
    assert read.frames[0].action is None and list(read.frames[0].sightings) == ["red"]
    assert list(read.frames[2].sightings) == ["green"]
    assert read.question == QUESTION
    assert read.options == (("A", "front-left"), ("B", "back-right"))


def _every_kind_of_line() -> list[FrameRecord]:
    """Geometric and odometry lines of every motion, a visual motion, an unknown one."""
    frames = [FrameRecord(0.0, objects=tuple(OBJECTS))]
    for i, (motion, _) in enumerate(MOTIONS, 1):
        frames.append(FrameRecord(i * 3.7, motion=motion, motion_source="odometry",
                                  objects=tuple(OBJECTS[i % 3:])))
    frames.append(FrameRecord(40.0, motion=Motion(yaw_deg=54.2, forward=0.71, left=0.36),
                              motion_source="visual", objects=tuple(OBJECTS[1:])))
    frames.append(FrameRecord(41.0, objects=()))  # no motion measured: an unknown motion
    return frames


@pytest.mark.parametrize("style", [TextStyle(), TextStyle("paper"), TextStyle(report_motion=False),
                                   TextStyle("paper", report_motion=False)])
def test_the_stated_view_is_what_the_old_texts_reader_reads(style: TextStyle) -> None:
    """Datasets written before records are read from their text: that reader and the stated
    view agree on every geometric and odometry line (and a VLM's with odometry)."""
    vlm = [FrameRecord(0.0, vlm_text="a hall"),
           FrameRecord(2.0, motion=Motion(yaw_deg=30.0, forward=0.6), motion_source="odometry",
                       vlm_action="rotate left", vlm_text="a door")]
    for record in (_record(_every_kind_of_line(), style), _record(vlm, style)):
        assert parse_perception(render(record)) == stated_view(record)


FINE = TextPrecision(degrees=0.1, metres=0.01, seconds=0.1)


@pytest.mark.parametrize("style", [TextStyle(), TextStyle("paper")])
def test_a_changed_precision_is_written_stated_and_read_back_alike(style: TextStyle) -> None:
    """The text format is one definition: finer steps change what the renderer writes, what
    the stated view says it wrote and what the reader of old texts reads, all alike."""
    record = _record(_every_kind_of_line(), style)
    text = render(record, precision=FINE)
    assert "(25.4 degrees left, about 3.14 m away)" in text  # was (25 degrees left, about 3.1 m
    assert "(25 degrees left, about 3.1 m away)" in render(record)
    if style.layout == "timed":
        assert "Frame 1 (37.3 s before the last key frame): After rotate left about 38.2" in text
        assert "move forward about 0.71 m and move left about 0.36 m, then rotate left" in text
    else:
        assert "After rotate left, about 38.2 degrees," in text
    assert parse_perception(text) == stated_view(record, FINE) != stated_view(record)


def test_the_prose_is_written_in_one_module_and_read_back_in_one() -> None:
    """Only the renderer writes perception prose; only the reader of old texts parses it."""
    writers, readers = set(), set()
    for folder in ("embodied_r_ros", "training", "lab"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
                a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names}
            rel = str(path.relative_to(ROOT))
            if {"_FRAME_RE", "_SIGHTING_RE"} & names or "Frame (\\d+)" in path.read_text():
                readers.add(rel)
            if "Observe: " in path.read_text() and "def render" in path.read_text():
                writers.add(rel)
    assert readers == {"embodied_r_ros/reading/legacy_text.py"}
    assert writers == {"embodied_r_ros/core/perception_text.py"}


def test_the_oracle_and_the_generator_use_the_core_geometry() -> None:
    # one angle rule: the oracle, the rationales and the question generator own none
    for module in (oracle, sim_questions, question_rules):
        assert not hasattr(module, "wrap") and not hasattr(module, "_heading")
        assert getattr(module, "quadrant", quadrant) is quadrant
        assert module.wrap_deg is wrap_deg and module.heading_deg is heading_deg
    assert oracle.quadrant is quadrant and question_rules.quadrant is quadrant
    assert not hasattr(oracle, "_FRAME_RE") and not hasattr(oracle, "parse_perception")


@pytest.mark.parametrize(
    ("bearing", "expected"),
    [(180.0, "back-left"), (-180.0, "back-left"), (540.0, "back-left"), (179.0, "back-left"),
     (-179.0, "back-right"), (90.0, "back-left"), (89.9, "front-left"), (-89.9, "front-right"),
     (0.5, "front-left"), (-0.5, "front-right")],
)
def test_quadrant_at_the_boundaries(bearing: float, expected: str) -> None:
    assert quadrant(bearing) == expected


def test_headings() -> None:
    assert heading_deg((0, 0), (1, 0)) == 0.0
    assert heading_deg((0, 0), (0, 2)) == 90.0
    assert heading_deg((1, 1), (0, 1)) == 180.0
    assert wrap_deg(heading_deg((0, 0), (0, -1)) - 180.0) == 90.0


def test_a_dataset_row_built_before_records_is_read_and_shortened_only_by_a_rebuild() -> None:
    """A row keeping only its prompt (and the per-frame parts datasets kept before records):
    the rule reader still reads it, from its text; dropping its oldest frames to fit a token
    budget needs the record, and stops with one line that says to rebuild the dataset."""
    from old_texts import old_row

    from embodied_r_training.data.dataset_files import BuildError
    from embodied_r_training.data.prompt_budget import PromptLayout, fit_prompt
    from embodied_r_training.data.row_records import perception_of

    row = {**old_row([(None, describe_objects(OBJECTS)),
                      ("rotate left about 30 degrees", describe_objects(OBJECTS[:1]))],
                     QUESTION, list(OPTIONS), "relative_direction"),
           "id": "old-1", "frames": [{"stamp": 0.0}, {"stamp": 1.0}]}
    read = perception_of(row)
    assert [f.action for f in read.frames] == [None, "rotate left"]
    assert list(read.frames[0].sightings) == ["red", "blue", "green"]
    count = len  # one "token" a message: any budget below two is over
    layout = PromptLayout(default_prompts())
    assert fit_prompt(row, count, 2, layout) == (row["prompt"], 0)  # it fits: untouched
    with pytest.raises(BuildError, match=r"old-1 was built before .*rebuild the dataset"):
        fit_prompt(row, count, 1, layout)

"""The perception text is written and read back by one module: a round trip loses nothing the
oracle and the rationales use, and the geometry they share agrees at its boundaries."""

from __future__ import annotations

import pytest

from embodied_r_ros.core import perception_text
from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.colors import Region
from embodied_r_ros.core.perception import FrameDescription
from embodied_r_ros.core.perception_text import (
    assemble,
    describe_motion,
    describe_regions,
    parse_motion,
    parse_observation,
    parse_perception,
)
from embodied_r_ros.core.poses import heading_deg, quadrant, wrap_deg
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.sim import question_rules
from embodied_r_ros.sim import questions as sim_questions
from embodied_r_training.data import oracle

REGIONS = [
    Region("red", "to the left", "small", 0.01, 25.4, 3.14),
    Region("blue", "ahead, below", "large", 0.2, -3.0, None),
    Region("green", "to the right, above", "medium", 0.05, -1.0, 12.0),
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


@pytest.mark.parametrize(("motion", "expected"), MOTIONS)
def test_a_written_motion_reads_back(motion: Motion, expected: tuple[str, float]) -> None:
    assert parse_motion(describe_motion(motion)) == expected


def test_written_observations_read_back_with_bearings_and_ranges() -> None:
    seen = parse_observation(describe_regions(REGIONS))
    assert list(seen) == ["red", "blue", "green"]
    assert (seen["red"].size, seen["red"].direction) == ("small", "to the left")
    assert seen["red"].bearing_deg == 25.0 and seen["red"].exact_bearing
    assert seen["red"].distance_m == pytest.approx(3.1)
    assert seen["blue"].bearing_deg == -3.0 and seen["blue"].distance_m is None
    assert seen["green"].bearing_deg == -1.0 and seen["green"].distance_m == 12.0
    assert parse_observation(describe_regions([])) == {}


def test_an_assembled_text_reads_back_frame_by_frame() -> None:
    frames = [FrameDescription(0.0, None, describe_regions(REGIONS[:1]))]
    for i, (motion, _) in enumerate(MOTIONS[:4], 1):
        frames.append(FrameDescription(float(i), describe_motion(motion),
                                       describe_regions(REGIONS[i % 3:])))
    options = ["A. front-left", "B. back-right"]
    text = assemble(frames, format_question("Where is the red box relative to you now?", options))
    read = parse_perception(text)
    assert [f.index for f in read.frames] == list(range(5))
    assert [(f.action, f.amount) for f in read.frames[1:]] == [e for _, e in MOTIONS[:4]]
    assert read.frames[0].action is None and list(read.frames[0].sightings) == ["red"]
    assert list(read.frames[2].sightings) == ["green"]
    assert read.question == "Where is the red box relative to you now?"
    assert read.options == (("A", "front-left"), ("B", "back-right"))


def test_the_oracle_and_the_generator_use_the_core_geometry() -> None:
    # one angle rule: the oracle, the rationales and the question generator own none
    for module in (oracle, sim_questions, question_rules):
        assert not hasattr(module, "wrap") and not hasattr(module, "_heading")
        assert getattr(module, "quadrant", quadrant) is quadrant
        assert module.wrap_deg is wrap_deg and module.heading_deg is heading_deg
    assert oracle.quadrant is quadrant and question_rules.quadrant is quadrant
    assert not hasattr(oracle, "_FRAME_RE") and oracle.parse_perception is parse_perception
    assert perception_text.parse_perception is parse_perception


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

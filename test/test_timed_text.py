"""The robot route's frame lines carry what its questions need: each frame's age and the whole
planar motion since the previous key frame, rounded in one place, read back exactly, and
enough to dead-reckon every pose; the benchmark route and the paper layout stay as they were."""

from __future__ import annotations

import math
import random

import pytest

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.perception_text import (
    TEXT_PRECISION,
    describe_motion,
    motion_parts,
    render,
    rounded,
    stated_view,
    written_age,
)
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord, TextStyle
from embodied_r_ros.reading.dead_reckoning import poses

QUESTION, OPTIONS = "Which way did I turn?", ("A. left", "B. right")
BLOCK = format_question(QUESTION, OPTIONS)


def _record(motions: list[Motion], stamps: list[float], layout: str = "timed"
            ) -> PerceptionRecord:
    frames = [FrameRecord(stamps[0])] + [
        FrameRecord(stamp, motion=motion, motion_source="odometry")
        for motion, stamp in zip(motions, stamps[1:], strict=True)]
    return PerceptionRecord(tuple(frames), QUESTION, OPTIONS, BLOCK,
                            TextStyle(layout))  # type: ignore[arg-type]


def test_a_pair_that_drives_and_turns_states_both() -> None:
    text = describe_motion(Motion(yaw_deg=54.2, forward=0.71, left=0.36))
    assert text == ("move forward about 0.7 m and move left about 0.4 m, then rotate left about "
                    "54 degrees")
    assert motion_parts(Motion(yaw_deg=54.2, forward=0.71, left=0.36)) == [
        ("move forward", 0.7), ("move left", 0.4), ("rotate left", 54.0)]
    assert describe_motion(Motion(yaw_deg=-90.0)) == "rotate right about 90 degrees"
    assert describe_motion(Motion(forward=-1.26)) == "move backward about 1.3 m"
    # the paper layout names the one primary action, as the shipped reasoner was trained
    assert describe_motion(Motion(yaw_deg=54.2, forward=0.71, left=0.36), "paper") == (
        "rotate left, about 54 degrees")


@pytest.mark.parametrize(("motion", "expected"), [
    (Motion(forward=0.149), "stay still"),  # rounds to 0.1 m: under the threshold
    (Motion(forward=0.15), "move forward about 0.2 m"),  # halves round up, then it counts
    (Motion(yaw_deg=4.49), "stay still"),
    (Motion(yaw_deg=-4.5), "rotate right about 5 degrees"),
    (Motion(yaw_deg=4.49, forward=0.149, left=-0.25), "move right about 0.3 m"),
])
def test_amounts_round_once_and_small_components_are_left_out(motion: Motion,
                                                               expected: str) -> None:
    assert describe_motion(motion) == expected
    assert TEXT_PRECISION.min_translation_m == 0.2 and TEXT_PRECISION.min_rotation_deg == 5.0


def test_every_line_states_its_age_rounded_to_the_second() -> None:
    stamps = [100.0, 103.4, 110.5, 111.6, 112.0]
    motions = [Motion(yaw_deg=30.0), Motion(forward=1.0), Motion(yaw_deg=-20.0),
               Motion(forward=0.5)]
    text = render(_record(motions, stamps))
    assert "Frame 0 (12 s before the last key frame): Observe:" in text
    assert "Frame 1 (9 s before the last key frame): After rotate left about 30 degrees," in text
    assert "Frame 2 (2 s before the last key frame):" in text  # 1.5 rounds up
    assert "Frame 3 (0 s before the last key frame):" in text  # 0.4 rounds down
    read = stated_view(_record(motions, stamps))
    assert [f.age_s for f in read.frames] == [12.0, 9.0, 2.0, 0.0, 0.0]
    assert written_age(1.5) == 2.0 and written_age(-0.1) == 0.0 and rounded(2.5, 1.0) == 3.0


def test_the_benchmark_route_and_the_paper_layout_write_no_ages() -> None:
    stamps, motions = [0.0, 2.0, 4.0], [Motion(yaw_deg=30.0), Motion(forward=1.0)]
    paper = render(_record(motions, stamps, layout="paper"))
    assert "Frame 1: After rotate left, about 30 degrees, Observe:" in paper
    assert "before the last key frame" not in paper
    # the VLM's own actions without measured motion: the paper's text whatever the layout
    vlm = (FrameRecord(0.0, vlm_text="a hall"),
           FrameRecord(2.0, motion=Motion(yaw_deg=31.0), motion_source="visual",
                       vlm_action="rotate left", vlm_text="a door"))
    official = render(PerceptionRecord(vlm, QUESTION, OPTIONS, BLOCK,
                                       TextStyle(report_motion=False)))
    assert "Frame 1: After rotate left, Observe:" in official
    assert "before the last key frame" not in official


def test_dead_reckoning_the_text_recomputes_every_pose() -> None:
    rng = random.Random(5)
    x = y = yaw = 0.0
    truth = [(x, y)]
    motions = []
    for _ in range(12):
        m = Motion(yaw_deg=rng.uniform(-90, 90), forward=rng.uniform(-0.5, 1.5),
                   left=rng.uniform(-0.6, 0.6))
        motions.append(m)
        h = math.radians(yaw)  # moves along the earlier pose's axes, then the turn
        x += m.forward * math.cos(h) - m.left * math.sin(h)
        y += m.forward * math.sin(h) + m.left * math.cos(h)
        yaw += m.yaw_deg
        truth.append((x, y))
    read = stated_view(_record(motions, [float(i) for i in range(13)]))
    path = poses(read.frames)
    errors = [math.dist(t, (p.x, p.y)) for t, p in zip(truth, path, strict=True)]
    # each step loses at most half a rounding step per axis and a component under threshold
    assert max(errors) < 0.6, errors
    assert abs(path[-1].yaw - yaw) <= 12 * 0.5 + 1e-6

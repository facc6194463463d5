"""Long-world questions are asked only where the perception text can decide them: the rule's
decision boundaries (a shared colour with and without a time that sets it apart, the rounding
margins), and the reader's grouping of one colour's sightings into objects."""

from __future__ import annotations

import numpy as np
import pytest
from memory_rows import memory_rec
from memory_rows import odometry_row as _row

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.memory import MemoryRow
from embodied_r_ros.memory.placements import Placement, place_frames
from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.scene import SceneObject
from embodied_r_ros.sim.trajectory import Trajectory
from embodied_r_ros.sim.visibility import Visibility
from lab.long_world.floor_plan import make_floor_plan
from lab.long_world.oracle import solve_record
from lab.long_world.question_rules import (
    AGE_BANDS,
    AGE_MARGIN,
    DISTANCE_BANDS,
    DISTANCE_MARGIN,
    band_of,
    first_turn,
    nearest_turn,
)
from lab.long_world.questions import CATEGORIES, generate_long_questions, long_questions
from lab.long_world.references import (
    SHARED_COLOUR,
    SHARED_LABEL,
    TIME_REF_SLACK_MIN,
    Perception,
)
from lab.long_world.sightings import Sightings
from lab.long_world.world import LongWorld, LongWorldSpec

ALL = {c: 5000 for c in CATEGORIES}
BOX, SPHERE, BALL = range(3)


def _world(sighted: dict[int, tuple[int, int]]) -> tuple[LongWorld, Sightings]:
    """A red box and a blue ball in room 1, a red sphere in room 2 (another name, the same
    colour); the camera stands in room 1 facing east for 4 minutes at 1 Hz."""
    plan = make_floor_plan(np.random.default_rng(5), columns=1)
    cx, cy = plan.areas[1].centre
    nx, ny = plan.areas[2].centre
    objects = (
        SceneObject("red box", "red", "box", cx + 2.5, cy + 1.5, (0.6, 0.5, 0.8)),
        SceneObject("red sphere", "red", "sphere", nx, ny, (0.6, 0.6, 0.6)),
        SceneObject("blue sphere", "blue", "sphere", cx - 1.2, cy - 1.0, (0.6, 0.6, 0.6)),
    )
    spec = LongWorldSpec(seed=1, duration_s=240.0, columns=1, n_objects=3, shared_names=0)
    pose = Pose(cx, cy, 1.5, 0.0, -10.0)
    world = LongWorld(spec, plan, objects, (1, 2, 1), PinholeCamera.from_hfov(320, 240),
                      Trajectory(()), np.arange(241.0), (pose,) * 241)
    shares = np.zeros((241, len(objects)))
    for k, (first, last) in sighted.items():
        shares[first:last + 1, k] = 0.01
    return world, Sightings(Visibility(shares, 1.0))


def _box_refs(sighted: dict[int, tuple[int, int]], perception: Perception = "colour"
              ) -> tuple[set[str], dict]:
    world, sightings = _world(sighted)
    rows, skipped = generate_long_questions(world, sightings, ALL, perception)
    refs = {t["reference"] for r in rows if r["frame"] == 240 and r["category"] != "last_seen"
            for t in r["targets"] if t["object"] == BOX and t["reference"]}
    return refs, skipped


def test_another_object_of_the_colour_seen_about_then_leaves_the_box_unnamed() -> None:
    # the box seen 4 minutes before the question (frames 5-10); the sphere, red too, is
    # excluded from the 4th minute +- (half a minute + the slack): up to frame 90
    assert TIME_REF_SLACK_MIN == 1.0
    refs, skipped = _box_refs({BOX: (5, 10), SPHERE: (90, 95), BALL: (20, 25)})
    assert not refs  # just inside the slack: the text cannot tell which red object is meant
    assert skipped["object_direction"][SHARED_COLOUR] > 0


def test_a_time_the_text_states_tells_the_box_apart() -> None:
    refs, _ = _box_refs({BOX: (5, 10), SPHERE: (91, 95), BALL: (20, 25)})
    assert refs == {"the red box you saw about 4 minutes ago"}  # just outside the slack


def test_labels_tell_apart_what_colours_cannot() -> None:
    """The red sphere, seen about when the red box was, leaves the box unnamed in colour
    records; a VLM's labels name it plainly, and make more of every kind decidable."""
    sighted = {BOX: (5, 10), SPHERE: (90, 95), BALL: (20, 25)}
    refs, skipped = _box_refs(sighted, "label")
    assert refs == {"the red box"}
    assert SHARED_LABEL not in skipped.get("object_direction", {})
    world, sightings = _world(sighted)
    colour = long_questions(world, sightings, ALL, "colour").decidable
    label = long_questions(world, sightings, ALL, "label").decidable
    assert all(label[c][h] >= colour[c][h] for c in CATEGORIES for h in colour[c])
    assert sum(label["object_direction"].values()) > sum(colour["object_direction"].values())
    with pytest.raises(ValueError, match="perception must be one of colour, label"):
        long_questions(world, sightings, ALL, "shape")  # type: ignore[arg-type]


def test_a_colour_alone_in_the_memory_is_named_plainly() -> None:
    refs, _ = _box_refs({BOX: (5, 10), BALL: (20, 25)})  # the sphere never shown
    assert refs == {"the red box"}


def test_did_you_see_a_name_whose_colour_another_object_showed_is_not_asked() -> None:
    world, sightings = _world({BOX: (5, 10), SPHERE: (200, 205), BALL: (20, 25)})
    rows, skipped = generate_long_questions(world, sightings, ALL)
    asked = {r["question"]: r["answer_text"] for r in rows if r["frame"] == 240}
    # no red box in the last minute, but a red sphere: the text sees only "red"
    assert "Did you see a red box in the last minute?" not in asked
    assert asked["Did you see a red sphere in the last minute?"] == "yes"
    assert asked["Did you see a green cone in the last minute?"] == "no"
    assert skipped["seen"][SHARED_COLOUR] > 0


def test_how_long_ago_is_asked_when_every_red_object_gives_the_same_answer() -> None:
    world, sightings = _world({BOX: (5, 10), SPHERE: (20, 25), BALL: (150, 155)})
    rows, _ = generate_long_questions(world, sightings, ALL)
    (row,) = [r for r in rows if r["category"] == "last_seen" and r["frame"] == 240
              and r["targets"][0]["object"] == BOX]
    assert row["answer_text"] == "between 1 and 5 minutes ago"  # 230 s, and the sphere 215 s
    world, sightings = _world({BOX: (5, 10), SPHERE: (190, 195), BALL: (150, 155)})
    rows, skipped = generate_long_questions(world, sightings, ALL)
    assert not [r for r in rows if r["category"] == "last_seen" and r["frame"] == 240
                and r["targets"][0]["object"] == BOX]  # the sphere: under a minute ago
    assert skipped["last_seen"][SHARED_COLOUR] > 0


@pytest.mark.parametrize(("value", "bands", "margin", "expected"), [
    (5.49, DISTANCE_BANDS, DISTANCE_MARGIN, None),  # within 0.5 m (a tenth) of 5 m
    (5.51, DISTANCE_BANDS, DISTANCE_MARGIN, "between 5 and 10 m"),
    (1.71, DISTANCE_BANDS, DISTANCE_MARGIN, None),  # within 0.3 m of 2 m
    (1.69, DISTANCE_BANDS, DISTANCE_MARGIN, "less than 2 m"),
    (69.0, AGE_BANDS, AGE_MARGIN, None),  # within 10 s of a minute
    (71.0, AGE_BANDS, AGE_MARGIN, "between 1 and 5 minutes ago"),
])
def test_bands_skip_just_inside_the_margin_and_answer_just_outside(
        value: float, bands: tuple, margin: tuple[float, float], expected: str | None) -> None:
    assert band_of(value, bands, margin) == expected


def test_turns_are_clear_or_skipped_and_the_reader_takes_the_nearest() -> None:
    assert first_turn(20.0) == "go straight ahead" and first_turn(21.0) is None
    assert first_turn(40.0) == "turn left" and first_turn(-130.0) == "turn right"
    assert first_turn(154.0) is None and first_turn(-155.0) == "turn around"
    assert nearest_turn(29.0) == "go straight ahead" and nearest_turn(31.0) == "turn left"
    assert nearest_turn(-142.0) == "turn right" and nearest_turn(143.0) == "turn around"


# ---------------------------------------------------------------- the memory's objects


def _reds(rows: list[MemoryRow]) -> list[Placement]:
    """The red objects the memory places from ``rows``' poses and bearings."""
    return [p for p in place_frames((r.frame_record(), r.pose) for r in rows)
            if p.colour == "red"]


def _seen(deg: float) -> str:
    side = "left" if deg >= 0 else "right"
    return f"I see a small red object to the {side} ({abs(deg):.0f} degrees {side})."


def test_two_objects_of_a_colour_seen_seconds_apart_in_two_places_stay_two() -> None:
    """A red object at (4, 2) seen from (0, 0), (1, -1) and (0, -2), then within 45 s another
    at (14, -2) from (10, 0), (11, 1) and (10, 2): one visit by time, two places by their
    bearings."""
    rows = [_row(0.0, 0.0, 0.0, 0.0, _seen(26.6)), _row(2.5, 1.0, -1.0, 0.0, _seen(45.0)),
            _row(5.0, 0.0, -2.0, 0.0, _seen(45.0)), _row(20.0, 10.0, 0.0, 0.0, _seen(-26.6)),
            _row(22.5, 11.0, 1.0, 0.0, _seen(-45.0)), _row(25.0, 10.0, 2.0, 0.0, _seen(-45.0))]
    reds = _reds(rows)
    assert len(reds) == 2 and all(r.triangulated for r in reds)
    places = sorted(r.position for r in reds if r.position is not None)
    assert places[0] == pytest.approx((4.0, 2.0), abs=0.2)
    assert places[1] == pytest.approx((14.0, -2.0), abs=0.2)


def test_an_object_seen_from_one_place_only_is_not_placed_next_to_another() -> None:
    """The blue object (4, 2) and the green one (4, -1) were triangulated; the red one was
    seen once, along one ray: no place, no evidence that it stood next to the blue one, so
    the option whose colour was placed wins."""
    rows = [
        _row(0.0, 0.0, 0.0, 0.0, "I see a small blue object to the left (27 degrees left); "
             "a small red object to the left (20 degrees left)."),
        _row(5.0, 0.0, -2.0, 0.0, "I see a small blue object to the left (45 degrees left); "
             "a small green object to the left (14 degrees left)."),
        _row(8.0, 2.0, -3.0, 0.0, "I see a small blue object to the left (68 degrees left); "
             "a small green object to the left (45 degrees left)."),
        _row(12.0, 3.0, -2.0, 0.0, "I see a small green object to the left (45 degrees "
             "left)."),
    ]
    options = ["A. red cone", "B. green box"]
    record = memory_rec(rows, "Which object stood next to the blue box (the nearest to it)?",
                        options)
    assert _reds(rows) == []
    assert solve_record("next_to", record).letter == "B"


def test_an_object_walked_towards_is_placed_from_rays_that_only_cross_together() -> None:
    """A red object at (8, 0) seen while walking towards it: each step's ray crosses the
    last one by less than the text can triangulate, all four together by about 22 degrees.
    They are one object, placed where they cross, not guesses along the rays."""
    rows = [_row(0.0, 0.0, 0.3, 0.0, _seen(-2.15)), _row(3.0, 2.0, 0.5, 0.0, _seen(-4.76)),
            _row(6.0, 4.0, 0.7, 0.0, _seen(-9.93)), _row(9.0, 6.0, 0.9, 0.0, _seen(-24.23))]
    (red,) = _reds(rows)
    assert red.triangulated and [r.stamp for r in red.rays] == [0.0, 3.0, 6.0, 9.0]
    assert red.position == pytest.approx((8.0, 0.0), abs=0.6)

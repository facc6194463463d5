"""The long world's layout and tour, from the plan and poses alone (nothing rendered)."""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from lab.long_world.floor_plan import CORRIDOR, make_floor_plan
from lab.long_world.tour import LEAVE_AT
from lab.long_world.world import (
    LEAVING_SPEC,
    LONG_SPEC,
    SMALL_LONG_SPEC,
    LongWorld,
    LongWorldSpec,
    build_long_world,
)


@lru_cache(maxsize=2)
def _world(spec: LongWorldSpec) -> LongWorld:
    return build_long_world(spec)


def _visits(world: LongWorld) -> list[tuple[int, float, float]]:
    """(area, first, last time) of each stay in an area, in order."""
    stays: list[list] = []
    for i, t in enumerate(world.times):
        area = world.area_of_frame(i)
        if stays and stays[-1][0] == area:
            stays[-1][2] = float(t)
        else:
            stays.append([area, float(t), float(t)])
    return [tuple(s) for s in stays]


def test_default_spec_is_thirty_minutes_of_seven_areas_and_24_objects() -> None:
    world = _world(LONG_SPEC)
    assert world.duration >= 30 * 60 and world.trajectory.duration >= 30 * 60
    assert world.n_frames == round(LONG_SPEC.duration_s * LONG_SPEC.rate_hz) + 1
    kinds = Counter(a.kind for a in world.plan.areas)
    assert kinds == {"room": 6, CORRIDOR: 1}
    assert len(world.objects) >= 20


def test_every_area_reaches_every_other_through_doorways_in_its_walls() -> None:
    plan = _world(LONG_SPEC).plan
    for door in plan.doors:
        a, b = (plan.areas[i] for i in door.areas)
        # the opening lies on the edge the two areas share, and no wall face covers it
        assert a.contains(door.x, door.y) and b.contains(door.x, door.y)
        assert plan.wall_distance(door.x, door.y) == pytest.approx(door.width / 2, abs=1e-6)
        inside = door.approach(door.areas[0], 0.5)
        assert plan.area_at(*inside) == door.areas[0]
    for start in range(len(plan.areas)):
        for goal in range(len(plan.areas)):
            here = start
            for k in plan.route(start, goal):
                here = plan.doors[k].other(here)
            assert here == goal


def test_walls_close_every_room_except_at_its_doorway() -> None:
    """Walk the boundary of each room: every point is on a wall except the door opening."""
    plan = make_floor_plan(np.random.default_rng(3), columns=2)
    for i, area in enumerate(plan.areas):
        openings = [plan.doors[k] for k in plan.doors_of(i)]
        for t in np.linspace(0.02, 0.98, 60):
            for x, y in ((area.x0 + t * (area.x1 - area.x0), area.y0),
                         (area.x0 + t * (area.x1 - area.x0), area.y1),
                         (area.x0, area.y0 + t * (area.y1 - area.y0)),
                         (area.x1, area.y0 + t * (area.y1 - area.y0))):
                in_door = any(math.hypot(x - d.x, y - d.y) < d.width / 2 - 1e-6
                              for d in openings)
                on_wall = plan.wall_distance(x, y) < 1e-6
                assert on_wall != in_door, (area.name, x, y)


def test_names_repeat_only_across_areas() -> None:
    world = _world(LONG_SPEC)
    names = Counter(o.name for o in world.objects)
    shared = [n for n, c in names.items() if c > 1]
    assert len(shared) == LONG_SPEC.shared_names >= 2
    for name in shared:
        areas = [world.object_areas[k] for k in world.instances(name)]
        assert len(set(areas)) == len(areas)
    for k, obj in enumerate(world.objects):
        assert world.plan.area_at(obj.x, obj.y) == world.object_areas[k]


def test_the_tour_revisits_rooms_and_leaves_some_alone_for_over_15_minutes() -> None:
    world = _world(LONG_SPEC)
    stays = [s for s in _visits(world) if world.plan.areas[s[0]].kind != CORRIDOR]
    per_room = Counter(s[0] for s in stays)
    assert len(per_room) == 6 and max(per_room.values()) >= 3
    by_room: dict[int, list[tuple[float, float]]] = {}
    for area, t0, t1 in stays:
        by_room.setdefault(area, []).append((t0, t1))
    gaps = [later[0] - earlier[1] for spans in by_room.values()
            for earlier, later in zip(spans, spans[1:], strict=False)]
    assert max(gaps) > 15 * 60  # a room seen again after a long absence
    assert min(gaps) < 5 * 60  # and others seen again soon


def test_the_leaving_tour_leaves_the_west_wing_for_good() -> None:
    """The object map's world: the west wing's rooms, each more than once, until a quarter of
    the tour, then the east wing's to the end, never the west's again."""
    world = _world(LEAVING_SPEC)
    assert len(world.plan.areas) == 9 and len(world.objects) == 36
    middle = world.plan.areas[0].centre[0]
    west = {i for i, a in enumerate(world.plan.areas)
            if a.kind != CORRIDOR and a.centre[0] < middle}
    stays = [s for s in _visits(world) if world.plan.areas[s[0]].kind != CORRIDOR]
    in_west = [s for s in stays if s[0] in west]
    assert {s[0] for s in in_west} == west and len(in_west) > len(west)
    left = max(s[2] for s in in_west)
    assert LEAVE_AT * 1800 <= left < LEAVE_AT * 1800 + 180
    assert all(s[0] not in west for s in stays if s[1] > left)
    assert {s[0] for s in stays if s[1] > left} == set(range(1, 9)) - west
    # nor does the camera come back along the corridor's west end
    assert all(p.x > middle - 2.0 for p in world.poses[round(left) + 60:])


def test_the_camera_keeps_clear_of_walls_and_objects_and_stays_inside() -> None:
    world = _world(LONG_SPEC)
    for p in world.poses[::3]:
        assert world.plan.area_at(p.x, p.y) is not None
        assert world.plan.wall_distance(p.x, p.y) >= 0.5
        assert min(o.distance_to_point(p.x, p.y) for o in world.objects) >= 0.55


def test_the_small_spec_takes_the_same_path_in_three_minutes() -> None:
    world = _world(SMALL_LONG_SPEC)
    assert 180 <= world.duration < 200 and world.n_frames == 181
    assert len(world.plan.areas) == 3
    assert len({o.name for o in world.objects}) < len(world.objects)
    stays = [s for s in _visits(world) if world.plan.areas[s[0]].kind != CORRIDOR]
    assert len(stays) > len({s[0] for s in stays})  # some room is entered twice


def test_same_seed_same_world_other_seed_other_world() -> None:
    a, b = build_long_world(SMALL_LONG_SPEC), build_long_world(SMALL_LONG_SPEC)
    assert a.poses == b.poses and a.objects == b.objects and a.plan == b.plan
    c = build_long_world(LongWorldSpec(**{**SMALL_LONG_SPEC.to_dict(), "seed": 8}))
    assert c.objects != a.objects and c.poses != a.poses


@pytest.mark.parametrize(("change", "message"), [
    ({"duration_s": 5.0}, "duration must be at least 10 s"),
    ({"columns": 0}, "columns must be between 1 and 6"),
    ({"n_objects": 60}, "objects must be between 2 and"),
    ({"shared_names": 5}, "shared names must be between 0 and half"),
    ({"rate_hz": 0.0}, "rate must be between"),
    ({"tour": "wander"}, "tour must be one of revisit, leave"),
    ({"tour": "leave"}, "a tour that leaves a wing needs at least 2 columns"),
])
def test_bad_specs_are_refused_with_a_reason(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LongWorldSpec(**{**SMALL_LONG_SPEC.to_dict(), **change}).validate()

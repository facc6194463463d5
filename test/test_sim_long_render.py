"""The long world's ray-cast renderer: walls hide objects, the id buffer says what shows."""

from __future__ import annotations

import numpy as np
import pytest

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.scene import SceneObject
from lab.long_world.floor_plan import FloorPlan, make_floor_plan
from lab.long_world.render import LongRenderer
from lab.long_world.textures import make_atlases

CAM = PinholeCamera.from_hfov(160, 120, 70.0)


@pytest.fixture(scope="module")
def plan() -> FloorPlan:
    return make_floor_plan(np.random.default_rng(5), columns=1)


def _behind_wall(plan: FloorPlan) -> tuple[SceneObject, float]:
    """A box in room 2 (north), at an x at least 2.5 m from both doorways."""
    north = plan.areas[2]
    xs = [x for x in np.arange(north.x0 + 1.0, north.x1 - 1.0, 0.1)
          if all(abs(x - d.x) > 2.5 for d in plan.doors)]
    assert xs, "no x far from both doorways"
    x = float(xs[0])
    return SceneObject("red box", "red", "box", x, north.y0 + 2.5, (0.8, 0.6, 1.0)), x


def test_a_wall_hides_an_object_that_the_same_view_would_show_without_it(plan) -> None:
    obj, x = _behind_wall(plan)
    renderer = LongRenderer(plan, (obj,), make_atlases(plan, 1), CAM)
    room1 = plan.areas[1]
    pose = Pose(x, room1.y0 + 2.0, 1.5, 90.0, 0.0)  # facing north, at the corridor wall
    uv, depth = CAM.project(pose, obj.centre[None])
    assert depth[0] > 0 and 0 <= uv[0, 0] < CAM.width and 0 <= uv[0, 1] < CAM.height
    hidden = renderer.render(pose)
    assert hidden.object_pixels[0] == 0 and not hidden.ids.any()
    near = Pose(x, plan.areas[2].y0 + 0.8, 1.5, 90.0, -10.0)  # same line, in its room
    shown = renderer.render(near)
    assert shown.object_pixels[0] > 200
    assert (shown.ids == 1).sum() == shown.object_pixels[0]
    assert np.all(shown.image[shown.ids == 1][:, 0] > shown.image[shown.ids == 1][:, 2])


def test_an_object_is_seen_through_an_open_doorway(plan) -> None:
    door = next(d for d in plan.doors if d.areas[0] == 1)  # room 1 onto the corridor
    obj = SceneObject("blue sphere", "blue", "sphere", door.x, door.y + 1.5, (0.6, 0.6, 0.6))
    renderer = LongRenderer(plan, (obj,), make_atlases(plan, 1), CAM)
    through = renderer.render(Pose(door.x, door.y - 3.0, 1.5, 90.0, -10.0))
    assert through.object_pixels[0] > 50
    beside = renderer.render(Pose(door.x + 2.6, door.y - 3.0, 1.5, 90.0, -10.0))
    assert beside.object_pixels[0] < through.object_pixels[0]


def test_rendering_is_deterministic_and_textures_follow_the_seed(plan) -> None:
    obj, x = _behind_wall(plan)
    pose = Pose(x - 1.0, plan.areas[2].y0 + 0.8, 1.4, 70.0, -10.0)
    a = LongRenderer(plan, (obj,), make_atlases(plan, 1), CAM).render(pose)
    b = LongRenderer(plan, (obj,), make_atlases(plan, 1), CAM).render(pose)
    c = LongRenderer(plan, (obj,), make_atlases(plan, 2), CAM).render(pose)
    assert np.array_equal(a.image, b.image) and np.array_equal(a.ids, b.ids)
    assert not np.array_equal(a.image, c.image) and np.array_equal(a.ids, c.ids)

"""Poses, the pinhole camera, the renderer's projection and the planned trajectory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embodied_r_ros.core.actions import ACTIONS, primary_action
from embodied_r_ros.core.colors import hue_name
from embodied_r_ros.core.poses import Pose, relative_motion, wrap_deg
from embodied_r_ros.sim.camera import PinholeCamera, clip_polygon
from embodied_r_ros.sim.render import Renderer
from embodied_r_ros.sim.scene import COLOURS, Scene, SceneObject, Surface, make_scene
from embodied_r_ros.sim.trajectory import MotionLimits, apply_action, plan_trajectory

CAM = PinholeCamera.from_hfov(320, 240, 70.0)


def _quat_matrix(q: tuple[float, float, float, float]) -> np.ndarray:
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


# ------------------------------------------------------------------ poses


def test_quaternion_round_trip_and_matches_rotation() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        pose = Pose(*rng.uniform(-5, 5, 3), float(rng.uniform(-179, 179)),
                    float(rng.uniform(-80, 80)))
        q = pose.quaternion()
        assert math.isclose(sum(v * v for v in q), 1.0, rel_tol=1e-12)
        np.testing.assert_allclose(_quat_matrix(q), pose.rotation(), atol=1e-12)
        back = Pose.from_quaternion(pose.position, q)
        assert back.yaw_deg == pytest.approx(pose.yaw_deg, abs=1e-9)
        assert back.pitch_deg == pytest.approx(pose.pitch_deg, abs=1e-9)


def test_ros_pitch_convention_tilt_up_points_view_up() -> None:
    # REP-103: a positive rotation about +y points x downward, so "tilt up" is negative ROS pitch.
    half = math.radians(-20.0) / 2
    pose = Pose.from_quaternion((0, 0, 0), (0.0, math.sin(half), 0.0, math.cos(half)))
    assert pose.pitch_deg == pytest.approx(20.0)
    assert pose.rotation()[2, 0] > 0  # the view direction has an upward component


def test_from_quaternion_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="zero length"):
        Pose.from_quaternion((0, 0, 0), (0, 0, 0, 0))
    with pytest.raises(ValueError, match="3 values"):
        Pose.from_quaternion((0, 0), (0, 0, 0, 1))


def test_relative_motion_is_in_the_earlier_heading_frame() -> None:
    a = Pose(1.0, 2.0, 1.5, 90.0, -30.0)  # facing +y, tilted down
    b = Pose(1.0, 3.0, 2.0, 120.0, -20.0)  # 1 m along +y (= a's forward), 0.5 m up
    m = relative_motion(a, b)
    assert (m.forward, m.left, m.up) == pytest.approx((1.0, 0.0, 0.5), abs=1e-12)
    assert m.yaw_deg == pytest.approx(30.0)
    assert m.pitch_deg == pytest.approx(10.0)
    assert relative_motion(Pose(yaw_deg=170.0), Pose(yaw_deg=-170.0)).yaw_deg == pytest.approx(20)
    assert wrap_deg(540.0) == 180.0 and wrap_deg(-180.0) == 180.0


@pytest.mark.parametrize("action", ACTIONS)
def test_each_action_is_recovered_from_the_true_poses(action: str) -> None:
    start = Pose(3.0, 4.0, 1.4, -135.0, -15.0)
    amount = 0.8 if action.startswith("move") else 20.0
    assert primary_action(relative_motion(start, apply_action(start, action, amount))) == action


# ------------------------------------------------------------------ camera and renderer


def test_camera_projects_a_known_point_to_the_predicted_pixel() -> None:
    pose = Pose(0.0, 0.0, 1.0, 0.0, 0.0)
    uv, depth = CAM.project(pose, np.array([[4.0, 0.0, 1.0], [4.0, -1.0, 1.5]]))
    np.testing.assert_allclose(uv[0], [CAM.cx, CAM.cy])
    # 1 m to the right and 0.5 m up at 4 m depth.
    np.testing.assert_allclose(uv[1], [CAM.cx + CAM.fx / 4.0, CAM.cy - 0.5 * CAM.fy / 4.0])
    np.testing.assert_allclose(depth, [4.0, 4.0])
    # the ray through a pixel goes back through the same point
    ray = CAM.ray_directions(pose, uv[1:2])[0]
    np.testing.assert_allclose(ray * math.sqrt(4**2 + 1 + 0.25), [4.0, -1.0, 0.5], atol=1e-12)


def test_clip_polygon_cuts_at_the_near_plane() -> None:
    square = np.array([[-1, -1, -1.0], [1, -1, -1.0], [1, -1, 3.0], [-1, -1, 3.0]])
    clipped = clip_polygon(square, CAM.frustum_planes()[:1])
    assert clipped[:, 2].min() == pytest.approx(CAM.near)
    assert len(clip_polygon(square - [0, 0, 10], CAM.frustum_planes())) == 0


def _single_box_scene(box: SceneObject) -> Scene:
    room = make_scene(1)
    return Scene(1, room.length, room.width, room.height, (box,), room.surfaces)


def test_rendered_object_lands_where_its_vertices_project() -> None:
    box = SceneObject("red box", "red", "box", 6.0, 5.0, (0.8, 0.6, 1.0), yaw_deg=25.0)
    scene = _single_box_scene(box)
    pose = Pose(2.5, 4.2, 1.3, 12.0, -8.0)
    frame = Renderer(scene, CAM).render(pose)
    ys, xs = np.nonzero(frame.ids == 1)
    corners = np.array([[*xy, z] for xy in box.footprint() for z in (0.0, box.height)])
    uv, depth = CAM.project(pose, corners)
    assert (depth > 0).all()
    assert xs.min() == pytest.approx(uv[:, 0].min(), abs=1.0)
    assert xs.max() == pytest.approx(uv[:, 0].max(), abs=1.0)
    assert ys.min() == pytest.approx(uv[:, 1].min(), abs=1.0)
    assert ys.max() == pytest.approx(uv[:, 1].max(), abs=1.0)
    # the centre of the box shows the box's colour (red hue, shaded)
    uv_c, _ = CAM.project(pose, box.centre[None])
    u, v = uv_c[0]
    r, g, b = frame.image[round(v), round(u)].astype(int)
    assert frame.ids[round(v), round(u)] == 1 and r > 2 * g and r > 2 * b
    assert frame.object_pixels[0] == len(xs)


def test_textured_floor_maps_world_points_to_their_texels() -> None:
    """A checkerboard floor of 0.25 m cells: each cell centre renders in its cell's colour."""
    room = make_scene(1)
    ppm = 64
    h, w = round(room.width * ppm), round(room.length * ppm)
    yy, xx = np.mgrid[0:h, 0:w]
    cell = ppm // 4
    checker = (((yy // cell) + (xx // cell)) % 2).astype(np.uint8)
    tex = np.stack([checker * 200 + 20, 60 + checker * 0, 220 - checker * 200], -1).astype(np.uint8)
    floor = room.surfaces[0]
    scene = Scene(1, room.length, room.width, room.height, (),
                  (Surface("floor", floor.origin, floor.axis_u, floor.axis_v, tex),
                   *room.surfaces[1:]))
    pose = Pose(3.0, 3.0, 1.2, 30.0, -35.0)
    image = Renderer(scene, CAM).render(pose).image
    checked = 0
    for i in range(8, 30):
        for j in range(8, 30):
            p = np.array([(j + 0.5) * 0.25, (i + 0.5) * 0.25, 0.0])
            uv, depth = CAM.project(pose, p[None])
            u, v = uv[0]
            if depth[0] <= 0 or not (2 <= u < CAM.width - 2 and 2 <= v < CAM.height - 2):
                continue
            expected_red = (i + j) % 2 == 1
            r, _, b = image[round(v), round(u)].astype(int)
            assert (r > b) == expected_red, (i, j, u, v)
            checked += 1
    assert checked > 40


def test_rendering_is_deterministic_and_seed_dependent() -> None:
    pose = Pose(4.0, 4.0, 1.5, 45.0, -10.0)
    a = Renderer(make_scene(3), CAM).render(pose).image
    b = Renderer(make_scene(3), CAM).render(pose).image
    c = Renderer(make_scene(4), CAM).render(pose).image
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_camera_touching_a_wall_still_renders_a_full_view() -> None:
    scene = make_scene(2)
    pose = Pose(scene.length - 0.06, scene.width / 2, 1.5, 0.0, 0.0)  # 6 cm from the east wall
    image = Renderer(scene, CAM).render(pose).image
    sky = np.all(image == image[0, 0], axis=-1).mean()
    assert sky < 0.01  # the wall fills the frame, no holes


# ------------------------------------------------------------------ scene and trajectory


def test_object_colours_are_the_names_the_colour_summary_uses() -> None:
    import cv2

    for name, rgb in COLOURS.items():
        hsv = cv2.cvtColor(np.array([[rgb]], np.uint8), cv2.COLOR_RGB2HSV)[0, 0]
        assert hue_name(int(hsv[0])) == name
        assert hsv[1] >= 110  # vivid enough for core.colors
    for surface in make_scene(5).surfaces:
        hsv = cv2.cvtColor(surface.texture, cv2.COLOR_RGB2HSV)
        # never vivid by core.colors' rule (saturation >= 110 and value >= 60)
        assert not np.any((hsv[..., 1] >= 110) & (hsv[..., 2] >= 60))


def test_scene_is_deterministic_with_unique_names_and_clear_space() -> None:
    a, b = make_scene(11), make_scene(11)
    assert [o.name for o in a.objects] == [o.name for o in b.objects]
    assert all(np.array_equal(s.texture, t.texture)
               for s, t in zip(a.surfaces, b.surfaces, strict=True))
    assert len({o.name for o in a.objects}) == len(a.objects)
    for i, o in enumerate(a.objects):
        for other in a.objects[i + 1:]:
            assert o.distance_to(other) >= 1.4
    with pytest.raises(ValueError, match="n_objects"):
        make_scene(1, n_objects=0)


@pytest.mark.parametrize("seed", [0, 7, 23])
def test_trajectory_uses_every_action_and_stays_clear(seed: int) -> None:
    scene = make_scene(seed)
    lim = MotionLimits()
    traj = plan_trajectory(scene, 30.0, seed)
    assert traj.duration >= 30.0
    assert {s.action for s in traj.segments} == set(ACTIONS)
    for seg in traj.segments:
        motion = relative_motion(seg.start, seg.end)
        assert primary_action(motion) == seg.action
        moved = motion.translation if seg.action.startswith("move") else max(
            abs(motion.yaw_deg), abs(motion.pitch_deg))
        assert moved == pytest.approx(seg.amount)
    for t in np.arange(0.0, traj.duration, 0.1):
        p = traj.pose_at(float(t))
        assert scene.clearance(p.x, p.y) >= lim.clearance_m - 1e-9
        assert lim.height_m[0] - 1e-9 <= p.z <= lim.height_m[1] + 1e-9
    # continuous at segment boundaries
    for a, b in zip(traj.segments, traj.segments[1:], strict=False):
        assert b.start == a.end and b.t0 == a.t1


def test_the_simulator_loads_no_ros() -> None:
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, embodied_r_ros.sim as s\n"
        "for m in pkgutil.walk_packages(s.__path__, prefix='embodied_r_ros.sim.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('rclpy', 'sensor_msgs', 'nav_msgs', 'rosidl_runtime_py')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"

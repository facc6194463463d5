"""The tf tree without ROS (recordings/transforms.py): the camera's chain, its mount, optical axes,
interpolation and the one tolerance rule."""

from __future__ import annotations

import math

import pytest

from embodied_r_ros.core.odometry import odometry_motions, poses_at
from embodied_r_ros.core.poses import Pose, relative_motion
from embodied_r_ros.recordings.transforms import ChainTrack, TfBuffer, Transform, camera_pose

OPTICAL = Transform.of((0, 0, 0), (-0.5, 0.5, -0.5, 0.5))  # camera_link -> optical (REP 103)


def yaw(deg: float) -> tuple[float, float, float, float]:
    half = math.radians(deg) / 2
    return (0.0, 0.0, math.sin(half), math.cos(half))


def pitch_down(deg: float) -> tuple[float, float, float, float]:
    half = math.radians(deg) / 2  # ROS pitch: positive about y, nose down
    return (0.0, math.sin(half), 0.0, math.cos(half))


def robot(mount_yaw_deg: float, *, steps: int = 11, speed: float = 1.0) -> TfBuffer:
    """A base driving straight ahead along odom's x at ``speed`` m/s, sampled at 10 Hz; its
    camera on a mount turned ``mount_yaw_deg`` to the left, 0.3 m ahead and 0.5 m up."""
    tf = TfBuffer()
    tf.add("base_link", "camera_link", 0.0,
           Transform.of((0.3, 0.0, 0.5), yaw(mount_yaw_deg)), static=True)
    tf.add("camera_link", "camera_optical_frame", 0.0, OPTICAL, static=True)
    for i in range(steps):
        tf.add("odom", "base_link", i / 10, Transform.of((speed * i / 10, 0.0, 0.0), yaw(0)))
    return tf


def test_a_base_driving_forward_moves_a_camera_turned_left_to_its_right() -> None:
    track = ChainTrack(robot(90.0), "odom", "camera_optical_frame")
    start, end = track.at(0.0, 0.2), track.at(1.0, 0.2)
    assert start is not None and end is not None
    # the camera sits on its mount: 0.3 m ahead of the base, 0.5 m up, looking left
    assert (start.x, start.y, start.z) == pytest.approx((0.3, 0.0, 0.5))
    assert start.yaw_deg == pytest.approx(90.0) and start.pitch_deg == pytest.approx(0.0)
    motion = relative_motion(start, end)
    # the base went 1 m forward: for the camera that is 1 m to its right, no turn
    assert motion.left == pytest.approx(-1.0) and motion.forward == pytest.approx(0.0, abs=1e-9)
    assert motion.yaw_deg == pytest.approx(0.0, abs=1e-9)
    # read at the base instead, it would be forward motion: the chain is what changes it
    base = ChainTrack(robot(90.0), "odom", "base_link", "body")
    (along,) = odometry_motions(poses_at(base, [0.0, 1.0], 0.2))
    assert along is not None and along.forward == pytest.approx(1.0)


@pytest.mark.parametrize("mount_yaw", [0.0, -90.0, 180.0])
def test_the_mount_turns_the_motion_by_its_yaw(mount_yaw: float) -> None:
    track = ChainTrack(robot(mount_yaw), "odom", "camera_optical_frame")
    (motion,) = odometry_motions(poses_at(track, [0.0, 1.0], 0.2))
    assert motion is not None
    a = math.radians(mount_yaw)  # the base's forward metre, in the camera's heading frame
    assert (motion.forward, motion.left) == pytest.approx((math.cos(a), -math.sin(a)), abs=1e-9)


def test_optical_axes_are_converted_and_body_axes_are_not() -> None:
    # a camera tilted 30 degrees down on its link: optical z (the view) points forward, down
    link = Transform.of((0, 0, 1), pitch_down(30.0))
    pose = camera_pose(link * OPTICAL)
    assert pose.yaw_deg == pytest.approx(0.0, abs=1e-9)
    assert pose.pitch_deg == pytest.approx(-30.0)
    body = camera_pose(link, "body")
    assert (body.yaw_deg, body.pitch_deg, body.z) == pytest.approx((0.0, -30.0, 1.0), abs=1e-9)
    # the optical frame read as if it had body axes looks along x_optical: to the right
    wrong = camera_pose(link * OPTICAL, "body")
    assert wrong.yaw_deg == pytest.approx(-90.0)


def test_moving_edges_are_interpolated_within_the_tolerance_only() -> None:
    tf = TfBuffer()
    tf.add("odom", "base_link", 0.0, Transform.of((0, 0, 0), yaw(0)))
    tf.add("odom", "base_link", 0.1, Transform.of((1, 0, 0), yaw(90)))
    tf.add("odom", "base_link", 2.0, Transform.of((2, 0, 0), yaw(90)))
    track = ChainTrack(tf, "odom", "base_link", "body")
    half = track.at(0.05, 0.2)
    assert half is not None and half.x == pytest.approx(0.5) and half.yaw_deg == pytest.approx(45)
    assert track.at(1.0, 0.2) is None  # in a gap: the nearest sample is 0.9 s away
    late = track.at(2.15, 0.2)  # past the newest sample but within the tolerance: no guess
    assert late is not None and late.x == pytest.approx(2.0)
    assert track.at(2.3, 0.2) is None and track.at(-0.3, 0.2) is None
    assert len(track) == 3


def test_frames_are_compared_without_a_leading_slash_and_unconnected_chains_give_none() -> None:
    tf = TfBuffer()
    tf.add("/odom", "/base_link", 1.0, Transform.of((1, 2, 0), yaw(0)))
    tf.add("base_link", "camera", 0.0, Transform.of((0, 0, 0), yaw(0)), static=True)
    assert tf.chain("odom", "/camera") == ["camera", "base_link"]
    found = tf.lookup("odom", "camera", 1.0, 0.1)
    assert found is not None and list(found.translation) == pytest.approx([1, 2, 0])
    assert tf.chain("map", "camera") is None and tf.lookup("map", "camera", 1.0, 0.1) is None
    # the lookup works either way round, across the common ancestor
    back = tf.lookup("camera", "odom", 1.0, 0.1)
    assert back is not None and list(back.translation) == pytest.approx([-1, -2, 0])
    assert len(ChainTrack(tf, "odom", "")) == 0 and ChainTrack(tf, "odom", "").at(1.0, 1) is None


def test_a_missing_chain_names_the_frames_the_tree_lacks_or_the_roots_nothing_joins() -> None:
    tf = robot(0.0, steps=2)
    assert tf.missing_chain("odom", "camera_optical_frame") is None
    assert tf.missing_chain("map", "/camera_optical_frame") == (
        "missing from the tree: 'map' (frames: base_link, camera_link, camera_optical_frame, "
        "odom)")
    mountless = TfBuffer()  # the mount never came: /tf only, and the optical edge alone
    mountless.add("odom", "base_link", 0.0, Transform())
    assert mountless.missing_chain("odom", "camera_optical_frame") == (
        "missing from the tree: 'camera_optical_frame' (frames: base_link, odom)")
    mountless.add("camera_link", "camera_optical_frame", 0.0, OPTICAL, static=True)
    assert mountless.missing_chain("odom", "camera_optical_frame") == (
        "no transform joins 'camera_link' (above 'camera_optical_frame') to 'odom' (frames: "
        "base_link, camera_link, camera_optical_frame, odom)")
    assert TfBuffer().missing_chain("odom", "cam") == "missing from the tree: 'odom', 'cam' " \
        "(frames: none)"


def test_bad_transforms_are_refused_and_counted() -> None:
    with pytest.raises(ValueError, match="zero length"):
        Transform.of((0, 0, 0), (0, 0, 0, 0))
    with pytest.raises(ValueError, match="not finite"):
        Transform.of((math.nan, 0, 0), (0, 0, 0, 1))
    tf = TfBuffer()
    tf.add("odom", "odom", 0.0, Transform())
    assert tf.rejected == 1 and not tf.frames()


def test_a_live_buffer_keeps_a_bounded_history() -> None:
    tf = TfBuffer(keep_sec=1.05)
    for i in range(50):
        tf.add("odom", "base_link", i / 10, Transform.of((i, 0, 0), yaw(0)))
    assert len(tf) == 11  # 3.9 .. 4.9 s
    assert tf.lookup("odom", "base_link", 0.0, 0.2) is None
    tf.clear()
    assert len(tf) == 0


def test_poses_at_accepts_odometry_samples_and_tf_tracks_alike() -> None:
    samples = [(0.0, Pose(x=0.0)), (1.0, Pose(x=1.0))]
    tf = TfBuffer()
    for stamp, pose in samples:
        tf.add("odom", "base_link", stamp, Transform.of((pose.x, 0, 0), yaw(0)))
    chain = ChainTrack(tf, "odom", "base_link", "body")
    assert [p.x for p in poses_at(samples, [0.0, 1.0], 0.1)] == \
        pytest.approx([p.x for p in poses_at(chain, [0.0, 1.0], 0.1)])

"""A robot's recording as ROS 1 stacks make it: a .bag with the pose only in the tf tree (the
camera on a mount turned to the left, optical axes) and grey images. The synthetic world's bag
rewritten that way gives the same questions, the same texts and the same rule-reader answers
as the original rosbag2 with its odometry, through the same commands."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from ros1data import rewrite_as_ros1, write_euroc_like

from embodied_r_ros.core.odometry import odometry_motions, poses_at
from embodied_r_ros.recordings.bags import BagReader
from embodied_r_ros.recordings.transforms import ChainTrack
from embodied_r_ros.sim.generate import generate_world
from embodied_r_ros.sim.world import WorldSpec
from embodied_r_training.cli import main
from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.oracle import answer_letter

SPEC = WorldSpec(seed=31, frames=200, width=128, height=96)  # 20 s at 10 Hz
CAMERA = ["--image-topic", "/camera/image_raw"]


@dataclass(frozen=True)
class Recordings:
    rosbag2: Path  # the world's own bag: /odom
    ros1: Path  # the same as a ROS 1 bag with /tf and /tf_static, rgb8
    mono: Path  # the same with mono8 images
    root: Path


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    root = tmp_path_factory.mktemp("ros1")
    paths = generate_world(SPEC, root / "world", 0, video=False, decides=None)
    assert paths.bag is not None
    # named bag.bag: the scene (the bag's stem) and so the question ids are the original's
    (root / "rgb").mkdir()
    (root / "mono").mkdir()
    return Recordings(paths.bag, rewrite_as_ros1(paths.bag, root / "rgb" / "bag.bag"),
                      rewrite_as_ros1(paths.bag, root / "mono" / "bag.bag", mono=True), root)


def _questions(bag: Path, poses: str, out: Path, *setting: str) -> list[dict]:
    assert main(["questions", "--bag", str(bag), *CAMERA, "--odom-topic", poses, "--out",
                 str(out), "--count", "30", "--seed", "3", *(setting or ("-p", "offline"))]) == 0
    return [json.loads(line) for line in out.open()]


def _build(bag: Path, poses: str, questions: Path, out: Path, cache: Path) -> list[dict]:
    assert main(["build", "--bag", str(bag), "--questions", str(questions), *CAMERA,
                 "--odom-topic", poses, "--out", str(out), "--split-by", "question", "--folds",
                 "0", "--no-progress", "--profile", "offline", "--cache-dir", str(cache)]) == 0
    return load_rows(out)


def test_the_bag_reads_as_the_original(bags: Recordings) -> None:
    with BagReader(bags.rosbag2) as original, BagReader(bags.ros1) as ros1:
        assert ros1.is_ros1 and not original.is_ros1
        assert ros1.start_ns == original.start_ns
        assert ros1.image_stamps_ns("/camera/image_raw") == \
            original.image_stamps_ns("/camera/image_raw")
        assert ros1.camera_info("/camera/camera_info") == \
            original.camera_info("/camera/camera_info")  # ROS 1's K, not k
        assert ros1.image_frame_id("/camera/image_raw") == "camera_optical_frame"
        (_, stamp), (_, first) = (next(iter(b.iter_images("/camera/image_raw")))
                                  for b in (ros1, original))
        assert stamp == first
        original_track = original.pose_track("/odom")
        tf_track = ros1.pose_track("/tf", image_topic="/camera/image_raw")
        # only the camera's chain is kept, not the rest of the robot's tree
        assert isinstance(tf_track, ChainTrack) and len(tf_track) == len(original_track)
        assert "wheel_left" not in tf_track.buffer.frames()
        for ns in original.image_stamps_ns("/camera/image_raw")[::17]:
            a, b = original_track.at(ns / 1e9, 0.2), tf_track.at(ns / 1e9, 0.2)
            assert a is not None and b is not None
            assert (b.x, b.y, b.z, b.yaw_deg, b.pitch_deg) == pytest.approx(
                (a.x, a.y, a.z, a.yaw_deg, a.pitch_deg), abs=1e-9)


def test_tf_poses_give_the_same_questions_texts_and_rule_answers(
    bags: Recordings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = _questions(bags.rosbag2, "/odom", tmp_path / "odom.jsonl")
    ros1 = _questions(bags.ros1, "/tf", tmp_path / "tf.jsonl")
    assert len(original) == 30 and ros1 == original
    rows = _build(bags.rosbag2, "/odom", tmp_path / "odom.jsonl", tmp_path / "a",
                  tmp_path / "cache")
    again = _build(bags.ros1, "/tf", tmp_path / "odom.jsonl", tmp_path / "b", tmp_path / "cache")
    assert [r["prompt"] for r in again] == [r["prompt"] for r in rows]
    assert all(r["motion_source"] == "odometry" for r in again)
    answers = [answer_letter(r) for r in rows]
    assert [answer_letter(r) for r in again] == answers
    assert sum(a == r["solution"] for a, r in zip(answers, rows, strict=True)) >= 25
    # the base is not the camera: read at base_link, the same recording asks otherwise
    base = tmp_path / "base.yaml"
    base.write_text("base: offline\nperception: {tf: {camera_frame: base_link, "
                    "camera_axes: body}}\n")
    assert _questions(bags.ros1, "/tf", tmp_path / "base.jsonl", "-c", str(base)) != original
    capsys.readouterr()


def test_grey_images_build_with_the_same_key_frames_and_motions(
    bags: Recordings, tmp_path: Path
) -> None:
    questions = tmp_path / "q.jsonl"
    _questions(bags.rosbag2, "/odom", questions)
    colour = _build(bags.rosbag2, "/odom", questions, tmp_path / "a", tmp_path / "cache")
    grey = _build(bags.mono, "/tf", questions, tmp_path / "b", tmp_path / "cache")
    assert [r["id"] for r in grey] == [r["id"] for r in colour]
    for a, b in zip(colour, grey, strict=True):
        assert b["key_frame_stamps"] == a["key_frame_stamps"]
        assert _motions(b) == _motions(a) and len(_motions(a)) == len(a["key_frame_stamps"])
    # grey frames show no colours: the texts differ only in what is seen
    assert any(r["prompt"] != c["prompt"] for r, c in zip(grey, colour, strict=True))


def _motions(row: dict) -> list[str]:
    """Each key frame's line up to what it observes: its age and the motion that led to it."""
    lines = [line for line in row["prompt"][1]["content"].splitlines()
             if line.startswith("Frame ")]
    return [line.split("Observe:")[0] for line in lines]


def test_a_chain_that_is_not_in_the_bag_is_one_line_naming_the_frames(
    bags: Recordings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "map.yaml"
    config.write_text("base: offline\nperception: {tf: {odom_frame: map}}\n")
    out = tmp_path / "q.jsonl"
    assert main(["questions", "--bag", str(bags.ros1), *CAMERA, "--odom-topic", "/tf",
                 "--out", str(out), "-c", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no transform chain from 'map' to 'camera_optical_frame'" in err[0]
    assert "base_link, camera_link, camera_optical_frame, odom" in err[0]
    assert not out.exists()


def test_a_euroc_like_bag_gives_grey_frames_and_motion_capture_poses(tmp_path: Path) -> None:
    with BagReader(write_euroc_like(tmp_path / "V1_01_easy.bag")) as bag:
        frames = list(bag.iter_images("/cam0/image_raw"))
        track = bag.pose_track("/vicon/firefly_sbx/firefly_sbx")
    assert len(frames) == 8 and frames[0][0].shape == (480, 752, 3)
    image = frames[0][0]
    assert (image[..., 0] == image[..., 1]).all() and (image[..., 1] == image[..., 2]).all()
    (motion,) = odometry_motions(poses_at(track, [frames[0][1], frames[4][1]], 0.02))
    assert motion is not None and motion.yaw_deg == pytest.approx(8.0)

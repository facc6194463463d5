"""What ``embodied-r world`` writes: the bag read back with rosbags, the mp4, the JSONL, the
manifest, byte-for-byte determinism, the sample cache, and clear errors for bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from rosbags.highlevel import AnyReader
from rosbags.image import message_to_cvimage
from rosbags.typesys import Stores, get_typestore

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.reading.text_decides import TextDecides
from embodied_r_ros.sim.generate import ensure_sample, generate_world
from embodied_r_ros.sim.render import Renderer
from embodied_r_ros.sim.world import EPOCH_NS, WorldSpec, build_world
from embodied_r_ros.world_command import main

SPEC = WorldSpec(seed=5, frames=40, width=160, height=120)
TOPICS = {
    "/camera/image_raw": "sensor_msgs/msg/Image",
    "/camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
    "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
    "/odom": "nav_msgs/msg/Odometry",
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("world") / "out"
    paths = generate_world(SPEC, out, 12, compressed=True, decides=TextDecides)
    world = build_world(SPEC)
    renderer = Renderer(world.scene, world.camera)
    return paths, world, [renderer.render(p).image for p in world.poses]


def _read(bag: Path) -> dict[str, list[tuple[int, object]]]:
    msgs: dict[str, list[tuple[int, object]]] = {}
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == TOPICS
        for conn, stamp, raw in reader.messages():
            msgs.setdefault(conn.topic, []).append((stamp, reader.deserialize(raw, conn.msgtype)))
    return msgs


def test_bag_reads_back_with_standard_types_and_true_values(outputs) -> None:
    paths, world, images = outputs
    meta = yaml.safe_load((paths.bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["storage_identifier"] == "mcap" and meta["version"] == 8
    assert meta["message_count"] == 4 * SPEC.frames
    assert meta["starting_time"]["nanoseconds_since_epoch"] == EPOCH_NS
    msgs = _read(paths.bag)
    assert {t: len(m) for t, m in msgs.items()} == {t: SPEC.frames for t in TOPICS}
    expected = [EPOCH_NS + i * 100_000_000 for i in range(SPEC.frames)]
    for topic, items in msgs.items():
        stamps = [s for s, _ in items]
        assert stamps == expected, topic
        headers = [m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec for _, m in items]
        assert headers == expected, topic
    for i, (_, img) in enumerate(msgs["/camera/image_raw"]):
        assert (img.encoding, img.width, img.height, img.step) == ("rgb8", 160, 120, 480)
        assert img.header.frame_id == "camera_optical_frame"
        assert np.array_equal(message_to_cvimage(img, "rgb8"), images[i])
    for i, (_, jpg) in enumerate(msgs["/camera/image_raw/compressed"]):
        decoded = message_to_cvimage(jpg, "rgb8")
        assert decoded.shape == images[i].shape
        assert np.abs(decoded.astype(int) - images[i]).mean() < 6.0
    for _, info in msgs["/camera/camera_info"]:
        assert np.allclose(info.k.reshape(3, 3), world.camera.K)
        assert info.distortion_model == "plumb_bob" and (info.width, info.height) == (160, 120)
    for i, (_, odom) in enumerate(msgs["/odom"]):
        assert (odom.header.frame_id, odom.child_frame_id) == ("odom", "base_link")
        p, q = odom.pose.pose.position, odom.pose.pose.orientation
        pose = Pose.from_quaternion((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))
        truth = world.poses[i]
        assert np.allclose(pose.position, truth.position, atol=1e-9)
        assert pose.yaw_deg == pytest.approx(truth.yaw_deg, abs=1e-6)
        assert pose.pitch_deg == pytest.approx(truth.pitch_deg, abs=1e-6)


def test_odometry_twist_is_the_true_velocity(outputs) -> None:
    paths, world, _ = outputs
    odom = [m for _, m in _read(paths.bag)["/odom"]]
    seg = world.trajectory.segments[0]
    i = 5  # inside the first segment
    assert world.trajectory.segment_index(world.times[i]) == 0
    twist = odom[i].twist.twist
    speed = np.linalg.norm([twist.linear.x, twist.linear.y, twist.linear.z])
    turn = np.linalg.norm([twist.angular.x, twist.angular.y, twist.angular.z])
    if seg.action.startswith("move"):
        assert speed == pytest.approx(seg.amount / seg.duration, rel=1e-3) and turn < 1e-6
    else:
        assert turn == pytest.approx(np.radians(seg.amount / seg.duration), rel=1e-3)
        assert speed < 1e-6


def test_mp4_has_every_frame(outputs) -> None:
    paths, _, images = outputs
    cap = cv2.VideoCapture(str(paths.video))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    cap.release()
    assert len(frames) == SPEC.frames
    assert np.abs(frames[0].astype(int) - images[0]).mean() < 12.0


def test_questions_and_manifest_are_written(outputs) -> None:
    paths, world, _ = outputs
    rows = [json.loads(line) for line in paths.questions.read_text().splitlines()]
    assert rows and all(r["scene_seed"] == 5 for r in rows)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["spec"] == SPEC.to_dict()
    assert manifest["questions_written"] == len(rows)
    assert [o["name"] for o in manifest["objects"]] == [o.name for o in world.scene.objects]
    assert len(manifest["frames"]) == SPEC.frames
    assert manifest["frames"][7]["yaw_deg"] == pytest.approx(world.poses[7].yaw_deg, abs=1e-4)


def test_same_seed_same_bytes_other_seed_differs(outputs, tmp_path: Path) -> None:
    paths, _, _ = outputs
    again = generate_world(SPEC, tmp_path / "again", 12, compressed=True,
                           decides=TextDecides)
    for name in ("questions.jsonl", "world.json", "bag/bag.mcap", "bag/metadata.yaml"):
        assert (again.root / name).read_bytes() == (paths.root / name).read_bytes(), name
    other = generate_world(WorldSpec(seed=6, frames=40, width=160, height=120),
                           tmp_path / "other", 12, bag=False, video=False,
                           decides=TextDecides)
    assert other.questions.read_bytes() != paths.questions.read_bytes()
    assert other.bag is None and not (tmp_path / "other" / "bag").exists()


def test_cli_writes_a_world_and_refuses_to_overwrite(tmp_path: Path, capsys) -> None:
    args = ["--seed", "3", "--out", str(tmp_path), "--frames", "15", "--resolution", "96x72",
            "--questions", "relative_direction=2,action_generation=1", "--no-video"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "world seed 3: 15 frames" in out and str(tmp_path / "bag") in out
    assert (tmp_path / "questions.jsonl").exists() and not (tmp_path / "video.mp4").exists()
    assert main(args) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--frames", "0"], "--frames must be a positive integer, got 0"),
        (["--frames", "-4"], "--frames must be a positive integer, got -4"),
        (["--frames", "many"], "--frames must be an integer, got 'many'"),
        (["--resolution", "640"], "--resolution must look like 640x480"),
        (["--resolution", "8x8"], "resolution must be between 16x16"),
        (["--rate", "0"], "rate must be between"),
        (["--questions", "colour_naming=3"], "unknown question category 'colour_naming'"),
        (["--objects", "20"], "objects must be between 1 and 8"),
        (["--no-raw"], "--no-raw needs --compressed"),
    ],
)
def test_bad_arguments_give_one_clear_line_and_exit_2(extra: list[str], message: str,
                                                      tmp_path: Path, capsys) -> None:
    assert main(["--out", str(tmp_path / "w"), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and message in captured.err
    assert captured.err.startswith("embodied-r world: error: ")
    assert not (tmp_path / "w").exists()


def test_unwritable_out_dir_is_a_clear_error_in_a_real_process(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_r_ros.world_command", "--out", str(blocker / "sub"),
         "--frames", "2", "--resolution", "32x24"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"embodied-r world: error: cannot write to {blocker / 'sub'}: Not a directory"]


def test_ensure_sample_generates_once_and_regenerates_when_stale(tmp_path: Path) -> None:
    spec = WorldSpec(seed=2, frames=12, width=64, height=48)
    first = ensure_sample(tmp_path / "sample", spec, 6, decides=TextDecides)
    assert first.bag is not None and first.video is not None
    assert all(p.exists() for p in (first.bag, first.video, first.questions, first.manifest))
    stamp = first.manifest.stat().st_mtime_ns
    again = ensure_sample(tmp_path / "sample", spec, 6, decides=TextDecides)
    assert again == first and again.manifest.stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left
    data = json.loads(first.manifest.read_text())
    data["generator_version"] = -1
    first.manifest.write_text(json.dumps(data))
    fresh = ensure_sample(tmp_path / "sample", spec, 6, decides=TextDecides)
    assert json.loads(fresh.manifest.read_text())["generator_version"] != -1

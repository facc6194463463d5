"""Reading frames, odometry and camera info from real rosbag2 files (mcap and sqlite3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from bagdata import FPS, T0_NS, write_bag
from media import pan_frames

from embodied_r_ros.core.odometry import odometry_motions, poses_at
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.recordings.bags import BagError, BagReader


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bags")
    return {
        "mcap": write_bag(root / "raw_mcap", storage="mcap"),
        "sqlite3": write_bag(root / "jpeg_sqlite", storage="sqlite3", compressed=True),
    }


@pytest.mark.parametrize("kind", ["mcap", "sqlite3"])
def test_window_of_frames(bags: dict[str, Path], kind: str) -> None:
    period = int(1e9 / FPS)
    start, end = T0_NS + 2 * period, T0_NS + 6 * period  # frames 2..6 inclusive
    with BagReader(bags[kind]) as bag:
        topics = bag.topics
        assert topics["/camera/image_raw"].count == 24
        frames = list(bag.iter_images("/camera/image_raw", start, end))
    assert [round(s - T0_NS / 1e9, 3) for _, s in frames] == [0.5, 0.75, 1.0, 1.25, 1.5]
    source = pan_frames(24, 12, (160, 120))
    for (image, _), expected in zip(frames, source[2:7], strict=True):
        assert image.shape == (120, 160, 3) and image.dtype == np.uint8
        err = np.abs(image.astype(int) - expected.astype(int)).mean()
        if kind == "mcap":  # raw rgb8: bit-exact, RGB order kept
            assert err == 0
        else:  # JPEG of a noisy texture: lossy, but far closer than the channel-swapped frame
            swapped = np.abs(image.astype(int) - expected[:, :, ::-1].astype(int)).mean()
            assert err < 20 and swapped > 3 * err


def test_a_bare_storage_file_and_a_folder_without_metadata(bags: dict[str, Path],
                                                           tmp_path: Path) -> None:
    mcap = next(bags["mcap"].glob("*.mcap"))
    with BagReader(mcap) as bag:
        assert len(list(bag.iter_images("/camera/image_raw"))) == 24
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(mcap, bare / mcap.name)
    with BagReader(bare) as bag:
        assert bag.start_ns == T0_NS


def test_odometry_and_camera_info(bags: dict[str, Path]) -> None:
    with BagReader(bags["mcap"]) as bag:
        poses = bag.read_poses("/odom")
        info = bag.camera_info("/camera/camera_info")
    assert len(poses) == 24
    assert poses[5][1].yaw_deg == pytest.approx(15.0) and poses[5][1].x == pytest.approx(0.5)
    stamps = [poses[2][0], poses[6][0] + 0.01]  # slightly off a pose: the nearest one counts
    (motion,) = odometry_motions(poses_at(poses, stamps, 0.2))
    assert motion.yaw_deg == pytest.approx(12.0)  # 4 frames x 3 degrees, turning left
    assert motion.metric and motion.translation == pytest.approx(0.4, abs=1e-6)
    assert info is not None and (info.width, info.height) == (160, 120)
    assert info.cx == 80.0 and info.fx == pytest.approx(114.25, abs=0.01)
    cam = info.to_config()
    assert cam.fx == info.fx and cam.cy == 60.0


def test_a_key_frame_takes_the_nearest_pose_within_the_tolerance_only() -> None:
    poses = [(0.0, Pose(x=0)), (1.0, Pose(x=1)), (2.0, Pose(x=2))]
    at = poses_at(poses, [1.15, 1.6, 1.9, -5.0, 9.0], 0.2)
    assert [p.x if p else None for p in at] == [1, None, 2, None, None]
    assert poses_at([], [0.0], 0.2) == [None]
    # a pair with a pose missing has no odometry motion (perception measures it visually)
    motions = odometry_motions(at[:3])
    assert motions[0] is None and motions[1] is None
    (both,) = odometry_motions([at[0], at[2]])
    assert both is not None and both.forward == pytest.approx(1.0)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("kind", ["mcap", "sqlite3"])
def test_truncated_bags_raise_one_line_bag_errors(bags: dict[str, Path], kind: str,
                                                  tmp_path: Path) -> None:
    copy = tmp_path / kind
    shutil.copytree(bags[kind], copy)
    _truncate(next(p for p in copy.iterdir() if p.suffix in (".mcap", ".db3")))
    with pytest.raises(BagError) as err:
        with BagReader(copy) as bag:
            list(bag.iter_images("/camera/image_raw"))
    message = str(err.value)
    assert str(copy) in message and "\n" not in message
    assert "truncated or corrupt" in message


def test_bad_paths_and_topics(bags: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(BagError, match="no such file"):
        BagReader(tmp_path / "missing").open()
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not a bag at all")
    with pytest.raises(BagError, match="cannot open"):
        BagReader(junk).open()
    empty = tmp_path / "empty.db3"
    empty.touch()
    with pytest.raises(BagError, match="empty"):
        BagReader(empty).open()
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(BagError, match="not a bag file"):
        BagReader(text).open()
    with BagReader(bags["mcap"]) as bag:
        with pytest.raises(BagError, match=r"no topic '/nope'.*/camera/image_raw"):
            list(bag.iter_images("/nope"))
        with pytest.raises(BagError, match="has type nav_msgs/msg/Odometry"):
            list(bag.iter_images("/odom"))
        with pytest.raises(BagError, match="expected one of"):
            bag.read_poses("/camera/image_raw")

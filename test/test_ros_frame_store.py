"""The frame buffer's store (no ROS needed): pre-sampling, bounds, windows, clamp, odometry."""

from __future__ import annotations

import numpy as np
import pytest
from media import pan_frames

from embodied_r_ros.agent.frame_store import FrameStore, PoseBuffer, StampGate
from embodied_r_ros.core.config import KeyframeConfig
from embodied_r_ros.core.error_codes import BAD_STAMP, NO_FRAMES
from embodied_r_ros.core.images import decode_image
from embodied_r_ros.core.pipeline import QueryError
from embodied_r_ros.core.poses import Pose

FRAMES = pan_frames(40, 16, size=(320, 240))


def offer(store: FrameStore, image: np.ndarray, t: float) -> bool:
    """What the node does: check the stamp, decode only when wanted."""
    if not store.wants(t):
        store.skip(t)
        return False
    store.add(image, t)
    return True


def fill(store: FrameStore, fps: float = 10.0, n: int = 40, t0: float = 100.0) -> None:
    for i in range(n):
        offer(store, FRAMES[i % len(FRAMES)], t0 + i / fps)


def test_presampling_decides_before_decoding() -> None:
    store = FrameStore(KeyframeConfig(sample_fps=1.0))
    kept = [offer(store, FRAMES[i], 100 + i / 10) for i in range(40)]
    assert sum(kept) == 4 and kept[0] and kept[10] and kept[20] and kept[30]
    assert store.stats.received == 40 and store.stats.skipped == 36 and len(store) == 4
    # a duplicate of the newest stamp (raw + compressed of one frame) is refused
    assert not store.wants(103.0)


def test_window_clamps_to_min_frames_and_stays_in_range() -> None:
    store = FrameStore(KeyframeConfig(sample_fps=2.0, min_frames=4, max_frames=6))
    fill(store)  # 4 s at 10 Hz -> 8 sampled frames at 2 fps
    whole = store.window(0)
    assert whole.images is not None and 4 <= len(whole.images) <= 6 and whole.n_sampled == 8
    assert whole.stamps[0] == pytest.approx(100.0) and whole.stamps[-1] == pytest.approx(103.5)
    assert whole.images[0].shape == (240, 320, 3) and len(whole.motions) == len(whole.images) - 1
    recent = store.window(1.6)
    assert all(103.5 - 1.6 <= s <= 103.5 for s in recent.stamps) and len(recent.stamps) == 4
    with pytest.raises(QueryError) as err:
        store.window(1.0, anchor=200.0)
    assert err.value.code == NO_FRAMES and "no frames in the last 1 s" in str(err.value)


def test_empty_buffer_and_dropped_frames_give_specific_codes() -> None:
    store = FrameStore(KeyframeConfig())
    with pytest.raises(QueryError) as err:
        store.window(5)
    assert err.value.code == NO_FRAMES
    store.note_dropped("UNSUPPORTED_ENCODING", "encoding '32FC1' is not a colour image")
    with pytest.raises(QueryError) as err:
        store.window(5)
    assert err.value.code == "UNSUPPORTED_ENCODING" and "32FC1" in str(err.value)
    offer(store, FRAMES[0], 1.0)
    assert len(store.window(5).images) == 1
    assert store.stats.dropped["UNSUPPORTED_ENCODING"] == 1


def test_bounded_by_time_and_bytes() -> None:
    store = FrameStore(KeyframeConfig(sample_fps=0), buffer_sec=2.0)
    fill(store, n=40)
    assert store.span_sec <= 2.0 + 1e-9 and store.stats.evicted == 40 - len(store)
    jpeg = len(store.window(0).jpegs[0])
    small = FrameStore(KeyframeConfig(sample_fps=0), buffer_max_bytes=5 * jpeg)
    fill(small, n=40)
    assert small.size_bytes <= 5 * jpeg * 1.5 and len(small) < 10


def test_stores_processing_resolution_jpeg() -> None:
    store = FrameStore(KeyframeConfig(max_side=160))
    big = np.ascontiguousarray(np.repeat(np.repeat(FRAMES[0], 2, 0), 2, 1))  # 640x480
    offer(store, big, 1.0)
    w = store.window(0)
    assert w.images[0].shape == (120, 160, 3)
    assert decode_image(w.jpegs[0]).shape == (120, 160, 3)
    assert np.abs(w.images[0].astype(int).mean() - FRAMES[0].astype(int).mean()) < 8


@pytest.mark.parametrize("outlier", [2_145_916_800.0, 100.0 - 500.0])  # 2038, 500 s back
def test_a_single_outlier_stamp_is_dropped_and_the_history_kept(outlier: float) -> None:
    store = FrameStore(KeyframeConfig(sample_fps=1.0))
    fill(store, n=30)  # 100.0 .. 102.9
    before = store.window(0).stamps
    assert not offer(store, FRAMES[0], outlier)
    fill(store, n=20, t0=103.0)  # the stream goes on where it was
    assert store.stats.dropped[BAD_STAMP] == 1 and store.stats.resets == 0
    after = store.window(0).stamps
    assert after[: len(before)] == before and after[-1] == pytest.approx(104.0)


def test_a_sustained_jump_back_starts_a_new_timeline() -> None:
    store = FrameStore(KeyframeConfig(sample_fps=1.0), stamp_confirm=3)
    fill(store, n=30)  # 100.0 .. 102.9: a bag that is now replayed from 50 s
    fill(store, n=30, t0=50.0)
    # the first two frames of the new timeline were held; the third confirmed the jump
    assert store.stats.resets == 1 and store.stats.dropped[BAD_STAMP] == 2
    stamps = store.window(0).stamps
    assert stamps[0] == pytest.approx(50.2) and all(s < 53.0 for s in stamps)
    store.restart("the clock jumped back")  # what a /clock jump does
    assert len(store) == 0 and store.stats.resets == 2


def test_stamp_gate_verdicts() -> None:
    gate = StampGate(max_jump_sec=5.0, confirm=3)
    assert [gate.check(t) for t in (10.0, 11.0, 10.5, 30.0, 12.0)] == [
        "ok", "ok", "ok", "held", "ok"]  # 10.5: within tolerance; 30: a lone outlier
    assert [gate.check(t) for t in (500.0, 500.1, 500.2, 500.3)] == [
        "held", "held", "restart", "ok"]
    assert [gate.check(t) for t in (1.0, 900.0, 1.1)] == ["held", "held", "held"]


def test_odometry_motion_between_key_frames() -> None:
    store = FrameStore(KeyframeConfig(sample_fps=1.0), odom_tolerance_sec=0.1)
    for i in range(60):
        t = 100 + i / 20
        store.add_pose(t, Pose(x=0.5 * (t - 100), yaw_deg=10.0 * (t - 100)))
    fill(store, n=30)
    w = store.window(0)
    assert len(w.motions) == len(w.stamps) - 1
    for m, a, b in zip(w.motions, w.stamps[:-1], w.stamps[1:], strict=True):
        assert m is not None and m.metric
        assert m.yaw_deg == pytest.approx(10.0 * (b - a), abs=1e-6)
        assert m.translation == pytest.approx(0.5 * (b - a), rel=0.05)


def test_the_pose_now_is_the_newest_odometry_or_the_track_at_the_newest_frame() -> None:
    store = FrameStore(KeyframeConfig(sample_fps=1.0), odom_tolerance_sec=0.1)
    assert store.pose_now() is None  # nothing received yet
    fill(store, n=20)  # frames to 101.9 s, no pose: none known
    assert store.pose_now() is None
    for t in (101.9, 102.0, 102.4):  # odometry keeps coming after the last frame
        store.add_pose(t, Pose(x=t - 100.0, yaw_deg=30.0))
    now = store.pose_now()
    assert now is not None and (now.stamp, now.pose.x) == pytest.approx((102.4, 2.4))
    # a tf track: looked up at the newest frame, by the same tolerance
    track = PoseBuffer()
    track.add(101.85, Pose(x=7.0))
    tf = FrameStore(KeyframeConfig(sample_fps=1.0), odom_tolerance_sec=0.1, pose_track=track)
    fill(tf, n=20)
    for t in (101.8, 101.9):
        tf.handled(t)
    now = tf.pose_now()
    assert now is not None and (now.stamp, now.pose.x) == (101.9, 7.0)
    tf.handled(102.5)  # the chain has nothing that close to the newest frame
    assert tf.pose_now() is None


def test_pose_buffer_nearest_respects_tolerance() -> None:
    poses = PoseBuffer()
    for i in range(5):
        poses.add(float(i), Pose(x=float(i)))
    assert poses.nearest(2.4, 0.5).x == 2.0
    assert poses.nearest(2.6, 0.5).x == 3.0
    assert poses.nearest(9.0, 0.5) is None
    poses.add(3.5, Pose(x=-1))  # late by less than a second: ignored
    assert poses.nearest(3.5, 0.1) is None
    poses.prune(3.0)
    assert len(poses) == 2
    poses.add(-900.0, Pose(x=-3))  # one bad stamp: dropped, the history stays
    assert len(poses) == 2 and poses.dropped == 1
    for t in (0.5, 0.6, 0.7):  # the clock went back for good: a new episode
        poses.add(t, Pose(x=-2))
    assert len(poses) == 1 and poses.nearest(0.7, 0.1).x == -2


def test_stamp_filter_passes_a_window_after_each_grid_time() -> None:
    from embodied_r_ros.agent.frame_store import stamp_filter

    expr, params = stamp_filter(1000.25, 1.0, 1 / 30)
    assert expr == "(header.stamp.nanosec >= %0 AND header.stamp.nanosec < %1)"
    assert params == ["250000000", "350000000"]  # three 30 Hz intervals = 100 ms
    expr, params = stamp_filter(7.98, 1.0, 0.1)  # the window wraps past the second
    assert params == ["980000000", "1000000000", "0", "280000000"] and expr.count(" OR ") == 1
    _, params = stamp_filter(3.0, 0.5, 1 / 30)  # two grid times a second
    assert params == ["0", "100000000", "500000000", "600000000"]
    assert stamp_filter(0.0, 0.3, 0.01) is None  # a 0.3 s grid does not repeat every second
    assert stamp_filter(0.0, 2.0, 0.1) is not None  # every other second does

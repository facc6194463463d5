"""Key-frame extractor: exact overlap, timestamp pre-sampling, the official clamp, streaming
against batch, on real OpenCV ORB over textured images moved by known homographies."""

from __future__ import annotations

import math
import os

import cv2
import numpy as np
import pytest
from media import texture

import embodied_r_ros.core.keyframes as keyframes_module
from embodied_r_ros.core.config import KeyframeConfig
from embodied_r_ros.core.keyframes import (
    FeatureMatcher,
    KeyframeDecision,
    KeyframeExtractor,
    finalize_positions,
    select_keyframes,
    uniform_positions,
)
from embodied_r_ros.core.overlap import (
    clip_convex,
    intersection_area,
    overlap_ratio,
    polygon_area,
    warp_rectangle,
)

W, H = 320, 240
# Continuous coordinates (pixel i spans [i, i+1]) from pixel-index coordinates.
HALF = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])


@pytest.fixture(scope="module")
def canvas() -> np.ndarray:
    return texture(900, 1500, seed=3)


def view(canvas: np.ndarray, a: np.ndarray, size: tuple[int, int] = (W, H)) -> np.ndarray:
    """The frame seen through the 2x3 affine map ``a`` (canvas -> frame pixels)."""
    return cv2.warpAffine(canvas, a, size, flags=cv2.INTER_LINEAR)


def pose(cx: float, cy: float, angle: float = 0.0, zoom: float = 1.0,
         size: tuple[int, int] = (W, H)) -> np.ndarray:
    """Affine canvas -> frame for a camera centred on canvas point (cx, cy)."""
    a = cv2.getRotationMatrix2D((cx, cy), angle, zoom)
    a[:, 2] += np.array([size[0] / 2, size[1] / 2]) - np.array([cx, cy])
    return a


def true_h(a_ref: np.ndarray, a_cur: np.ndarray) -> np.ndarray:
    """Homography current -> reference in continuous coordinates."""
    ref = np.vstack([a_ref, [0, 0, 1]])
    cur = np.vstack([a_cur, [0, 0, 1]])
    return HALF @ ref @ np.linalg.inv(cur) @ np.linalg.inv(HALF)


def expected_keys(poses: list[np.ndarray], threshold: float = 0.5) -> tuple[list[int], list]:
    """The official rule run on the TRUE homographies; also the true overlap of each frame."""
    keys, overlaps = [0], [None]
    for i in range(1, len(poses)):
        ov = overlap_ratio(true_h(poses[keys[-1]], poses[i]), (W, H), (W, H))
        overlaps.append(ov)
        if ov < threshold:
            keys.append(i)
    return keys, overlaps


def stream(frames: list[tuple[np.ndarray, float]], cfg: KeyframeConfig) -> list[KeyframeDecision]:
    ex = KeyframeExtractor(cfg)
    return [ex.push(img, t, force=(i == len(frames) - 1)) for i, (img, t) in enumerate(frames)]


# --- exact overlap ------------------------------------------------------------------------


def test_polygon_area_and_clipping_hand_computed() -> None:
    square = [(0, 0), (2, 0), (2, 2), (0, 2)]
    assert polygon_area(square) == pytest.approx(4.0)
    assert polygon_area(square[::-1]) == pytest.approx(-4.0)
    shifted = [(1, 1), (3, 1), (3, 3), (1, 3)]
    assert intersection_area(shifted, square) == pytest.approx(1.0)
    diamond = [(1, 0), (2, 1), (1, 2), (0, 1)]  # corners on the square's edge midpoints
    assert intersection_area(diamond, square) == pytest.approx(2.0)
    assert intersection_area(square, diamond) == pytest.approx(2.0)
    triangle = [(-1, -1), (3, -1), (-1, 3)]  # cuts the square along x + y = 2
    assert intersection_area(triangle, square) == pytest.approx(2.0)
    assert len(clip_convex([(5, 5), (6, 5), (6, 6)], square)) == 0
    # Clipping a square by a square rotated 45 degrees about the same centre: an octagon.
    r = math.sqrt(2)
    rotated = [(1 + r * math.cos(t), 1 + r * math.sin(t)) for t in np.arange(4) * math.pi / 2]
    octagon = clip_convex(rotated, square)
    assert len(octagon) == 8
    assert abs(polygon_area(octagon)) == pytest.approx(8 * (math.sqrt(2) - 1))


def test_overlap_ratio_of_known_homographies() -> None:
    w, h = 640.0, 480.0
    for s in (0.0, 64.0, 200.0, 320.5, 639.0):  # horizontal shift by s: 1 - s / w
        shift = np.array([[1, 0, s], [0, 1, 0], [0, 0, 1.0]])
        assert overlap_ratio(shift, (w, h), (w, h)) == pytest.approx(1 - s / w)
    beyond = np.array([[1, 0, 700], [0, 1, 0], [0, 0, 1.0]])
    assert overlap_ratio(beyond, (w, h), (w, h)) == 0.0
    # Zoomed in by 2 about the centre: the current frame covers a quarter of the reference.
    half = np.array([[0.5, 0, w / 4], [0, 0.5, h / 4], [0, 0, 1.0]])
    assert overlap_ratio(half, (w, h), (w, h)) == pytest.approx(0.25)
    # Zoomed out: the current frame covers all of the reference.
    assert overlap_ratio(np.linalg.inv(half), (w, h), (w, h)) == pytest.approx(1.0)
    # Rotation by 90 degrees about the centre of a square frame keeps all of it.
    c = 240.0
    rot = np.array([[0, -1, 2 * c], [1, 0, 0], [0, 0, 1.0]])
    assert overlap_ratio(rot, (480, 480), (480, 480)) == pytest.approx(1.0)
    # A mirror is still a proper quadrilateral (reversed orientation).
    mirror = np.array([[-1, 0, w], [0, 1, 0], [0, 0, 1.0]])
    assert overlap_ratio(mirror, (w, h), (w, h)) == pytest.approx(1.0)


def test_twisted_quadrilateral_counts_as_failed_homography() -> None:
    # The line w = 0 (x = 320) cuts the rectangle: corners land on both sides of infinity.
    proj = np.array([[1, 0, 0], [0, 1, 0], [-1 / 320, 0, 1.0]])
    assert warp_rectangle(proj, 640, 480) is None
    assert overlap_ratio(proj, (640, 480), (640, 480)) is None
    # A corner exactly at infinity, and NaN.
    assert warp_rectangle(np.array([[1, 0, 0], [0, 1, 0], [-1 / 640, 0, 1.0]]), 640, 480) is None
    assert warp_rectangle(np.full((3, 3), np.nan), 640, 480) is None
    # Mild perspective (all corners in front): a proper convex quadrilateral.
    mild = np.array([[1, 0, 0], [0, 1, 0], [1e-4, 2e-4, 1.0]])
    quad = warp_rectangle(mild, 640, 480)
    assert quad is not None and len(quad) == 4
    assert 0.0 < overlap_ratio(mild, (640, 480), (640, 480)) <= 1.0


# --- matching ----------------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [True, False], ids=["popcount-c", "numpy-gemm"])
def test_matcher_equals_opencv_bruteforce_crosscheck(
    canvas: np.ndarray, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled:
        if keyframes_module._hamming is None:
            if os.environ.get("CI"):
                pytest.fail("the _hamming extension was not built (setup.py ext_modules)")
            pytest.skip("the _hamming extension is not built here")
    else:
        monkeypatch.setattr(keyframes_module, "_hamming", None)
    fm = FeatureMatcher(KeyframeConfig())
    bf = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)
    feats = [fm.detect(view(canvas, pose(500 + 60 * k, 400, 7 * k))) for k in range(4)]
    feats.append(fm.detect(texture(H, W, seed=99)))  # unrelated scene: outliers only
    for i in range(len(feats)):
        for j in range(len(feats)):
            if i == j:
                continue
            ours = fm.match(feats[i], feats[j])
            ref = sorted(bf.match(feats[i].des, feats[j].des), key=lambda m: m.distance)
            assert ours.tolist() == [[m.queryIdx, m.trainIdx] for m in ref]


# --- key-frame decisions on known motion -------------------------------------------------


def test_horizontal_pan_keyframes_follow_analytic_overlap(canvas: np.ndarray) -> None:
    step = 0.14 * W  # overlaps with the key frame: 0.86, 0.72, 0.58, 0.44 -> key
    poses = [pose(400 + k * step, 450) for k in range(10)]
    frames = [(view(canvas, p), float(k)) for k, p in enumerate(poses)]
    keys, overlaps = expected_keys(poses)
    assert keys == [0, 4, 8]
    for k in range(1, 10):
        ref = max(key for key in keys if key < k)
        assert overlaps[k] == pytest.approx(1 - step * (k - ref) / W)  # the analytic value
    decisions = stream(frames, KeyframeConfig(sample_fps=0))
    assert [i for i, d in enumerate(decisions) if d.keyframe] == keys
    assert decisions[0].reason == "first"
    assert {decisions[i].reason for i in keys[1:]} == {"overlap"}
    for k in range(1, 10):
        assert decisions[k].overlap == pytest.approx(overlaps[k], abs=0.01)
        assert decisions[k].n_matches > 10


@pytest.mark.parametrize("seed", [4, 9])
def test_rotation_zoom_path_matches_true_homographies(canvas: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    poses, x, y, ang, zoom = [], 400.0, 450.0, 0.0, 1.0
    for _ in range(16):
        poses.append(pose(x, y, ang, zoom))
        x += rng.uniform(25, 65)
        y += rng.uniform(-30, 30)
        ang += rng.uniform(-12, 12)
        zoom = float(np.clip(zoom * rng.uniform(0.85, 1.18), 0.7, 1.5))
    keys, overlaps = expected_keys(poses)
    # The sequence must exercise both outcomes and stay clear of the threshold.
    assert 3 <= len(keys) <= 12
    assert all(abs(o - 0.5) > 0.03 for o in overlaps[1:])
    frames = [(view(canvas, p), float(k)) for k, p in enumerate(poses)]
    decisions = stream(frames, KeyframeConfig(sample_fps=0))
    assert [i for i, d in enumerate(decisions) if d.keyframe] == keys
    for d, true in zip(decisions[1:], overlaps[1:], strict=True):
        if not d.keyframe:
            assert d.overlap == pytest.approx(true, abs=0.02)
        elif d.overlap is not None:  # below half overlap few matches remain: less precise
            assert d.overlap == pytest.approx(true, abs=0.08)
        else:
            assert d.reason in ("homography_failed", "few_matches")


def test_overlap_is_scale_invariant_and_pairs_are_in_input_pixels(canvas: np.ndarray) -> None:
    size = (640, 480)
    a = view(canvas, pose(700, 450, size=size), size)
    b = view(canvas, pose(700 + 150, 450, size=size), size)  # 150 px to the right
    for max_side in (0, 320):
        ex = KeyframeExtractor(KeyframeConfig(sample_fps=0, max_side=max_side))
        ex.push(a, 0.0)
        d = ex.push(b, 1.0)
        assert d.overlap == pytest.approx(1 - 150 / 640, abs=0.01)
        # A point x in b shows canvas x + 150 - 320 + ..., i.e. x + 150 in a.
        shift = d.pairs.pts_ref - d.pairs.pts_cur
        med = np.median(shift, axis=0)
        assert med == pytest.approx([150.0, 0.0], abs=0.5 if max_side == 0 else 1.0)


def test_gray_rgba_and_rgb_inputs_decide_alike(canvas: np.ndarray) -> None:
    poses = [pose(400 + k * 70, 450, 3 * k) for k in range(6)]
    rgb = [view(canvas, p) for p in poses]
    gray = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in rgb]
    rgba = [cv2.cvtColor(f, cv2.COLOR_RGB2RGBA) for f in rgb]
    runs = [stream([(f, float(k)) for k, f in enumerate(seq)], KeyframeConfig(sample_fps=0))
            for seq in (rgb, gray, rgba)]
    assert runs[0] == runs[1] == runs[2]
    sel = select_keyframes([(f, float(k)) for k, f in enumerate(gray)], KeyframeConfig(max_side=0))
    assert all(img.shape == (H, W, 3) for img in sel.images)


def test_blank_frames_are_no_descriptor_keyframes() -> None:
    blank = np.zeros((H, W, 3), np.uint8)
    decisions = stream([(blank, float(k)) for k in range(4)], KeyframeConfig(sample_fps=0))
    assert [d.reason for d in decisions] == ["first"] + ["no_descriptors"] * 3
    assert all(d.keyframe and d.n_matches == 0 and d.overlap is None for d in decisions)


def test_unrelated_scenes_are_keyframes_and_never_overlap_ok() -> None:
    frames = [(texture(H, W, seed=100 + k), float(k)) for k in range(5)]
    decisions = stream(frames, KeyframeConfig(sample_fps=0))
    assert all(d.keyframe for d in decisions)
    assert {d.reason for d in decisions[1:]} <= {"overlap", "few_matches", "homography_failed"}


def test_bad_inputs_are_rejected() -> None:
    ex = KeyframeExtractor()
    with pytest.raises(ValueError):
        ex.push(np.zeros((H, W, 3), np.float32), 0.0)
    with pytest.raises(ValueError):
        ex.push(np.zeros((H, W, 2), np.uint8), 0.0)
    with pytest.raises(ValueError):
        ex.push(np.zeros((H, W), np.uint8), float("nan"))


# --- timestamp pre-sampling --------------------------------------------------------------

TINY = np.zeros((24, 32), np.uint8)  # featureless: sampling tests need no ORB work


def sampled_indices(stamps: list[float], cfg: KeyframeConfig, ros_style: bool = False
                    ) -> list[int]:
    """Input indices the extractor samples; ``ros_style`` asks ``wants`` before "decoding"."""
    ex = KeyframeExtractor(cfg)
    out = []
    for i, t in enumerate(stamps):
        last = i == len(stamps) - 1
        if ros_style and not last and not ex.wants(t):
            ex.skip(t)
            continue
        if ex.push(TINY, t, force=last).sampled:
            out.append(i)
    return out


def test_jitter_and_exact_timestamps_sample_the_same_frames() -> None:
    n = 30 * 12 + 7
    exact = [i / 30 for i in range(n)]
    jitter = np.random.default_rng(0).uniform(-0.007, 0.007, n)
    jittered = [t + j for t, j in zip(exact, jitter, strict=True)]
    cfg = KeyframeConfig()
    expected = [*range(0, n, 30), n - 1]  # 1 fps, plus the last frame always
    assert sampled_indices(exact, cfg) == expected
    assert sampled_indices(jittered, cfg) == expected
    assert sampled_indices(jittered, cfg, ros_style=True) == expected
    # Offset clock (a ROS stamp), same answer.
    assert sampled_indices([t + 1.7e9 for t in jittered], cfg) == expected
    # Select over real frames gives the same sampled set.
    sel = select_keyframes([(TINY, t) for t in jittered], cfg)
    assert sel.sampled_indices == expected
    assert sel.n_in == n
    assert sel.indices[-1] == n - 1


def test_dropped_frames_and_other_rates() -> None:
    n = 30 * 6
    stamps = [i / 30 for i in range(n)]
    dropped = {30, 31, 95, 120, 121, 122}
    kept = [i for i in range(n) if i not in dropped]
    got = [kept[j] for j in sampled_indices([stamps[i] for i in kept], KeyframeConfig())]
    # A dropped sample is replaced by the next frame; the grid does not drift.
    assert got == [0, 32, 60, 90, 123, 150, n - 1]
    # A 3 s gap skips slots instead of sampling a burst afterwards.
    gap = [t for t in stamps if not 1.5 < t < 4.5]
    idx = sampled_indices(gap, KeyframeConfig())
    assert [round(gap[i], 3) for i in idx] == [0.0, 1.0, 4.5, 5.0, round(gap[-1], 3)]
    # 2 fps from 30 Hz.
    assert sampled_indices(stamps[:61], KeyframeConfig(sample_fps=2.0)) == list(range(0, 61, 15))


def test_sample_fps_zero_takes_every_frame() -> None:
    stamps = [0.0, 0.001, 0.002, 0.5, 0.5, 3.0]
    assert sampled_indices(stamps, KeyframeConfig(sample_fps=0)) == list(range(6))


def test_clock_jumping_back_restarts_the_grid() -> None:
    stamps = [i / 10 for i in range(25)] + [i / 10 for i in range(15)]
    idx = sampled_indices(stamps, KeyframeConfig())
    assert idx == [0, 10, 20, 25, 35, 39]


def test_wants_has_no_side_effects(canvas: np.ndarray) -> None:
    cfg = KeyframeConfig()
    frames = [(view(canvas, pose(400 + 25 * k, 450)), k / 5) for k in range(20)]
    plain = stream(frames, cfg)
    ex = KeyframeExtractor(cfg)
    probed = []
    for i, (img, t) in enumerate(frames):
        answers = {probe: ex.wants(probe) for probe in (t - 5.0, t, t + 0.3, t + 7.0, 1e9)}
        assert answers == {probe: ex.wants(probe) for probe in answers}
        assert ex.wants(t) == plain[i].sampled or i == len(frames) - 1
        probed.append(ex.push(img, t, force=(i == len(frames) - 1)))
    assert probed == plain
    assert sum(d.sampled for d in plain) == 5  # 0, 1, 2, 3 s and the last frame


# --- clamp -------------------------------------------------------------------------------


def test_uniform_positions_official_formula() -> None:
    assert uniform_positions(10, 4) == [0, 1, 5, 9]
    # step 2.5: Python's round(2.5) == 2 (half to even), as in the official code.
    assert uniform_positions(7, 4) == [0, 1, 3, 6]
    assert uniform_positions(40, 32) == [0, *[round(i * 38 / 30) + 1 for i in range(30)], 39]
    assert uniform_positions(40, 32)[:6] == [0, 1, 2, 4, 5, 6]
    assert uniform_positions(3, 4) == [0, 1, 2]
    assert uniform_positions(5, 2) == [0, 4]
    for n, m in ((33, 32), (100, 32), (12, 4), (5, 4)):
        pos = uniform_positions(n, m)
        assert len(pos) == m and pos[0] == 0 and pos[-1] == n - 1 and pos == sorted(set(pos))


def test_finalize_positions_bounds() -> None:
    cfg = KeyframeConfig()
    # First and last are always there.
    assert finalize_positions([3, 6], 10, cfg) == [0, 3, 6, 9]
    # Too few: 4 uniformly from ALL sampled frames (not from the key frames).
    assert finalize_positions([0], 10, cfg) == [0, 1, 5, 9]
    assert finalize_positions([0, 5], 7, cfg) == [0, 1, 3, 6]
    assert finalize_positions([0], 2, cfg) == [0, 1]
    # Too many: 32 from the key-frame list, keeping its first and last.
    keys = list(range(0, 120, 3))  # 40 key frames, sampled list of 120 -> 41 with the last
    out = finalize_positions(keys, 120, cfg)
    full = [*keys, 119]
    assert out == [full[i] for i in uniform_positions(41, 32)]
    assert len(out) == 32 and out[0] == 0 and out[-1] == 119
    # 0 disables a bound.
    assert finalize_positions([0], 10, KeyframeConfig(min_frames=0)) == [0, 9]
    assert finalize_positions(keys, 120, KeyframeConfig(max_frames=0)) == full
    assert finalize_positions([], 0, cfg) == []
    with pytest.raises(ValueError):
        finalize_positions([12], 10, cfg)


def test_batch_clamps_to_four_from_all_sampled_frames(canvas: np.ndarray) -> None:
    # A nearly static camera: frame 0 is the only key frame.
    frames = [(view(canvas, pose(600 + 3 * k, 450)), float(k)) for k in range(9)]
    sel = select_keyframes(frames, KeyframeConfig(sample_fps=0))
    assert sel.indices == [0, 1, 5, 8]  # uniform_positions(9, 4): step 3.5
    assert sel.reasons == ["first", "clamp", "clamp", "last"]
    assert sel.sampled_indices == list(range(9))
    assert sel.stamps == [0.0, 1.0, 5.0, 8.0]
    assert sel.images[2] is frames[5][0]
    assert sel.extractor_seconds > 0


def test_batch_clamps_to_thirty_two_keeping_first_and_last() -> None:
    frames = [(texture(96, 128, seed=200 + k), float(k)) for k in range(40)]
    sel = select_keyframes(frames, KeyframeConfig())
    assert sel.indices == uniform_positions(40, 32)
    assert len(sel.images) == 32
    unbounded = select_keyframes(frames, KeyframeConfig(max_frames=0))
    assert unbounded.indices == list(range(40))


def test_streaming_and_batch_agree(canvas: np.ndarray) -> None:
    rng = np.random.default_rng(11)
    frames, x, ang = [], 500.0, 0.0
    for i in range(75):  # 15 Hz for 5 s with jitter; the camera pans and turns
        x += 9.0
        ang += 0.6
        frames.append((view(canvas, pose(x, 450, ang)), i / 15 + rng.uniform(-0.004, 0.004)))
    cfg = KeyframeConfig()
    sel = select_keyframes(iter(frames), cfg)

    ex = KeyframeExtractor(cfg)
    sampled, keys, decisions = [], [], []
    for i, (img, t) in enumerate(frames):
        last = i == len(frames) - 1
        if not last and not ex.wants(t):
            ex.skip(t)
            continue
        d = ex.push(img, t, force=last)
        decisions.append(d)
        if d.keyframe:
            keys.append(len(sampled))
        sampled.append(i)
    chosen = finalize_positions(keys, len(sampled), cfg)
    assert sel.sampled_indices == sampled == [0, 15, 30, 45, 60, 74]
    assert sel.indices == [sampled[p] for p in chosen]
    assert len(sel.indices) >= 4
    # Pairs are passed on exactly where two chosen frames were compared directly.
    for j in range(1, len(chosen)):
        compared_with = max(k for k in keys if k < chosen[j])
        kept = decisions[chosen[j]].keyframe or chosen[j] == len(sampled) - 1
        direct = kept and chosen[j - 1] == compared_with
        assert (sel.pairs[j] is not None) == direct
        if direct:
            np.testing.assert_array_equal(sel.pairs[j].pts_cur, decisions[chosen[j]].pairs.pts_cur)
    assert sel.pairs[0] is None


def test_empty_input() -> None:
    sel = select_keyframes([], KeyframeConfig())
    assert sel.indices == [] and sel.images == [] and sel.n_in == 0

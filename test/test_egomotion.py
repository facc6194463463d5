"""Visual ego-motion on sequences with known motion: rotations rendered as homographies of a
far texture, translations from projected 3-D points and from layered planes at several depths;
signs checked against the body-frame conventions of ``core/actions.py``."""

from __future__ import annotations

import math
import re
from itertools import pairwise

import cv2
import numpy as np
import pytest
from media import texture

from embodied_r_ros.core.actions import primary_action
from embodied_r_ros.core.config import CameraConfig, KeyframeConfig
from embodied_r_ros.core.egomotion import (
    camera_matrix,
    estimate_motion,
    keyframe_motions,
    motion_between,
    pairs_motion,
)
from embodied_r_ros.core.keyframes import (
    KeyframeExtractor,
    KeyframeSelection,
    MatchPairs,
    select_keyframes,
)
from embodied_r_ros.core.perception_text import describe_motion

W, H = 640, 480
CAM = CameraConfig()  # 70 degrees horizontal field of view
K = camera_matrix(CAM, W, H)
# Camera axes (x right, y down, z forward) expressed in body axes (forward, left, up).
BODY_FROM_CAM = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def camera_rotation(yaw: float = 0.0, pitch: float = 0.0) -> np.ndarray:
    """Orientation of a camera (columns: its x, y, z axes in the reference camera frame) after
    turning ``yaw`` degrees left and ``pitch`` degrees up."""
    y, p = math.radians(yaw), math.radians(-pitch)
    rz = np.array([[math.cos(y), -math.sin(y), 0], [math.sin(y), math.cos(y), 0], [0, 0, 1]])
    ry = np.array([[math.cos(p), 0, math.sin(p)], [0, 1, 0], [-math.sin(p), 0, math.cos(p)]])
    return BODY_FROM_CAM.T @ rz @ ry @ BODY_FROM_CAM


def magnitude(phrase: str) -> float:
    return float(re.search(r"about (\d+) degrees", phrase).group(1))


@pytest.fixture(scope="module")
def panorama() -> tuple[np.ndarray, np.ndarray]:
    """A far textured plane seen by a wide virtual camera with the same focal length."""
    big = texture(1500, 2200, seed=7)
    kb = K.copy()
    kb[0, 2], kb[1, 2] = (2200 - 1) / 2, (1500 - 1) / 2
    return big, kb


def rotated_view(panorama: tuple[np.ndarray, np.ndarray], yaw: float, pitch: float = 0.0
                 ) -> np.ndarray:
    big, kb = panorama
    h = K @ camera_rotation(yaw, pitch).T @ np.linalg.inv(kb)
    return cv2.warpPerspective(big, h, (W, H), flags=cv2.INTER_LINEAR)


# --- intrinsics ---------------------------------------------------------------------------


def test_camera_matrix_defaults_and_overrides() -> None:
    k = camera_matrix(CameraConfig(hfov_deg=90.0), 640, 480)
    assert k[0, 0] == pytest.approx(320.0) and k[1, 1] == pytest.approx(320.0)
    assert (k[0, 2], k[1, 2]) == (319.5, 239.5)
    k = camera_matrix(CameraConfig(fx=500.0, fy=510.0, cx=300.0, cy=200.0), 640, 480)
    np.testing.assert_allclose(k, [[500, 0, 300], [0, 510, 200], [0, 0, 1]])
    assert camera_matrix(CameraConfig(fx=400.0), 640, 480)[1, 1] == 400.0


def test_intrinsics_calibrated_at_another_size_are_scaled_to_the_frame() -> None:
    # CameraInfo of a 1280 x 960 calibration; the key frames are 640 x 480
    info = CameraConfig(fx=K[0, 0] * 2, cx=(K[0, 2] + 0.5) * 2 - 0.5,
                        cy=(K[1, 2] + 0.5) * 2 - 0.5, width=1280, height=960)
    np.testing.assert_allclose(camera_matrix(info, W, H), K)
    a, b = project_scene(camera_rotation(25.0, 0.0), np.zeros(3))
    pairs = MatchPairs(a.astype(np.float32), b.astype(np.float32))
    motion = pairs_motion(pairs, info, W, H)
    assert motion is not None and motion.yaw_deg == pytest.approx(25.0, abs=0.5)
    # the same numbers taken as the frame's own intrinsics halve the field of view, and the turn
    unscaled = pairs_motion(pairs, info.model_copy(update={"width": None, "height": None}), W, H)
    assert unscaled is not None and abs(unscaled.yaw_deg - 25.0) > 5.0


# --- point correspondences from a known 3-D scene -----------------------------------------


def project_scene(rot_c: np.ndarray, centre_body: np.ndarray, seed: int = 0,
                  noise_px: float = 0.3, outliers: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Random 3-D points seen from the reference camera and from a camera at ``centre_body``
    (body axes, metres) with orientation ``rot_c``; pixels with noise and some outliers."""
    rng = np.random.default_rng(seed)
    pts = np.column_stack([rng.uniform(-6, 6, 600), rng.uniform(-4, 4, 600),
                           rng.uniform(4, 14, 600)])
    centre = BODY_FROM_CAM.T @ centre_body
    later = (pts - centre) @ rot_c  # rows: rot_c^T (X - C)

    def pixels(p: np.ndarray) -> np.ndarray:
        q = p @ K.T
        return q[:, :2] / q[:, 2:]

    a, b = pixels(pts), pixels(later)
    seen = (later[:, 2] > 0.5) & np.all((b > 0) & (b < [W, H]) & (a > 0) & (a < [W, H]), axis=1)
    a, b = a[seen], b[seen]
    a = a + rng.normal(0, noise_px, a.shape)
    b = b + rng.normal(0, noise_px, b.shape)
    bad = rng.random(len(b)) < outliers
    b[bad] = rng.uniform([0, 0], [W, H], (int(bad.sum()), 2))
    return a, b


@pytest.mark.parametrize(
    ("yaw", "pitch", "move", "action"),
    [
        (25.0, 0.0, (0, 0, 0), "rotate left"),
        (-15.0, 0.0, (0, 0, 0), "rotate right"),
        (0.0, 12.0, (0, 0, 0), "tilt upward"),
        (0.0, -9.0, (0, 0, 0), "tilt downward"),
        (0.0, 0.0, (1.0, 0, 0), "move forward"),
        (0.0, 0.0, (-1.0, 0, 0), "move backward"),
        (0.0, 0.0, (0, 1.0, 0), "move left"),
        (0.0, 0.0, (0, -1.0, 0), "move right"),
        (0.0, 0.0, (0, 0, 1.0), "move upward"),
        (0.0, 0.0, (0, 0, -1.0), "move downward"),
        (2.0, 0.0, (1.0, 0.3, 0), "move forward"),  # small turn: below the rotation threshold
        (20.0, 0.0, (1.0, 0, 0), "rotate left"),  # turning while driving: rotation wins
    ],
)
def test_estimate_motion_on_projected_points(
    yaw: float, pitch: float, move: tuple[float, float, float], action: str
) -> None:
    a, b = project_scene(camera_rotation(yaw, pitch), np.array(move, float))
    motion = estimate_motion(a, b, K)
    assert motion is not None and not motion.metric
    assert primary_action(motion) == action
    # Sideways or vertical travel and a small turn look alike over a narrow view: wider there.
    tol = 2.0 if any(move) else 0.5
    assert motion.yaw_deg == pytest.approx(yaw, abs=tol)
    assert motion.pitch_deg == pytest.approx(pitch, abs=tol)
    direction = np.array([motion.forward, motion.left, motion.up])
    if any(move):
        truth = np.array(move) / np.linalg.norm(move)
        assert np.linalg.norm(direction) == pytest.approx(1.0)
        assert math.degrees(math.acos(min(1.0, float(direction @ truth)))) < 5.0
    else:  # a pure rotation is reported as such, not with an arbitrary direction
        assert not direction.any()
    if action.startswith(("rotate", "tilt")):
        assert magnitude(describe_motion(motion)) == pytest.approx(abs(yaw or pitch), abs=1)


def test_estimate_motion_needs_enough_points() -> None:
    a, b = project_scene(camera_rotation(10.0), np.zeros(3))
    assert estimate_motion(a[:5], b[:5], K) is None
    with pytest.raises(ValueError):
        estimate_motion(a[:20], b[:19], K)


# --- images -------------------------------------------------------------------------------


@pytest.mark.parametrize(("yaw", "pitch", "phrase"), [
    (20.0, 0.0, "rotate left"),
    (-30.0, 0.0, "rotate right"),
    (0.0, 15.0, "tilt upward"),
    (0.0, -10.0, "tilt downward"),
])
def test_rotation_between_images(
    panorama: tuple[np.ndarray, np.ndarray], yaw: float, pitch: float, phrase: str
) -> None:
    a = rotated_view(panorama, 0.0)
    b = rotated_view(panorama, yaw, pitch)
    # Turning left moves the scene to the right in the image: the convention under test.
    motion = motion_between(a, b, KeyframeConfig(), CAM)
    assert motion is not None
    text = describe_motion(motion)
    assert text.startswith(phrase)
    assert magnitude(text) == pytest.approx(abs(yaw or pitch), abs=2)


def layered_views(move_body: tuple[float, float, float], seed: int = 3
                  ) -> tuple[np.ndarray, np.ndarray]:
    """A far wall and textured boards at 3-7 m, fronto-parallel to the first camera; the
    second camera is translated by ``move_body`` metres (no rotation). Each layer maps by its
    plane-induced homography K (I + t n^T / Z) K^-1, drawn far to near."""
    rng = np.random.default_rng(seed)
    centre = BODY_FROM_CAM.T @ np.array(move_body, float)
    t = -centre  # X_later = X - C
    layers = [(25.0, texture(H, W, seed), np.full((H, W), 255, np.uint8))]
    for k in range(7):
        depth = float(rng.uniform(3, 7))
        mask = np.zeros((H, W), np.uint8)
        x, y = int(rng.integers(0, W - 160)), int(rng.integers(0, H - 140))
        cv2.rectangle(mask, (x, y), (x + int(rng.integers(120, 220)),
                                     y + int(rng.integers(100, 180))), 255, -1)
        layers.append((depth, texture(H, W, seed + 10 + k), mask))
    layers.sort(key=lambda layer: -layer[0])
    first = np.zeros((H, W, 3), np.uint8)
    second = np.zeros((H, W, 3), np.uint8)
    for depth, tex, mask in layers:
        h = K @ (np.eye(3) + np.outer(t, [0, 0, 1.0]) / depth) @ np.linalg.inv(K)
        first[mask > 0] = tex[mask > 0]
        warped_mask = cv2.warpPerspective(mask, h, (W, H), flags=cv2.INTER_NEAREST)
        warped = cv2.warpPerspective(tex, h, (W, H), flags=cv2.INTER_LINEAR)
        second[warped_mask > 0] = warped[warped_mask > 0]
    return first, second


@pytest.mark.parametrize(("move", "phrase"), [
    ((0.0, 0.5, 0.0), "move left"),
    ((0.0, -0.5, 0.0), "move right"),
    ((0.8, 0.0, 0.0), "move forward"),
    ((0.0, 0.0, 0.4), "move upward"),
])
def test_translation_between_layered_images(move: tuple[float, float, float], phrase: str
                                            ) -> None:
    a, b = layered_views(move)
    motion = motion_between(a, b, KeyframeConfig(), CAM)
    assert motion is not None
    assert describe_motion(motion) == phrase
    assert abs(motion.yaw_deg) < 2.0 and abs(motion.pitch_deg) < 2.0


def test_keyframe_motions_reuse_extractor_matches(panorama: tuple[np.ndarray, np.ndarray]
                                                 ) -> None:
    yaws = [5.0 * k for k in range(20)]  # turning left 5 degrees a frame
    frames = [(rotated_view(panorama, y), float(k)) for k, y in enumerate(yaws)]
    cfg = KeyframeConfig(sample_fps=0)
    sel = select_keyframes(frames, cfg)
    assert len(sel.indices) >= 3
    assert all(p is not None for p in sel.pairs[1:])  # every chosen pair was compared directly
    motions = keyframe_motions(sel, cfg, CAM)
    assert len(motions) == len(sel.images) - 1
    for (i, j), m in zip(pairwise(sel.indices), motions, strict=True):
        assert m is not None and primary_action(m) == "rotate left"
        assert m.yaw_deg == pytest.approx(yaws[j] - yaws[i], abs=1.5)
    # Without the stored matches every pair is matched again, with the same outcome.
    bare = KeyframeSelection(sel.indices, sel.stamps, sel.images, sel.sampled_indices,
                             sel.n_in, sel.extractor_seconds)
    again = keyframe_motions(bare, cfg, CAM)
    for m, m2 in zip(motions, again, strict=True):
        assert m2 is not None and m2.yaw_deg == pytest.approx(m.yaw_deg, abs=0.5)


def test_keyframe_motions_rematch_pairs_the_clamp_made_non_adjacent(
    panorama: tuple[np.ndarray, np.ndarray],
) -> None:
    yaws = [5.0 * k for k in range(20)]  # 4 key frames before the clamp
    frames = [(rotated_view(panorama, y), float(k)) for k, y in enumerate(yaws)]
    cfg = KeyframeConfig(sample_fps=0, min_frames=2, max_frames=3)
    sel = select_keyframes(frames, cfg)
    assert sel.indices == [0, 7, 19]  # key frames 0, 7, 14, 19 clamped to 3
    assert sel.pairs[1] is not None and sel.pairs[2] is None
    motions = keyframe_motions(sel, cfg, CAM)
    for (i, j), m in zip(pairwise(sel.indices), motions, strict=True):
        assert m is not None
        assert m.yaw_deg == pytest.approx(yaws[j] - yaws[i], abs=1.5)


def test_streaming_decisions_carry_matches_for_motion(
    panorama: tuple[np.ndarray, np.ndarray],
) -> None:
    ex = KeyframeExtractor(KeyframeConfig(sample_fps=0))
    ex.push(rotated_view(panorama, 0.0), 0.0)
    d = ex.push(rotated_view(panorama, -40.0), 1.0)  # turned right: less than half overlap
    assert d.keyframe and d.pairs is not None
    motion = pairs_motion(d.pairs, CAM, W, H)
    assert motion is not None and describe_motion(motion) == "rotate right about 40 degrees"


def test_identical_views_stay_still(panorama: tuple[np.ndarray, np.ndarray]) -> None:
    view = rotated_view(panorama, 10.0, 5.0)
    motion = motion_between(view, view.copy(), KeyframeConfig(), CAM)
    assert motion is not None and motion.translation == 0.0
    assert describe_motion(motion) == "stay still"


def test_featureless_images_give_no_motion() -> None:
    blank = np.full((H, W, 3), 128, np.uint8)
    assert motion_between(blank, blank, KeyframeConfig(), CAM) is None

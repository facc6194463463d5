"""Visual ego-motion between key frames, mapped to the paper's action vocabulary.

The VLM in Embodied-R names the action between two key frames ("rotate left") by looking at
them; this module measures it from the ORB matches the key-frame extractor already computed:
a pure rotation fitted to the bearings when the views show no parallax, else the essential
matrix and ``recoverPose``. Monocular vision gives the direction of travel, not its length, so
translations are unit vectors (``Motion.metric = False``).

Frames: OpenCV's camera frame is x right, y down, z forward; :class:`Motion` is in the body
frame forward / left / up with yaw positive left and pitch positive up, from the earlier
view to the later one, in the earlier view's frame.
"""

from __future__ import annotations

import logging
import math

import cv2
import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.config import CameraConfig, KeyframeConfig
from embodied_r_ros.core.keyframes import FeatureMatcher, KeyframeSelection, MatchPairs
from embodied_r_ros.core.poses import BODY_FROM_OPTICAL

log = logging.getLogger(__name__)

# Body (forward, left, up) from camera (x right, y down, z forward).

# Inlier threshold of the essential matrix as an angle (rad), converted to pixels with the
# focal length: about 2.3 px at 640 px and 70 degrees (ORB corners from coarse pyramid levels
# are off by a pixel or two), proportionally more for a larger image whose matches come from
# a downscaled copy.
_INLIER_RAD = 0.005
# A rotation is judged by the angle between bearings (a 2-D error), the essential matrix by
# the 1-D distance to an epipolar line, so the rotation gets a wider threshold to be fair.
_ROTATION_SLACK = 2.0
_MIN_POINTS = 8
_ROTATION_HYPOTHESES = 500  # 2-point samples: 99.9 % sure to draw a clean one at 12 % inliers
# Essential matrix by LO-RANSAC with SPRT: the same inlier counting as RANSAC, ten times
# faster on key-frame pairs with many outliers (25 ms instead of 260 ms).
_ROBUST = cv2.USAC_DEFAULT
# Translation counts as observed only when both hold, on the essential matrix's inliers:
# - the pure rotation leaves residuals at least this many times the epipolar (Sampson)
#   residuals. Without parallax both are noise and the ratio is 2.2-3.6 (a 2-D error against
#   a 1-D one); with parallax it was 6 to 130 on rendered and synthetic scenes, except where
#   0.25 m of vertical travel hid in a 1.5-2 degree pitch (2-4.5);
_PARALLAX_RATIO = 4.0
# - the essential matrix explains this share of the matches the rotation leaves out (chance
#   matches on an epipolar line: 0-0.3; parallax: 0.4-0.97).
_PARALLAX_SHARE = 0.3


def camera_matrix(cam: CameraConfig, width: int, height: int) -> np.ndarray:
    """Pinhole K for an image of ``width`` x ``height``: the one intrinsics rule of visual
    motion, colour bearings and grounding.

    Intrinsics calibrated at another size (``cam.width``/``height``, a CameraInfo's) are
    scaled to this one, principal point by pixel-index coordinates ((c + 0.5) * s - 0.5);
    without that size they are taken as given. Unset ``fx`` comes from the horizontal field of
    view at this width, unset ``fy`` equals ``fx``, and an unset principal point is the image
    centre in pixel-index coordinates ((w - 1) / 2).
    """
    sx = width / cam.width if cam.width else 1.0
    sy = height / cam.height if cam.height else sx
    if cam.fx is None:
        fx = (width / 2.0) / math.tan(math.radians(cam.hfov_deg) / 2)
        fy = fx if cam.fy is None else cam.fy * sy
    else:
        fx = cam.fx * sx
        fy = (cam.fy if cam.fy is not None else cam.fx) * sy
    cx = (cam.cx + 0.5) * sx - 0.5 if cam.cx is not None else (width - 1) / 2.0
    cy = (cam.cy + 0.5) * sy - 0.5 if cam.cy is not None else (height - 1) / 2.0
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


def _motion(rot: np.ndarray, direction: np.ndarray | None) -> Motion:
    """Motion from the rotation R (X_to = R X_from) and the unit direction of travel of the
    camera centre in the earlier camera frame (None: rotation only)."""
    # The later camera's axes in the earlier frame are the columns of R^T; in body axes:
    forward_now = BODY_FROM_OPTICAL @ rot.T @ np.array([0.0, 0.0, 1.0])
    yaw = math.degrees(math.atan2(forward_now[1], forward_now[0]))
    pitch = math.degrees(math.atan2(forward_now[2], math.hypot(forward_now[0], forward_now[1])))
    if direction is None:
        return Motion(yaw_deg=yaw, pitch_deg=pitch, metric=False)
    fwd, left, up = (float(v) for v in BODY_FROM_OPTICAL @ direction)
    return Motion(yaw_deg=yaw, pitch_deg=pitch, forward=fwd, left=left, up=up, metric=False)


def _nearest_rotation(m: np.ndarray) -> np.ndarray:
    u, _, vt = np.linalg.svd(m)
    r = u @ vt
    if np.linalg.det(r) < 0:
        r = u @ np.diag([1.0, 1.0, -1.0]) @ vt
    return r


def _rotation_fit(
    bear_from: np.ndarray, bear_to: np.ndarray, thr_rad: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Best rotation-only model for unit bearings (N, 3): R and its inlier mask, or None.

    A rotation has three degrees of freedom, so two correspondences fix it (the triad of the
    two bearings and their cross product); RANSAC over such pairs is vectorised and finds
    rotation-consistent matches even at 10 % inliers, where a 4-point homography fit gives up.
    The winner is refined by the orthogonal Procrustes fit on its inliers.
    """
    n = len(bear_from)
    rng = np.random.default_rng(0)  # deterministic: the same matches give the same motion
    i = rng.integers(0, n, _ROTATION_HYPOTHESES)
    j = rng.integers(0, n, _ROTATION_HYPOTHESES)
    tri_from, ok_from = _triads(bear_from[i], bear_from[j])
    tri_to, ok_to = _triads(bear_to[i], bear_to[j])
    ok = ok_from & ok_to & (i != j)
    if not ok.any():
        return None
    rots = tri_to[ok] @ np.transpose(tri_from[ok], (0, 2, 1))  # maps the from-triad onto to
    cos_thr = math.cos(thr_rad)
    scores = (np.einsum("hij,nj,ni->hn", rots, bear_from, bear_to) > cos_thr).sum(axis=1)
    rot = rots[int(np.argmax(scores))]
    for _ in range(2):
        inl = np.einsum("ij,nj,ni->n", rot, bear_from, bear_to) > cos_thr
        if inl.sum() < _MIN_POINTS:
            return None
        # Procrustes: the R maximising sum(b_to . R b_from).
        rot = _nearest_rotation(bear_to[inl].T @ bear_from[inl])
    return rot, np.einsum("ij,nj,ni->n", rot, bear_from, bear_to) > cos_thr


def _triads(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal frames (columns a, a x b, a x (a x b)) and whether a, b were not parallel."""
    c = np.cross(a, b)
    norm = np.linalg.norm(c, axis=1)
    ok = norm > 1e-3
    c = c / np.where(ok, norm, 1.0)[:, None]
    return np.stack([a, c, np.cross(a, c)], axis=2), ok


def _bearings(pts: np.ndarray, k_inv: np.ndarray) -> np.ndarray:
    rays = np.hstack([pts, np.ones((len(pts), 1))]) @ k_inv.T
    return rays / np.linalg.norm(rays, axis=1, keepdims=True)


def _parallax_observed(
    rot_fit: tuple[np.ndarray, np.ndarray],
    fundamental: np.ndarray,
    e_inl: np.ndarray,
    bear_from: np.ndarray,
    pts_from: np.ndarray,
    pts_to: np.ndarray,
    K: np.ndarray,
    thr_px: float,
) -> bool:
    """Whether the essential matrix sees translation that the pure rotation cannot explain."""
    rot, rot_inl = rot_fit
    left_out = ~rot_inl
    if not left_out.any() or not e_inl.any():
        return False
    share = np.count_nonzero(e_inl & left_out) / np.count_nonzero(left_out)
    proj = bear_from[e_inl] @ (K @ rot).T
    rot_resid = np.linalg.norm(proj[:, :2] / proj[:, 2:3] - pts_to[e_inl], axis=1)
    # Sampson distance to the epipolar geometry.
    x1 = np.hstack([pts_from[e_inl], np.ones((int(e_inl.sum()), 1))])
    x2 = np.hstack([pts_to[e_inl], np.ones((int(e_inl.sum()), 1))])
    fx1, ftx2 = x1 @ fundamental.T, x2 @ fundamental
    sampson = np.abs(np.sum(x2 * fx1, axis=1)) / np.sqrt(
        fx1[:, 0] ** 2 + fx1[:, 1] ** 2 + ftx2[:, 0] ** 2 + ftx2[:, 1] ** 2
    )
    # The floor keeps identical views (both residuals ~0) from reading as parallax.
    ratio = np.median(rot_resid) / max(float(np.median(sampson)), 0.05 * thr_px)
    return bool(ratio >= _PARALLAX_RATIO and share >= _PARALLAX_SHARE)


def estimate_motion(pts_from: np.ndarray, pts_to: np.ndarray, K: np.ndarray) -> Motion | None:
    """Camera motion from matched pixels (N, 2) in the earlier and the later image.

    Two models compete: a pure rotation and the essential matrix. Without parallax (the camera
    turned, or moved too little for its view to tell) the essential matrix is degenerate: it
    fits the rotation-consistent matches plus chance outliers, and on its inliers the rotation
    leaves only noise. With parallax the rotation's residuals on them are several times the
    epipolar ones, and the essential matrix explains many matches no rotation does. So the
    motion is a rotation only unless both show; else R and the direction of travel come from
    the essential matrix and the cheirality check of ``recoverPose``. None when the matches
    support neither model.
    """
    pts_from = np.ascontiguousarray(pts_from, dtype=np.float64).reshape(-1, 2)
    pts_to = np.ascontiguousarray(pts_to, dtype=np.float64).reshape(-1, 2)
    K = np.asarray(K, dtype=np.float64)
    if len(pts_from) != len(pts_to):
        raise ValueError(f"{len(pts_from)} points against {len(pts_to)}")
    if len(pts_from) < _MIN_POINTS:
        return None
    thr_px = _INLIER_RAD * float(K[0, 0])
    k_inv = np.linalg.inv(K)
    bear_from, bear_to = _bearings(pts_from, k_inv), _bearings(pts_to, k_inv)
    rot_fit = _rotation_fit(bear_from, bear_to, _ROTATION_SLACK * _INLIER_RAD)

    e, e_mask = cv2.findEssentialMat(pts_from, pts_to, K, _ROBUST, 0.999, thr_px)
    if e is None or e.shape[0] < 3:
        return _motion(rot_fit[0], None) if rot_fit is not None else None
    e = e[:3]  # several stacked solutions are possible; RANSAC ranks the first best
    e_inl = e_mask.ravel().astype(bool)
    if rot_fit is not None and not _parallax_observed(
        rot_fit, k_inv.T @ e @ k_inv, e_inl, bear_from, pts_from, pts_to, K, thr_px
    ):
        return _motion(rot_fit[0], None)
    n_pose, rot, t, _ = cv2.recoverPose(e, pts_from, pts_to, K, mask=e_mask.copy())
    if n_pose < _MIN_POINTS:
        return None
    # recoverPose: X_to = R X_from + t, so the later centre sits at -R^T t in the earlier frame.
    centre = -rot.T @ t.ravel()
    return _motion(rot, centre / np.linalg.norm(centre))


def motion_between(
    img_a: np.ndarray, img_b: np.ndarray, kf: KeyframeConfig, cam: CameraConfig
) -> Motion | None:
    """Motion from image ``img_a`` to image ``img_b`` (same camera, RGB or gray uint8)."""
    return _motion_of(FeatureMatcher(kf), img_a, img_b, None, cam)


def _motion_of(
    matcher: FeatureMatcher,
    img_a: np.ndarray,
    img_b: np.ndarray,
    pairs: MatchPairs | None,
    cam: CameraConfig,
) -> Motion | None:
    if img_a.shape[:2] != img_b.shape[:2]:
        log.warning("no ego-motion between images of sizes %s and %s", img_a.shape, img_b.shape)
        return None
    if pairs is None:
        fa, fb = matcher.detect(img_a), matcher.detect(img_b)
        pairs = matcher.pairs(fa, fb, matcher.match(fa, fb))
    height, width = img_b.shape[:2]
    return pairs_motion(pairs, cam, width, height)


def pairs_motion(pairs: MatchPairs, cam: CameraConfig, width: int, height: int) -> Motion | None:
    """Motion from the matches a key-frame decision carries (``KeyframeDecision.pairs``: the
    previous key frame to this one), for images of ``width`` x ``height``; the streaming use."""
    return estimate_motion(pairs.pts_ref, pairs.pts_cur, camera_matrix(cam, width, height))


def keyframe_motions(
    selection: KeyframeSelection, kf: KeyframeConfig, cam: CameraConfig
) -> list[Motion | None]:
    """Motion between each pair of consecutive chosen key frames (``len(images) - 1`` items).

    Reuses the matches the extractor made where it compared exactly these two frames; only
    pairs that the clamp made non-adjacent are matched again.
    """
    matcher = FeatureMatcher(kf)
    images = selection.images
    pairs = selection.pairs or [None] * len(images)
    return [
        _motion_of(matcher, images[j - 1], images[j], pairs[j], cam)
        for j in range(1, len(images))
    ]

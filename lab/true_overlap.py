"""True overlap between two rendered views, from geometry instead of image features.

The key-frame rule of Embodied-R measures overlap as the share of the reference (key) frame
covered by the current frame's rectangle mapped into it by a homography. Two ground truths:

* :func:`true_overlap` is the 3-D coverage: each pixel of a grid over the reference view is cast
  as a ray onto the floor or a wall (or the sky above the walls, a point at infinity) and
  counts when that point projects inside the current view. Exact for the room, but a
  homography cannot express it when the camera translates (near floor and far wall move
  differently), so it departs from any homography-based measure under translation.
* :func:`true_homography_overlap` is the paper's measure with perfect features: a RANSAC
  homography fitted to the *true* correspondences of that grid (it locks onto the dominant
  plane, as ORB + RANSAC do), then the official rectangle overlap. This is what the key-frame
  extractor estimates, so it is the reference for checking it.

Objects are ignored: they are small against the room.
"""

from __future__ import annotations

import cv2
import numpy as np

from embodied_r_ros.core.overlap import overlap_ratio
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.scene import Scene


def room_hits(scene: Scene, origin: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where rays from ``origin`` (inside the room) first meet the floor or a wall.

    Returns (points N x 3, finite N bool); rays leaving above the walls are not finite and
    their point is the unit direction itself.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        cands = np.stack([
            np.where(dirs[:, 2] < 0, -origin[2] / dirs[:, 2], np.inf),
            np.where(dirs[:, 0] < 0, -origin[0] / dirs[:, 0], np.inf),
            np.where(dirs[:, 0] > 0, (scene.length - origin[0]) / dirs[:, 0], np.inf),
            np.where(dirs[:, 1] < 0, -origin[1] / dirs[:, 1], np.inf),
            np.where(dirs[:, 1] > 0, (scene.width - origin[1]) / dirs[:, 1], np.inf),
        ], axis=1)
    cands = np.where(cands > 0, cands, np.inf)
    s = cands.min(axis=1)
    points = origin + dirs * np.where(np.isfinite(s), s, 0.0)[:, None]
    finite = np.isfinite(s) & (points[:, 2] <= scene.height + 1e-9)
    return np.where(finite[:, None], points, dirs), finite


def correspondences(scene: Scene, camera: PinholeCamera, ref: Pose, cur: Pose,
                    grid: tuple[int, int] = (64, 48)) -> tuple[np.ndarray, np.ndarray]:
    """A grid of reference pixels (N x 2) and where their scene points land in the current
    view (N x 2; NaN when behind the current camera). Pixel-index coordinates."""
    gw, gh = grid
    us = (np.arange(gw) + 0.5) * camera.width / gw - 0.5
    vs = (np.arange(gh) + 0.5) * camera.height / gh - 0.5
    uu, vv = np.meshgrid(us, vs)
    uv = np.stack([uu.ravel(), vv.ravel()], axis=1)
    points, finite = room_hits(scene, ref.position, camera.ray_directions(ref, uv))
    rot = camera.optical_rotation(cur)
    pc = np.where(finite[:, None], (points - cur.position) @ rot, points @ rot)
    ahead = pc[:, 2] > 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        proj = camera.project_camera(np.where(ahead[:, None], pc, 1.0))
    proj[~ahead] = np.nan
    return uv, proj


def _inside(camera: PinholeCamera, uv: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return ((uv[:, 0] >= -0.5) & (uv[:, 0] <= camera.width - 0.5)
                & (uv[:, 1] >= -0.5) & (uv[:, 1] <= camera.height - 0.5))


def true_overlap(scene: Scene, camera: PinholeCamera, ref: Pose, cur: Pose,
                 grid: tuple[int, int] = (64, 48)) -> float:
    """Share of the reference view whose scene points are also inside the current view."""
    uv_ref, uv_cur = correspondences(scene, camera, ref, cur, grid)
    return float(np.count_nonzero(_inside(camera, uv_cur))) / len(uv_ref)


def true_homography_overlap(scene: Scene, camera: PinholeCamera, ref: Pose, cur: Pose,
                            grid: tuple[int, int] = (64, 48),
                            ransac_px: float = 5.0) -> float | None:
    """The official overlap ratio with a homography fitted to true correspondences.

    0.0 when fewer than 8 grid points are shared; None when no homography fits or the warped
    rectangle is degenerate (the extractor keeps a key frame then, too).
    """
    uv_ref, uv_cur = correspondences(scene, camera, ref, cur, grid)
    shared = _inside(camera, uv_cur)
    if np.count_nonzero(shared) < 8:
        return 0.0
    # Continuous coordinates (pixel i spans [i, i + 1]), as core.overlap expects.
    src = (uv_cur[shared] + 0.5).astype(np.float32)
    dst = (uv_ref[shared] + 0.5).astype(np.float32)
    homography, _ = cv2.findHomography(src, dst, cv2.RANSAC, ransac_px)
    if homography is None:
        return None
    size = (camera.width, camera.height)
    return overlap_ratio(homography, size, size)

"""The pinhole camera: intrinsics, world-to-optical transform, projection and frustum clipping.

Pixel centres sit at integer coordinates (OpenCV convention), so the principal point of a
W x H image defaults to ((W - 1) / 2, (H - 1) / 2). The optical frame is the ROS one: x right,
y down, z along the view direction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.egomotion import camera_matrix
from embodied_r_ros.core.poses import BODY_FROM_OPTICAL, Pose


@dataclass(frozen=True)
class PinholeCamera:
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    near: float = 0.05

    def __post_init__(self) -> None:
        if self.width < 8 or self.height < 8:
            raise ValueError(f"image size must be at least 8x8, got {self.width}x{self.height}")
        if self.fx <= 0 or self.fy <= 0:
            raise ValueError("focal lengths must be positive")

    @classmethod
    def from_hfov(cls, width: int, height: int, hfov_deg: float = 70.0) -> PinholeCamera:
        """Square pixels and a centred principal point for a horizontal field of view."""
        if not 1.0 < hfov_deg < 179.0:
            raise ValueError(f"hfov must be in (1, 179) degrees, got {hfov_deg}")
        k = camera_matrix(CameraConfig(hfov_deg=hfov_deg), width, height)
        return cls(width, height, k[0, 0], k[1, 1], k[0, 2], k[1, 2])

    @property
    def K(self) -> np.ndarray:  # noqa: N802 - the usual name of the intrinsic matrix
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def to_config(self) -> CameraConfig:
        """The same intrinsics as the core's camera configuration (for visual ego-motion)."""
        return CameraConfig(fx=self.fx, fy=self.fy, cx=self.cx, cy=self.cy)

    @staticmethod
    def optical_rotation(pose: Pose) -> np.ndarray:
        """3x3 rotation taking optical-frame vectors to the world frame."""
        return pose.rotation() @ BODY_FROM_OPTICAL

    def to_camera(self, pose: Pose, points: np.ndarray) -> np.ndarray:
        """World points (N x 3) in the optical frame of ``pose``."""
        rot = self.optical_rotation(pose)
        return (np.asarray(points, dtype=np.float64) - pose.position) @ rot

    def project_camera(self, pc: np.ndarray) -> np.ndarray:
        """Optical-frame points (N x 3, z > 0) to pixel coordinates (N x 2)."""
        z = pc[:, 2]
        return np.stack([self.fx * pc[:, 0] / z + self.cx, self.fy * pc[:, 1] / z + self.cy], 1)

    def project(self, pose: Pose, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (N x 2) and depths (N,) of world points; depth <= 0 is behind."""
        pc = self.to_camera(pose, points)
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = self.project_camera(pc)
        return uv, pc[:, 2]

    def ray_directions(self, pose: Pose, uv: np.ndarray) -> np.ndarray:
        """Unit world directions of the rays through pixels ``uv`` (N x 2)."""
        d = np.stack([(uv[:, 0] - self.cx) / self.fx, (uv[:, 1] - self.cy) / self.fy,
                      np.ones(len(uv))], axis=1)
        d = d @ self.optical_rotation(pose).T
        return d / np.linalg.norm(d, axis=1, keepdims=True)

    def frustum_planes(self, margin_px: float = 2.0) -> np.ndarray:
        """Planes (M x 4, ``a x + b y + c z + d >= 0`` inside) bounding the visible volume."""
        u0, u1 = -0.5 - margin_px, self.width - 0.5 + margin_px
        v0, v1 = -0.5 - margin_px, self.height - 0.5 + margin_px
        return np.array([
            [0.0, 0.0, 1.0, -self.near],
            [1.0, 0.0, -(u0 - self.cx) / self.fx, 0.0],
            [-1.0, 0.0, (u1 - self.cx) / self.fx, 0.0],
            [0.0, 1.0, -(v0 - self.cy) / self.fy, 0.0],
            [0.0, -1.0, (v1 - self.cy) / self.fy, 0.0],
        ])


def clip_polygon(poly: np.ndarray, planes: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman clipping of a convex polygon (N x 3) by half-spaces; may be empty."""
    out = poly
    for plane in planes:
        if len(out) == 0:
            break
        dist = out @ plane[:3] + plane[3]
        if np.all(dist >= 0.0):
            continue
        if np.all(dist < 0.0):
            return out[:0]
        kept: list[np.ndarray] = []
        n = len(out)
        for i in range(n):
            j = (i + 1) % n
            if dist[i] >= 0.0:
                kept.append(out[i])
            if (dist[i] >= 0.0) != (dist[j] >= 0.0):
                t = dist[i] / (dist[i] - dist[j])
                kept.append(out[i] + t * (out[j] - out[i]))
        out = np.array(kept) if kept else out[:0]
    return out

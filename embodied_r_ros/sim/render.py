"""Painter's-algorithm renderer: textured room surfaces, then shaded objects far to near.

The room is convex and the camera is always inside it, so its surfaces never overlap on screen
and need no depth order; each is cut into chunks, frustum-clipped and drawn by warping its
texture with the homography its plane induces (from a mip level chosen per chunk, so distant
floor does not alias into noise that ORB would chase). Objects are convex polyhedra drawn with
back-face culling, farthest first; an object-id buffer drawn alongside gives true visibility.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera, clip_polygon
from embodied_r_ros.sim.scene import Mesh, Scene, Surface, object_mesh

_SHIFT = 4  # fixed-point bits for sub-pixel polygon vertices
_SCALE = float(1 << _SHIFT)
_CHUNK_M = 2.0
_MIP_LEVELS = 5
_SKY_TOP = np.array([150.0, 185.0, 225.0])
_SKY_BOTTOM = np.array([205.0, 220.0, 235.0])


@dataclass(frozen=True)
class RenderedFrame:
    image: np.ndarray  # H x W x 3 uint8 RGB
    ids: np.ndarray  # H x W uint8: 0 background, k + 1 where scene object k is visible
    object_pixels: np.ndarray  # (n_objects,) visible pixel count of each scene object


@dataclass(frozen=True)
class _Chunk:
    surface: int
    corners: np.ndarray  # 4 x 3 world


class Renderer:
    """Renders ``scene`` through ``camera``; deterministic for a given pose."""

    def __init__(self, scene: Scene, camera: PinholeCamera) -> None:
        self.scene = scene
        self.camera = camera
        self._planes = camera.frustum_planes()
        self._meshes: tuple[Mesh, ...] = tuple(object_mesh(o) for o in scene.objects)
        self._mips = tuple(_pyramid(s.texture) for s in scene.surfaces)
        self._chunks = tuple(
            chunk for i, s in enumerate(scene.surfaces) for chunk in _split(i, s, _CHUNK_M)
        )
        rows = np.linspace(0.0, 1.0, camera.height)[:, None]
        sky = (1.0 - rows) * _SKY_TOP + rows * _SKY_BOTTOM
        self._sky = np.ascontiguousarray(
            np.broadcast_to(sky[:, None, :], (camera.height, camera.width, 3)).astype(np.uint8)
        )

    def render(self, pose: Pose) -> RenderedFrame:
        image = self._sky.copy()
        ids = np.zeros((self.camera.height, self.camera.width), np.uint8)
        rot = self.camera.optical_rotation(pose)
        for chunk in self._chunks:
            self._draw_chunk(image, chunk, pose, rot)
        centre = pose.position
        order = sorted(
            range(len(self.scene.objects)),
            key=lambda k: -float(np.linalg.norm(self.scene.objects[k].centre - centre)),
        )
        for k in order:
            self._draw_object(image, ids, k, pose)
        counts = np.bincount(ids.ravel(), minlength=len(self.scene.objects) + 1)[1:]
        return RenderedFrame(image, ids, counts.astype(np.int64))

    # -------------------------------------------------------------- surfaces

    def _draw_chunk(self, image: np.ndarray, chunk: _Chunk, pose: Pose, rot: np.ndarray) -> None:
        cam = self.camera
        pc = (chunk.corners - pose.position) @ rot
        clipped = clip_polygon(pc, self._planes)
        if len(clipped) < 3:
            return
        uv = cam.project_camera(clipped)
        x0, y0 = (max(0, int(math.floor(v))) for v in uv.min(axis=0))
        x1 = min(cam.width, int(math.ceil(uv[:, 0].max())) + 1)
        y1 = min(cam.height, int(math.ceil(uv[:, 1].max())) + 1)
        if x1 <= x0 or y1 <= y0:
            return
        surface = self.scene.surfaces[chunk.surface]
        level = self._mip_level(surface, clipped, uv, pose, rot)
        tex = self._mips[chunk.surface][level]
        scale = float(1 << level)
        u, v = surface.axis_u * scale, surface.axis_v * scale
        origin = surface.origin + 0.5 * (u + v) - pose.position
        homography = cam.K @ rot.T @ np.column_stack([u, v, origin])
        shift = np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0], [0.0, 0.0, 1.0]])
        size = (x1 - x0, y1 - y0)
        warped = cv2.warpPerspective(tex, shift @ homography, size, flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_REFLECT)
        mask = np.zeros((size[1], size[0]), np.uint8)
        pts = np.round((uv - [x0, y0]) * _SCALE).astype(np.int32)
        cv2.fillConvexPoly(mask, pts, 1, lineType=cv2.LINE_8, shift=_SHIFT)
        roi = image[y0:y1, x0:x1]
        np.copyto(roi, warped, where=mask.astype(bool)[..., None])

    def _mip_level(self, surface: Surface, clipped: np.ndarray, uv: np.ndarray, pose: Pose,
                   rot: np.ndarray) -> int:
        """Texture level whose texels are about one pixel on screen (area average)."""
        pixel_area = _polygon_area(uv)
        if pixel_area < 1.0:
            return _MIP_LEVELS - 1
        world = clipped @ rot.T + pose.position
        texel = float(np.linalg.norm(surface.axis_u))
        world_area = _polygon_area_3d(world)
        ratio = world_area / (texel * texel) / pixel_area
        if ratio <= 1.0:
            return 0
        return int(min(_MIP_LEVELS - 1, math.floor(0.5 * math.log2(ratio) + 0.25)))

    # -------------------------------------------------------------- objects

    def _draw_object(self, image: np.ndarray, ids: np.ndarray, k: int, pose: Pose) -> None:
        mesh = self._meshes[k]
        cam = self.camera
        pc = cam.to_camera(pose, mesh.vertices)
        inside = np.all(pc @ self._planes[:, :3].T + self._planes[:, 3] >= 0.0, axis=1)
        to_eye = pose.position - mesh.vertices[[f[0] for f in mesh.faces]]
        facing = np.einsum("ij,ij->i", mesh.normals, to_eye) > 1e-9
        with np.errstate(divide="ignore", invalid="ignore"):
            uv_all = cam.project_camera(pc)
        for f in np.flatnonzero(facing):
            face = mesh.faces[f]
            if inside[face].all():
                uv = uv_all[face]
            else:
                clipped = clip_polygon(pc[face], self._planes)
                if len(clipped) < 3:
                    continue
                uv = cam.project_camera(clipped)
            pts = np.round(uv * _SCALE).astype(np.int32)
            colour = tuple(int(c) for c in mesh.colours[f])
            cv2.fillConvexPoly(image, pts, colour, lineType=cv2.LINE_8, shift=_SHIFT)
            cv2.fillConvexPoly(ids, pts, k + 1, lineType=cv2.LINE_8, shift=_SHIFT)


def _pyramid(texture: np.ndarray) -> tuple[np.ndarray, ...]:
    levels = [texture]
    for _ in range(_MIP_LEVELS - 1):
        prev = levels[-1]
        if min(prev.shape[:2]) < 4:
            levels.append(prev)
        else:
            levels.append(cv2.pyrDown(prev))
    return tuple(levels)


def _split(index: int, surface: Surface, chunk_m: float) -> list[_Chunk]:
    h, w = surface.texture.shape[:2]
    du = float(np.linalg.norm(surface.axis_u))
    dv = float(np.linalg.norm(surface.axis_v))
    nu = max(1, round(w * du / chunk_m))
    nv = max(1, round(h * dv / chunk_m))
    cols = np.linspace(0, w, nu + 1)
    rows = np.linspace(0, h, nv + 1)
    out = []
    for i in range(nv):
        for j in range(nu):
            corners = [
                surface.origin + c * surface.axis_u + r * surface.axis_v
                for c, r in ((cols[j], rows[i]), (cols[j + 1], rows[i]),
                             (cols[j + 1], rows[i + 1]), (cols[j], rows[i + 1]))
            ]
            out.append(_Chunk(index, np.array(corners)))
    return out


def _polygon_area(uv: np.ndarray) -> float:
    x, y = uv[:, 0], uv[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _polygon_area_3d(points: np.ndarray) -> float:
    return 0.5 * float(np.linalg.norm(np.sum(np.cross(points, np.roll(points, -1, axis=0)), 0)))

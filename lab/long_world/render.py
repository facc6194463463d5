"""Ray-cast renderer for the long world: walls hide what lies behind them.

The short worlds' painter's renderer relies on one convex room; several rooms need occlusion.
Walls are vertical and the floor flat, so every pixel's ray is cut against the plan in 2-D:
the nearest wall side it faces (looked up per azimuth, then solved exactly per pixel) or the
floor, whichever comes first; rays that clear the walls see the sky. That gives a depth per
pixel, against which the objects (the short worlds' shaded meshes, far to near) are drawn, so
the object-id buffer, and with it the visibility the questions use, respects walls.

Textures are sampled from the atlas mip level whose texels are about one pixel on screen, as
in the short worlds, so distant floor does not alias into noise that ORB would chase.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera, clip_polygon
from embodied_r_ros.sim.render import RenderedFrame
from embodied_r_ros.sim.scene import Mesh, SceneObject, object_mesh
from lab.long_world.floor_plan import FloorPlan
from lab.long_world.textures import MIP_LEVELS, Atlases

_SKY_TOP = np.array([150.0, 185.0, 225.0])
_SKY_BOTTOM = np.array([205.0, 220.0, 235.0])
_AZIMUTH_BINS = 2048
_SHIFT = 4  # fixed-point bits for sub-pixel polygon vertices
_REMAP_ROW = 256  # remap works on images under 32767 pixels a side: gathered pixels in rows


class LongRenderer:
    """Renders a floor plan with objects through ``camera``; deterministic for a pose."""

    def __init__(self, plan: FloorPlan, objects: tuple[SceneObject, ...], atlases: Atlases,
                 camera: PinholeCamera) -> None:
        if len(objects) > 254:
            raise ValueError("the object-id buffer holds at most 254 objects")
        self.plan = plan
        self.objects = objects
        self.atlases = atlases
        self.camera = camera
        self._planes = camera.frustum_planes()
        self._meshes: tuple[Mesh, ...] = tuple(object_mesh(o) for o in objects)
        u, v = np.meshgrid(np.arange(camera.width, dtype=np.float64),
                           np.arange(camera.height, dtype=np.float64))
        self._rays = np.stack([(u - camera.cx) / camera.fx, (v - camera.cy) / camera.fy,
                               np.ones_like(u)], axis=-1).reshape(-1, 3)
        self._face_a = np.array([f.a for f in plan.faces])
        self._face_e = np.array([f.b for f in plan.faces]) - self._face_a
        self._face_n = np.array([f.normal for f in plan.faces])
        self._face_a32 = self._face_a.astype(np.float32)
        self._face_e32 = self._face_e.astype(np.float32)
        self._by_pitch: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        rows = np.linspace(0.0, 1.0, camera.height)[:, None]
        sky = (1.0 - rows) * _SKY_TOP + rows * _SKY_BOTTOM
        self._sky = np.broadcast_to(sky[:, None, :], (camera.height, camera.width, 3)
                                    ).reshape(-1, 3).astype(np.uint8)

    # -------------------------------------------------------------- surfaces
    def _heading_rays(self, pitch_deg: float) -> tuple[np.ndarray, np.ndarray]:
        """Pixel rays in the heading frame (yaw 0) and their azimuths, per camera tilt: the
        tour keeps one tilt, so a frame only turns these by its yaw."""
        if pitch_deg not in self._by_pitch:
            rot = self.camera.optical_rotation(Pose(pitch_deg=pitch_deg))
            rays = (self._rays @ rot.T).astype(np.float32)
            azimuth = np.arctan2(rays[:, 1], rays[:, 0]).astype(np.float32)
            self._by_pitch[pitch_deg] = (rays, azimuth)
        return self._by_pitch[pitch_deg]

    def _nearest_faces(self, pose: Pose, azimuth: np.ndarray) -> np.ndarray:
        """Per pixel, the wall face its horizontal ray meets first (-1: none), found on a
        table of azimuths (relative to the heading) spanning the view."""
        lo, hi = float(azimuth.min()), float(azimuth.max())
        bins = math.radians(pose.yaw_deg) + np.linspace(lo, hi, _AZIMUTH_BINS)
        d = np.stack([np.cos(bins), np.sin(bins)], axis=1)
        ao = self._face_a - [pose.x, pose.y]
        e = self._face_e
        denom = d[:, :1] * e[None, :, 1] - d[:, 1:] * e[None, :, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            s = (ao[:, 0] * e[:, 1] - ao[:, 1] * e[:, 0])[None, :] / denom
            w = (ao[None, :, 0] * d[:, 1:] - ao[None, :, 1] * d[:, :1]) / denom
        hit = (denom > 1e-12) & (s > 1e-6) & (w >= 0.0) & (w <= 1.0)
        s = np.where(hit, s, np.inf)
        best = np.argmin(s, axis=1)
        best = np.where(np.isfinite(s[np.arange(len(bins)), best]), best, -1)
        scale = (_AZIMUTH_BINS - 1) / max(hi - lo, 1e-12)
        return best[np.rint((azimuth - lo) * scale).astype(np.int64)]

    def _surfaces(self, pose: Pose) -> tuple[np.ndarray, np.ndarray]:
        """Colour (P x 3) and optical depth (P,) of the walls, floor and sky for each pixel."""
        at = self.atlases
        cam = pose.position
        heading_rays, azimuth = self._heading_rays(pose.pitch_deg)
        c, s_ = math.cos(math.radians(pose.yaw_deg)), math.sin(math.radians(pose.yaw_deg))
        rx = c * heading_rays[:, 0] - s_ * heading_rays[:, 1]
        ry = s_ * heading_rays[:, 0] + c * heading_rays[:, 1]
        rz = heading_rays[:, 2]
        face = self._nearest_faces(pose, azimuth)
        f = np.maximum(face, 0)
        a, e = self._face_a32[f], self._face_e32[f]
        ao_x, ao_y = a[:, 0] - np.float32(cam[0]), a[:, 1] - np.float32(cam[1])
        denom = rx * e[:, 1] - ry * e[:, 0]
        ok = (face >= 0) & (np.abs(denom) > 1e-9)
        safe = np.where(ok, denom, np.float32(1.0))
        s_wall = (ao_x * e[:, 1] - ao_y * e[:, 0]) / safe
        s_wall[~ok | (s_wall <= 0.0)] = np.inf
        down = rz < 0.0
        s_floor = np.full(len(rz), np.inf, np.float32)
        s_floor[down] = np.float32(-cam[2]) / rz[down]
        on_floor = s_floor <= s_wall
        with np.errstate(invalid="ignore"):
            z_wall = np.float32(cam[2]) + s_wall * rz
        on_wall = ~on_floor & (z_wall <= self.plan.height)
        depth = np.where(on_floor, s_floor, np.where(on_wall, s_wall, np.float32(np.inf)))
        colour = self._sky.copy()
        k = self.camera.fx * self.camera.fy
        if on_floor.any():
            idx = np.flatnonzero(on_floor)
            s = s_floor[idx]
            col = (cam[0] + s * rx[idx] - at.origin[0]) * at.ppm - 0.5
            row = (cam[1] + s * ry[idx] - at.origin[1]) * at.ppm - 0.5
            area = cam[2] ** 2 / (k * np.abs(rz[idx]) ** 3)
            colour[idx] = self._sample(at.floor, col, row, area * at.ppm ** 2)
        if on_wall.any():
            idx = np.flatnonzero(on_wall)
            fi = f[idx]
            w = (ao_x[idx] * ry[idx] - ao_y[idx] * rx[idx]) / safe[idx]
            w = np.clip(w, 0.0, 1.0)
            col = at.face_col[fi] + (1.0 - w) * at.face_cols[fi] - 0.5
            row = at.face_row[fi] + (self.plan.height - z_wall[idx]) * at.ppm - 0.5
            n = self._face_n[fi]
            perp = np.abs(n[:, 0] * (cam[0] - self._face_a[fi, 0])
                          + n[:, 1] * (cam[1] - self._face_a[fi, 1]))
            cos = np.abs(n[:, 0] * rx[idx] + n[:, 1] * ry[idx])
            area = perp ** 2 / (k * np.maximum(cos, 1e-9) ** 3)
            colour[idx] = self._sample(at.walls, col, row, area * at.ppm ** 2)
        return colour, depth

    @staticmethod
    def _sample(levels: tuple[np.ndarray, ...], col: np.ndarray, row: np.ndarray,
                ratio: np.ndarray) -> np.ndarray:
        """Bilinear texels at level-0 coordinates, each from the level with ~1 texel/pixel."""
        with np.errstate(divide="ignore"):
            level = np.floor(0.5 * np.log2(np.maximum(ratio, 1e-12)) + 0.25)
        level = np.clip(level, 0, MIP_LEVELS - 1).astype(np.int64)
        out = np.empty((len(col), 3), np.uint8)
        for lv in range(MIP_LEVELS):
            sel = np.flatnonzero(level == lv)
            if len(sel) == 0:
                continue
            scale = float(1 << lv)
            n = len(sel)
            padded = -(-n // _REMAP_ROW) * _REMAP_ROW
            mx = np.zeros(padded, np.float32)
            my = np.zeros(padded, np.float32)
            mx[:n] = (col[sel] + 0.5) / scale - 0.5
            my[:n] = (row[sel] + 0.5) / scale - 0.5
            got = cv2.remap(levels[lv], mx.reshape(-1, _REMAP_ROW),
                            my.reshape(-1, _REMAP_ROW), cv2.INTER_LINEAR,
                            borderMode=cv2.BORDER_REFLECT)
            out[sel] = got.reshape(-1, 3)[:n]
        return out

    # -------------------------------------------------------------- objects
    def _draw_object(self, image: np.ndarray, ids: np.ndarray, depth: np.ndarray, k: int,
                     pose: Pose, rot: np.ndarray) -> None:
        """Faces of object ``k`` where they are nearer than the walls and floor."""
        mesh = self._meshes[k]
        cam = self.camera
        pc = (mesh.vertices - pose.position) @ rot
        if np.any(np.all(pc @ self._planes[:, :3].T + self._planes[:, 3] < 0.0, axis=0)):
            return  # wholly outside one side of the view
        inside = np.all(pc @ self._planes[:, :3].T + self._planes[:, 3] >= 0.0, axis=1)
        to_eye = pose.position - mesh.vertices[[f[0] for f in mesh.faces]]
        facing = np.einsum("ij,ij->i", mesh.normals, to_eye) > 1e-9
        with np.errstate(divide="ignore", invalid="ignore"):
            uv_all = cam.project_camera(pc)
        h, w = ids.shape
        for f in np.flatnonzero(facing):
            face = mesh.faces[f]
            if inside[face].all():
                poly, uv = pc[face], uv_all[face]
            else:
                poly = clip_polygon(pc[face], self._planes)
                if len(poly) < 3:
                    continue
                uv = cam.project_camera(poly)
            x0 = max(0, int(math.floor(uv[:, 0].min())))
            y0 = max(0, int(math.floor(uv[:, 1].min())))
            x1 = min(w, int(math.ceil(uv[:, 0].max())) + 1)
            y1 = min(h, int(math.ceil(uv[:, 1].max())) + 1)
            if x1 <= x0 or y1 <= y0:
                continue
            mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
            pts = np.round((uv - [x0, y0]) * (1 << _SHIFT)).astype(np.int32)
            cv2.fillConvexPoly(mask, pts, 1, lineType=cv2.LINE_8, shift=_SHIFT)
            ys, xs = np.nonzero(mask)
            if len(ys) == 0:
                continue
            ys, xs = ys + y0, xs + x0
            normal = rot.T @ mesh.normals[f]  # in the optical frame
            offset = float(normal @ poly[0])
            along = (normal[0] * (xs - cam.cx) / cam.fx + normal[1] * (ys - cam.cy) / cam.fy
                     + normal[2])
            with np.errstate(divide="ignore", invalid="ignore"):
                z = offset / along
            front = (z > 0.0) & (z < depth[ys, xs])
            ys, xs = ys[front], xs[front]
            image[ys, xs] = mesh.colours[f]
            ids[ys, xs] = k + 1

    def render(self, pose: Pose) -> RenderedFrame:
        cam = self.camera
        rot = cam.optical_rotation(pose)
        colour, depth = self._surfaces(pose)
        image = colour.reshape(cam.height, cam.width, 3)
        depth = depth.reshape(cam.height, cam.width)
        ids = np.zeros((cam.height, cam.width), np.uint8)
        centre = pose.position
        order = sorted(range(len(self.objects)),
                       key=lambda k: -float(np.linalg.norm(self.objects[k].centre - centre)))
        for k in order:
            self._draw_object(image, ids, depth, k, pose, rot)
        counts = np.bincount(ids.ravel(), minlength=len(self.objects) + 1)[1:]
        return RenderedFrame(image, ids, counts.astype(np.int64))

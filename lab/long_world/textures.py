"""The long world's surface textures, packed into two atlases: one floor, one for all walls.

Each room gets its own floor and every wall side its own panels and posters (the short
worlds' texture generators), so places look different from each other, as a memory needs;
a plate with the room's name hangs beside each doorway on both sides, so "room 3" can be
read off the video. The atlases keep a mip pyramid each, for the ray-cast renderer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from embodied_r_ros.sim.scene import TEXTURE_PX_PER_M, floor_texture, wall_texture
from lab.long_world.floor_plan import CORRIDOR, FloorPlan, WallFace

MIP_LEVELS = 5
_PAD_PX = 32  # between wall textures in the atlas, so coarse mip levels do not bleed
_ATLAS_COLS = 8192  # below OpenCV's remap limit of 32767 pixels a side
_PLATE_M = (1.0, 0.4)  # width, height of a name plate
_PLATE_TOP_M = 1.95
_PLATE_FROM_JAMB_M = 0.75


@dataclass(frozen=True)
class Atlases:
    """Floor and wall atlases (mip pyramids, RGB uint8) and where each wall face lies.

    Floor texel (col, row) covers world ``(x0 + col / ppm, y0 + row / ppm)``. Wall face ``f``
    occupies columns ``face_col[f] .. face_col[f] + face_cols[f]`` and rows
    ``face_row[f] .. face_row[f] + wall_rows`` of the wall atlas; its columns run from ``b``
    to ``a`` (left to right for a viewer facing it) and its rows from the top down.
    """

    ppm: float
    origin: tuple[float, float]
    floor: tuple[np.ndarray, ...]
    walls: tuple[np.ndarray, ...]
    face_col: np.ndarray
    face_row: np.ndarray
    face_cols: np.ndarray
    wall_rows: int


def _pyramid(image: np.ndarray) -> tuple[np.ndarray, ...]:
    levels = [image]
    for _ in range(MIP_LEVELS - 1):
        levels.append(cv2.pyrDown(levels[-1]))
    return tuple(levels)


def _shade(face: WallFace) -> float:
    """Walls facing different ways are lit differently, as in the short worlds' room."""
    nx, ny = face.normal
    angle = math.degrees(math.atan2(ny, nx))
    return 0.72 + 0.2 * (0.5 + 0.5 * math.cos(math.radians(angle - 60.0)))


def _plate(texture: np.ndarray, centre_col: float, text: str, ppm: float,
           height_m: float) -> None:
    """A light plate with dark text, centred at ``centre_col``, top at ``_PLATE_TOP_M``."""
    w, h = round(_PLATE_M[0] * ppm), round(_PLATE_M[1] * ppm)
    x0 = int(round(centre_col - w / 2))
    y0 = int(round((height_m - _PLATE_TOP_M) * ppm))
    if x0 < 2 or x0 + w > texture.shape[1] - 2:
        return
    cv2.rectangle(texture, (x0, y0), (x0 + w, y0 + h), (238, 238, 232), -1)
    cv2.rectangle(texture, (x0, y0), (x0 + w, y0 + h), (30, 30, 30), 2)
    font = cv2.FONT_HERSHEY_SIMPLEX
    (tw, th), _ = cv2.getTextSize(text, font, 1.0, 2)
    scale = min((w - 8) / tw, (h - 8) / th)
    (tw, th), _ = cv2.getTextSize(text, font, scale, 2)
    org = (x0 + (w - tw) // 2, y0 + (h + th) // 2)
    cv2.putText(texture, text, org, font, scale, (20, 20, 20), 2, cv2.LINE_AA)


def _plates(plan: FloorPlan, f: int, texture: np.ndarray, ppm: float) -> None:
    """Name plates on face ``f`` beside the doorways it ends at."""
    face = plan.faces[f]
    for door in plan.doors:
        room = next(a for a in door.areas if plan.areas[a].kind != CORRIDOR)
        text = plan.areas[room].name.upper()
        half = door.width / 2.0
        along = (door.normal[1], -door.normal[0])
        jamb = (door.x + half * along[0], door.y + half * along[1])  # one jamb per door
        for end, at_a in ((face.a, True), (face.b, False)):
            if math.dist(end, jamb) > 1e-6 or face.length < _PLATE_FROM_JAMB_M + _PLATE_M[0]:
                continue
            from_a = _PLATE_FROM_JAMB_M if at_a else face.length - _PLATE_FROM_JAMB_M
            _plate(texture, (face.length - from_a) * ppm, text, ppm, plan.height)


def make_atlases(plan: FloorPlan, seed: int, ppm: float = TEXTURE_PX_PER_M) -> Atlases:
    """Every surface's texture, drawn from ``seed`` (deterministic, a second or two)."""
    x0, y0, x1, y1 = plan.bounds
    floor = np.zeros((round((y1 - y0) * ppm), round((x1 - x0) * ppm), 3), np.uint8)
    for i, area in enumerate(plan.areas):
        rng = np.random.default_rng([seed, 0x7E47, 0, i])
        c0, r0 = round((area.x0 - x0) * ppm), round((area.y0 - y0) * ppm)
        c1, r1 = round((area.x1 - x0) * ppm), round((area.y1 - y0) * ppm)
        floor[r0:r1, c0:c1] = floor_texture(rng, r1 - r0, c1 - c0)
    rows = round(plan.height * ppm)
    cols = [round(f.length * ppm) for f in plan.faces]
    place_col, place_row = [], []
    col, row = _PAD_PX, _PAD_PX
    for c in cols:
        if col + c + _PAD_PX > _ATLAS_COLS:
            col, row = _PAD_PX, row + rows + _PAD_PX
        place_col.append(col)
        place_row.append(row)
        col += c + _PAD_PX
    walls = np.full((row + rows + _PAD_PX, _ATLAS_COLS, 3), 128, np.uint8)
    for f, face in enumerate(plan.faces):
        rng = np.random.default_rng([seed, 0x7E47, 1, f])
        texture = wall_texture(rng, rows, cols[f], _shade(face))
        _plates(plan, f, texture, ppm)
        walls[place_row[f]:place_row[f] + rows, place_col[f]:place_col[f] + cols[f]] = texture
    return Atlases(ppm, (x0, y0), _pyramid(floor), _pyramid(walls),
                   np.array(place_col, np.float64), np.array(place_row, np.float64),
                   np.array(cols, np.float64), rows)

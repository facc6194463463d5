"""A walled room with textured surfaces and named, coloured objects, all from a seed.

Surfaces carry procedural, non-repeating, desaturated textures (tiles, panels, posters, noise)
so ORB finds many distinctive corners and homographies between views are well determined,
while only the objects are vividly coloured: their names ("red box") are then unambiguous to a
VLM and to the colour-region stand-in in :mod:`embodied_r_ros.core.colors`.

World frame: x east/forward, y north/left, z up; the room spans [0, length] x [0, width] x
[0, height] and every object stands on the floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import cv2
import numpy as np

# Vivid RGB colours whose hues fall in the bins of core.colors.hue_name, so the name we give an
# object is the name the colour-region summary would give it.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "orange": (240, 135, 25),
    "yellow": (230, 205, 30),
    "green": (40, 175, 60),
    "cyan": (30, 195, 210),
    "blue": (35, 75, 220),
    "purple": (135, 45, 200),
    "magenta": (215, 35, 165),
}
SHAPES: tuple[str, ...] = ("box", "cylinder", "cone", "sphere")
MAX_OBJECTS = len(COLOURS)

TEXTURE_PX_PER_M = 64.0
_MAX_SURFACE_SATURATION = 80  # of 255: surfaces never look like a coloured object
_LIGHT = np.array([0.45, 0.3, 0.84]) / np.linalg.norm([0.45, 0.3, 0.84])
_ROUND_SIDES = 20


@dataclass(frozen=True)
class SceneObject:
    """A named object standing on the floor.

    ``size`` is (length, width, height) in metres; round shapes have length == width == the
    diameter. ``yaw_deg`` turns a box about its vertical axis.
    """

    name: str
    colour: str
    shape: str
    x: float
    y: float
    size: tuple[float, float, float]
    yaw_deg: float = 0.0

    @property
    def rgb(self) -> tuple[int, int, int]:
        return COLOURS[self.colour]

    @property
    def height(self) -> float:
        return self.size[2]

    @property
    def centre(self) -> np.ndarray:
        return np.array([self.x, self.y, self.size[2] / 2.0])

    def footprint(self) -> np.ndarray:
        """Convex ground outline (N x 2, counter-clockwise), the widest horizontal section."""
        return self._outline

    @cached_property
    def _outline(self) -> np.ndarray:
        if self.shape == "box":
            hl, hw = self.size[0] / 2.0, self.size[1] / 2.0
            local = np.array([[hl, hw], [-hl, hw], [-hl, -hw], [hl, -hw]])
            c, s = math.cos(math.radians(self.yaw_deg)), math.sin(math.radians(self.yaw_deg))
            rot = np.array([[c, -s], [s, c]])
            return local @ rot.T + [self.x, self.y]
        radius = self.size[0] / 2.0
        ang = np.linspace(0.0, 2.0 * math.pi, _ROUND_SIDES, endpoint=False)
        return np.stack([self.x + radius * np.cos(ang), self.y + radius * np.sin(ang)], axis=1)

    def distance_to(self, other: SceneObject) -> float:
        """Closest-point distance between the two objects (their ground outlines; 0 if touching).

        Everything stands on the floor, so for prisms and cones the closest points lie in the
        ground outline; for a sphere this is its equator, a close approximation.
        """
        return polygon_distance(self.footprint(), other.footprint())

    def distance_to_point(self, x: float, y: float) -> float:
        """Horizontal distance from a point to the object's outline (0 inside)."""
        return float(_outline_distances(np.array([[x, y]]), self.footprint())[0])


@dataclass(frozen=True)
class Mesh:
    """Convex polygons of one object: vertex index lists, outward normals and shaded colours."""

    vertices: np.ndarray  # V x 3
    faces: tuple[np.ndarray, ...]  # each: indices into vertices, counter-clockwise from outside
    normals: np.ndarray  # F x 3
    colours: np.ndarray  # F x 3, uint8 RGB after Lambert shading


@dataclass(frozen=True)
class Surface:
    """A textured planar rectangle: texture pixel (col, row) sits at ``origin + col*u + row*v``."""

    name: str
    origin: np.ndarray
    axis_u: np.ndarray  # metres per texture column
    axis_v: np.ndarray  # metres per texture row
    texture: np.ndarray  # H x W x 3 uint8 RGB

    def corners(self) -> np.ndarray:
        h, w = self.texture.shape[:2]
        o, u, v = self.origin, self.axis_u * w, self.axis_v * h
        return np.array([o, o + u, o + u + v, o + v])


@dataclass(frozen=True)
class Scene:
    seed: int
    length: float  # along x
    width: float  # along y
    height: float  # walls
    objects: tuple[SceneObject, ...]
    surfaces: tuple[Surface, ...]

    def object(self, name: str) -> SceneObject:
        for obj in self.objects:
            if obj.name == name:
                return obj
        raise KeyError(f"no object named {name!r}")

    def clearance(self, x: float, y: float) -> float:
        """Horizontal distance from a point to the nearest wall or object outline."""
        walls = min(x, y, self.length - x, self.width - y)
        objects = min((o.distance_to_point(x, y) for o in self.objects), default=math.inf)
        return min(walls, objects)


def _outline_distances(points: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Distance of each point (M x 2) to a convex counter-clockwise polygon (0 inside)."""
    a = poly[None, :, :]
    ab = np.roll(poly, -1, axis=0)[None, :, :] - a
    ap = points[:, None, :] - a
    t = np.clip(np.sum(ap * ab, axis=2) / np.maximum(np.sum(ab * ab, axis=2), 1e-12), 0.0, 1.0)
    dist = np.linalg.norm(ap - t[..., None] * ab, axis=2).min(axis=1)
    cross = ab[..., 0] * ap[..., 1] - ab[..., 1] * ap[..., 0]
    return np.where(np.all(cross >= 0.0, axis=1), 0.0, dist)


def _edges_cross(p: np.ndarray, q: np.ndarray) -> bool:
    """Whether any edge of ``p`` properly crosses an edge of ``q``."""
    a, b = p[:, None, :], np.roll(p, -1, axis=0)[:, None, :]
    c, d = q[None, :, :], np.roll(q, -1, axis=0)[None, :, :]

    def orient(o: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return (u[..., 0] - o[..., 0]) * (v[..., 1] - o[..., 1]) - (
            u[..., 1] - o[..., 1]) * (v[..., 0] - o[..., 0])

    return bool(np.any((orient(a, b, c) * orient(a, b, d) < 0)
                       & (orient(c, d, a) * orient(c, d, b) < 0)))


def polygon_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Distance between two convex counter-clockwise polygons (0 when they overlap).

    For convex polygons that do not intersect, the closest pair always involves a vertex of
    one of them, so vertex-to-outline distances both ways suffice once crossing edges (an
    overlap with no vertex inside the other polygon) are ruled out.
    """
    if _edges_cross(p, q):
        return 0.0
    return float(min(_outline_distances(p, q).min(), _outline_distances(q, p).min()))


# ---------------------------------------------------------------- meshes


def _shade(normals: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    lambert = np.clip(normals @ _LIGHT, 0.0, 1.0)
    factor = 0.5 + 0.5 * lambert
    return np.clip(factor[:, None] * np.array(rgb, dtype=np.float64), 0, 255).astype(np.uint8)


def _prism(outline: np.ndarray, z0: float, z1: float) -> tuple[np.ndarray, list[np.ndarray]]:
    n = len(outline)
    bottom = np.column_stack([outline, np.full(n, z0)])
    top = np.column_stack([outline, np.full(n, z1)])
    verts = np.vstack([bottom, top])
    faces = [np.arange(n, 2 * n), np.arange(n - 1, -1, -1)]  # top (ccw from above), bottom
    faces += [np.array([i, (i + 1) % n, n + (i + 1) % n, n + i]) for i in range(n)]
    return verts, faces


def _cone(outline: np.ndarray, height: float) -> tuple[np.ndarray, list[np.ndarray]]:
    n = len(outline)
    centre = outline.mean(axis=0)
    verts = np.vstack([np.column_stack([outline, np.zeros(n)]), [[*centre, height]]])
    faces = [np.arange(n - 1, -1, -1)] + [np.array([i, (i + 1) % n, n]) for i in range(n)]
    return verts, faces


def _sphere(obj: SceneObject, rings: int = 8, sectors: int = 14) -> tuple[
    np.ndarray, list[np.ndarray]
]:
    r = obj.size[0] / 2.0
    centre = np.array([obj.x, obj.y, r])
    verts = [centre + [0.0, 0.0, -r]]
    for i in range(1, rings):
        theta = -math.pi / 2 + math.pi * i / rings
        for j in range(sectors):
            phi = 2.0 * math.pi * j / sectors
            verts.append(centre + r * np.array([
                math.cos(theta) * math.cos(phi), math.cos(theta) * math.sin(phi), math.sin(theta)
            ]))
    verts.append(centre + [0.0, 0.0, r])
    top = len(verts) - 1

    def ring(i: int, j: int) -> int:
        return 1 + (i - 1) * sectors + j % sectors

    faces = [np.array([0, ring(1, j + 1), ring(1, j)]) for j in range(sectors)]
    for i in range(1, rings - 1):
        faces += [
            np.array([ring(i, j), ring(i, j + 1), ring(i + 1, j + 1), ring(i + 1, j)])
            for j in range(sectors)
        ]
    faces += [np.array([ring(rings - 1, j), ring(rings - 1, j + 1), top]) for j in range(sectors)]
    return np.array(verts), faces


def object_mesh(obj: SceneObject) -> Mesh:
    """Polygons of ``obj`` with outward normals and fixed-light shading."""
    if obj.shape in ("box", "cylinder"):
        verts, faces = _prism(obj.footprint(), 0.0, obj.height)
    elif obj.shape == "cone":
        verts, faces = _cone(obj.footprint(), obj.height)
    elif obj.shape == "sphere":
        verts, faces = _sphere(obj)
    else:
        raise ValueError(f"unknown shape {obj.shape!r}")
    normals = []
    for face in faces:
        p = verts[face]
        n = np.cross(p[1] - p[0], p[2] - p[0])
        if np.linalg.norm(n) < 1e-12:  # degenerate first corner: use Newell's method
            n = np.sum(np.cross(p, np.roll(p, -1, axis=0)), axis=0)
        normals.append(n / np.linalg.norm(n))
    normals_arr = np.array(normals)
    return Mesh(verts, tuple(faces), normals_arr, _shade(normals_arr, obj.rgb))


# ---------------------------------------------------------------- textures


def _value_noise(rng: np.random.Generator, h: int, w: int, cell: int) -> np.ndarray:
    """Smooth noise in [0, 1] with features about ``cell`` pixels wide."""
    small = rng.random((h // cell + 3, w // cell + 3)).astype(np.float32)
    big = cv2.resize(small, (small.shape[1] * cell, small.shape[0] * cell),
                     interpolation=cv2.INTER_CUBIC)
    return big[cell : cell + h, cell : cell + w]


def _muted(rng: np.random.Generator, lo: int = 110, hi: int = 215) -> np.ndarray:
    base = rng.uniform(lo, hi)
    return np.clip(base + rng.uniform(-22, 22, size=3), 0, 255)


def _desaturate(img: np.ndarray) -> np.ndarray:
    hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
    hsv[..., 1] = np.minimum(hsv[..., 1], _MAX_SURFACE_SATURATION)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)


def _speckle(rng: np.random.Generator, img: np.ndarray, density: float) -> None:
    """Random blobs, rings and strokes of muted colour: unique corners for ORB."""
    h, w = img.shape[:2]
    for _ in range(int(density * h * w / 4096)):
        colour = tuple(float(c) for c in _muted(rng, 20, 250))
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        kind = rng.integers(0, 4)
        size = int(rng.integers(3, 14))
        if kind == 0:
            axes = (size, int(rng.integers(2, 10)))
            cv2.ellipse(img, (cx, cy), axes, float(rng.uniform(0, 180)), 0, 360, colour, -1)
        elif kind == 1:
            cv2.circle(img, (cx, cy), size, colour, int(rng.integers(1, 4)))
        elif kind == 2:
            dx, dy = (int(v) for v in rng.integers(-25, 26, size=2))
            cv2.line(img, (cx, cy), (cx + dx, cy + dy), colour, int(rng.integers(1, 4)))
        else:
            dx, dy = (int(v) for v in rng.integers(3, 16, size=2))
            cv2.rectangle(img, (cx, cy), (cx + dx, cy + dy), colour, -1)


def _tiles(rng: np.random.Generator, h: int, w: int, tile: int) -> np.ndarray:
    base = _muted(rng, 120, 200)
    img = np.empty((h, w, 3), np.float32)
    img[:] = base
    rows, cols = h // tile + 1, w // tile + 1
    jitter = rng.uniform(-28, 28, size=(rows, cols, 1)).astype(np.float32)
    img += np.kron(jitter, np.ones((tile, tile, 1), np.float32))[:h, :w]
    img[::tile] -= 55
    img[:, ::tile] -= 55
    return img


def _panels(rng: np.random.Generator, h: int, w: int, pw: int, ph: int) -> np.ndarray:
    base = _muted(rng, 120, 205)
    img = np.empty((h, w, 3), np.float32)
    img[:] = base
    for row, y0 in enumerate(range(0, h, ph)):
        offset = (pw // 2) * (row % 2)
        for x0 in range(-offset, w, pw):
            shade = float(rng.uniform(-30, 30))
            img[y0 : y0 + ph, max(x0, 0) : x0 + pw] += shade
            img[y0 : y0 + ph, max(x0, 0) : max(x0, 0) + 2] -= 45
        img[y0 : y0 + 2] -= 45
    return img


def _poster(rng: np.random.Generator, img: np.ndarray) -> None:
    h, w = img.shape[:2]
    pw, ph = int(rng.integers(26, 80)), int(rng.integers(24, min(70, h - 20)))
    x0, y0 = int(rng.integers(0, max(1, w - pw))), int(rng.integers(6, max(7, h - ph - 20)))
    bg = tuple(float(c) for c in _muted(rng, 160, 245))
    cv2.rectangle(img, (x0, y0), (x0 + pw, y0 + ph), bg, -1)
    for _ in range(int(rng.integers(4, 10))):
        colour = tuple(float(c) for c in _muted(rng, 15, 140))
        a = (x0 + int(rng.integers(2, pw - 2)), y0 + int(rng.integers(2, ph - 2)))
        if rng.random() < 0.5:
            b = (x0 + int(rng.integers(2, pw - 2)), y0 + int(rng.integers(2, ph - 2)))
            cv2.rectangle(img, a, b, colour, -1)
        else:
            cv2.circle(img, a, int(rng.integers(2, max(3, min(pw, ph) // 4))), colour, -1)
    cv2.rectangle(img, (x0, y0), (x0 + pw, y0 + ph), (35.0, 35.0, 35.0), 2)


def _finish(rng: np.random.Generator, img: np.ndarray, shade: float) -> np.ndarray:
    h, w = img.shape[:2]
    for cell, amp in ((3, 16.0), (9, 22.0), (27, 26.0)):
        img += (amp * (_value_noise(rng, h, w, cell) - 0.5))[..., None]
    img *= shade
    img = cv2.GaussianBlur(img, (3, 3), 0.7)
    return _desaturate(np.clip(img, 0, 255).astype(np.uint8))


def floor_texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    img = _tiles(rng, h, w, tile=int(rng.integers(34, 46)))
    _speckle(rng, img, density=2.2)
    return _finish(rng, img, shade=1.0)


def wall_texture(rng: np.random.Generator, h: int, w: int, shade: float) -> np.ndarray:
    img = _panels(rng, h, w, pw=int(rng.integers(36, 60)), ph=int(rng.integers(16, 26)))
    _speckle(rng, img, density=1.2)
    for _ in range(max(2, int(w / 64 * 0.6))):
        _poster(rng, img)
    img[h - 7 :] = img[h - 7 :] * 0.45  # skirting board: a strong horizontal edge
    return _finish(rng, img, shade=shade)


# ---------------------------------------------------------------- scene


def _surfaces(rng: np.random.Generator, length: float, width: float, height: float,
              ppm: float) -> tuple[Surface, ...]:
    d = 1.0 / ppm
    wl, ww, wh = round(length * ppm), round(width * ppm), round(height * ppm)
    ex, ey, ez = np.eye(3)
    floor = Surface("floor", np.zeros(3), ex * d, ey * d, floor_texture(rng, ww, wl))
    # Walls seen from inside: texture columns run left to right, rows top to bottom.
    walls = (
        ("wall_south", np.array([length, 0.0, height]), -ex * d, wl, 0.92),
        ("wall_east", np.array([length, width, height]), -ey * d, ww, 0.78),
        ("wall_north", np.array([0.0, width, height]), ex * d, wl, 0.86),
        ("wall_west", np.array([0.0, 0.0, height]), ey * d, ww, 0.72),
    )
    out = [floor]
    for name, origin, axis_u, cols, shade in walls:
        out.append(Surface(name, origin, axis_u, -ez * d, wall_texture(rng, wh, cols, shade)))
    return tuple(out)


def _place_objects(rng: np.random.Generator, length: float, width: float, n: int,
                   wall_margin: float, gap: float) -> tuple[SceneObject, ...]:
    colours = list(rng.permutation(list(COLOURS)))[:n]
    placed: list[SceneObject] = []
    for colour in colours:
        for _ in range(2000):
            shape = str(SHAPES[int(rng.integers(0, len(SHAPES)))])
            if shape == "box":
                size = (float(rng.uniform(0.5, 1.1)), float(rng.uniform(0.4, 0.9)),
                        float(rng.uniform(0.4, 1.2)))
            elif shape == "sphere":
                diameter = float(rng.uniform(0.5, 0.9))
                size = (diameter, diameter, diameter)
            else:
                diameter = float(rng.uniform(0.45, 0.9))
                size = (diameter, diameter, float(rng.uniform(0.6, 1.5)))
            obj = SceneObject(
                name=f"{colour} {shape}",
                colour=str(colour),
                shape=shape,
                x=float(rng.uniform(wall_margin, length - wall_margin)),
                y=float(rng.uniform(wall_margin, width - wall_margin)),
                size=size,
                yaw_deg=float(rng.uniform(0, 90)) if shape == "box" else 0.0,
            )
            if all(obj.distance_to(o) >= gap for o in placed):
                placed.append(obj)
                break
        else:
            raise RuntimeError(f"could not place {n} objects in a {length}x{width} m room")
    return tuple(placed)


def make_scene(seed: int, n_objects: int = 6, ppm: float = TEXTURE_PX_PER_M) -> Scene:
    """The room, its textures and ``n_objects`` objects, all drawn from ``seed``."""
    if not 1 <= n_objects <= MAX_OBJECTS:
        raise ValueError(f"n_objects must be between 1 and {MAX_OBJECTS}, got {n_objects}")
    rng = np.random.default_rng([seed, 0x5CE7E])
    # Whole texture pixels, so textures end exactly at the room's corners.
    length = round(float(rng.uniform(11.0, 14.0)) * ppm) / ppm
    width = round(float(rng.uniform(9.0, 12.0)) * ppm) / ppm
    height = 3.0
    objects = _place_objects(rng, length, width, n_objects, wall_margin=1.4, gap=1.4)
    surfaces = _surfaces(rng, length, width, height, ppm)
    return Scene(seed, length, width, height, objects, surfaces)

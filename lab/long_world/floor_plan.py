"""A floor plan of connected areas: a corridor with rooms on both sides, joined by doorways.

The long world needs places the camera cannot see all at once, so that what it saw earlier
must be remembered: walls hide the other rooms, and the only ways between areas are doorways.
The plan is pure 2-D geometry (no textures), cheap enough to build in tests.

Layout: ``columns`` rooms south of an east-west corridor and as many north of it, each with
one doorway onto the corridor, so the areas form a tree and the route between two areas is
unique. Walls are zero-thickness segments; each side a camera can face is a
:class:`WallFace` seen from its left (the facing area lies to the left of ``a -> b``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

CORRIDOR = "corridor"
ROOM = "room"
DOOR_WIDTH_M = 1.6
WALL_HEIGHT_M = 3.0
_GRID_M = 1.0 / 64.0  # dimensions snap to whole texture pixels


@dataclass(frozen=True)
class Area:
    """An axis-aligned rectangle the camera can be in: the corridor or a room."""

    name: str  # "the corridor", "room 3": how questions name the place
    kind: str  # CORRIDOR or ROOM
    x0: float
    y0: float
    x1: float
    y1: float

    @property
    def centre(self) -> tuple[float, float]:
        return ((self.x0 + self.x1) / 2.0, (self.y0 + self.y1) / 2.0)

    @property
    def size(self) -> tuple[float, float]:
        return (self.x1 - self.x0, self.y1 - self.y0)

    def contains(self, x: float, y: float, margin: float = 0.0) -> bool:
        return (self.x0 + margin <= x <= self.x1 - margin
                and self.y0 + margin <= y <= self.y1 - margin)


@dataclass(frozen=True)
class Door:
    """A full-height opening between ``areas[0]`` and ``areas[1]``.

    ``normal`` is the unit vector across the opening, from ``areas[0]`` into ``areas[1]``.
    """

    areas: tuple[int, int]
    x: float
    y: float
    normal: tuple[float, float]
    width: float = DOOR_WIDTH_M

    def approach(self, area: int, depth: float) -> tuple[float, float]:
        """The point ``depth`` metres in front of the opening, inside ``area``."""
        if area not in self.areas:
            raise ValueError(f"door {self.areas} does not open into area {area}")
        sign = -1.0 if area == self.areas[0] else 1.0
        return (self.x + sign * depth * self.normal[0], self.y + sign * depth * self.normal[1])

    def other(self, area: int) -> int:
        return self.areas[1] if area == self.areas[0] else self.areas[0]


@dataclass(frozen=True)
class WallFace:
    """One side of a wall segment, seen from its left; ``area`` is the area it faces."""

    a: tuple[float, float]
    b: tuple[float, float]
    area: int

    @property
    def length(self) -> float:
        return math.hypot(self.b[0] - self.a[0], self.b[1] - self.a[1])

    @property
    def normal(self) -> tuple[float, float]:
        """Unit normal pointing into the facing area."""
        dx, dy = self.b[0] - self.a[0], self.b[1] - self.a[1]
        n = math.hypot(dx, dy)
        return (-dy / n, dx / n)


@dataclass(frozen=True)
class FloorPlan:
    areas: tuple[Area, ...]
    doors: tuple[Door, ...]
    faces: tuple[WallFace, ...]
    height: float = WALL_HEIGHT_M

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (min(a.x0 for a in self.areas), min(a.y0 for a in self.areas),
                max(a.x1 for a in self.areas), max(a.y1 for a in self.areas))

    def area_at(self, x: float, y: float) -> int | None:
        """Index of the area holding the point (the first one on a shared edge)."""
        for i, area in enumerate(self.areas):
            if area.contains(x, y):
                return i
        return None

    def doors_of(self, area: int) -> list[int]:
        return [k for k, d in enumerate(self.doors) if area in d.areas]

    def route(self, start: int, goal: int) -> list[int]:
        """Door indices to pass, in order, from area ``start`` to area ``goal`` (breadth
        first; the plan is a tree, so this is the only route without doubling back)."""
        previous: dict[int, tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            here = queue.popleft()
            if here == goal:
                break
            for k in self.doors_of(here):
                there = self.doors[k].other(here)
                if there not in previous:
                    previous[there] = (here, k)
                    queue.append(there)
        if goal not in previous:
            raise ValueError(f"area {goal} cannot be reached from area {start}")
        doors: list[int] = []
        node = goal
        while (step := previous[node]) is not None:
            node, k = step
            doors.append(k)
        return doors[::-1]

    def wall_distance(self, x: float, y: float) -> float:
        """Horizontal distance from a point to the nearest wall (door openings are open)."""
        a = np.array([f.a for f in self.faces])
        ab = np.array([f.b for f in self.faces]) - a
        ap = np.array([x, y]) - a
        t = np.clip(np.sum(ap * ab, axis=1) / np.sum(ab * ab, axis=1), 0.0, 1.0)
        return float(np.min(np.linalg.norm(ap - t[:, None] * ab, axis=1)))


def _snap(value: float) -> float:
    return round(value / _GRID_M) * _GRID_M


def make_floor_plan(rng: np.random.Generator, columns: int = 3) -> FloorPlan:
    """A corridor along x with ``columns`` rooms on each side, sizes and doorways from ``rng``.

    Rooms south of the corridor are numbered 1..columns from west to east, those north of it
    columns+1..2*columns; area 0 is the corridor.
    """
    if not 1 <= columns <= 6:
        raise ValueError(f"columns must be between 1 and 6, got {columns}")
    widths = [_snap(float(rng.uniform(6.5, 8.5))) for _ in range(columns)]
    xs = [0.0, *np.cumsum(widths).tolist()]
    depth_s = _snap(float(rng.uniform(6.0, 7.5)))
    corridor_w = _snap(float(rng.uniform(3.2, 3.6)))
    depth_n = _snap(float(rng.uniform(6.0, 7.5)))
    y_s, y_n = depth_s, depth_s + corridor_w
    top = y_n + depth_n
    end = xs[-1]
    areas = [Area(f"the {CORRIDOR}", CORRIDOR, 0.0, y_s, end, y_n)]
    areas += [Area(f"{ROOM} {k + 1}", ROOM, xs[k], 0.0, xs[k + 1], y_s) for k in range(columns)]
    areas += [Area(f"{ROOM} {columns + k + 1}", ROOM, xs[k], y_n, xs[k + 1], top)
              for k in range(columns)]
    doors: list[Door] = []
    faces: list[WallFace] = []
    for k in range(columns):
        south, north = 1 + k, 1 + columns + k
        lo, hi = xs[k] + 1.2 + DOOR_WIDTH_M / 2, xs[k + 1] - 1.2 - DOOR_WIDTH_M / 2
        for room, y_wall, into_corridor in ((south, y_s, (0.0, 1.0)),
                                            (north, y_n, (0.0, -1.0))):
            door_x = _snap(float(rng.uniform(lo, hi)))
            doors.append(Door((room, 0), door_x, y_wall, into_corridor))
            gaps = [(xs[k], door_x - DOOR_WIDTH_M / 2), (door_x + DOOR_WIDTH_M / 2, xs[k + 1])]
            for x0, x1 in gaps:
                west_east, east_west = ((x0, y_wall), (x1, y_wall)), ((x1, y_wall), (x0, y_wall))
                if room == south:  # room below the wall, corridor above
                    faces += [WallFace(*east_west, room), WallFace(*west_east, 0)]
                else:
                    faces += [WallFace(*west_east, room), WallFace(*east_west, 0)]
        # Outer walls of the two rooms.
        faces.append(WallFace((xs[k], 0.0), (xs[k + 1], 0.0), south))
        faces.append(WallFace((xs[k + 1], top), (xs[k], top), north))
        # Walls between neighbouring rooms (and the outer west and east walls).
        for room, y0, y1 in ((south, 0.0, y_s), (north, y_n, top)):
            faces.append(WallFace((xs[k], y1), (xs[k], y0), room))  # west wall, facing east
            faces.append(WallFace((xs[k + 1], y0), (xs[k + 1], y1), room))  # east, facing west
    faces.append(WallFace((0.0, y_n), (0.0, y_s), 0))
    faces.append(WallFace((end, y_s), (end, y_n), 0))
    return FloorPlan(tuple(areas), tuple(doors), tuple(faces))

"""The long world's camera path: a tour of the rooms with revisits, made of turns and walks.

Memory questions need three kinds of past: moments ago, some minutes ago and long ago. The
tour (:data:`REVISIT`) therefore has phases: it first visits every room once, then keeps
revisiting most of them while a third of the rooms are left alone, and near the end goes back
to one of those, so objects last seen more than 15 minutes earlier exist and are seen again.

That tour comes back to nearly every room, so few objects go unseen for 15 minutes, and a
question about the long past names one of a handful. The :data:`LEAVE` tour gives the long
past many objects: it tours the west wing's rooms (those west of the corridor's middle), again
and again, for the first :data:`LEAVE_AT` of the tour, then walks east and tours the east
wing's rooms for the rest, never going back: the corridor's west end and the west doorways
stay behind it, so nothing there is glimpsed again.

Motion is the paper's actions, as in the short worlds: the camera turns in place to face
where it goes next ("rotate left/right") and walks straight there ("move forward"), at
:class:`~embodied_r_ros.sim.trajectory.MotionLimits` speeds. Inside an area a blocked leg is
replaced by a path on a clearance grid; between areas the camera passes doorways head on.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from embodied_r_ros.core.poses import Pose, heading_deg, wrap_deg
from embodied_r_ros.sim.scene import SceneObject
from embodied_r_ros.sim.trajectory import MotionLimits, Segment, Trajectory
from lab.long_world.floor_plan import CORRIDOR, FloorPlan

CAMERA_HEIGHT_M = 1.5
CAMERA_PITCH_DEG = -10.0
WALL_CLEARANCE_M = 0.5
OBJECT_CLEARANCE_M = 0.6
ROOM_APPROACH_M = 1.0  # stop this far in front of a doorway inside a room
_GRID_M = 0.2
REVISIT = "revisit"
LEAVE = "leave"
TOURS = (REVISIT, LEAVE)
LEAVE_AT = 0.25  # share of the tour spent in the west wing before leaving it
_STEP_M = 0.1


class _Obstacles:
    """Clearance tests in one area: its walls and its objects (as bounding circles)."""

    def __init__(self, plan: FloorPlan, objects: Sequence[SceneObject]) -> None:
        self.a = np.array([f.a for f in plan.faces])
        self.ab = np.array([f.b for f in plan.faces]) - self.a
        self.centres = np.array([[o.x, o.y] for o in objects]).reshape(-1, 2)
        self.radii = np.array([math.hypot(o.size[0], o.size[1]) / 2.0 if o.shape == "box"
                               else o.size[0] / 2.0 for o in objects])

    def clear(self, points: np.ndarray) -> np.ndarray:
        """Per point (M x 2): far enough from every wall and object."""
        ap = points[:, None, :] - self.a[None]
        t = np.clip(np.sum(ap * self.ab[None], axis=2) / np.sum(self.ab * self.ab, axis=1),
                    0.0, 1.0)
        walls = np.linalg.norm(ap - t[..., None] * self.ab[None], axis=2).min(axis=1)
        ok = walls >= WALL_CLEARANCE_M
        if len(self.centres):
            gaps = np.linalg.norm(points[:, None, :] - self.centres[None], axis=2) - self.radii
            ok &= gaps.min(axis=1) >= OBJECT_CLEARANCE_M
        return ok

    def leg_clear(self, p: Sequence[float], q: Sequence[float]) -> bool:
        n = max(2, math.ceil(math.dist(p, q) / _STEP_M) + 1)
        pts = np.linspace(np.asarray(p, float), np.asarray(q, float), n)
        return bool(self.clear(pts).all())


class _Tour:
    """Appends turn and walk segments while keeping the pose, the clock and the area."""

    def __init__(self, plan: FloorPlan, objects: Sequence[SceneObject], areas: Sequence[int],
                 rng: np.random.Generator, limits: MotionLimits) -> None:
        self.plan = plan
        self.objects = objects
        self.areas = areas
        self.rng = rng
        self.lim = limits
        self.segments: list[Segment] = []
        self.t = 0.0
        self._obstacles = {
            i: _Obstacles(plan, [o for o, a in zip(objects, areas, strict=True) if a == i])
            for i in range(len(plan.areas))
        }
        self.area = 0
        self.pose = Pose()

    # ---------------------------------------------------------------- primitives
    def _append(self, action: str, amount: float, speed: float) -> None:
        seg = Segment(action, amount, self.pose, self.t, amount / speed)
        self.segments.append(seg)
        self.pose = seg.end
        self.t = seg.t1

    def turn_to(self, yaw_deg: float) -> None:
        delta = wrap_deg(yaw_deg - self.pose.yaw_deg)
        if abs(delta) < 1.0:
            return
        action = "rotate left" if delta > 0 else "rotate right"
        self._append(action, abs(delta), self.lim.rotate_speed)

    def walk_to(self, x: float, y: float) -> None:
        """Face the point, then walk straight to it (the caller checked the leg is clear)."""
        dist = math.hypot(x - self.pose.x, y - self.pose.y)
        if dist < 0.05:
            return
        self.turn_to(heading_deg((self.pose.x, self.pose.y), (x, y)))
        self._append("move forward", dist, self.lim.move_speed)

    # ---------------------------------------------------------------- planning
    def _grid_path(self, goal: tuple[float, float]) -> list[tuple[float, float]] | None:
        """Cell centres from here to ``goal`` through clear cells of the current area (A*)."""
        box = self.plan.areas[self.area]
        nx = max(1, int((box.x1 - box.x0) / _GRID_M))
        ny = max(1, int((box.y1 - box.y0) / _GRID_M))
        xs = box.x0 + (np.arange(nx) + 0.5) * (box.x1 - box.x0) / nx
        ys = box.y0 + (np.arange(ny) + 0.5) * (box.y1 - box.y0) / ny
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        free = self._obstacles[self.area].clear(np.stack([gx.ravel(), gy.ravel()], 1))
        free = free.reshape(nx, ny)

        def cell(p: Sequence[float]) -> tuple[int, int]:
            i = min(nx - 1, max(0, int((p[0] - box.x0) / (box.x1 - box.x0) * nx)))
            j = min(ny - 1, max(0, int((p[1] - box.y0) / (box.y1 - box.y0) * ny)))
            return i, j

        start, end = cell((self.pose.x, self.pose.y)), cell(goal)
        free[start] = free[end] = True
        best = {start: 0.0}
        came: dict[tuple[int, int], tuple[int, int]] = {}
        queue = [(0.0, start)]
        while queue:
            _, here = heapq.heappop(queue)
            if here == end:
                break
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    there = (here[0] + di, here[1] + dj)
                    if (di == dj == 0 or not (0 <= there[0] < nx and 0 <= there[1] < ny)
                            or not free[there]):
                        continue
                    cost = best[here] + math.hypot(di, dj)
                    if cost < best.get(there, math.inf):
                        best[there] = cost
                        came[there] = here
                        heapq.heappush(queue, (cost + math.dist(there, end), there))
        if end not in best:
            return None
        cells = [end]
        while cells[-1] != start:
            cells.append(came[cells[-1]])
        return [(float(xs[i]), float(ys[j])) for i, j in reversed(cells[1:-1])] + [goal]

    def go(self, x: float, y: float) -> bool:
        """Walk to a point of the current area, around objects if needed; False if walled in."""
        obstacles = self._obstacles[self.area]
        here = (self.pose.x, self.pose.y)
        if obstacles.leg_clear(here, (x, y)):
            self.walk_to(x, y)
            return True
        path = self._grid_path((x, y))
        if path is None:
            return False
        # String pulling: from each stop, the farthest path point still in clear sight.
        while path:
            reach = 0
            for j in range(len(path) - 1, -1, -1):
                if obstacles.leg_clear((self.pose.x, self.pose.y), path[j]):
                    reach = j
                    break
            self.walk_to(*path[reach])
            path = path[reach + 1:]
        return True

    def viewpoint(self, area: int) -> tuple[float, float]:
        """A random clear standing point of ``area``, a metre from its walls."""
        box = self.plan.areas[area]
        for _ in range(500):
            p = np.array([[self.rng.uniform(box.x0 + 1.0, box.x1 - 1.0),
                           self.rng.uniform(box.y0 + 1.0, box.y1 - 1.0)]])
            if self._obstacles[area].clear(p)[0]:
                return float(p[0, 0]), float(p[0, 1])
        raise RuntimeError(f"no clear standing point in {box.name}")

    def _approach_depth(self, area: int) -> float:
        box = self.plan.areas[area]
        if box.kind == CORRIDOR:  # the corridor's middle line
            return min(box.x1 - box.x0, box.y1 - box.y0) / 2.0
        return ROOM_APPROACH_M

    def travel(self, goal_area: int) -> None:
        """Through the doorways of the route, each passed head on, into ``goal_area``."""
        for k in self.plan.route(self.area, goal_area):
            door = self.plan.doors[k]
            here = door.approach(self.area, self._approach_depth(self.area))
            if not self.go(*here):
                raise RuntimeError(f"cannot reach the doorway of {self.plan.areas[self.area].name}")
            nxt = door.other(self.area)
            self.walk_to(*door.approach(nxt, self._approach_depth(nxt)))
            self.area = nxt

    def explore(self) -> None:
        """Two or three standing points of the current area, looking at its objects."""
        mine = [k for k, a in enumerate(self.areas) if a == self.area]
        for _ in range(int(self.rng.integers(2, 4))):
            for _attempt in range(20):
                if self.go(*self.viewpoint(self.area)):
                    break
            roll = self.rng.random()
            if mine and roll < 0.55:
                obj = self.objects[mine[int(self.rng.integers(0, len(mine)))]]
                self.turn_to(heading_deg((self.pose.x, self.pose.y), (obj.x, obj.y)))
            elif roll < 0.85:
                sign = 1.0 if self.rng.random() < 0.5 else -1.0
                self.turn_to(self.pose.yaw_deg + sign * float(self.rng.uniform(120.0, 170.0)))


def _schedule(rooms: list[int], rng: np.random.Generator) -> tuple[list[int], set[int]]:
    """Rooms in first-visit order, and the rooms left alone after that until the end."""
    order = [rooms[j] for j in rng.permutation(len(rooms))]
    neglected = set(order[: len(rooms) // 3])  # visited first, then long unvisited
    return order, neglected


def _next_room(rooms: Sequence[int], here: int, last_visit: dict[int, float], t: float,
               rng: np.random.Generator) -> int:
    """Another of ``rooms`` (``here`` itself if it is the only one), the longer unvisited the
    likelier."""
    choices = [r for r in rooms if r != here] or list(rooms)
    ages = np.array([t - last_visit.get(r, 0.0) + 30.0 for r in choices])
    return choices[int(rng.choice(len(choices), p=ages / ages.sum()))]


def plan_tour(plan: FloorPlan, objects: Sequence[SceneObject], areas: Sequence[int],
              duration_s: float, rng: np.random.Generator,
              limits: MotionLimits | None = None, leave: bool = False) -> Trajectory:
    """A tour lasting at least ``duration_s`` (see the module notes for its phases; ``leave``:
    the tour that leaves the west wing for good)."""
    tour = _Tour(plan, objects, areas, rng, limits or MotionLimits())
    rooms = [i for i, a in enumerate(plan.areas) if a.kind != CORRIDOR]
    if leave:
        return _leaving_tour(tour, rooms, duration_s)
    first, neglected = _schedule(rooms, rng)
    tour.area = first[0]
    x, y = tour.viewpoint(tour.area)
    tour.pose = Pose(x, y, CAMERA_HEIGHT_M, float(rng.uniform(-180.0, 180.0)), CAMERA_PITCH_DEG)
    last_visit = {first[0]: 0.0}
    pending = first[1:]
    comeback_at = 0.85 * duration_s
    came_back = False
    while True:
        tour.explore()
        last_visit[tour.area] = tour.t
        if tour.t >= duration_s:
            break
        if pending:
            goal = pending.pop(0)
        elif neglected and not came_back and tour.t >= comeback_at:
            goal = sorted(neglected)[int(rng.integers(0, len(neglected)))]
            came_back = True
        else:
            choices = [r for r in rooms if r != tour.area and r not in neglected]
            if not choices:
                choices = [r for r in rooms if r != tour.area] or rooms
            ages = np.array([tour.t - last_visit.get(r, 0.0) + 30.0 for r in choices])
            goal = choices[int(rng.choice(len(choices), p=ages / ages.sum()))]
        tour.travel(goal)
    return Trajectory(tuple(tour.segments))


def _leaving_tour(tour: _Tour, rooms: list[int], duration_s: float) -> Trajectory:
    """The :data:`LEAVE` tour: each wing's rooms first in a random order, then again, the
    longer unvisited the likelier; the west wing until :data:`LEAVE_AT`, the east to the end."""
    rng = tour.rng
    corridor = tour.plan.areas[next(i for i, a in enumerate(tour.plan.areas)
                                    if a.kind == CORRIDOR)]
    middle = corridor.centre[0]
    wings = ([r for r in rooms if tour.plan.areas[r].centre[0] < middle],
             [r for r in rooms if tour.plan.areas[r].centre[0] >= middle])
    wing = 0
    pending = [wings[0][j] for j in rng.permutation(len(wings[0]))]
    tour.area = pending.pop(0)
    x, y = tour.viewpoint(tour.area)
    tour.pose = Pose(x, y, CAMERA_HEIGHT_M, float(rng.uniform(-180.0, 180.0)), CAMERA_PITCH_DEG)
    last_visit: dict[int, float] = {}
    while True:
        tour.explore()
        last_visit[tour.area] = tour.t
        if tour.t >= duration_s:
            break
        if wing == 0 and not pending and tour.t >= LEAVE_AT * duration_s:
            wing = 1
            pending = [wings[1][j] for j in rng.permutation(len(wings[1]))]
        goal = pending.pop(0) if pending else _next_room(wings[wing], tour.area, last_visit,
                                                           tour.t, rng)
        tour.travel(goal)
    return Trajectory(tuple(tour.segments))

"""The long world: connected rooms, many objects (some sharing a name), a tour of many minutes.

A memory benchmark needs what the short worlds lack: places out of sight of each other, the
same object name in different places (so a question must say which one it means), revisits,
and enough time for "how long ago" to span seconds to half an hour. Frames come at a low rate
(key-frame-like, 1 Hz by default), so 30 minutes stay cheap to render.

The short worlds (:mod:`embodied_r_ros.sim.world`) are untouched: this module shares their
object type, camera, action segments, frame clock and bag epoch, nothing else.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.scene import COLOURS, SHAPES, SceneObject
from embodied_r_ros.sim.trajectory import Trajectory
from embodied_r_ros.sim.world import MAX_FRAMES, MAX_SIDE, FrameTimeline
from lab.long_world.floor_plan import CORRIDOR, FloorPlan, make_floor_plan
from lab.long_world.tour import LEAVE, REVISIT, TOURS, plan_tour

MAX_LONG_OBJECTS = 40
PER_ROOM = 4  # most objects a room holds (and the corridor one per pair of rooms)
_OBJECT_GAP_M = 1.3  # between object outlines: room for the camera to pass
_DOOR_KEEP_OUT_M = 2.2  # no object this close to a doorway's centre


@dataclass(frozen=True)
class LongWorldSpec:
    """Everything that determines a long world's frames; questions add their own counts."""

    seed: int = 7
    duration_s: float = 1800.0
    rate_hz: float = 1.0
    width: int = 320
    height: int = 240
    hfov_deg: float = 70.0
    columns: int = 3  # rooms on each side of the corridor
    n_objects: int = 24
    shared_names: int = 6  # names given to two objects, always in different areas
    tour: str = REVISIT  # REVISIT: every room again and again; LEAVE: a wing left for good

    @property
    def frames(self) -> int:
        return int(math.floor(self.duration_s * self.rate_hz + 1e-9)) + 1

    def validate(self) -> LongWorldSpec:
        """Raise ``ValueError`` with a one-line reason for a spec that cannot be built."""
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if not 0.1 <= self.rate_hz <= 30.0:
            raise ValueError(f"rate must be between 0.1 and 30 Hz, got {self.rate_hz}")
        if self.duration_s < 10.0 or self.frames > MAX_FRAMES:
            raise ValueError(f"duration must be at least 10 s and at most {MAX_FRAMES} frames, "
                             f"got {self.duration_s} s at {self.rate_hz} Hz")
        if not (16 <= self.width <= MAX_SIDE and 16 <= self.height <= MAX_SIDE):
            raise ValueError(f"resolution must be between 16x16 and {MAX_SIDE}x{MAX_SIDE}, "
                             f"got {self.width}x{self.height}")
        if not 20.0 <= self.hfov_deg <= 150.0:
            raise ValueError(f"hfov must be between 20 and 150 degrees, got {self.hfov_deg}")
        if self.tour not in TOURS:
            raise ValueError(f"tour must be one of {', '.join(TOURS)}, got {self.tour!r}")
        if self.tour == LEAVE and self.columns < 2:
            raise ValueError(f"a tour that leaves a wing needs at least 2 columns, "
                             f"got {self.columns}")
        if not 1 <= self.columns <= 6:
            raise ValueError(f"columns must be between 1 and 6, got {self.columns}")
        most = min(MAX_LONG_OBJECTS, (2 * PER_ROOM + 1) * self.columns)
        if not 2 <= self.n_objects <= most:
            raise ValueError(f"objects must be between 2 and {most} for "
                             f"{2 * self.columns} rooms, got {self.n_objects}")
        names = len(COLOURS) * len(SHAPES)
        if not 0 <= self.shared_names <= self.n_objects // 2 \
                or self.n_objects - self.shared_names > names:
            raise ValueError(f"shared names must be between 0 and half the objects, with at "
                             f"most {names} names in all, got {self.shared_names}")
        return self

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


#: the benchmark's world: 30 minutes, 7 areas, 24 objects (6 names twice)
LONG_SPEC = LongWorldSpec()
#: the same code path in three minutes, for tests
SMALL_LONG_SPEC = LongWorldSpec(duration_s=180.0, columns=1, n_objects=9, shared_names=2)
#: the object map's world: 30 minutes, 9 areas, 36 objects (4 names twice), the west wing's
#: rooms toured for 7.5 minutes and then left for good, so that many objects go unseen for
#: over 15 minutes while the east wing keeps others fresh
LEAVING_SPEC = LongWorldSpec(columns=4, n_objects=36, shared_names=4, tour=LEAVE)
#: the same code path in three minutes (the wing left after 45 s), for tests
SMALL_LEAVING_SPEC = LongWorldSpec(duration_s=180.0, columns=2, n_objects=14, shared_names=3,
                                   tour=LEAVE)
#: the long worlds a benchmark can ask for by name, and their three-minute versions
NAMED_SPECS = {REVISIT: LONG_SPEC, LEAVE: LEAVING_SPEC}
SMALL_SPECS = {REVISIT: SMALL_LONG_SPEC, LEAVE: SMALL_LEAVING_SPEC}


@dataclass(frozen=True)
class LongWorld(FrameTimeline):
    spec: LongWorldSpec
    plan: FloorPlan
    objects: tuple[SceneObject, ...]
    object_areas: tuple[int, ...]  # the area index of each object
    camera: PinholeCamera
    trajectory: Trajectory
    times: np.ndarray  # seconds from the first frame
    poses: tuple[Pose, ...]

    def area_of_frame(self, index: int) -> int | None:
        pose = self.poses[index]
        return self.plan.area_at(pose.x, pose.y)

    def instances(self, name: str) -> list[int]:
        """Indices of the objects called ``name``."""
        return [k for k, o in enumerate(self.objects) if o.name == name]


def _object_size(rng: np.random.Generator, shape: str, scale: float
                 ) -> tuple[float, float, float]:
    if shape == "box":
        return (scale * float(rng.uniform(0.5, 1.0)), scale * float(rng.uniform(0.4, 0.8)),
                float(rng.uniform(0.4, 1.2)))
    if shape == "sphere":
        d = scale * float(rng.uniform(0.5, 0.85))
        return (d, d, d)
    d = scale * float(rng.uniform(0.45, 0.85))
    return (d, d, float(rng.uniform(0.6, 1.5)))


def _names(rng: np.random.Generator, n_objects: int, shared: int) -> list[tuple[str, str]]:
    """(colour, shape) of every object: ``shared`` names twice, the rest once each, spread
    evenly over the colours: the geometric perception names colours only, so the fewer objects
    a colour has, the more questions its text can tell apart."""
    colours = [list(COLOURS)[j] for j in rng.permutation(len(COLOURS))]
    shapes = {c: [SHAPES[j] for j in rng.permutation(len(SHAPES))] for c in colours}
    count = dict.fromkeys(colours, 0)

    def take(colour: str, objects: int) -> tuple[str, str]:
        count[colour] += objects
        return colour, shapes[colour].pop()

    twice = [take(colours[j % len(colours)], 2) for j in range(shared)]
    once = []
    for _ in range(n_objects - 2 * shared):
        colour = min((c for c in colours if shapes[c]), key=lambda c: count[c])
        once.append(take(colour, 1))
    return twice * 2 + once


def _area_slots(plan: FloorPlan, n_objects: int, rng: np.random.Generator) -> list[int]:
    """How many objects each area holds, as a list of area indices: rooms share the objects
    evenly, the corridor (narrow, always walked) holds one per room pair."""
    rooms = [i for i, a in enumerate(plan.areas) if a.kind != CORRIDOR]
    corridors = [i for i, a in enumerate(plan.areas) if a.kind == CORRIDOR]
    n_corridor = min(len(rooms) // 2, max(1, n_objects // 8)) if n_objects >= 4 else 0
    slots = [corridors[j % len(corridors)] for j in range(n_corridor)]
    rest = n_objects - n_corridor
    slots += [rooms[j % len(rooms)] for j in range(rest)]
    return [slots[j] for j in rng.permutation(len(slots))]


def _assign_areas(names: list[tuple[str, str]], slots: list[int],
                  rng: np.random.Generator) -> list[int]:
    """An area per object such that objects sharing a name are in different areas, and where
    the areas allow, objects sharing a colour too (their text then differs by when each was
    seen, the only thing it can tell them apart by)."""
    for key in (lambda n: n[0], lambda n: n):
        for _ in range(500):
            order = [slots[j] for j in rng.permutation(len(slots))]
            used: set[tuple[object, int]] = set()
            for name, area in zip(names, order, strict=True):
                if (key(name), area) in used:
                    break
                used.add((key(name), area))
            else:
                return order
    raise RuntimeError("could not spread objects sharing a name over different areas")


def _place(plan: FloorPlan, area: int, colour: str, shape: str, placed: list[SceneObject],
           rng: np.random.Generator) -> SceneObject | None:
    """A spot for one object in ``area`` clear of the others, or None when none is found."""
    box = plan.areas[area]
    corridor = box.kind == CORRIDOR
    for _ in range(400):
        size = _object_size(rng, shape, 0.7 if corridor else 1.0)
        half = max(size[0], size[1]) / 2.0
        x = float(rng.uniform(box.x0 + 0.9, box.x1 - 0.9))
        if corridor:  # against one of the long walls, leaving the middle free
            side = box.y0 if rng.random() < 0.5 else box.y1
            y = side + (1.0 if side == box.y0 else -1.0) * (0.15 + half)
        else:
            y = float(rng.uniform(box.y0 + 0.9, box.y1 - 0.9))
        obj = SceneObject(f"{colour} {shape}", colour, shape, x, y, size,
                          float(rng.uniform(0, 90)) if shape == "box" else 0.0)
        if any(math.hypot(d.x - x, d.y - y) < _DOOR_KEEP_OUT_M + half for d in plan.doors):
            continue
        if plan.wall_distance(x, y) < 0.15 + half:
            continue
        if all(obj.distance_to(o) >= _OBJECT_GAP_M for o in placed):
            return obj
    return None


def place_objects(plan: FloorPlan, rng: np.random.Generator, n_objects: int,
                  shared: int) -> tuple[tuple[SceneObject, ...], tuple[int, ...]]:
    """Objects and their areas: names from :func:`_names`, sharing ones apart; a layout that
    leaves no room for the next object is drawn again."""
    names = _names(rng, n_objects, shared)
    areas = _assign_areas(names, _area_slots(plan, n_objects, rng), rng)
    for _ in range(50):
        placed: list[SceneObject] = []
        for (colour, shape), area in zip(names, areas, strict=True):
            obj = _place(plan, area, colour, shape, placed, rng)
            if obj is None:
                break
            placed.append(obj)
        else:
            return tuple(placed), tuple(areas)
    raise RuntimeError(f"could not place {n_objects} objects in {len(plan.areas)} areas")


def build_long_world(spec: LongWorldSpec = LONG_SPEC) -> LongWorld:
    """Floor plan, objects, camera and tour for ``spec`` (validated), with every frame's pose.

    Cheap (no textures, no rendering): tests check the layout and the tour from this alone.
    """
    spec.validate()
    plan = make_floor_plan(np.random.default_rng([spec.seed, 0x10A6, 1]), spec.columns)
    objects, areas = place_objects(plan, np.random.default_rng([spec.seed, 0x10A6, 2]),
                                   spec.n_objects, spec.shared_names)
    camera = PinholeCamera.from_hfov(spec.width, spec.height, spec.hfov_deg)
    times = np.arange(spec.frames, dtype=np.float64) / spec.rate_hz
    trajectory = plan_tour(plan, objects, areas, float(times[-1]) + 1.0 / spec.rate_hz,
                           np.random.default_rng([spec.seed, 0x10A6, 3]),
                           leave=spec.tour == LEAVE)
    poses = tuple(trajectory.pose_at(float(t)) for t in times)
    return LongWorld(spec, plan, objects, areas, camera, trajectory, times, poses)


"""Where the memory places the objects its key frames show: bearing rays from the stored poses.

Every object a frame's record shows with a bearing (the geometric perception's colour regions,
a VLM's grounded objects alike) is a ray in the floor plane of the world (odometry) frame: from
the camera's stored position, in the direction of its stored heading plus the bearing. A
:class:`Placer` groups one robot's rays, frame by frame as the writer stores them, into
:class:`Placement` s, one per object:

- a ray joins the object of its kind seen last when it is part of the same visit (at most
  :data:`VISIT_GAP_S` later) and the rays still cross at one place, or when it only runs along
  the last ray (the camera turned in place, or walked towards the object);
- else it joins a placed object of its kind that it passes through (a revisit);
- else it starts a new object, a guess along the ray.

An object is *triangulated* where its rays cross at least :data:`MIN_CROSSING_DEG` apart, in
front of every camera, each within :data:`RAY_GAP_M` of the crossing; objects placed about one
spot are merged, and guesses whose rays pass through a placed object join it. A guess stands at
the object's measured distance where perception gave one, else :data:`ASSUMED_RANGE_M` along
its newest ray. ``uncertainty_m`` says how far off the place may be, as two standard
deviations (about 95 %): for a crossing, along the larger axis of the least-squares covariance
(each ray's perpendicular error its range times its bearing error), scaled up where the rays
disagree more than that; for a guess, a share of the measured distance, or the assumed range
itself. Odometry drift between visits is not modelled apart: it shows as rays that disagree.

Kinds (:func:`object_key`): a colour region is its colour's object ("red object"); a labelled
object is its label's head noun, singular ("office chairs" -> "chair"), so that a VLM naming one
chair "chair" and then "office chair" still crosses its rays. The module imports no store: the
stores keep placements, the recorder feeds the placer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from embodied_r_ros.core.poses import Pose, crossing_deg
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory.labels import head_word

#: rays of one object closer in time than this belong to one visit
VISIT_GAP_S = 45.0
#: placed objects of a kind closer than this are one object
SAME_OBJECT_M = 2.0
#: a ray passing this near a place is a sighting of the object there
RAY_GAP_M = 0.8
#: rays must cross at least this wide to place an object (a degree of bearing error would put
#: a narrower crossing metres off)
MIN_CROSSING_DEG = 6.0
#: a guess without a measured distance stands this far along its ray
ASSUMED_RANGE_M = 3.5
#: crossings farther than this from a camera are not believed
MAX_RANGE_M = 15.0
#: bearing error of a ray (degrees, one standard deviation): a perception's bearing to an
#: object's centre, as written to a degree; a VLM's box adds a quarter of its width
BEARING_SIGMA_DEG = 1.0
#: a measured floor distance is taken to be good to this share of itself (one standard
#: deviation)
RANGE_SHARE = 0.2
#: standard deviations an uncertainty states (two: about 95 % of places lie within it)
SIGMAS = 2.0
#: no place is surer than this
MIN_UNCERTAINTY_M = 0.1
#: rays and visits a placement keeps (the newest): its place follows the newest sightings
MAX_RAYS = 32
MAX_VISITS = 16


@dataclass(frozen=True)
class Ray:
    """One sighting: the camera's floor position, the world direction (radians) towards the
    object, the bearing error (degrees), and the measured floor distance where known."""

    stamp: float
    x: float
    y: float
    angle: float
    sigma_deg: float = BEARING_SIGMA_DEG
    distance_m: float | None = None

    def ahead(self, q: tuple[float, float]) -> float:
        return (q[0] - self.x) * math.cos(self.angle) + (q[1] - self.y) * math.sin(self.angle)

    def aside(self, q: tuple[float, float]) -> float:
        """The signed distance of ``q`` from the ray's line (left > 0)."""
        return -(q[0] - self.x) * math.sin(self.angle) + (q[1] - self.y) * math.cos(self.angle)

    def point(self, distance: float) -> tuple[float, float]:
        return (self.x + distance * math.cos(self.angle),
                self.y + distance * math.sin(self.angle))

    def to_list(self) -> list[float | None]:
        return [self.stamp, round(self.x, 4), round(self.y, 4), round(self.angle, 6),
                self.sigma_deg, self.distance_m]

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> Ray:
        return cls(float(v[0]), float(v[1]), float(v[2]), float(v[3]), float(v[4]),
                   None if v[5] is None else float(v[5]))


@dataclass(frozen=True)
class Placement:
    """One object as the memory places it, in the world frame of the poses it was placed
    from. ``label`` is the name perception gave it last, ``key`` its kind
    (:func:`object_key`), ``colour`` the geometric perception's colour (None for a labelled
    object). ``visits`` are the (first, last) stamps of each visit, oldest first;
    ``seen_from`` where the camera stood when it last saw the object; ``rays`` the newest
    sightings (the writer's: a reader reads placements without them); ``sightings`` how many
    there were in all."""

    id: int
    robot: str
    key: str
    label: str
    colour: str | None
    x: float
    y: float
    uncertainty_m: float
    triangulated: bool
    visits: tuple[tuple[float, float], ...]
    seen_from: tuple[float, float]
    rays: tuple[Ray, ...] = field(default=(), repr=False)
    sightings: int = 1
    #: how many sightings named the object by each label (labels the matcher joins counted as
    #: one), the best-supported first
    votes: tuple[tuple[str, int], ...] = ()

    @property
    def position(self) -> tuple[float, float]:
        return (self.x, self.y)

    @property
    def first(self) -> float:
        return self.visits[0][0]

    @property
    def last(self) -> float:
        return self.visits[-1][1]


def object_key(obj: SeenObject) -> str | None:
    """The kind of object ``obj`` is, for grouping its rays: a colour region's name ("red
    object"), a labelled object's head noun ("chair"); None for a label of no content word."""
    if obj.colour and obj.name == f"{obj.colour} object":
        return obj.name
    return head_word(obj.name)


def frame_rays(record: FrameRecord, pose: Pose | None) -> list[tuple[SeenObject, Ray]]:
    """The rays of the objects ``record`` shows with a bearing, from camera pose ``pose``
    (none without a pose)."""
    if pose is None:
        return []
    out = []
    for obj in record.objects:
        if obj.bearing_deg is None or not math.isfinite(obj.bearing_deg):
            continue
        sigma = max(BEARING_SIGMA_DEG, (obj.extent_deg or 0.0) / 4.0)
        distance = obj.distance_m if obj.distance_m and obj.distance_m > 0 else None
        out.append((obj, Ray(record.stamp, pose.x, pose.y,
                             math.radians(pose.yaw_deg + obj.bearing_deg), sigma, distance)))
    return out


# -- geometry ---------------------------------------------------------------------------------

def _fits(q: tuple[float, float], ray: Ray) -> bool:
    """Whether place ``q`` lies in front of ``ray``'s camera, in range, near the ray."""
    return 0.3 < ray.ahead(q) < MAX_RANGE_M and abs(ray.aside(q)) < RAY_GAP_M


def triangulate(rays: Sequence[Ray]) -> tuple[float, float] | None:
    """The least-squares crossing of ``rays``, where they cross wide enough to place it (in
    front of every camera, within range, every ray within :data:`RAY_GAP_M`), else None."""
    if len(rays) < 2 or crossing_deg([r.angle for r in rays]) < MIN_CROSSING_DEG:
        return None
    a11 = a12 = a22 = b1 = b2 = 0.0
    for r in rays:
        nx, ny = -math.sin(r.angle), math.cos(r.angle)
        c = nx * r.x + ny * r.y
        a11, a12, a22 = a11 + nx * nx, a12 + nx * ny, a22 + ny * ny
        b1, b2 = b1 + nx * c, b2 + ny * c
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-6:
        return None
    q = ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det)
    return q if all(_fits(q, r) for r in rays) else None


def crossing_uncertainty(q: tuple[float, float], rays: Sequence[Ray]) -> float:
    """How far off the crossing ``q`` of ``rays`` may be (metres, :data:`SIGMAS` standard
    deviations along its worst axis): the covariance of the least-squares crossing with each
    ray's perpendicular error its range times its bearing error, scaled by the rays' spread
    about ``q`` where they scatter more than those errors explain."""
    a11 = a12 = a22 = chi2 = 0.0
    for r in rays:
        s = max(r.ahead(q), 0.3) * math.tan(math.radians(r.sigma_deg))
        w = 1.0 / (s * s)
        nx, ny = -math.sin(r.angle), math.cos(r.angle)
        a11, a12, a22 = a11 + w * nx * nx, a12 + w * nx * ny, a22 + w * ny * ny
        chi2 += w * r.aside(q) ** 2
    det = a11 * a22 - a12 * a12
    if det <= 0.0:
        return MAX_RANGE_M
    # the larger eigenvalue of the inverse is 1 / the smaller eigenvalue of the matrix
    small = (a11 + a22) / 2.0 - math.sqrt(((a11 - a22) / 2.0) ** 2 + a12 * a12)
    dof = len(rays) - 2
    scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
    return max(MIN_UNCERTAINTY_M, SIGMAS * math.sqrt(scale / max(small, 1e-12)))


def guess(rays: Sequence[Ray]) -> tuple[tuple[float, float], float]:
    """Where rays that cross nowhere put an object, and how far off it may be: the mean of
    their measured distances' points, else :data:`ASSUMED_RANGE_M` along the newest ray."""
    ranged = [r for r in rays if r.distance_m is not None]
    if ranged:
        points = [r.point(r.distance_m or 0.0) for r in ranged]
        mean = sum(r.distance_m or 0.0 for r in ranged) / len(ranged)
        return ((sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points)),
                max(MIN_UNCERTAINTY_M, SIGMAS * RANGE_SHARE * mean))
    newest = max(rays, key=lambda r: r.stamp)
    return newest.point(ASSUMED_RANGE_M), ASSUMED_RANGE_M


def along(rays: Sequence[Ray], ray: Ray) -> bool:
    """Whether ``ray`` adds no crossing to the untriangulated ``rays`` but contradicts nothing:
    from about the newest ray's viewpoint, pointing about the same way (the camera turned in
    place, keeping the object in view), or from a place on the newest ray, pointing along it
    (the camera moved towards or away from the object)."""
    last = max(rays, key=lambda r: r.stamp)
    turn = abs(math.degrees(math.remainder(ray.angle - last.angle, 2 * math.pi)))
    if math.hypot(ray.x - last.x, ray.y - last.y) < 0.3:
        return turn < 45.0
    return turn < MIN_CROSSING_DEG and abs(last.aside((ray.x, ray.y))) < RAY_GAP_M


def _visits(stamps: Iterable[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Visits merged where they overlap or lie less than :data:`VISIT_GAP_S` apart."""
    out: list[list[float]] = []
    for a, b in sorted(stamps):
        if out and a - out[-1][1] <= VISIT_GAP_S:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out[-MAX_VISITS:])


def placed(p: Placement, rays: Sequence[Ray], visits: Iterable[tuple[float, float]],
           sightings: int, label: str | None = None) -> Placement:
    """``p`` with ``rays`` (the newest :data:`MAX_RAYS` kept), placed again."""
    kept = tuple(sorted(rays, key=lambda r: r.stamp)[-MAX_RAYS:])
    q = triangulate(kept)
    if q is not None:
        position, spread, crossed = q, crossing_uncertainty(q, kept), True
    else:
        (position, spread), crossed = guess(kept), False
    return replace(p, label=label or p.label, x=position[0], y=position[1],
                   uncertainty_m=spread, triangulated=crossed, visits=_visits(visits),
                   seen_from=(kept[-1].x, kept[-1].y), rays=kept, sightings=sightings)


class Placer:
    """One robot's placements, updated frame by frame (see the module notes); not
    thread-safe (the memory's one writer feeds it)."""

    def __init__(self, robot: str, placements: Iterable[Placement] = ()) -> None:
        self.robot = robot
        self.placements: dict[int, Placement] = {p.id: p for p in placements
                                                 if p.robot == robot}
        self._next = max(self.placements, default=0) + 1

    def add_frame(self, record: FrameRecord, pose: Pose | None
                  ) -> tuple[list[Placement], list[int]]:
        """Place the objects ``record`` shows from ``pose``: the placements changed or
        created, and the ids of those merged into others (gone)."""
        changed: dict[int, Placement] = {}
        gone: list[int] = []
        for obj, ray in frame_rays(record, pose):
            key = object_key(obj)
            if key is None:
                continue
            p = self._join(key, obj, ray)
            if p.triangulated:
                p, merged = self._merge(p)
                gone += merged
                for i in merged:
                    changed.pop(i, None)
            changed[p.id] = p
        return list(changed.values()), gone

    def _of(self, key: str) -> list[Placement]:
        return [p for p in self.placements.values() if p.key == key]

    def _join(self, key: str, obj: SeenObject, ray: Ray) -> Placement:
        mine = [p for p in self._of(key) if all(r.stamp != ray.stamp for r in p.rays)]
        colour = obj.colour if obj.name == f"{obj.colour} object" else None
        newest = max(mine, key=lambda p: p.last, default=None)
        target = None
        if newest is not None and ray.stamp - newest.last <= VISIT_GAP_S and (
                triangulate([*newest.rays, ray]) is not None
                or (not newest.triangulated and along(newest.rays, ray))):
            target = newest
        else:
            passing = [p for p in mine if p.triangulated and _fits(p.position, ray)
                       and triangulate([*p.rays, ray]) is not None]
            target = min(passing, key=lambda p: math.dist(p.position, (ray.x, ray.y)),
                         default=None)
        if target is None:
            target = Placement(self._next, self.robot, key, obj.name, colour, 0.0, 0.0,
                               0.0, False, (), (ray.x, ray.y), (), 0)
            self._next += 1
        p = placed(target, [*target.rays, ray], [*target.visits, (ray.stamp, ray.stamp)],
                   target.sightings + 1, obj.name)
        self.placements[p.id] = p
        return p

    def _merge(self, p: Placement) -> tuple[Placement, list[int]]:
        """``p`` with the objects of its kind placed about its spot (triangulated ones nearer
        than :data:`SAME_OBJECT_M`, guesses whose rays pass through it) merged in."""
        merged: list[int] = []
        for other in sorted(self._of(p.key), key=lambda o: o.id):
            if (other.id == p.id or other.id not in self.placements
                    or math.dist(other.seen_from, p.position) > MAX_RANGE_M):
                continue
            near = (not other.triangulated
                    or math.dist(other.position, p.position) < SAME_OBJECT_M)
            both = sorted([*p.rays, *other.rays], key=lambda r: r.stamp)[-MAX_RAYS:]
            if near and triangulate(both) is not None:
                keep, drop = (p, other) if p.id < other.id else (other, p)
                label = p.label  # the newest name
                p = placed(keep, [*keep.rays, *drop.rays], [*keep.visits, *drop.visits],
                           keep.sightings + drop.sightings, label)
                del self.placements[drop.id]
                self.placements[p.id] = p
                merged.append(drop.id)
        return p, merged


def place_frames(frames: Iterable[tuple[FrameRecord, Pose | None]], robot: str = "robot"
                 ) -> list[Placement]:
    """The placements of ``frames`` (records with their camera poses) placed in stamp order
    by a fresh :class:`Placer`: a memory's places where no store keeps them."""
    placer = Placer(robot)
    for record, pose in sorted(frames, key=lambda f: f[0].stamp):
        placer.add_frame(record, pose)
    return sorted(placer.placements.values(), key=lambda p: p.id)

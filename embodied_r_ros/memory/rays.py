"""Bearing rays in the floor plane and where they cross: the geometry objects are placed by.

A sighting of an object is a ray from the camera's stored floor position, in the direction of
its stored heading plus the object's bearing, with the bearing's error and, where perception
measured it, the object's floor distance. Several rays place the object at their
least-squares crossing, as sure as the covariance of that crossing says; one ray with a
measured distance places a guess at that distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.colors import floor_distance, view_ray
from embodied_r_ros.core.poses import Pose, crossing_deg

#: a ray passing this near a crossing is one of the rays that cross there
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
#: a ray passes through a place within this many of its bearing errors there
GATE_SIGMAS = 3.0
#: camera positions closer than this are one position
SAME_POSE_M = 0.3
#: no place is surer than this (an object's centre, not its surface, is placed)
MIN_UNCERTAINTY_M = 0.3


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

    def spread(self, q: tuple[float, float]) -> float:
        """One standard deviation of the ray's perpendicular error at ``q``: its range
        times its bearing error."""
        return max(self.ahead(q), 0.3) * math.tan(math.radians(self.sigma_deg))

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


def in_front(q: tuple[float, float], ray: Ray) -> bool:
    """Whether place ``q`` lies in front of ``ray``'s camera, within range."""
    return 0.3 < ray.ahead(q) < MAX_RANGE_M


def fits(q: tuple[float, float], ray: Ray) -> bool:
    """Whether place ``q`` lies in front of ``ray``'s camera, in range, near the ray."""
    return in_front(q, ray) and abs(ray.aside(q)) < RAY_GAP_M


def through(q: tuple[float, float], ray: Ray) -> bool:
    """Whether ``ray`` passes through ``q``: in front of its camera and within
    :data:`GATE_SIGMAS` of its bearing error there."""
    return in_front(q, ray) and abs(ray.aside(q)) <= GATE_SIGMAS * ray.spread(q)


def coincide(a: Ray, at_a: tuple[float, float], b: Ray, at_b: tuple[float, float]) -> bool:
    """Whether rays ``a`` and ``b``, their measured places ``at_a`` and ``at_b``, saw one spot:
    each passes through the other's place."""
    return through(at_a, b) and through(at_b, a)


def positions(rays: Sequence[Ray]) -> int:
    """How many distinct camera positions ``rays`` were cast from."""
    seen: list[tuple[float, float]] = []
    for r in rays:
        if all(math.dist((r.x, r.y), s) >= SAME_POSE_M for s in seen):
            seen.append((r.x, r.y))
    return len(seen)


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
    return q if all(fits(q, r) for r in rays) else None


def crossing_uncertainty(q: tuple[float, float], rays: Sequence[Ray]) -> float:
    """How far off the crossing ``q`` of ``rays`` may be (metres): :data:`SIGMAS` times the
    root of the covariance's trace, the covariance that of the least-squares crossing with
    each ray's perpendicular error its range times its bearing error, scaled by the rays'
    spread about ``q`` where they scatter more than those errors explain. The trace, not the
    worst axis alone: an error in the plane has two axes, and where they are alike (rays
    crossing square) two standard deviations of one cover only 86 % of places, of the trace
    at least 95 %."""
    a11 = a12 = a22 = chi2 = 0.0
    for r in rays:
        s = r.spread(q)
        w = 1.0 / (s * s)
        nx, ny = -math.sin(r.angle), math.cos(r.angle)
        a11, a12, a22 = a11 + w * nx * nx, a12 + w * nx * ny, a22 + w * ny * ny
        chi2 += w * r.aside(q) ** 2
    det = a11 * a22 - a12 * a12
    if det <= 0.0:
        return MAX_RANGE_M
    dof = len(rays) - 2
    scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
    return max(MIN_UNCERTAINTY_M, SIGMAS * math.sqrt(scale * (a11 + a22) / det))


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


def foot_range(bearing_deg: float, foot_deg: float, pose: Pose) -> float | None:
    """The floor distance of an object whose box's bottom edge is ``foot_deg`` below the
    optical axis, at ``bearing_deg``, from a camera at ``pose`` (its height above the floor
    and pitch); None where the pose has no height or the edge lies above the horizon."""
    if pose.z <= 0.0:
        return None
    right = -math.tan(math.radians(bearing_deg))
    return floor_distance(view_ray(right, math.tan(math.radians(foot_deg)), pose.pitch_deg),
                          pose.z)

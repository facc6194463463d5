"""The object-map benchmark's truth: which true object a placement is of, and its errors
(``bench/vlm_object_map.py``, and ``lab/placement_replay.py`` placing a kept tour again).

A placement is of the true object most of its sightings came from: each ray's frame shows
some objects (the renderer's truth), and the ray points at one of them, the one whose true
bearing (turned by the odometry's heading error of that moment) is nearest the ray's, within
:data:`ATTRIBUTE_DEG`. So a placement named "couch" for the sofa is the sofa.

Errors are those a question suffers: the placement and the true object each seen from the
robot at the ask, the placement from where the (drifted) odometry puts the robot, the object
from where the robot truly is. Without drift this is the distance between the two places. A
question's *odometry error* is the same for the place a perfect perception would have made at
the object's last sighting before the ask: the object seen exactly from the drifted pose of
that moment.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from embodied_r_ros.core.poses import wrap_deg
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.sim.scene import SceneObject
from embodied_r_ros.sim.visibility import MIN_SHARE
from lab.odometry_drift import DriftedTrack
from lab.truth_boxes import TruthTable

#: a ray further than this from every object its frame shows is of none
ATTRIBUTE_DEG = 10.0
#: a stated uncertainty below this covers an error up to this (metres)
MIN_COVER_M = 0.1


def covers(error_m: float, uncertainty_m: float) -> bool:
    """Whether a placement's stated uncertainty covers its error."""
    return error_m <= max(uncertainty_m, MIN_COVER_M)


class Truth:
    """One world's objects, truth boxes and (drifted) track, to score placements by; a frame
    shows an object clearly from :data:`~embodied_r_ros.sim.visibility.MIN_SHARE` of its
    pixels."""

    def __init__(self, objects: Sequence[SceneObject], table: TruthTable,
                 track: DriftedTrack) -> None:
        self.objects = objects
        self.table = table
        self.track = track
        self.min_pixels = max(1, math.ceil(MIN_SHARE * table.width * table.height))
        self._owner: dict[tuple[str, int, float], int | None] = {}

    def place(self, k: int) -> tuple[float, float]:
        return (self.objects[k].x, self.objects[k].y)

    def ray_object(self, stamp: float, angle: float) -> int | None:
        """The object a ray cast at ``stamp`` in direction ``angle`` (radians) points at."""
        i = self.track.index(stamp)
        if i >= self.table.n_frames:
            return None
        pose = self.track.truth[i]
        turn = self.track.yaw_error_deg(i)
        best, best_off = None, ATTRIBUTE_DEG
        for k in np.flatnonzero(self.table.pixels[i] > 0):
            o = self.objects[int(k)]
            bearing = math.degrees(math.atan2(o.y - pose.y, o.x - pose.x)) + turn
            off = abs(wrap_deg(math.degrees(angle) - bearing))
            if off < best_off:
                best, best_off = int(k), off
        return best

    def owner(self, p: Placement) -> int | None:
        """The true object most of ``p``'s rays point at (kept per placement and version)."""
        key = (p.robot, p.id, p.last)
        if key not in self._owner:
            votes = Counter(k for r in p.rays if (k := self.ray_object(r.stamp, r.angle))
                            is not None)
            self._owner[key] = votes.most_common(1)[0][0] if votes else None
        return self._owner[key]

    def error(self, position: tuple[float, float], k: int, ask: float) -> float:
        """How far off ``position`` (odometry frame) puts object ``k`` from the robot at
        ``ask``."""
        i = self.track.index(ask)
        est = self.track.relative(position, i, odometry=True)
        true = self.track.relative(self.place(k), i, odometry=False)
        return math.dist(est, true)

    def read(self, placements: Sequence[Placement], k: int) -> Placement | None:
        """The placement of object ``k`` a question naming no time reads: of those of ``k``,
        the one seen last."""
        return max((p for p in placements if self.owner(p) == k), key=lambda p: p.last,
                   default=None)

    def score(self, placements: Sequence[Placement], k: int, ask: float
              ) -> tuple[float | None, bool | None]:
        """A question's error about object ``k`` at ``ask`` from ``placements``: that of the
        placement of ``k`` seen last (the one a question naming no time reads), and whether
        the uncertainty it states covers that error; (None, None) where none is of ``k``
        (unplaced)."""
        newest = self.read(placements, k)
        if newest is None:
            return None, None
        error = self.error(newest.position, k, ask)
        return error, covers(error, newest.uncertainty_m)

    def last_seen(self, k: int, ask: float) -> int | None:
        """The last frame at or before ``ask`` that shows object ``k`` clearly."""
        i = self.track.index(ask)
        shown = np.flatnonzero(self.table.pixels[: i + 1, k] >= self.min_pixels)
        return int(shown[-1]) if len(shown) else None

    def odometry_error(self, k: int, ask: float) -> float | None:
        """The error a perfect perception would make about ``k`` at ``ask`` (module notes)."""
        last = self.last_seen(k, ask)
        if last is None:
            return None
        return self.error(self.track.to_odometry(self.place(k), last), k, ask)

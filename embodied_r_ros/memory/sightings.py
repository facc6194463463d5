"""A frame record's objects as sightings: what kind of object each is, and its ray.

The placer (:mod:`~embodied_r_ros.memory.placements`) associates rays; this is where a stored
perception record (a colour region of the geometric perception, a VLM's grounded object)
becomes one, from the camera pose of its frame: the bearing's error widened by a box's width,
the floor distance perception measured, else the one its box's foot gives.
"""

from __future__ import annotations

import math

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory.labels import head_word
from embodied_r_ros.memory.rays import BEARING_SIGMA_DEG, Ray, foot_range

__all__ = ["frame_rays", "is_region", "object_key"]


def object_key(obj: SeenObject) -> str | None:
    """The kind of object ``obj`` is: a colour region's name ("red object"), a labelled
    object's head noun ("chair"); None for a label of no content word."""
    if is_region(obj):
        return obj.name
    return head_word(obj.name)


def is_region(obj: SeenObject) -> bool:
    """Whether ``obj`` is a colour region of the geometric perception ("red object")."""
    return bool(obj.colour) and obj.name == f"{obj.colour} object"


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
        if distance is None and obj.foot_deg is not None and math.isfinite(obj.foot_deg):
            distance = foot_range(obj.bearing_deg, obj.foot_deg, pose)
        out.append((obj, Ray(record.stamp, pose.x, pose.y,
                             math.radians(pose.yaw_deg + obj.bearing_deg), sigma, distance)))
    return out

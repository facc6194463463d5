"""A weight-free stand-in for a VLM's observation: where the strongly coloured regions are.

The ``geometric`` perception backend has no VLM, yet the reasoning LM still needs something to
look at. Saturated colour regions named by hue, with an egocentric direction and size, are cheap,
deterministic and enough for questions about distinctly coloured objects.

Each region also gets its bearing in degrees from the camera intrinsics (the config's guess from
a 70-degree field of view when none are given): the coarse thirds of the image ("to the left")
cannot tell 15 from 35 degrees, and questions about where an object is after the camera has
turned need that. When the caller knows the camera's mount (height above the floor and pitch,
as a ground robot's calibration or odometry has them), the floor distance of each region's
lowest visible row is added too: objects stand on the floor, so that row is where the object
meets it, unless the object is cut off by the image's lower edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.records import SeenObject

#: bump when the observation text changes, so that datasets built from it are rebuilt
OBSERVATION_VERSION = 2
#: horizontal field of view assumed when no intrinsics are given (the config's default guess)
DEFAULT_HFOV_DEG: float = CameraConfig.model_fields["hfov_deg"].default

# OpenCV hue (0..179) upper bounds, in order; red wraps around.
_HUES: tuple[tuple[int, str], ...] = (
    (8, "red"),
    (20, "orange"),
    (34, "yellow"),
    (85, "green"),
    (100, "cyan"),
    (130, "blue"),
    (150, "purple"),
    (170, "magenta"),
    (180, "red"),
)
#: every colour name an observation can use
COLOUR_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for _, name in _HUES))
_MIN_SATURATION = 110
_MIN_VALUE = 60
_WORK_WIDTH = 160  # regions are found on a copy this wide
_MAX_RANGE_M = 20.0  # farther floor distances are not reported (the ray is nearly level)


@dataclass(frozen=True)
class CameraMount:
    """Where the camera sits: height of the optical centre above the floor and its pitch
    (degrees, up > 0), as a robot knows them from its calibration or odometry."""

    height_m: float
    pitch_deg: float = 0.0


@dataclass(frozen=True)
class Region:
    """The largest region of one colour in an image."""

    colour: str
    direction: str  # "to the left", "straight ahead", "ahead, below", ...
    size: str  # small / medium / large by image share
    share: float  # of the image area
    bearing_deg: float  # horizontal angle of the region's centre from the view, left > 0
    distance_m: float | None = None  # floor distance of its lowest row, with a mount


def hue_name(hue: int) -> str:
    for bound, name in _HUES:
        if hue < bound:
            return name
    return "red"


def _direction(cx: float, cy: float) -> str:
    horiz = "left" if cx < 1 / 3 else "right" if cx > 2 / 3 else "ahead"
    vert = "above" if cy < 0.25 else "below" if cy > 0.8 else ""
    if horiz == "ahead":
        return f"ahead, {vert}" if vert else "straight ahead"
    return f"to the {horiz}, {vert}" if vert else f"to the {horiz}"


def _size(share: float) -> str:
    return "large" if share > 0.08 else "medium" if share > 0.02 else "small"


def _intrinsics(camera: CameraConfig | None, width: int, height: int) -> np.ndarray:
    from embodied_r_ros.core.egomotion import camera_matrix

    return camera_matrix(camera or CameraConfig(hfov_deg=DEFAULT_HFOV_DEG), width, height)


def _ray(k: np.ndarray, u: float, v: float, pitch_deg: float) -> tuple[float, float, float]:
    """(forward, left, up) of the ray through pixel (u, v) for a camera pitched up by
    ``pitch_deg`` (optical frame: x right, y down, z along the view)."""
    return view_ray((u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], pitch_deg)


def view_ray(right: float, down: float, pitch_deg: float) -> tuple[float, float, float]:
    """(forward, left, up) of the ray through the normalised image point (``right``,
    ``down``: offsets from the principal point over the focal length) of a camera pitched up
    by ``pitch_deg``."""
    p = math.radians(pitch_deg)
    return (down * math.sin(p) + math.cos(p), -right, -down * math.cos(p) + math.sin(p))


def floor_distance(ray: tuple[float, float, float], height_m: float) -> float | None:
    """How far along the floor a ray (forward, left, up) from a camera ``height_m`` above the
    floor meets it; None where it never does or farther than :data:`_MAX_RANGE_M`."""
    fwd, left, up = ray
    if up >= 0.0 or height_m <= 0.0:
        return None
    ground = height_m / -up * math.hypot(fwd, left)
    return ground if ground <= _MAX_RANGE_M else None


def find_regions(
    image: np.ndarray,
    min_share: float = 0.004,
    camera: CameraConfig | None = None,
    mount: CameraMount | None = None,
) -> list[Region]:
    """The largest region per colour, largest first, with bearing (and distance with a mount).

    ``camera``: intrinsics of ``image`` (unset values are guessed from its field of view).
    """
    full_h, full_w = image.shape[:2]
    scale = _WORK_WIDTH / full_w
    small = cv2.resize(image, (_WORK_WIDTH, max(1, round(_WORK_WIDTH * full_h / full_w))))
    hsv = cv2.cvtColor(small, cv2.COLOR_RGB2HSV)
    vivid = (hsv[..., 1] >= _MIN_SATURATION) & (hsv[..., 2] >= _MIN_VALUE)
    names = np.array([hue_name(h) for h in range(180)])
    labels = np.where(vivid, names[hsv[..., 0]], "")
    h, w = labels.shape
    k = _intrinsics(camera, full_w, full_h)
    pitch = mount.pitch_deg if mount is not None else 0.0
    found: list[Region] = []
    for colour in sorted(set(labels[vivid].tolist())):
        mask = (labels == colour).astype(np.uint8)
        n, _, stats, centroids = cv2.connectedComponentsWithStats(mask, connectivity=8)
        if n <= 1:
            continue
        best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
        share = stats[best, cv2.CC_STAT_AREA] / float(h * w)
        if share < min_share:
            continue
        cx, cy = centroids[best]
        # back to full-resolution pixel-index coordinates (pixel centres at integers)
        u, v = (cx + 0.5) / scale - 0.5, (cy + 0.5) / scale - 0.5
        fwd, left, _ = _ray(k, u, v, pitch)
        bearing = math.degrees(math.atan2(left, fwd))
        distance = None
        bottom = stats[best, cv2.CC_STAT_TOP] + stats[best, cv2.CC_STAT_HEIGHT]  # exclusive
        if mount is not None and bottom < h:  # the region's foot is inside the image
            distance = floor_distance(_ray(k, u, bottom / scale - 0.5, pitch), mount.height_m)
        found.append(Region(colour, _direction(cx / w, cy / h), _size(share), float(share),
                            bearing, distance))
    found.sort(key=lambda r: -r.share)
    return found


def colour_objects(
    image: np.ndarray,
    camera: CameraConfig | None = None,
    mount: CameraMount | None = None,
) -> tuple[SeenObject, ...]:
    """The colour regions of one frame as its record's objects, largest first (see the module
    notes for ``camera`` and ``mount``)."""
    return tuple(SeenObject(f"{r.colour} object", colour=r.colour, size=r.size,
                            direction=r.direction, bearing_deg=r.bearing_deg,
                            distance_m=r.distance_m)
                 for r in find_regions(image, camera=camera, mount=mount))

"""A weight-free stand-in for a VLM's observation: where the strongly coloured regions are.

The ``geometric`` perception backend has no VLM, yet the reasoning LM still needs something to
look at. Saturated colour regions named by hue, with an egocentric direction and size, are cheap,
deterministic and enough for questions about distinctly coloured objects.
"""

from __future__ import annotations

import cv2
import numpy as np

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
_MIN_SATURATION = 110
_MIN_VALUE = 60


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


def colour_regions(
    image: np.ndarray, min_share: float = 0.004
) -> list[tuple[str, str, str, float]]:
    """``(colour, direction, size, share)`` of the largest region per colour, largest first."""
    small = cv2.resize(image, (160, max(1, round(160 * image.shape[0] / image.shape[1]))))
    hsv = cv2.cvtColor(small, cv2.COLOR_RGB2HSV)
    vivid = (hsv[..., 1] >= _MIN_SATURATION) & (hsv[..., 2] >= _MIN_VALUE)
    names = np.array([hue_name(h) for h in range(180)])
    labels = np.where(vivid, names[hsv[..., 0]], "")
    h, w = labels.shape
    found: list[tuple[str, str, str, float]] = []
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
        found.append((colour, _direction(cx / w, cy / h), _size(share), share))
    found.sort(key=lambda r: -r[3])
    return found


def describe_colour_regions(image: np.ndarray) -> str:
    regions = colour_regions(image)
    if not regions:
        return "no distinctly coloured object in view."
    parts = [f"a {size} {colour} object {direction}" for colour, direction, size, _ in regions]
    return "I see " + "; ".join(parts) + "."

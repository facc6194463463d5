"""Exact overlap of two image footprints, the key-frame criterion of Embodied-R.

The official code rasterises both polygons on a w x h mask with integer corners; here the
warped rectangle is clipped against the reference rectangle (Sutherland-Hodgman) and the area
of the intersection is taken with the shoelace formula, so the ratio is exact and does not
depend on the resolution it is computed at.

Coordinates are *continuous* pixel coordinates: the image of width w spans [0, w] (the pixel
with index i covers [i, i + 1]), as the official corners ``(0, 0), (w, 0), (w, h), (0, h)``.
Polygons have at most eight vertices here, so plain Python floats beat numpy on speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Point = tuple[float, float]

# A corner whose homogeneous coordinate is this close to zero maps (nearly) to infinity.
_MIN_W = 1e-9


def polygon_area(poly: Sequence[Sequence[float]] | np.ndarray) -> float:
    """Signed shoelace area of a polygon given as N (x, y) points: positive when the vertices
    run counter-clockwise in x-right, y-up axes (clockwise on screen, where y points down)."""
    pts = [(float(x), float(y)) for x, y in poly]
    twice = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:] + pts[:1], strict=True):
        twice += x0 * y1 - y0 * x1
    return 0.5 * twice


def clip_convex(
    subject: Sequence[Sequence[float]] | np.ndarray,
    clip: Sequence[Sequence[float]] | np.ndarray,
) -> np.ndarray:
    """Intersection of polygon ``subject`` with the convex polygon ``clip`` (Sutherland-Hodgman).

    Either may have either orientation. Exact for a convex subject; returns an (M, 2) array,
    M == 0 when they do not intersect (or touch only along an edge or at a point).
    """
    out = _clip([(float(x), float(y)) for x, y in subject], [(float(x), float(y)) for x, y in clip])
    return np.array(out, dtype=np.float64).reshape(-1, 2)


def _clip(subject: list[Point], clip: list[Point]) -> list[Point]:
    if polygon_area(clip) < 0.0:
        clip = clip[::-1]
    out = subject
    for (ax, ay), (bx, by) in zip(clip, clip[1:] + clip[:1], strict=True):
        if not out:
            break
        ex, ey = bx - ax, by - ay
        # side >= 0: on the inner (left) side of the directed clip edge a -> b.
        sides = [ex * (y - ay) - ey * (x - ax) for x, y in out]
        inp, out = out, []
        for j, cur in enumerate(inp):
            prev, s_prev, s_cur = inp[j - 1], sides[j - 1], sides[j]
            if (s_cur >= 0.0) != (s_prev >= 0.0):
                t = s_prev / (s_prev - s_cur)
                out.append((prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])))
            if s_cur >= 0.0:
                out.append(cur)
    return out


def rectangle(width: float, height: float) -> list[Point]:
    """The image footprint ``(0, 0), (w, 0), (w, h), (0, h)`` as the official code writes it."""
    return [(0.0, 0.0), (float(width), 0.0), (float(width), float(height)), (0.0, float(height))]


def warp_rectangle(homography: np.ndarray, width: float, height: float) -> list[Point] | None:
    """The image rectangle mapped by ``homography``, or None when the result is not a proper
    quadrilateral.

    A homography keeps a convex quadrilateral convex unless the quadrilateral crosses the line
    sent to infinity; that shows as homogeneous coordinates of mixed sign (or zero) at the
    corners, and the "quad" is then twisted or unbounded. Only a degenerate RANSAC fit
    produces that, so it counts as a failed homography.
    """
    (h00, h01, h02), (h10, h11, h12), (h20, h21, h22) = np.asarray(homography, float).tolist()
    quad: list[Point] = []
    signs = set()
    for x, y in rectangle(width, height):
        w = h20 * x + h21 * y + h22
        if not abs(w) >= _MIN_W:  # also catches NaN
            return None
        signs.add(w > 0.0)
        px, py = (h00 * x + h01 * y + h02) / w, (h10 * x + h11 * y + h12) / w
        if not (math.isfinite(px) and math.isfinite(py)):
            return None
        quad.append((px, py))
    return quad if len(signs) == 1 else None


def intersection_area(
    subject: Sequence[Sequence[float]] | np.ndarray,
    clip: Sequence[Sequence[float]] | np.ndarray,
) -> float:
    """Area of the intersection of two convex polygons (either orientation)."""
    return abs(polygon_area(clip_convex(subject, clip)))


def overlap_ratio(
    homography: np.ndarray,
    cur_size: tuple[float, float],
    ref_size: tuple[float, float],
) -> float | None:
    """area(reference rectangle ∩ current rectangle warped into the reference) / area(reference).

    ``homography`` maps current-frame points to reference-frame points; sizes are (w, h).
    None when the warped rectangle is not a proper quadrilateral (see :func:`warp_rectangle`).
    """
    quad = warp_rectangle(homography, *cur_size)
    if quad is None:
        return None
    ref_w, ref_h = ref_size
    area = abs(polygon_area(_clip(quad, rectangle(ref_w, ref_h))))
    return area / float(ref_w * ref_h)

"""Which frame of a synthetic world an image is: the nearest grey thumbnail.

A VLM request carries key frames as JPEG data URLs, often shrunk to the model's ``image_max_side``
and coded twice (the frame buffer stores JPEG, the backend sends JPEG). Area-averaging any such
copy down to 48 pixels wide and blurring that by a pixel (area averaging at a ratio that is
not a whole number leaves a resampling pattern the blur removes) wipes out the coding noise and
the size: a copy lands within a grey level of its frame, while two frames of a moving camera
differ by more. The distance is the root mean square of the thumbnails' difference in grey
levels; a nearest frame further than ``max_rms`` means the image is no frame of this world.

Frames are told apart as far as the views differ: a tour that passes the same doorway twice on
the same line shows the same view twice (poses within centimetres), and either frame may be
named for it; their truth (boxes, actions) is the same to a pixel. ``python -m lab.frame_match``
measures this on a world.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from tqdm import tqdm

from embodied_r_ros.backends.images import from_data_url, to_data_url
from embodied_r_ros.core.images import as_stored, decode_image, encode_jpeg, resize_max_side
from embodied_r_ros.core.poses import wrap_deg
from embodied_r_ros.sim.visibility import MIN_SHARE
from lab.truth_boxes import TruthTable, TruthWorld, load_world, thumbnail, truth_table

#: grey levels (RMS over the thumbnail) within which an image is taken for its nearest frame
MAX_RMS = 4.0
_BLUR_PX = 1.0


@dataclass(frozen=True)
class Match:
    frame: int
    rms: float  # to that frame
    runner_up_rms: float  # to the next nearest frame (inf for a world of one frame)


class NotAFrame(ValueError):
    """An image whose nearest frame is too far to be a copy of it."""


class FrameMatcher:
    """Nearest-thumbnail lookup over a world's frames (``thumbs``: frames x th x tw)."""

    def __init__(self, thumbs: np.ndarray, max_rms: float = MAX_RMS) -> None:
        if thumbs.ndim != 3 or len(thumbs) == 0:
            raise ValueError("thumbnails must be a non-empty frames x height x width array")
        self.size = (int(thumbs.shape[2]), int(thumbs.shape[1]))
        self.max_rms = max_rms
        self._flat = np.stack([_smooth(t) for t in thumbs])
        self._sq = np.einsum("ij,ij->i", self._flat, self._flat)

    def distances(self, image: np.ndarray) -> np.ndarray:
        """RMS grey-level distance of an RGB image's thumbnail to every frame's."""
        probe = _smooth(thumbnail(image, self.size))
        sq = self._sq + float(probe @ probe) - 2.0 * (self._flat @ probe)
        return np.sqrt(np.maximum(sq, 0.0) / probe.size)

    def match(self, image: np.ndarray) -> Match:
        d = self.distances(image)
        order = np.argsort(d, kind="stable")[:2]
        runner_up = float(d[order[1]]) if len(order) > 1 else float("inf")
        return Match(int(order[0]), float(d[order[0]]), runner_up)

    def identify(self, image: np.ndarray) -> int:
        """The frame ``image`` is a copy of; :class:`NotAFrame` if none is near enough."""
        found = self.match(image)
        if found.rms > self.max_rms:
            raise NotAFrame(f"the nearest frame ({found.frame}) differs by {found.rms:.1f} grey "
                            f"levels RMS, more than {self.max_rms:g}")
        return found.frame


def _smooth(thumb: np.ndarray) -> np.ndarray:
    return cv2.GaussianBlur(thumb.astype(np.float32), (0, 0), _BLUR_PX).ravel()


# -- how well frames are told apart --------------------------------------------------------------

def _codings() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Ways a frame reaches a VLM: stored by the frame buffer and sent by the backend at
    640 and 160 pixels a side (JPEG quality 90 twice), and a harsh 112 pixels at quality 50."""
    def wire(side: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda im: from_data_url(to_data_url(as_stored(im, side)[0], side))

    return {"stored and sent at 640 px": wire(640), "stored and sent at 160 px": wire(160),
            "112 px at JPEG quality 50":
                lambda im: decode_image(encode_jpeg(resize_max_side(im, 112), 50))}


@dataclass(frozen=True)
class CodingReport:
    coding: str
    frames: int
    exact: int  # identified as themselves
    worst_rms: float  # the largest distance of a copy to its own frame
    pose_gap_m: float  # the largest distance between a frame and the frame named instead
    yaw_gap_deg: float
    box_gap_px: float  # the largest edge difference of an object both frames show
    objects_differ: int  # misnamed frames whose clearly seen objects differ


def verify(world: TruthWorld, table: TruthTable, max_rms: float = MAX_RMS,
           min_share: float = MIN_SHARE) -> list[CodingReport]:
    """Render every frame again, code it each way of :func:`_codings`, identify it, and say
    how far the frame named is from the true one (0 everywhere: all exact)."""
    matcher = FrameMatcher(table.thumbs, max_rms)
    codings = _codings()
    named = {c: np.zeros(world.n_frames, np.int64) for c in codings}
    rms = {c: np.zeros(world.n_frames) for c in codings}
    renderer = world.make_renderer()
    for i, pose in enumerate(tqdm(world.poses, unit="frame", desc="frames", disable=None)):
        image = renderer.render(pose).image
        for c, code in codings.items():
            d = matcher.distances(code(image))
            named[c][i], rms[c][i] = int(np.argmin(d)), d[i]
    clear = table.pixels >= min_share * table.width * table.height
    out = []
    for c in codings:
        wrong = np.flatnonzero(named[c] != np.arange(world.n_frames))
        pose_gap = yaw_gap = box_gap = 0.0
        differ = 0
        for i in wrong:
            j = int(named[c][i])
            a, b = world.poses[i], world.poses[j]
            pose_gap = max(pose_gap, float(np.linalg.norm(a.position - b.position)))
            yaw_gap = max(yaw_gap, abs(wrap_deg(a.yaw_deg - b.yaw_deg)))
            differ += int(not np.array_equal(clear[i], clear[j]))
            both = (table.pixels[i] > 0) & (table.pixels[j] > 0)
            if both.any():
                gap = np.abs(table.visible[i, both] - table.visible[j, both]).max()
                box_gap = max(box_gap, float(gap))
        out.append(CodingReport(c, world.n_frames, world.n_frames - len(wrong),
                                float(rms[c].max()), pose_gap, yaw_gap, box_gap, differ))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.frame_match",
                                description="how reliably the scripted VLM tells a world's "
                                            "frames apart, for three ways of coding them")
    p.add_argument("--world", required=True, help="a generated world directory")
    p.add_argument("--cache", default=None, help="truth table file (as lab.scripted_vlm's)")
    args = p.parse_args(argv)
    try:
        world = load_world(args.world)
    except ValueError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    table = truth_table(world, args.cache)
    for r in verify(world, table):
        print(f"{r.coding}: {r.exact}/{r.frames} frames exact, copies within {r.worst_rms:.2f} "
              f"grey levels RMS; frames named instead lie within {r.pose_gap_m:.3f} m and "
              f"{r.yaw_gap_deg:.2f} deg, boxes within {r.box_gap_px:.1f} px, "
              f"{r.objects_differ} show other objects")
    return 0


if __name__ == "__main__":
    sys.exit(main())

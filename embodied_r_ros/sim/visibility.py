"""Which object the camera truly saw, and when, from the renderer's object-id buffer.

Questions must be answerable from the video: an object counts as seen only after it covers a
visible share of the image for a sustained moment, long enough to survive the 1-fps
pre-sampling of the key-frame extractor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_SHARE = 0.003  # of the image area
MIN_SEEN_S = 0.5


@dataclass(frozen=True)
class Visibility:
    shares: np.ndarray  # n_frames x n_objects, visible share of the image
    rate_hz: float

    @classmethod
    def from_pixels(cls, pixels: np.ndarray, image_area: int, rate_hz: float) -> Visibility:
        return cls(np.asarray(pixels, dtype=np.float64) / float(image_area), rate_hz)

    @property
    def n_frames(self) -> int:
        return int(self.shares.shape[0])

    def visible(self, min_share: float = MIN_SHARE) -> np.ndarray:
        """Boolean n_frames x n_objects: the object is visibly in frame."""
        return self.shares >= min_share

    def first_visible(self, min_share: float = MIN_SHARE) -> list[int | None]:
        """Per object, the first frame it is visibly in (None: never)."""
        vis = self.visible(min_share)
        return [int(np.argmax(col)) if col.any() else None for col in vis.T]

    def first_seen(self, min_share: float = MIN_SHARE,
                   min_seen_s: float = MIN_SEEN_S) -> list[int | None]:
        """Per object, the first frame of its first sustained sighting (None: never seen)."""
        run = max(1, round(min_seen_s * self.rate_hz))
        vis = self.visible(min_share)
        out: list[int | None] = []
        for k in range(vis.shape[1]):
            col = vis[:, k].astype(np.int32)
            # windowed sum: frames i..i+run-1 all visible
            csum = np.concatenate([[0], np.cumsum(col)])
            if len(col) < run:
                out.append(None)
                continue
            full = np.flatnonzero(csum[run:] - csum[:-run] == run)
            out.append(int(full[0]) if len(full) else None)
        return out

    def seen_by(self, frame: int, min_share: float = MIN_SHARE,
                min_seen_s: float = MIN_SEEN_S) -> list[int]:
        """Objects whose first sustained sighting is complete by ``frame``."""
        run = max(1, round(min_seen_s * self.rate_hz))
        first = self.first_seen(min_share, min_seen_s)
        return [k for k, f in enumerate(first) if f is not None and f + run - 1 <= frame]

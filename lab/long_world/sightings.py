"""When each object was truly visible: the renderer's object-id buffer, frame by frame.

The long world's questions ("how long ago did you see X", "did you see X") are decided here,
never from perception. A frame shows an object *clearly* when it covers at least
:data:`~embodied_r_ros.sim.visibility.MIN_SHARE` of the image, and *faintly* when it covers
less but some pixels: a faint frame neither proves a sighting nor rules one out, so questions
whose answer would hinge on one are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embodied_r_ros.sim.visibility import MIN_SHARE, Visibility


@dataclass(frozen=True)
class Sightings:
    visibility: Visibility
    min_share: float = MIN_SHARE
    _clear: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)
    _any: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shares = self.visibility.shares
        clear = tuple(np.flatnonzero(col >= self.min_share) for col in shares.T)
        seen = tuple(np.flatnonzero(col > 0.0) for col in shares.T)
        object.__setattr__(self, "_clear", clear)
        object.__setattr__(self, "_any", seen)

    @property
    def n_frames(self) -> int:
        return self.visibility.n_frames

    @property
    def n_objects(self) -> int:
        return len(self._clear)

    def clear_frames(self, k: int, first: int = 0, last: int | None = None) -> list[int]:
        """Frames in ``[first, last]`` that show object ``k`` clearly."""
        frames = self._clear[k]
        hi = self.n_frames - 1 if last is None else last
        lo_i, hi_i = np.searchsorted(frames, [first, hi + 1])
        return frames[lo_i:hi_i].tolist()

    def last_clear(self, k: int, frame: int) -> int | None:
        """The latest frame up to ``frame`` that shows object ``k`` clearly."""
        frames = self._clear[k]
        i = int(np.searchsorted(frames, frame, side="right"))
        return int(frames[i - 1]) if i > 0 else None

    def any_in(self, k: int, first: int, last: int) -> bool:
        """Whether any pixel of object ``k`` shows in a frame of ``[first, last]``."""
        frames = self._any[k]
        lo_i, hi_i = np.searchsorted(frames, [max(0, first), last + 1])
        return bool(hi_i > lo_i)

    def clear_in(self, k: int, first: int, last: int) -> bool:
        frames = self._clear[k]
        lo_i, hi_i = np.searchsorted(frames, [max(0, first), last + 1])
        return bool(hi_i > lo_i)

    def seen_by(self, frame: int) -> list[int]:
        """Objects shown clearly at least once up to ``frame``."""
        return [k for k in range(self.n_objects) if self.last_clear(k, frame) is not None]

    def visits(self, k: int, gap_frames: int) -> list[tuple[int, int]]:
        """Runs of clear frames of object ``k``, split where it went unseen for more than
        ``gap_frames`` frames: (first, last) frame of each sighting."""
        frames = self._clear[k]
        if len(frames) == 0:
            return []
        breaks = np.flatnonzero(np.diff(frames) > gap_frames)
        starts = np.concatenate([[frames[0]], frames[breaks + 1]])
        ends = np.concatenate([frames[breaks], [frames[-1]]])
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

"""Key-frame extraction as in Embodied-R (paper §3.1, ``train/conver_format/utils.py``).

Frames are pre-sampled at ``sample_fps`` by *timestamp*; each sampled frame is compared with the
last key frame (ORB, brute-force Hamming with cross-check, RANSAC homography current -> key
frame) and becomes the new key frame when the warped footprint covers less than
``overlap_threshold`` of the key frame, or when no homography can be had. The count is then
clamped to ``[min_frames, max_frames]`` by the official uniform resampling.

One implementation serves both uses: :class:`KeyframeExtractor` takes frames one at a time and
keeps only the key frame's keypoints and descriptors (a ROS node), and :func:`select_keyframes`
drives it over a whole video.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import cv2
import numpy as np

from embodied_r_ros.core.config import KeyframeConfig
from embodied_r_ros.core.images import resize_max_side
from embodied_r_ros.core.overlap import overlap_ratio

try:  # the compiled matcher (setup.py builds it); NumPy does the same where it is missing
    from embodied_r_ros.core import _hamming
except ImportError:  # pragma: no cover - depends on the build
    _hamming = None

log = logging.getLogger(__name__)

REASONS = (
    "first",
    "overlap",
    "few_matches",
    "no_descriptors",
    "homography_failed",
    "overlap_ok",
    "rate",
)

# Frame intervals remembered to place the sampling boundary between two frames.
_GAP_HISTORY = 8
# RANSAC with PROSAC sampling: hypotheses come from the best matches first (they are sorted
# by distance, as in the official code) and an SPRT test drops bad ones early; the score is
# still the inlier count at ransac_reproj_px. On 1,125 frame pairs with known motion it made
# as few key-frame errors as plain cv2.RANSAC (7 against 7 with the inlier gate below, 10
# without it) at 0.2 ms instead of 4-9 ms per frame (20-30 ms when all matches are outliers).
_HOMOGRAPHY_METHOD = cv2.USAC_PROSAC


@dataclass(frozen=True)
class MatchPairs:
    """Cross-checked ORB matches between a reference frame and a later frame.

    Points are (N, 2) float32 in each frame's *input* pixel coordinates (pixel-index
    convention, so they pair with intrinsics of the input image), whatever resolution the
    matching ran at.
    """

    pts_ref: np.ndarray
    pts_cur: np.ndarray

    def __len__(self) -> int:
        return len(self.pts_ref)


@dataclass(frozen=True)
class KeyframeDecision:
    sampled: bool  # passed the pre-sampling rate check
    keyframe: bool
    reason: str  # one of REASONS
    overlap: float | None
    n_matches: int
    # Matches with the key frame this frame was compared with (None when there was none);
    # ego-motion between consecutive key frames reuses them.
    pairs: MatchPairs | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Features:
    """ORB output for one frame at processing resolution."""

    pts: np.ndarray  # (N, 2) float32, continuous processing coordinates (pixel i spans [i, i+1])
    des: np.ndarray | None  # (N, 32) uint8, None when ORB found nothing
    # (N, 256) float32 descriptor bits as -1/+1, for the NumPy matcher (None with the C one)
    signs: np.ndarray | None
    size: tuple[int, int]  # processing (w, h)
    scale: tuple[float, float]  # processing / input, per axis

    def to_input(self, idx: np.ndarray) -> np.ndarray:
        """Points ``idx`` in input pixel-index coordinates."""
        return (self.pts[idx] / np.asarray(self.scale, np.float32) - 0.5).astype(np.float32)


class FeatureMatcher:
    """Grayscale + resize once, ORB, and cross-checked brute-force matching.

    Shared by the extractor and by ego-motion so that both see the same features.
    """

    def __init__(self, cfg: KeyframeConfig) -> None:
        self.cfg = cfg
        self._orb = cv2.ORB_create(nfeatures=cfg.n_features)

    def gray(self, image: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
        """The processing-resolution grayscale image and its scale relative to the input."""
        image = _check_image(image)
        if image.ndim == 3:
            code = cv2.COLOR_RGB2GRAY if image.shape[2] == 3 else cv2.COLOR_RGBA2GRAY
            gray = image[:, :, 0] if image.shape[2] == 1 else cv2.cvtColor(image, code)
        else:
            gray = image
        (h, w), small = gray.shape, resize_max_side(gray, self.cfg.max_side)
        return small, (small.shape[1] / w, small.shape[0] / h)

    def detect(self, image: np.ndarray) -> Features:
        gray, scale = self.gray(image)
        kps, des = self._orb.detectAndCompute(gray, None)
        size = (gray.shape[1], gray.shape[0])
        if des is None or len(des) == 0:
            return Features(np.empty((0, 2), np.float32), None, None, size, scale)
        # ORB reports pixel-index coordinates; +0.5 makes a resize a pure scaling.
        pts = cv2.KeyPoint_convert(kps).reshape(-1, 2) + np.float32(0.5)
        signs = None
        if _hamming is None or des.shape[1] != 32:
            signs = np.unpackbits(des, axis=1).astype(np.float32) * 2.0 - 1.0
        return Features(pts, np.ascontiguousarray(des), signs, size, scale)

    @staticmethod
    def match(ref: Features, cur: Features) -> np.ndarray:
        """(N, 2) index pairs (ref, cur): brute-force Hamming matches with cross-check, best
        first, exactly as ``BFMatcher(NORM_HAMMING, crossCheck=True)`` plus the official sort.

        The compiled popcount matcher (``_hamming``) does it in one pass over the distance
        matrix; without it, with bits as -1/+1, ``signs_a . signs_b = nbits - 2 * hamming``
        gives every distance in one matrix product (integers, exact in float32). Both are
        several times cheaper than the matcher's loop. Ties go to the lowest index on both
        sides, as in OpenCV.
        """
        if ref.des is None or cur.des is None:
            return np.empty((0, 2), np.intp)
        if ref.signs is None and cur.signs is None:
            best_cur = np.empty(len(ref.des), np.int32)
            dist = np.empty(len(ref.des), np.int32)
            best_ref = np.empty(len(cur.des), np.int32)
            _hamming.best_matches(ref.des, cur.des, best_cur, dist, best_ref)
            score = -dist
        else:
            sim = cv2.gemm(_signs(ref), _signs(cur), 1.0, None, 0.0, flags=cv2.GEMM_2_T)
            best_cur = sim.argmax(axis=1)
            best_ref = cv2.transpose(sim).argmax(axis=1)  # faster than a strided argmax(axis=0)
            score = sim[np.arange(len(best_cur)), best_cur]
        q = np.flatnonzero(best_ref[best_cur] == np.arange(len(best_cur)))
        t = best_cur[q]
        order = np.argsort(-score[q], kind="stable")
        return np.stack([q[order], t[order]], axis=1).astype(np.intp)

    @staticmethod
    def pairs(ref: Features, cur: Features, idx: np.ndarray) -> MatchPairs:
        return MatchPairs(ref.to_input(idx[:, 0]), cur.to_input(idx[:, 1]))


def _signs(features: Features) -> np.ndarray:
    if features.signs is not None:
        return features.signs
    assert features.des is not None
    return np.unpackbits(features.des, axis=1).astype(np.float32) * 2.0 - 1.0


def _check_image(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"key frames need uint8 images, got {image.dtype}")
    shape_ok = image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (1, 3, 4))
    if not shape_ok or min(image.shape[:2]) < 1:
        raise ValueError(f"expected a non-empty HxW or HxWx3 image, got shape {image.shape}")
    return image


class KeyframeExtractor:
    """Streaming key-frame selection: push frames with their timestamps, one at a time.

    Only the current key frame's keypoints and descriptors are kept, never images. The
    decision for a frame depends on the frames before it alone, so this is the exact
    per-frame rule of the official code; the final clamp to ``[min_frames, max_frames]``
    needs the whole video and is :func:`finalize_positions`.
    """

    def __init__(self, cfg: KeyframeConfig = KeyframeConfig()) -> None:  # noqa: B008 (frozen)
        self.cfg = cfg
        self._matcher = FeatureMatcher(cfg)
        self.reset()

    def reset(self) -> None:
        """Forget the key frame and the sampling clock (a new video or a new episode)."""
        self._ref: Features | None = None
        self._t0: float | None = None  # sampling grid origin: the first sampled stamp
        self._next_slot = 0  # the grid slot the next sampled frame must reach
        self._last_stamp: float | None = None
        self._gaps: deque[float] = deque(maxlen=_GAP_HISTORY)

    # --- pre-sampling -------------------------------------------------------------------

    def _slack(self) -> float:
        """How far before a grid time a frame still counts for it.

        Half the smallest recent frame interval puts the boundary midway between two frames,
        so timestamp jitter below a quarter of the interval cannot move the choice. Capped at
        a tenth of the sampling period, which only matters for a sparse stream (skipped frames
        not reported): its grid then shifts by at most that much.
        """
        if not self._gaps:
            return 0.0
        return min(0.5 * min(self._gaps), 0.1 / self.cfg.sample_fps)

    def wants(self, stamp: float) -> bool:
        """Would a frame at ``stamp`` be pre-sampled? No state changes (call it before decoding)."""
        stamp = _check_stamp(stamp)
        if self.cfg.sample_fps == 0 or self._t0 is None:
            return True
        if self._last_stamp is not None and stamp < self._last_stamp - 1.0 / self.cfg.sample_fps:
            return True  # the clock jumped back (a bag loop, a sim reset): start a new grid
        due = self._t0 + self._next_slot / self.cfg.sample_fps
        return stamp >= due - self._slack()

    def grid(self) -> tuple[float, float] | None:
        """``(origin, period)`` of the sampling grid once it is set (None: every frame is
        sampled, or no frame yet): sampled frames are those at or just after ``origin + k *
        period``."""
        if self.cfg.sample_fps == 0 or self._t0 is None:
            return None
        return self._t0, 1.0 / self.cfg.sample_fps

    def frame_interval(self) -> float | None:
        """The smallest recent interval between frames (None before two frames)."""
        return min(self._gaps) if self._gaps else None

    def skip(self, stamp: float) -> KeyframeDecision:
        """Account for a frame that :meth:`wants` refused and that was not decoded.

        Reporting skipped frames lets the sampler learn the frame interval, which makes the
        sampled set robust to timestamp jitter; calling it is optional.
        """
        self._note_stamp(_check_stamp(stamp))
        return KeyframeDecision(False, False, "rate", None, 0)

    def _note_stamp(self, stamp: float) -> None:
        if self._last_stamp is not None and stamp > self._last_stamp:
            self._gaps.append(stamp - self._last_stamp)
        self._last_stamp = stamp

    def _advance_clock(self, stamp: float) -> None:
        if self.cfg.sample_fps == 0:
            self._note_stamp(stamp)
            return
        period = 1.0 / self.cfg.sample_fps
        jumped = self._last_stamp is not None and stamp < self._last_stamp - period
        if self._t0 is None or jumped:
            if jumped:
                log.warning("timestamp went back from %.3f to %.3f: restarting the sampling grid",
                            self._last_stamp, stamp)
                self._gaps.clear()
                self._last_stamp = None
            self._t0 = stamp
            self._next_slot = 1
        else:
            # The next slot after the one this frame filled; a gap (dropped frames) skips
            # slots rather than sampling a burst to catch up.
            slot = math.floor((stamp - self._t0 + self._slack()) * self.cfg.sample_fps)
            self._next_slot = max(self._next_slot, slot) + 1
        self._note_stamp(stamp)

    # --- selection ----------------------------------------------------------------------

    def push(self, image: np.ndarray, stamp: float, force: bool = False) -> KeyframeDecision:
        """Offer a frame (RGB HxWx3 or gray HxW, uint8) taken at ``stamp`` seconds.

        ``force`` samples it whatever the rate (the last frame of a video is always kept).
        """
        stamp = _check_stamp(stamp)
        image = _check_image(image)  # before any state changes
        if not force and not self.wants(stamp):
            return self.skip(stamp)
        self._advance_clock(stamp)
        cur = self._matcher.detect(image)
        ref = self._ref
        if ref is None:
            return self._keep(cur, "first", None, 0)
        if ref.des is None or cur.des is None:
            return self._keep(cur, "no_descriptors", None, 0)
        idx = self._matcher.match(ref, cur)
        n = len(idx)
        pairs = self._matcher.pairs(ref, cur, idx)
        if n <= self.cfg.min_matches:
            return self._keep(cur, "few_matches", None, n, pairs)
        homography, inliers = cv2.findHomography(
            cur.pts[idx[:, 1]], ref.pts[idx[:, 0]], _HOMOGRAPHY_METHOD, self.cfg.ransac_reproj_px
        )
        # A model that only a handful of matches agree with is a fit to outliers: hold it to
        # the same "more than min_matches" bar as the matches themselves.
        if homography is None or int(np.count_nonzero(inliers)) <= self.cfg.min_matches:
            return self._keep(cur, "homography_failed", None, n, pairs)
        ratio = overlap_ratio(homography, cur.size, ref.size)
        if ratio is None:
            return self._keep(cur, "homography_failed", None, n, pairs)
        if ratio < self.cfg.overlap_threshold:
            return self._keep(cur, "overlap", ratio, n, pairs)
        return KeyframeDecision(True, False, "overlap_ok", ratio, n, pairs)

    def _keep(
        self,
        cur: Features,
        reason: str,
        ratio: float | None,
        n: int,
        pairs: MatchPairs | None = None,
    ) -> KeyframeDecision:
        self._ref = cur
        return KeyframeDecision(True, True, reason, ratio, n, pairs)


def _check_stamp(stamp: float) -> float:
    stamp = float(stamp)
    if not math.isfinite(stamp):
        raise ValueError(f"timestamp must be finite, got {stamp}")
    return stamp


# --- clamping -----------------------------------------------------------------------------


def uniform_positions(n: int, m: int) -> list[int]:
    """``m`` of ``range(n)``: first, last and ``round(i*(n-2)/(m-2)) + 1`` for i < m-2.

    The official ``constrained_sampling`` (Python's round, half to even); all of them when
    ``n <= m``.
    """
    if n <= m:
        return list(range(n))
    if m <= 0:
        return []
    if m == 1:
        return [0]
    step = (n - 2) / (m - 2) if m > 2 else 0.0
    return [0, *(int(round(i * step)) + 1 for i in range(m - 2)), n - 1]


def finalize_positions(
    key_positions: Sequence[int], n_sampled: int, cfg: KeyframeConfig, *,
    keep_first: bool = True,
) -> list[int]:
    """Positions into the pre-sampled list to keep: the key frames plus the first and the last
    sampled frame, clamped to ``[min_frames, max_frames]`` (0 disables a bound).

    Too few: ``min_frames`` uniformly from *all* sampled frames. Too many: ``max_frames``
    uniformly from the key-frame list, keeping its first and last. ``keep_first=False`` starts
    at the first key frame instead of the first sampled frame (streaming perception: windows
    that start at a frame already described).
    """
    if n_sampled <= 0:
        return []
    bad = [p for p in key_positions if not 0 <= p < n_sampled]
    if bad:
        raise ValueError(f"key positions {bad} outside 0..{n_sampled - 1}")
    first = {0} if keep_first or not key_positions else set()
    positions = sorted({*first, *key_positions, n_sampled - 1})
    if cfg.min_frames and len(positions) < cfg.min_frames:
        return uniform_positions(n_sampled, cfg.min_frames)
    if cfg.max_frames and len(positions) > cfg.max_frames:
        return [positions[i] for i in uniform_positions(len(positions), cfg.max_frames)]
    return positions


# --- batch --------------------------------------------------------------------------------


@dataclass
class KeyframeSelection:
    indices: list[int]  # input-stream indices of the chosen key frames
    stamps: list[float]
    images: list[np.ndarray]  # the chosen key frames at INPUT resolution (RGB)
    sampled_indices: list[int]  # input indices of all pre-sampled frames
    n_in: int  # frames considered (input count)
    extractor_seconds: float  # time spent inside the extractor (decode excluded)
    # pairs[j]: matches between images[j-1] and images[j] when the extractor compared exactly
    # these two (else None; always None for j == 0).
    pairs: list[MatchPairs | None] = field(default_factory=list, repr=False)
    # why each was chosen: its extractor reason, "last" (always kept) or "clamp" (min_frames)
    reasons: list[str] = field(default_factory=list)


def select_keyframes(
    frames: Iterable[tuple[np.ndarray, float]],
    cfg: KeyframeConfig = KeyframeConfig(),  # noqa: B008 (frozen)
) -> KeyframeSelection:
    """Key frames of a whole video given as ``(image, stamp)`` pairs, in order.

    Holds only the pre-sampled frames (the ``min_frames`` fallback draws from all of them)
    plus one frame of look-ahead, which is how the last frame is known to be the last. The
    arrays are kept, not copied: a reader must not reuse one buffer for every frame.
    """
    ex = KeyframeExtractor(cfg)
    sampled: list[tuple[int, float, np.ndarray]] = []
    decisions: list[KeyframeDecision] = []  # per sampled frame, without its pairs
    ref_of: list[int] = []  # position of the key frame each sampled frame was compared with
    key_positions: list[int] = []
    # Match points only where ego-motion may reuse them: key frames and the latest frame.
    kept_pairs: dict[int, MatchPairs] = {}
    seconds = 0.0

    def offer(idx: int, image: np.ndarray, stamp: float, last: bool) -> None:
        nonlocal seconds
        t = time.perf_counter()
        decision = ex.push(image, stamp, force=last)
        seconds += time.perf_counter() - t
        if not decision.sampled:
            return
        pos = len(sampled)
        if decisions and not decisions[-1].keyframe:
            kept_pairs.pop(pos - 1, None)
        if decision.pairs is not None:
            kept_pairs[pos] = decision.pairs
        ref_of.append(key_positions[-1] if key_positions else -1)
        if decision.keyframe:
            key_positions.append(pos)
        decisions.append(replace(decision, pairs=None))
        sampled.append((idx, stamp, image))

    n_in = 0
    held: tuple[int, np.ndarray, float] | None = None
    for idx, (image, stamp) in enumerate(frames):
        if held is not None:
            offer(*held, last=False)
        held = (idx, image, stamp)
        n_in = idx + 1
    if held is not None:
        offer(*held, last=True)

    chosen = finalize_positions(key_positions, len(sampled), cfg)
    pairs = [
        kept_pairs.get(pos) if j > 0 and ref_of[pos] == chosen[j - 1] else None
        for j, pos in enumerate(chosen)
    ]
    return KeyframeSelection(
        indices=[sampled[p][0] for p in chosen],
        stamps=[sampled[p][1] for p in chosen],
        images=[_as_rgb(sampled[p][2]) for p in chosen],
        sampled_indices=[s[0] for s in sampled],
        n_in=n_in,
        extractor_seconds=seconds,
        pairs=pairs,
        reasons=[_chosen_reason(decisions[p], p == len(sampled) - 1) for p in chosen],
    )


def _chosen_reason(decision: KeyframeDecision, last: bool) -> str:
    if decision.keyframe:
        return decision.reason
    return "last" if last else "clamp"


def _as_rgb(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB)
    if image.shape[2] == 1:
        return cv2.cvtColor(image[:, :, 0], cv2.COLOR_GRAY2RGB)
    if image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_RGBA2RGB)
    return image

"""The egocentric frame window behind the frame-buffer node, with no ROS in it.

Frames are pre-sampled by timestamp *before* decoding (:meth:`FrameStore.wants`), shrunk to the
processing resolution, run through the core's streaming key-frame extractor and kept as JPEG
bytes, bounded by a time span and a byte budget. A question's window is answered with the key
frames inside it, clamped by the core's :func:`finalize_positions`, and the odometry motion
between consecutive ones where poses are known.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import Counter, deque
from dataclasses import dataclass, field

import cv2
import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.config import KeyframeConfig
from embodied_r_ros.core.keyframes import KeyframeDecision, KeyframeExtractor, finalize_positions
from embodied_r_ros.core.pipeline import NO_FRAMES, QueryError
from embodied_r_ros.core.poses import Pose, relative_motion

log = logging.getLogger(__name__)


def resize_max_side(rgb: np.ndarray, max_side: int) -> np.ndarray:
    """Shrink so the longest side is at most ``max_side`` (0 = keep); never enlarges."""
    h, w = rgb.shape[:2]
    if not max_side or max(h, w) <= max_side:
        return rgb
    r = max_side / max(h, w)
    return cv2.resize(rgb, (max(1, round(w * r)), max(1, round(h * r))),
                      interpolation=cv2.INTER_AREA)


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()


def decode_jpeg(data: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError("not a decodable JPEG")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


@dataclass(frozen=True)
class StoredFrame:
    stamp: float
    jpeg: bytes
    keyframe: bool


@dataclass(frozen=True)
class Window:
    """Key frames of a time window, oldest first, ready for perception."""

    images: list[np.ndarray]
    stamps: list[float]
    jpegs: list[bytes]
    # motions[i]: from key frame i to i+1, from odometry; None where a pose is missing
    motions: list[Motion | None]
    n_sampled: int  # pre-sampled frames inside the window


@dataclass(frozen=True)
class FrameAdded:
    """What became of a decoded frame offered to the store."""

    decision: KeyframeDecision
    image: np.ndarray  # at processing resolution
    reset: bool = False  # the stream's clock went back and the buffer was cleared


class PoseBuffer:
    """Time-ordered poses (from odometry) with nearest-in-time lookup."""

    def __init__(self) -> None:
        self._stamps: deque[float] = deque()
        self._poses: deque[Pose] = deque()

    def __len__(self) -> int:
        return len(self._stamps)

    def add(self, stamp: float, pose: Pose) -> None:
        if self._stamps and stamp < self._stamps[-1]:
            if stamp < self._stamps[-1] - 1.0:  # the clock went back: a new episode
                self.clear()
            else:
                return  # late duplicate: odometry is dense, dropping one costs nothing
        self._stamps.append(stamp)
        self._poses.append(pose)

    def clear(self) -> None:
        self._stamps.clear()
        self._poses.clear()

    def prune(self, before: float) -> None:
        while len(self._stamps) > 1 and self._stamps[0] < before:
            self._stamps.popleft()
            self._poses.popleft()

    def nearest(self, stamp: float, tolerance: float) -> Pose | None:
        if not self._stamps:
            return None
        stamps = self._stamps
        i = bisect.bisect_left(stamps, stamp)
        best = min(
            (j for j in (i - 1, i) if 0 <= j < len(stamps)), key=lambda j: abs(stamps[j] - stamp)
        )
        return self._poses[best] if abs(stamps[best] - stamp) <= tolerance else None


@dataclass
class StoreStats:
    received: int = 0  # frames offered (wanted or not)
    skipped: int = 0  # refused by the pre-sampling rate, never decoded
    stored: int = 0
    keyframes: int = 0
    evicted: int = 0
    resets: int = 0
    poses: int = 0  # odometry poses received
    dropped: Counter[str] = field(default_factory=Counter)  # by FrameError code
    dropped_since_stored: int = 0  # bad frames in a row, since the last good one
    last_drop: tuple[str, str] | None = None  # (code, one-line reason)


class FrameStore:
    """Thread-safe: the camera callback adds frames while query threads read windows."""

    def __init__(
        self,
        kf_cfg: KeyframeConfig,
        *,
        buffer_sec: float = 300.0,
        buffer_max_bytes: int = 64 * 2**20,
        jpeg_quality: int = 90,
        odom_tolerance_sec: float = 0.2,
    ) -> None:
        self.kf_cfg = kf_cfg
        self.buffer_sec = buffer_sec
        self.buffer_max_bytes = buffer_max_bytes
        self.jpeg_quality = jpeg_quality
        self.odom_tolerance_sec = odom_tolerance_sec
        self.stats = StoreStats()
        self._extractor = KeyframeExtractor(kf_cfg)
        self._frames: deque[StoredFrame] = deque()
        self._bytes = 0
        self._poses = PoseBuffer()
        self._lock = threading.Lock()

    # -- ingestion -------------------------------------------------------------------------

    def _jumped_back(self, stamp: float) -> bool:
        period = 1.0 / self.kf_cfg.sample_fps if self.kf_cfg.sample_fps else 0.0
        return bool(self._frames) and stamp < self._frames[-1].stamp - max(period, 1e-3)

    def wants(self, stamp: float) -> bool:
        """Whether a frame at ``stamp`` would be kept: decide this before decoding it."""
        with self._lock:
            self.stats.received += 1
            if self._jumped_back(stamp):
                return True
            if self._frames and stamp <= self._frames[-1].stamp:
                return False  # duplicate (raw + compressed of one frame) or late
            return self._extractor.wants(stamp)

    def skip(self, stamp: float) -> None:
        """Account for a refused frame (lets the sampler learn the camera's frame interval)."""
        with self._lock:
            self.stats.skipped += 1
            if not self._frames or stamp > self._frames[-1].stamp:
                self._extractor.skip(stamp)

    def note_dropped(self, code: str, reason: str) -> None:
        """Count a frame that could not be decoded; it is gone, the stream goes on."""
        with self._lock:
            self.stats.dropped[code] += 1
            self.stats.dropped_since_stored += 1
            self.stats.last_drop = (code, reason)

    def add(self, rgb: np.ndarray, stamp: float) -> FrameAdded:
        """Store a decoded RGB frame that :meth:`wants` accepted."""
        image = resize_max_side(rgb, self.kf_cfg.max_side)
        jpeg = encode_jpeg(image, self.jpeg_quality)
        with self._lock:
            reset = self._jumped_back(stamp)
            if reset:
                log.warning("camera time went back from %.3f to %.3f s: clearing the buffer",
                            self._frames[-1].stamp, stamp)
                self._clear_locked()
                self.stats.resets += 1
            decision = self._extractor.push(image, stamp)
            if decision.sampled:
                self._frames.append(StoredFrame(stamp, jpeg, decision.keyframe))
                self._bytes += len(jpeg)
                self.stats.stored += 1
                self.stats.dropped_since_stored = 0
                self.stats.keyframes += int(decision.keyframe)
                self._evict_locked()
            else:
                self.stats.skipped += 1
        return FrameAdded(decision, image, reset)

    def add_pose(self, stamp: float, pose: Pose) -> None:
        with self._lock:
            self.stats.poses += 1
            self._poses.add(stamp, pose)
            if self._frames:
                self._poses.prune(self._frames[0].stamp - self.odom_tolerance_sec)

    def _clear_locked(self) -> None:
        self._frames.clear()
        self._bytes = 0
        self._poses.clear()
        self._extractor.reset()

    def _evict_locked(self) -> None:
        newest = self._frames[-1].stamp
        while len(self._frames) > 1 and (
            newest - self._frames[0].stamp > self.buffer_sec or self._bytes > self.buffer_max_bytes
        ):
            old = self._frames.popleft()
            self._bytes -= len(old.jpeg)
            self.stats.evicted += 1
        self._poses.prune(self._frames[0].stamp - self.odom_tolerance_sec)

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def span_sec(self) -> float:
        with self._lock:
            return self._frames[-1].stamp - self._frames[0].stamp if self._frames else 0.0

    @property
    def newest_stamp(self) -> float | None:
        with self._lock:
            return self._frames[-1].stamp if self._frames else None

    def window(self, window_sec: float, anchor: float | None = None) -> Window:
        """Key frames stamped in ``[anchor - window_sec, anchor]`` (0 s = the whole buffer).

        ``anchor`` defaults to the newest frame, so a paused or replayed stream still answers.
        Raises :class:`QueryError` ``NO_FRAMES`` when the window is empty.
        """
        if window_sec < 0:
            raise QueryError(NO_FRAMES, f"window_sec must be >= 0, got {window_sec:g}")
        with self._lock:
            end = anchor if anchor is not None else (
                self._frames[-1].stamp if self._frames else 0.0
            )
            start = end - window_sec if window_sec > 0 else -np.inf
            frames = [f for f in self._frames if start <= f.stamp <= end]
            if not frames and self.stats.last_drop and self.stats.dropped_since_stored:
                code, reason = self.stats.last_drop
                raise QueryError(
                    code,
                    f"the last {self.stats.dropped_since_stored} camera frame(s) were dropped: "
                    f"{reason}",
                )
            if not self._frames:
                raise QueryError(NO_FRAMES, "no camera frames have been received yet")
            if not frames:
                age = end - self._frames[-1].stamp
                raise QueryError(
                    NO_FRAMES,
                    f"no frames in the last {window_sec:g} s (newest frame is {age:.1f} s old)",
                )
            keys = [i for i, f in enumerate(frames) if f.keyframe]
            chosen = [frames[p] for p in finalize_positions(keys, len(frames), self.kf_cfg)]
            poses = [self._poses.nearest(f.stamp, self.odom_tolerance_sec) for f in chosen]
        motions = [
            relative_motion(a, b) if a is not None and b is not None else None
            for a, b in zip(poses, poses[1:], strict=False)
        ]
        return Window(
            images=[decode_jpeg(f.jpeg) for f in chosen],
            stamps=[f.stamp for f in chosen],
            jpegs=[f.jpeg for f in chosen],
            motions=motions,
            n_sampled=len(frames),
        )

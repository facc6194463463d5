"""The egocentric frame window behind the frame-buffer node, with no ROS in it.

Frames are pre-sampled by timestamp *before* decoding (:meth:`FrameStore.wants`), shrunk to the
processing resolution, run through the core's streaming key-frame extractor and kept as JPEG
bytes, bounded by a time span and a byte budget; the newest key frames are also kept decoded,
so a query does not decode its window again. A question's window is answered with the key frames
inside it, clamped by the core's :func:`finalize_positions`, and the odometry motion between
consecutive ones where poses are known (``core.odometry``: the rule ``build`` applies to bags).
Poses are the odometry handed to :meth:`FrameStore.add_pose`, or, where the robot publishes
its pose only as transforms, a pose track the store is given (the tf tree's camera chain).

Stamps are checked by a :class:`StampGate`: a single frame stamped far in the future or the past
(a bad driver clock, a corrupt header) is dropped and counted (``BAD_STAMP``), while a sustained
jump (a bag loop, a clock reset: several consecutive stamps consistent with each other) starts a
new timeline, clearing the buffer when the jump went back.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.config import ODOM_TOLERANCE_SEC, KeyframeConfig
from embodied_r_ros.core.error_codes import BAD_STAMP, NO_FRAMES
from embodied_r_ros.core.images import decode_image, encode_jpeg, resize_max_side
from embodied_r_ros.core.keyframes import KeyframeDecision, KeyframeExtractor, finalize_positions
from embodied_r_ros.core.odometry import PoseTrack, odometry_motions, pose_near
from embodied_r_ros.core.poses import Pose, StampedPose
from embodied_r_ros.core.request import QueryError, check_window_sec

log = logging.getLogger(__name__)

#: the frame buffer's parameters start here: seconds and bytes of frames kept, their JPEG
#: quality, and how far off the timeline a stamp is dropped unless as many frames confirm it
BUFFER_SEC = 300.0
BUFFER_MAX_BYTES = 64 * 2**20
JPEG_QUALITY = 90
STAMP_JUMP_SEC = 5.0
STAMP_CONFIRM = 3

Verdict = Literal["ok", "held", "restart"]


class StampGate:
    """Decides whether a stamp continues the stream's timeline.

    A stamp more than ``max_jump_sec`` ahead of the last accepted one, or more than
    ``tolerance_sec`` behind it, is *held*: refused, unless ``confirm`` consecutive held stamps
    agree with each other (each within ``max_jump_sec`` after the previous one), which makes the
    last of them a *restart* of the timeline.
    """

    def __init__(self, max_jump_sec: float = 5.0, confirm: int = 3,
                 tolerance_sec: float = 1.0) -> None:
        self.max_jump_sec = max_jump_sec
        self.confirm = max(1, confirm)
        self.tolerance_sec = tolerance_sec
        self.last: float | None = None
        self._held: list[float] = []

    def check(self, stamp: float) -> Verdict:
        last = self.last
        if last is None or last - self.tolerance_sec <= stamp <= last + self.max_jump_sec:
            self._held.clear()
            if last is None or stamp > last:
                self.last = stamp
            return "ok"
        if self._held and 0.0 <= stamp - self._held[-1] <= self.max_jump_sec:
            self._held.append(stamp)
        else:
            self._held = [stamp]
        if len(self._held) >= self.confirm:
            self._held.clear()
            self.last = stamp
            return "restart"
        return "held"

    def reset(self) -> None:
        self.last = None
        self._held.clear()


def stamp_filter(origin: float, period: float, interval: float, *, field: str = "header.stamp"
                 ) -> tuple[str, list[str]] | None:
    """A DDS content filter (expression, parameters) passing only the frames the sampler can
    want: those within a short window after each grid time ``origin + k * period``.

    The grid must repeat every second (``period`` = 1/n s, or n whole seconds), so the window
    is a range of ``nanosec`` (split where it wraps past the second). The window is three frame
    intervals (at least 50 ms, at most 40 % of the period): with 30 Hz frames about three of
    every thirty reach the process, enough to sample from despite jitter and drops. None where
    no such filter exists (the subscription then receives every frame).
    """
    per_second = 1.0 / period
    if not (abs(per_second - round(per_second)) < 1e-9 or abs(period - round(period)) < 1e-9):
        return None
    window = min(max(3.0 * interval, 0.05), 0.4 * period)
    phases = sorted({(origin + k * period) % 1.0 for k in range(max(1, round(per_second)))})
    ranges: list[tuple[int, int]] = []
    for phase in phases:
        lo, hi = round(phase * 1e9), round((phase + window) * 1e9)
        if hi <= 1_000_000_000:
            ranges.append((lo, hi))
        else:  # wraps past the second
            ranges += [(lo, 1_000_000_000), (0, hi - 1_000_000_000)]
    if len(ranges) > 20:
        return None  # too long an expression to be worth it
    terms, params = [], []
    for lo, hi in ranges:
        terms.append(f"({field}.nanosec >= %{len(params)} AND {field}.nanosec < "
                     f"%{len(params) + 1})")
        params += [str(lo), str(hi)]
    return " OR ".join(terms), params


@dataclass
class StoredFrame:
    stamp: float
    jpeg: bytes
    keyframe: bool


@dataclass
class Window:
    """Key frames of a time window, oldest first, ready for perception.

    ``images`` are decoded on first use (:meth:`decoded`) when the window came as JPEG bytes
    only, e.g. from another process: frames are decoded once, where they are perceived.
    """

    stamps: list[float]
    jpegs: list[bytes]
    # motions[i]: from key frame i to i+1, from odometry; None where a pose is missing
    motions: list[Motion | None]
    n_sampled: int  # pre-sampled frames inside the window
    images: list[np.ndarray] | None = None

    def decoded(self) -> list[np.ndarray]:
        if self.images is None:
            self.images = [decode_image(j) for j in self.jpegs]
        return self.images


@dataclass(frozen=True)
class FrameAdded:
    """What became of a decoded frame offered to the store."""

    decision: KeyframeDecision
    image: np.ndarray  # at processing resolution
    jpeg: bytes  # as stored
    reset: bool = False  # the stream's clock went back and the buffer was cleared


class PoseBuffer:
    """Time-ordered poses (from odometry) with nearest-in-time lookup; stamps gated like
    frames (a lone outlier is dropped, a sustained jump back starts over)."""

    def __init__(self, gate: StampGate | None = None) -> None:
        self._stamps: deque[float] = deque()
        self._poses: deque[Pose] = deque()
        self.gate = gate or StampGate()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._stamps)

    def add(self, stamp: float, pose: Pose) -> None:
        verdict = self.gate.check(stamp)
        if verdict == "held":
            self.dropped += 1
            return
        if verdict == "restart" and self._stamps and stamp < self._stamps[-1]:
            self.clear()
        if self._stamps and stamp <= self._stamps[-1]:
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
        """The core's rule (``core.odometry``), as datasets built from bags apply it."""
        return pose_near(self._stamps, self._poses, stamp, tolerance)

    def at(self, stamp: float, tolerance_sec: float) -> Pose | None:
        """:meth:`nearest`, as a :class:`~embodied_r_ros.core.odometry.PoseTrack`."""
        return self.nearest(stamp, tolerance_sec)


@dataclass
class StoreStats:
    received: int = 0  # frames offered (wanted or not)
    skipped: int = 0  # refused by the pre-sampling rate, never decoded
    stored: int = 0
    keyframes: int = 0
    evicted: int = 0
    resets: int = 0
    poses: int = 0  # odometry poses received
    dropped: Counter[str] = field(default_factory=Counter)  # by FrameError code / BAD_STAMP
    dropped_since_stored: int = 0  # bad frames in a row, since the last good one
    last_drop: tuple[str, str] | None = None  # (code, one-line reason)
    # stamps of the last frame handled (stored, skipped or dropped) and the last pose received:
    # proof that a given one arrived, which a count cannot give (a late duplicate moves it too)
    last_frame_stamp: float | None = None
    last_pose_stamp: float | None = None


class FrameStore:
    """Thread-safe: the camera callback adds frames while query threads read windows."""

    def __init__(
        self,
        kf_cfg: KeyframeConfig,
        *,
        buffer_sec: float = BUFFER_SEC,
        buffer_max_bytes: int = BUFFER_MAX_BYTES,
        jpeg_quality: int = JPEG_QUALITY,
        odom_tolerance_sec: float = ODOM_TOLERANCE_SEC,
        stamp_jump_sec: float = STAMP_JUMP_SEC,
        stamp_confirm: int = STAMP_CONFIRM,
        decoded_keep: int = 40,
        snap_to_key_frames: bool = False,
        pose_track: PoseTrack | None = None,
    ) -> None:
        """``pose_track``: where frames' poses come from when not from :meth:`add_pose` (the tf
        tree's camera chain, filled by its own subscriber)."""
        self.kf_cfg = kf_cfg
        self.buffer_sec = buffer_sec
        self.buffer_max_bytes = buffer_max_bytes
        self.jpeg_quality = jpeg_quality
        self.odom_tolerance_sec = odom_tolerance_sec
        self.stats = StoreStats()
        period = 1.0 / kf_cfg.sample_fps if kf_cfg.sample_fps else 0.0
        self._gate = StampGate(max(stamp_jump_sec, 3.0 * period), stamp_confirm)
        self._extractor = KeyframeExtractor(kf_cfg)
        self._frames: deque[StoredFrame] = deque()
        self._bytes = 0
        self._poses = PoseBuffer(StampGate(max(stamp_jump_sec, 1.0), stamp_confirm))
        self._track: PoseTrack = pose_track if pose_track is not None else self._poses
        self._decoded: OrderedDict[float, np.ndarray] = OrderedDict()  # newest key frames
        self._decoded_keep = decoded_keep
        self._restart = False
        self._snap = snap_to_key_frames
        self._lock = threading.Lock()
        #: called with the stamp, the decoded image (as every reader will see it) and whether
        #: it is a key frame, for each stored frame (streaming perception); runs on the
        #: ingesting thread: only enqueue
        self.on_frame: Callable[[float, np.ndarray, bool], None] | None = None

    # -- ingestion -------------------------------------------------------------------------

    def wants(self, stamp: float) -> bool:
        """Whether a frame at ``stamp`` would be kept: decide this before decoding it."""
        with self._lock:
            self.stats.received += 1
            verdict = self._gate.check(stamp)
            if verdict == "held":
                self._note_dropped_locked(BAD_STAMP, f"frame stamped {stamp:.3f} s is off the "
                                          "stream's timeline")
                return False
            if verdict == "restart":
                self._restart = True
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

    def handled(self, stamp: float) -> None:
        """The frame stamped ``stamp`` is done with (stored, skipped or dropped)."""
        with self._lock:
            self.stats.last_frame_stamp = stamp

    def note_dropped(self, code: str, reason: str) -> None:
        """Count a frame that could not be decoded; it is gone, the stream goes on."""
        with self._lock:
            self._note_dropped_locked(code, reason)

    def _note_dropped_locked(self, code: str, reason: str) -> None:
        self.stats.dropped[code] += 1
        self.stats.dropped_since_stored += 1
        self.stats.last_drop = (code, reason)

    def restart(self, why: str) -> None:
        """Start over (e.g. ``/clock`` went back): the next frame begins a new timeline."""
        with self._lock:
            log.warning("%s: clearing the frame buffer", why)
            self._clear_locked()
            self.stats.resets += 1

    def add(self, rgb: np.ndarray, stamp: float) -> FrameAdded:
        """Store a decoded RGB frame that :meth:`wants` accepted."""
        image = resize_max_side(rgb, self.kf_cfg.max_side)
        jpeg = encode_jpeg(image, self.jpeg_quality)
        with self._lock:
            reset = False
            if self._restart:
                self._restart = False
                if self._frames and stamp < self._frames[-1].stamp:
                    log.warning("camera time went back from %.3f to %.3f s: a new timeline, "
                                "clearing the buffer", self._frames[-1].stamp, stamp)
                    self._clear_locked()
                    self.stats.resets += 1
                    reset = True
            if self._frames and stamp <= self._frames[-1].stamp:  # raced with another frame
                late = KeyframeDecision(sampled=False, keyframe=False, reason="rate",
                                        overlap=None, n_matches=0)
                return FrameAdded(late, image, jpeg)
            decision = self._extractor.push(image, stamp)
            if decision.sampled:
                if decision.keyframe:
                    self._decoded[stamp] = decode_image(jpeg)  # what every reader will see
                    while len(self._decoded) > self._decoded_keep:
                        self._decoded.popitem(last=False)
                self._frames.append(StoredFrame(stamp, jpeg, decision.keyframe))
                self._bytes += len(jpeg)
                self.stats.stored += 1
                self.stats.dropped_since_stored = 0
                self.stats.keyframes += int(decision.keyframe)
                self._evict_locked()
            else:
                self.stats.skipped += 1
            hook = self.on_frame if decision.sampled else None
            decoded = self._decoded.get(stamp)
        if hook is not None:
            hook(stamp, decoded if decoded is not None else decode_image(jpeg),
                 decision.keyframe)
        return FrameAdded(decision, image, jpeg, reset)

    def add_pose(self, stamp: float, pose: Pose) -> None:
        with self._lock:
            self.stats.poses += 1
            self._poses.add(stamp, pose)
            if self._frames:
                self._poses.prune(self._frames[0].stamp - self.odom_tolerance_sec)
            self.stats.last_pose_stamp = stamp

    def pose_at(self, stamp: float) -> Pose | None:
        """The odometry pose of a frame at ``stamp`` by the rule windows use (the nearest within
        ``odom_tolerance_sec``), None where none is that close: what the memory stores."""
        with self._lock:
            return self._track.at(stamp, self.odom_tolerance_sec)

    def pose_now(self) -> StampedPose | None:
        """The camera's pose at the newest frame or odometry pose received, by the lookup key
        frames get (None: none is that close): where a question read from the memory counts
        "now" from, later than the newest key frame the memory stored."""
        with self._lock:
            stamps = [s for s in (self.stats.last_frame_stamp, self.stats.last_pose_stamp)
                      if s is not None]
            if not stamps:
                return None
            pose = self._track.at(max(stamps), self.odom_tolerance_sec)
            return None if pose is None else StampedPose(max(stamps), pose)

    @property
    def poses_dropped(self) -> int:
        return self._poses.dropped

    def sampling(self) -> tuple[float, float, float] | None:
        """``(grid origin, period, frame interval)`` once the sampler knows them."""
        with self._lock:
            grid, interval = self._extractor.grid(), self._extractor.frame_interval()
        if grid is None or interval is None or self.stats.received < 10:
            return None
        return (*grid, interval)

    def _clear_locked(self) -> None:
        self._frames.clear()
        self._decoded.clear()
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
            self._decoded.pop(old.stamp, None)
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
        Raises :class:`QueryError`: ``BAD_WINDOW`` for a negative or non-finite ``window_sec``;
        ``NO_FRAMES`` when the window is empty, or the code of the last drop when the newest
        frames were dropped.
        """
        check_window_sec(window_sec)
        with self._lock:
            end = anchor if anchor is not None else (
                self._frames[-1].stamp if self._frames else 0.0
            )
            start = end - window_sec if window_sec > 0 else -np.inf
            frames = [f for f in self._frames if start <= f.stamp <= end]
            if not frames and self.stats.last_drop and self.stats.dropped_since_stored:
                code, reason = self.stats.last_drop
                if code != BAD_STAMP or not self._frames:
                    raise QueryError(
                        code,
                        f"the last {self.stats.dropped_since_stored} camera frame(s) were "
                        f"dropped: {reason}",
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
            positions = finalize_positions(keys, len(frames), self.kf_cfg,
                                           keep_first=not self._snap)
            chosen = [frames[p] for p in positions]
            poses = [self._track.at(f.stamp, self.odom_tolerance_sec) for f in chosen]
            cached = [self._decoded.get(f.stamp) for f in chosen]
        images = [img if img is not None else decode_image(f.jpeg)
                  for img, f in zip(cached, chosen, strict=True)]
        motions = odometry_motions(poses)
        return Window(
            stamps=[f.stamp for f in chosen],
            jpegs=[f.jpeg for f in chosen],
            motions=motions,
            n_sampled=len(frames),
            images=images,
        )

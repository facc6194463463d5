"""The tf tree without ROS: the camera's pose in the odometry frame from timestamped transforms.

Many robots publish their pose only as transforms: ``odom -> base_link`` on ``/tf``, and the
camera's mount (``base_link -> camera_link -> camera_optical_frame``) once on ``/tf_static``.
The motion written for a key frame is the camera's, so its pose is the whole chain from the
odometry frame to the camera's frame: :class:`TfBuffer` keeps each edge (a parent and a child
frame) as timestamped samples, or one static transform, and :meth:`TfBuffer.lookup` composes the
chain at a stamp, each moving edge interpolated between the samples around it (linear position,
spherical rotation) under the one rule of ``core/odometry.py``: its nearest sample must be
within the tolerance, so a gap in the transforms reads as no pose, as a gap in odometry does.

Bags (:mod:`embodied_r_ros.recordings.bags`) and the frame buffer's fallback tf reader fill a
buffer; :class:`ChainTrack` turns it into the camera poses every consumer of poses reads
(:class:`~embodied_r_ros.core.odometry.PoseTrack`), converting a camera frame with optical axes
(REP 103: z forward, x right, y down; what ``sensor_msgs/Image`` headers name) to the body
axes of :mod:`embodied_r_ros.core.poses` (x forward, y left, z up).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from embodied_r_ros.core.odometry import nearest_within
from embodied_r_ros.core.poses import BODY_FROM_OPTICAL, Pose

#: the axes of the camera's frame: optical (REP 103 ``*_optical_frame``: z forward, x right,
#: y down) or body (a ``camera_link``: x forward, y left, z up)
CameraAxes = Literal["optical", "body"]


def frame_name(name: str) -> str:
    """A frame id as tf2 compares it: without the leading ``/`` ROS 1 names often carry."""
    return name.strip().lstrip("/")


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw,
                     aw * bw - ax * bx - ay * by - az * bz])


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return rotation_matrix(q) @ v


def rotation_matrix(q: np.ndarray) -> np.ndarray:
    """3x3 rotation of a unit quaternion ``(x, y, z, w)``."""
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


@dataclass(frozen=True, eq=False)
class Transform:
    """Where a child frame is in its parent: ``p_parent = R(rotation) p_child + translation``;
    ``rotation`` a unit quaternion ``(x, y, z, w)``."""

    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))
    rotation: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 0.0, 1.0]))

    @classmethod
    def of(cls, translation: Iterable[float], rotation: Iterable[float]) -> Transform:
        """From plain numbers; ValueError for a non-finite value or a zero quaternion."""
        t = np.array([float(v) for v in translation], dtype=np.float64)
        q = np.array([float(v) for v in rotation], dtype=np.float64)
        if t.shape != (3,) or q.shape != (4,):
            raise ValueError("a transform needs 3 translation and 4 rotation values")
        if not (np.isfinite(t).all() and np.isfinite(q).all()):
            raise ValueError("transform is not finite")
        norm = float(np.linalg.norm(q))
        if norm < 1e-12:
            raise ValueError("rotation quaternion has zero length")
        return cls(t, q / norm)

    @classmethod
    def from_msg(cls, msg: Any) -> Transform:
        """A ``geometry_msgs/Transform`` (an rclpy message or a rosbags one)."""
        t, q = msg.translation, msg.rotation
        return cls.of((t.x, t.y, t.z), (q.x, q.y, q.z, q.w))

    def __mul__(self, other: Transform) -> Transform:
        """``self`` then ``other`` down the tree: parent<-self<-other."""
        return Transform(self.translation + _rotate(self.rotation, other.translation),
                         _quat_mul(self.rotation, other.rotation))

    def inverse(self) -> Transform:
        conj = self.rotation * np.array([-1.0, -1.0, -1.0, 1.0])
        return Transform(-_rotate(conj, self.translation), conj)

    def interpolate(self, other: Transform, fraction: float) -> Transform:
        """Between ``self`` (0) and ``other`` (1): position linearly, rotation by slerp."""
        a, b = self.rotation, other.rotation
        dot = float(np.dot(a, b))
        if dot < 0.0:  # the shorter way round
            b, dot = -b, -dot
        if dot > 0.9995:
            q = a + fraction * (b - a)
        else:
            theta = math.acos(min(1.0, dot))
            q = (math.sin((1 - fraction) * theta) * a + math.sin(fraction * theta) * b) \
                / math.sin(theta)
        translation = self.translation + fraction * (other.translation - self.translation)
        return Transform(translation, q / np.linalg.norm(q))


def camera_pose(transform: Transform, axes: CameraAxes = "optical") -> Pose:
    """The core's pose (heading and tilt of the view direction, roll dropped) of a camera frame
    placed by ``transform`` in the fixed frame."""
    rot = rotation_matrix(transform.rotation)
    if axes == "optical":
        rot = rot @ BODY_FROM_OPTICAL.T  # columns: view direction, left, up
    forward = rot[:, 0]
    x, y, z = (float(v) for v in transform.translation)
    return Pose(x, y, z, math.degrees(math.atan2(forward[1], forward[0])),
                math.degrees(math.asin(max(-1.0, min(1.0, float(forward[2]))))))


@dataclass
class _Samples:
    """One moving edge: its samples sorted by stamp."""

    parent: str
    stamps: list[float] = field(default_factory=list)
    transforms: list[Transform] = field(default_factory=list)

    def add(self, stamp: float, transform: Transform) -> None:
        if not self.stamps or stamp > self.stamps[-1]:
            self.stamps.append(stamp)
            self.transforms.append(transform)
            return
        i = bisect.bisect_left(self.stamps, stamp)
        if i < len(self.stamps) and self.stamps[i] == stamp:
            self.transforms[i] = transform
        else:
            self.stamps.insert(i, stamp)
            self.transforms.insert(i, transform)

    def at(self, stamp: float, tolerance_sec: float) -> Transform | None:
        if nearest_within(self.stamps, stamp, tolerance_sec) is None:
            return None
        i = bisect.bisect_right(self.stamps, stamp)
        if i == 0 or i == len(self.stamps):  # before the first or after the last: no guess
            return self.transforms[0 if i == 0 else -1]
        lo, hi = self.stamps[i - 1], self.stamps[i]
        if stamp == lo:
            return self.transforms[i - 1]
        return self.transforms[i - 1].interpolate(self.transforms[i], (stamp - lo) / (hi - lo))

    def prune(self, before: float) -> None:
        i = min(bisect.bisect_left(self.stamps, before), len(self.stamps) - 1)
        if i > 0:
            del self.stamps[:i], self.transforms[:i]


class TfBuffer:
    """The transforms of a tf tree, by child frame (a frame has one parent); thread-safe.

    ``keep_sec`` bounds how far back a moving edge keeps samples (the live reader's history);
    the newest sample always stays.
    """

    def __init__(self, keep_sec: float = math.inf) -> None:
        self.keep_sec = keep_sec
        self._moving: dict[str, _Samples] = {}
        self._static: dict[str, tuple[str, Transform]] = {}
        self._lock = threading.Lock()
        #: transforms refused (not finite, a zero quaternion, a frame its own parent)
        self.rejected = 0

    def add(self, parent: str, child: str, stamp: float, transform: Transform, *,
            static: bool = False) -> None:
        parent, child = frame_name(parent), frame_name(child)
        if not parent or not child or parent == child:
            self.rejected += 1
            return
        with self._lock:
            if static:
                self._static[child] = (parent, transform)
                self._moving.pop(child, None)
                return
            edge = self._moving.get(child)
            if edge is None or edge.parent != parent:  # new, or re-parented: start over
                edge = self._moving[child] = _Samples(parent)
                self._static.pop(child, None)
            edge.add(stamp, transform)
            if math.isfinite(self.keep_sec):
                edge.prune(edge.stamps[-1] - self.keep_sec)

    def add_message(self, msg: Any, *, static: bool = False,
                    children: set[str] | None = None) -> None:
        """Every transform of a ``tf2_msgs/TFMessage`` (rclpy or rosbags), or those to the
        frames in ``children``; bad ones are counted in :attr:`rejected` and left out."""
        for ts in msg.transforms:
            if children is not None and frame_name(ts.child_frame_id) not in children:
                continue
            try:
                transform = Transform.from_msg(ts.transform)
            except ValueError:
                self.rejected += 1
                continue
            stamp = int(ts.header.stamp.sec) + int(ts.header.stamp.nanosec) * 1e-9
            self.add(ts.header.frame_id, ts.child_frame_id, stamp, transform, static=static)

    def retain(self, children: set[str]) -> None:
        """Forget the moving edges to frames not in ``children`` (off the chain read)."""
        with self._lock:
            for child in [c for c in self._moving if c not in children]:
                del self._moving[child]

    def clear(self) -> None:
        """Forget the moving edges (time went back); the static mounts stay."""
        with self._lock:
            self._moving.clear()

    def frames(self) -> set[str]:
        with self._lock:
            return self._frames()

    def _frames(self) -> set[str]:
        edges = [(c, e.parent) for c, e in self._moving.items()]
        edges += [(c, p) for c, (p, _) in self._static.items()]
        return {f for edge in edges for f in edge}

    def _parent(self, child: str) -> str | None:
        if child in self._moving:
            return self._moving[child].parent
        static = self._static.get(child)
        return static[0] if static else None

    def _up(self, frame: str) -> list[str]:
        """``frame`` and its ancestors up to the root (a loop is cut where it closes)."""
        chain = [frame]
        while (parent := self._parent(chain[-1])) is not None and parent not in chain:
            chain.append(parent)
        return chain

    def chain(self, target: str, source: str) -> list[str] | None:
        """The child frames of the edges between ``source`` and ``target`` (up to their
        common ancestor and down again), or None where the two are not connected."""
        with self._lock:
            branches = self._branches(target, source)
        if branches is None:
            return None
        up, down = branches
        return up[:-1] + down[:-1]

    def missing_chain(self, target: str, source: str) -> str | None:
        """What keeps ``source`` from ``target``, in words for a log line or an error (None:
        they are connected): the frames missing from the tree, or, where both are in it, the
        two roots no transform joins; then the frames the tree holds."""
        target, source = frame_name(target), frame_name(source)
        with self._lock:
            if self._branches(target, source) is not None:
                return None
            frames = self._frames()
            missing = [f for f in dict.fromkeys((target, source)) if f not in frames]
            roots = self._up(source)[-1], self._up(target)[-1]
        known = ", ".join(sorted(frames)) or "none"
        if missing:
            gap = f"missing from the tree: {', '.join(repr(f) for f in missing)}"
        else:
            ends = [repr(root) if root == frame else f"{root!r} (above {frame!r})"
                    for root, frame in zip(roots, (source, target), strict=True)]
            gap = f"no transform joins {ends[0]} to {ends[1]}"
        return f"{gap} (frames: {known})"

    def _branches(self, target: str, source: str) -> tuple[list[str], list[str]] | None:
        """The frames from ``source`` and from ``target`` up to their common ancestor (both
        ending in it), or None where the two are not connected; under the lock."""
        up_source, up_target = self._up(frame_name(source)), self._up(frame_name(target))
        common = next((f for f in up_source if f in up_target), None)
        if common is None:
            return None
        return (up_source[: up_source.index(common) + 1],
                up_target[: up_target.index(common) + 1])

    def moving_samples(self, children: Iterable[str]) -> int:
        """How many samples the moving edges to ``children`` hold."""
        with self._lock:
            return sum(len(self._moving[c].stamps) for c in children if c in self._moving)

    def _edge(self, child: str, stamp: float, tolerance_sec: float) -> Transform | None:
        if child in self._moving:
            return self._moving[child].at(stamp, tolerance_sec)
        return self._static[child][1]

    def _along(self, path: list[str], stamp: float, tolerance_sec: float
                   ) -> Transform | None:
        """Where the first frame of ``path`` (a frame, then its ancestors) is in the last."""
        total = Transform()
        for child in reversed(path[:-1]):
            edge = self._edge(child, stamp, tolerance_sec)
            if edge is None:
                return None
            total = total * edge
        return total

    def lookup(self, target: str, source: str, stamp: float, tolerance_sec: float
               ) -> Transform | None:
        """Where ``source`` is in ``target`` at ``stamp`` (tf2's ``lookup_transform(target,
        source, stamp)``); None where the frames are not connected or a moving edge has no
        sample within ``tolerance_sec`` of ``stamp``."""
        with self._lock:
            branches = self._branches(target, source)
            if branches is None:
                return None
            down = self._along(branches[0], stamp, tolerance_sec)
            across = self._along(branches[1], stamp, tolerance_sec)
        if down is None or across is None:
            return None
        return across.inverse() * down

    def __len__(self) -> int:
        with self._lock:
            return sum(len(e.stamps) for e in self._moving.values())


@dataclass
class ChainTrack:
    """The camera's poses from a tf tree: the chain from ``fixed_frame`` (the odometry frame)
    to ``camera_frame``, looked up at each stamp (a :class:`~embodied_r_ros.core.odometry.
    PoseTrack`)."""

    buffer: TfBuffer
    fixed_frame: str
    camera_frame: str
    axes: CameraAxes = "optical"

    def at(self, stamp: float, tolerance_sec: float) -> Pose | None:
        if not self.camera_frame:
            return None
        found = self.buffer.lookup(self.fixed_frame, self.camera_frame, stamp, tolerance_sec)
        return None if found is None else camera_pose(found, self.axes)

    def __len__(self) -> int:
        """Samples of the chain's moving edges (0: no pose at all)."""
        chain = self.buffer.chain(self.fixed_frame, self.camera_frame) \
            if self.camera_frame else None
        return 0 if chain is None else self.buffer.moving_samples(chain)

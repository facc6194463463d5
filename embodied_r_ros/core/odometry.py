"""Which pose belongs to a key frame, and the motion between two key frames from it.

One rule for the robot's frame buffer and for datasets built from bags, so that the LM trains on
the text the robot writes: a key frame gets the pose nearest to it in time when that pose is
at most ``perception.odom_tolerance_sec`` away, else none; a pair of key frames gets the
odometry motion when both have a pose, else ``None``, which perception fills with visual
ego-motion (:meth:`embodied_r_ros.core.pipeline.EmbodiedR.perceive_window`). A bag with an
odometry gap therefore reads like the robot did during that gap, not like metres from a pose
seconds away.

Poses come from an odometry topic (:class:`SampledPoses`) or from the tf tree
(:class:`embodied_r_ros.recordings.transforms.ChainTrack`); both answer :class:`PoseTrack`'s ``at``,
and the tf tree applies the same rule to each of its moving transforms
(:func:`nearest_within`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from embodied_r_ros.core.actions import Motion
from embodied_r_ros.core.poses import Pose, nearest_index, relative_motion


class PoseTrack(Protocol):
    """Camera poses over time, looked up by the one rule (``len``: how many samples it holds;
    an empty track gives no pose at all)."""

    def at(self, stamp: float, tolerance_sec: float) -> Pose | None: ...

    def __len__(self) -> int: ...


def nearest_within(stamps: Sequence[float], stamp: float, tolerance_sec: float) -> int | None:
    """Index of the sample nearest to ``stamp`` (``stamps`` sorted) if it is at most
    ``tolerance_sec`` away, else None: the rule every pose lookup applies."""
    best = nearest_index(stamps, stamp)
    if best is None or abs(stamps[best] - stamp) > tolerance_sec:
        return None
    return best


def pose_near(
    stamps: Sequence[float], poses: Sequence[Pose], stamp: float, tolerance_sec: float
) -> Pose | None:
    """The pose nearest to ``stamp`` (``stamps`` sorted) if within ``tolerance_sec``."""
    best = nearest_within(stamps, stamp, tolerance_sec)
    return None if best is None else poses[best]


@dataclass(frozen=True)
class SampledPoses:
    """Poses as an odometry topic gives them: ``(stamp, pose)`` samples sorted by stamp."""

    stamps: tuple[float, ...]
    poses: tuple[Pose, ...]

    @classmethod
    def of(cls, track: Sequence[tuple[float, Pose]]) -> SampledPoses:
        ordered = sorted(track, key=lambda sp: sp[0])
        return cls(tuple(s for s, _ in ordered), tuple(p for _, p in ordered))

    def at(self, stamp: float, tolerance_sec: float) -> Pose | None:
        return pose_near(self.stamps, self.poses, stamp, tolerance_sec)

    def __len__(self) -> int:
        return len(self.stamps)


def as_track(track: PoseTrack | Sequence[tuple[float, Pose]]) -> PoseTrack:
    """A :class:`PoseTrack` as is; a list of ``(stamp, pose)`` as :class:`SampledPoses`."""
    if isinstance(track, Sequence):
        return SampledPoses.of(track)
    return track


def poses_at(
    track: PoseTrack | Sequence[tuple[float, Pose]], stamps: Sequence[float],
    tolerance_sec: float,
) -> list[Pose | None]:
    """For each of ``stamps``, its pose from ``track`` (a :class:`PoseTrack`, or ``(stamp,
    pose)`` pairs)."""
    found = as_track(track)
    return [found.at(s, tolerance_sec) for s in stamps]


def odometry_motions(poses: Sequence[Pose | None]) -> list[Motion | None]:
    """Motion between consecutive key frames where both have a pose, else None."""
    return [
        relative_motion(a, b) if a is not None and b is not None else None
        for a, b in zip(poses, poses[1:], strict=False)
    ]

"""A world: the scene, the camera, the trajectory and the frame clock, all from one spec.

Frame ``i`` is taken at ``t = i / rate`` seconds; its ROS stamp is ``EPOCH_NS + t`` so bags
made twice from the same seed are identical.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from embodied_r_ros.core.poses import Pose, wrap_deg
from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.scene import MAX_OBJECTS, Scene, make_scene
from embodied_r_ros.sim.trajectory import Trajectory, plan_trajectory

EPOCH_NS = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z, a fixed bag start
MAX_SIDE = 4096
MAX_FRAMES = 100_000


@dataclass(frozen=True)
class WorldSpec:
    """Everything that determines a world's frames; questions add their own counts."""

    seed: int = 7
    frames: int = 300
    rate_hz: float = 10.0
    width: int = 640
    height: int = 480
    hfov_deg: float = 70.0
    n_objects: int = 6

    def validate(self) -> WorldSpec:
        """Raise ``ValueError`` with a one-line reason for a spec that cannot be rendered."""
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if not 1 <= self.frames <= MAX_FRAMES:
            raise ValueError(f"frames must be between 1 and {MAX_FRAMES}, got {self.frames}")
        if not 0.1 <= self.rate_hz <= 240.0:
            raise ValueError(f"rate must be between 0.1 and 240 Hz, got {self.rate_hz}")
        if not (16 <= self.width <= MAX_SIDE and 16 <= self.height <= MAX_SIDE):
            raise ValueError(
                f"resolution must be between 16x16 and {MAX_SIDE}x{MAX_SIDE}, "
                f"got {self.width}x{self.height}"
            )
        if not 20.0 <= self.hfov_deg <= 150.0:
            raise ValueError(f"hfov must be between 20 and 150 degrees, got {self.hfov_deg}")
        if not 1 <= self.n_objects <= MAX_OBJECTS:
            raise ValueError(f"objects must be between 1 and {MAX_OBJECTS}, got {self.n_objects}")
        return self

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


class FrameTimeline:
    """Frame count, duration and stamps of a world rendered at ``spec.rate_hz`` (the short and
    the long worlds alike)."""

    spec: Any  # a world spec: its rate_hz
    times: np.ndarray  # seconds from the first frame
    poses: tuple[Pose, ...]

    @property
    def n_frames(self) -> int:
        return len(self.poses)

    @property
    def duration(self) -> float:
        return float(self.times[-1]) if len(self.times) else 0.0

    def stamp_ns(self, index: int) -> int:
        return EPOCH_NS + round(index * 1e9 / self.spec.rate_hz)


@dataclass(frozen=True)
class World(FrameTimeline):
    spec: WorldSpec
    scene: Scene
    camera: PinholeCamera
    trajectory: Trajectory
    times: np.ndarray  # seconds from the first frame
    poses: tuple[Pose, ...]


def build_world(spec: WorldSpec) -> World:
    """Scene, camera and trajectory for ``spec`` (validated), with every frame's true pose."""
    spec.validate()
    scene = make_scene(spec.seed, spec.n_objects)
    camera = PinholeCamera.from_hfov(spec.width, spec.height, spec.hfov_deg)
    times = np.arange(spec.frames, dtype=np.float64) / spec.rate_hz
    trajectory = plan_trajectory(scene, float(times[-1]) + 1.0 / spec.rate_hz, spec.seed,
                                 hfov_deg=spec.hfov_deg)
    poses = tuple(trajectory.pose_at(float(t)) for t in times)
    return World(spec, scene, camera, trajectory, times, poses)


def body_twist(world: World, index: int) -> tuple[np.ndarray, np.ndarray]:
    """True (linear m/s, angular rad/s) velocity of frame ``index`` in the camera body frame
    (x along the view, y left, z camera-up), by central differences of the true poses."""
    return trajectory_twist(world.trajectory, float(world.times[index]), world.poses[index])


def trajectory_twist(trajectory: Trajectory, t: float,
                     pose: Pose) -> tuple[np.ndarray, np.ndarray]:
    """:func:`body_twist` at time ``t`` of any trajectory, ``pose`` being its pose then."""
    dt = 1e-3
    before = trajectory.pose_at(max(0.0, t - dt))
    after = trajectory.pose_at(t + dt)
    span = (t + dt) - max(0.0, t - dt)
    rot = pose.rotation()
    linear = rot.T @ ((after.position - before.position) / span)
    yaw_rate = math.radians(wrap_deg(after.yaw_deg - before.yaw_deg)) / span
    pitch_rate = math.radians(after.pitch_deg - before.pitch_deg) / span
    # Tilting up turns about -left (REP-103 pitch is nose-down positive about +y).
    omega_world = yaw_rate * np.array([0.0, 0.0, 1.0]) - pitch_rate * rot[:, 1]
    return linear, rot.T @ omega_world

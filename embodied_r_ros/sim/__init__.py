"""A procedural egocentric world with ground truth: scene, trajectory, renderer, questions.

No ROS imports: the bag is written with ``rosbags``. Typical use::

    from embodied_r_ros.sim import ensure_sample
    paths = ensure_sample()          # bag/, video.mp4, questions.jsonl, world.json

The long world (connected rooms, a 30-minute tour, memory questions by horizon) is
:func:`generate_long_world` of a :class:`LongWorldSpec`.
"""

from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.floor_plan import FloorPlan, make_floor_plan
from embodied_r_ros.sim.generate import (
    SAMPLE_SPEC,
    WorldPaths,
    default_sample_dir,
    ensure_sample,
    generate_world,
)
from embodied_r_ros.sim.long_generate import generate_long_world, long_sightings
from embodied_r_ros.sim.long_questions import generate_long_questions
from embodied_r_ros.sim.long_world import (
    LONG_SPEC,
    SMALL_LONG_SPEC,
    LongWorld,
    LongWorldSpec,
    build_long_world,
)
from embodied_r_ros.sim.questions import CATEGORIES, generate_questions, parse_counts
from embodied_r_ros.sim.render import RenderedFrame, Renderer
from embodied_r_ros.sim.scene import Scene, SceneObject, make_scene
from embodied_r_ros.sim.trajectory import Segment, Trajectory, plan_trajectory
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import World, WorldSpec, build_world

__all__ = [
    "CATEGORIES",
    "LONG_SPEC",
    "SAMPLE_SPEC",
    "SMALL_LONG_SPEC",
    "FloorPlan",
    "LongWorld",
    "LongWorldSpec",
    "PinholeCamera",
    "RenderedFrame",
    "Renderer",
    "Scene",
    "SceneObject",
    "Segment",
    "Trajectory",
    "Visibility",
    "World",
    "WorldPaths",
    "WorldSpec",
    "build_long_world",
    "build_world",
    "default_sample_dir",
    "ensure_sample",
    "generate_long_questions",
    "generate_long_world",
    "generate_questions",
    "generate_world",
    "long_sightings",
    "make_floor_plan",
    "make_scene",
    "parse_counts",
    "plan_trajectory",
]

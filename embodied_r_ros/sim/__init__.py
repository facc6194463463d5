"""A procedural egocentric world with ground truth: scene, trajectory, renderer, questions.

No ROS imports: the bag is written with ``rosbags``. Typical use::

    from embodied_r_ros.reading.text_decides import TextDecides
    from embodied_r_ros.sim import ensure_sample
    paths = ensure_sample(decides=TextDecides)   # bag/, video.mp4, questions.jsonl, world.json
"""

from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.generate import (
    SAMPLE_SPEC,
    WorldPaths,
    default_sample_dir,
    ensure_sample,
    generate_world,
)
from embodied_r_ros.sim.questions import CATEGORIES, generate_questions, parse_counts
from embodied_r_ros.sim.render import RenderedFrame, Renderer
from embodied_r_ros.sim.scene import Scene, SceneObject, make_scene
from embodied_r_ros.sim.trajectory import Segment, Trajectory, plan_trajectory
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import World, WorldSpec, build_world

__all__ = [
    "CATEGORIES",
    "SAMPLE_SPEC",
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
    "build_world",
    "default_sample_dir",
    "ensure_sample",
    "generate_questions",
    "generate_world",
    "make_scene",
    "parse_counts",
    "plan_trajectory",
]

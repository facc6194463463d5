"""Small rendered worlds shared by the ``test_sim_*`` files, each rendered once per session."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from embodied_r_ros.sim.render import Renderer
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import World, WorldSpec, build_world


@dataclass(frozen=True)
class Rendered:
    world: World
    images: tuple[np.ndarray, ...]
    visibility: Visibility


def rendered(seed: int = 7, frames: int = 300, width: int = 320, height: int = 240) -> Rendered:
    """``frames`` frames at 10 Hz of world ``seed``, with the visibility the questions use."""
    return _rendered(seed, frames, width, height)  # one cache key however it is called


@lru_cache(maxsize=4)
def _rendered(seed: int, frames: int, width: int, height: int) -> Rendered:
    world = build_world(WorldSpec(seed=seed, frames=frames, width=width, height=height))
    renderer = Renderer(world.scene, world.camera)
    out = [renderer.render(p) for p in world.poses]
    pixels = np.array([f.object_pixels for f in out])
    vis = Visibility.from_pixels(pixels, width * height, world.spec.rate_hz)
    return Rendered(world, tuple(f.image for f in out), vis)

"""A robot whose VLM is the scripted endpoint: a small long world's bag (three minutes, two
rooms, 1 Hz, 160x120) and the all-in-one process's configuration that streams its key frames to
the endpoint with grounding on and the memory on. The end-to-end memory test and the viewer
test both play it; the world is built once a run and shared by the suite's workers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from lab.long_world.world import SMALL_LONG_SPEC

#: three minutes, two rooms, 1 Hz, at a low resolution
SPEC = replace(SMALL_LONG_SPEC, width=160, height=120)
#: the tiny reasoner (its answers are noise: the tests check what the memory and the viewer
#: hold), the VLM at the endpoint with room for a grounding reply, grounding placed with the
#: bag's camera_info; ``{extra}`` adds sections (the viewer's)
CONFIG = """base: tiny
cache: {{enabled: false}}
perception:
  mode: streaming
  streaming_queue: 256
  vlm: {{backend: openai, model: scripted-vlm, base_url: "{url}", max_new_tokens: 512,
         image_max_side: 320}}
  grounding: {{mode: request}}
reasoning: {{model: {{max_new_tokens: 8}}}}
memory: {{enabled: true, path: "{path}", embedder: "off"}}
{extra}"""
#: what the bag plays into the process
TOPICS = ["/camera/image_raw", "/odom", "/camera/camera_info"]


def scripted_world(cache: Path) -> Path:
    """The world's folder (bag, manifest, truth), built once under ``cache`` (the run's shared
    model cache) however many workers ask; read it, never write into it."""
    from embodied_r_ros.backends.offline import build_once
    from lab.long_world.generate import generate_long_world

    dest = cache.parent / "scripted-long-world"

    def build(tmp: Path) -> None:
        generate_long_world(SPEC, tmp / "world", 0, raw=True, compressed=False, video=False)

    build_once(dest, lambda: (dest / "world" / "world.json").is_file(), build)
    return dest / "world"

"""Ground-truth 2-D boxes of the objects each frame of a synthetic world shows.

A grounding VLM is measured against these. Both renderers (the short worlds' painter's one and
the long world's ray caster) draw an object-id buffer beside the image, so what a frame truly
shows of an object is known pixel by pixel, occlusion by nearer objects and by walls included:
an object is visible when it covers pixels (``object_pixels``), and its box is the bounding box
of those pixels. Beside it, the box of the object's whole projection (its mesh clipped to the
view frustum and projected through the world's pinhole camera, ignoring occlusion) says how
much of the object a box could at most span.

Boxes are in *edge* coordinates of the camera image, as Qwen2.5-VL writes ``bbox_2d``: pixel
column ``c`` spans ``[c, c + 1)``, so ``[0, 0, W, H]`` is the whole image (the camera's pixel
centres sit at integers, hence the half pixel between a projected point and its edge value).

One pass renders every frame; a :class:`TruthTable` keeps the boxes, the pixel counts and a
small grey thumbnail of each frame (what the scripted VLM identifies request images by), and
saves to and loads from one ``.npz`` file so a long world is rendered once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np
from tqdm import tqdm

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera, clip_polygon
from embodied_r_ros.sim.generate import GENERATOR_VERSION, MANIFEST
from embodied_r_ros.sim.render import RenderedFrame, Renderer
from embodied_r_ros.sim.scene import Mesh, SceneObject, object_mesh
from embodied_r_ros.sim.world import World, WorldSpec, build_world
from lab.long_world.generate import LONG_GENERATOR_VERSION, long_renderer
from lab.long_world.world import LongWorld, LongWorldSpec, build_long_world

log = logging.getLogger(__name__)

#: thumbnail width in pixels (its height keeps the camera's aspect)
THUMB_WIDTH = 48
_POSE_TOLERANCE = 1e-3  # manifest poses are rounded to 4-5 decimals


class _Renders(Protocol):
    def render(self, pose: Pose) -> RenderedFrame: ...


@dataclass(frozen=True)
class TruthWorld:
    """What the truth needs of a short or a long world: its objects, camera, frame poses and
    a renderer (made on demand: the long world's textures take seconds)."""

    kind: str  # "short" or "long"
    key: str  # what determines the frames: the kind, the spec and the generator version
    objects: tuple[SceneObject, ...]
    camera: PinholeCamera
    poses: tuple[Pose, ...]
    make_renderer: Callable[[], _Renders]

    @property
    def n_frames(self) -> int:
        return len(self.poses)


def truth_world(world: World | LongWorld) -> TruthWorld:
    """The truth's view of a built short or long world."""
    if isinstance(world, LongWorld):
        key = json.dumps(["long", LONG_GENERATOR_VERSION, world.spec.to_dict()], sort_keys=True)
        return TruthWorld("long", key, world.objects, world.camera, world.poses,
                          lambda: long_renderer(world))
    key = json.dumps(["short", GENERATOR_VERSION, world.spec.to_dict()], sort_keys=True)
    return TruthWorld("short", key, world.scene.objects, world.camera, world.poses,
                      lambda: Renderer(world.scene, world.camera))


def load_world(root: Path | str) -> TruthWorld:
    """The world a generated directory (``embodied-r world`` or ``python -m lab.long_world``)
    was rendered from, rebuilt from its ``world.json`` and checked against the poses it
    recorded. Raises ``ValueError`` with one line saying what does not match."""
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise ValueError(f"{path} is not valid JSON") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("spec"), dict):
        raise ValueError(f"{path} has no world spec")
    long = manifest.get("mode") == "long"
    version = LONG_GENERATOR_VERSION if long else GENERATOR_VERSION
    if manifest.get("generator_version") != version:
        raise ValueError(f"{path} was written by generator version "
                         f"{manifest.get('generator_version')}, this code renders version "
                         f"{version}: generate the world again")
    try:
        world: World | LongWorld = (build_long_world(LongWorldSpec(**manifest["spec"])) if long
                                    else build_world(WorldSpec(**manifest["spec"])))
    except TypeError as exc:
        raise ValueError(f"{path}: spec does not fit this code ({exc})") from None
    frames = manifest.get("frames") or []
    if len(frames) != len(world.poses) or any(
        max(abs(f[a] - getattr(p, a)) for a in ("x", "y", "z", "pitch_deg")) > _POSE_TOLERANCE
        or abs((f["yaw_deg"] - p.yaw_deg + 180.0) % 360.0 - 180.0) > _POSE_TOLERANCE
        for f, p in zip(frames, world.poses, strict=False)
    ):
        raise ValueError(f"{path}: the rebuilt world's poses differ from the recorded ones")
    return truth_world(world)


@dataclass(frozen=True)
class TruthBox:
    """One object a frame shows: its visible pixels and their box, and the box of its whole
    projection (edge coordinates of the camera image)."""

    index: int  # the object's index in the world
    name: str
    pixels: int
    box: tuple[float, float, float, float]
    projected: tuple[float, float, float, float]


@dataclass(frozen=True)
class TruthTable:
    """Per frame and object: visible pixels, visible box, projected box (NaN where the
    object covers no pixel), and each frame's grey thumbnail."""

    key: str
    names: tuple[str, ...]
    width: int
    height: int
    pixels: np.ndarray  # frames x objects, int64
    visible: np.ndarray  # frames x objects x 4, float64
    projected: np.ndarray  # frames x objects x 4, float64
    thumbs: np.ndarray  # frames x th x tw, uint8

    @property
    def n_frames(self) -> int:
        return int(self.pixels.shape[0])

    def boxes(self, frame: int, min_pixels: int = 1) -> list[TruthBox]:
        """The objects frame ``frame`` shows with at least ``min_pixels`` pixels, largest
        first (ties by index)."""
        counts = self.pixels[frame]
        shown = [k for k in np.flatnonzero(counts >= max(1, min_pixels))]
        shown.sort(key=lambda k: (-int(counts[k]), int(k)))
        return [TruthBox(int(k), self.names[k], int(counts[k]), _box(self.visible[frame, k]),
                         _box(self.projected[frame, k])) for k in shown]

    def save(self, path: Path | str) -> None:
        with Path(path).open("wb") as fh:  # a path given as is: no ".npz" appended
            np.savez_compressed(fh, key=np.array(self.key), names=np.array(self.names),
                                size=np.array([self.width, self.height]),
                                pixels=self.pixels, visible=self.visible,
                                projected=self.projected, thumbs=self.thumbs)

    @classmethod
    def load(cls, path: Path | str) -> TruthTable:
        with np.load(path, allow_pickle=False) as data:
            width, height = (int(v) for v in data["size"])
            return cls(str(data["key"]), tuple(str(n) for n in data["names"]), width, height,
                       data["pixels"], data["visible"], data["projected"], data["thumbs"])


def _box(row: np.ndarray) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = (float(v) for v in row)
    return x0, y0, x1, y1


def thumb_size(width: int, height: int) -> tuple[int, int]:
    """(width, height) of the thumbnails of a ``width`` x ``height`` camera."""
    return THUMB_WIDTH, max(8, round(THUMB_WIDTH * height / width))


def thumbnail(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A small grey version of an RGB image, area-averaged to ``size`` (width, height)
    whatever its own size: a frame and a shrunk, JPEG-coded copy of it come out alike."""
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA)


def visible_box(ids: np.ndarray, k: int) -> tuple[float, float, float, float]:
    """The edge box of the pixels where object ``k`` is drawn in an object-id buffer."""
    mask = ids == k + 1
    cols = np.flatnonzero(mask.any(axis=0))
    rows = np.flatnonzero(mask.any(axis=1))
    return float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)


def projected_box(camera: PinholeCamera, pose: Pose, mesh: Mesh,
                  planes: np.ndarray) -> tuple[float, float, float, float] | None:
    """The edge box of a mesh's projection clipped to the image (``planes``: the camera's
    frustum without margin); None when no part of it is in view."""
    pc = camera.to_camera(pose, mesh.vertices)
    side = pc @ planes[:, :3].T + planes[:, 3]
    if np.any(np.all(side < 0.0, axis=0)):
        return None  # wholly outside one side of the view, behind the camera included
    if np.all(side >= 0.0):
        points = pc
    else:
        parts = [clip_polygon(pc[face], planes) for face in mesh.faces]
        parts = [p for p in parts if len(p)]
        if not parts:
            return None
        points = np.vstack(parts)
    uv = camera.project_camera(points) + 0.5  # pixel centres -> edges
    x0, y0 = np.clip(uv.min(axis=0), 0.0, [camera.width, camera.height])
    x1, y1 = np.clip(uv.max(axis=0), 0.0, [camera.width, camera.height])
    return float(x0), float(y0), float(x1), float(y1)


def render_truth(world: TruthWorld) -> TruthTable:
    """Render every frame once and keep its truth (a 30-minute long world: 1801 frames)."""
    cam = world.camera
    renderer = world.make_renderer()
    meshes = tuple(object_mesh(o) for o in world.objects)
    planes = cam.frustum_planes(margin_px=0.0)
    n, f = len(world.objects), world.n_frames
    size = thumb_size(cam.width, cam.height)
    pixels = np.zeros((f, n), np.int64)
    visible = np.full((f, n, 4), np.nan)
    projected = np.full((f, n, 4), np.nan)
    thumbs = np.zeros((f, size[1], size[0]), np.uint8)
    frames = tqdm(enumerate(world.poses), total=f, unit="frame", desc="truth boxes",
                  disable=None)
    for i, pose in frames:
        frame = renderer.render(pose)
        pixels[i] = frame.object_pixels
        thumbs[i] = thumbnail(frame.image, size)
        for k in np.flatnonzero(frame.object_pixels):
            visible[i, k] = visible_box(frame.ids, int(k))
            box = projected_box(cam, pose, meshes[k], planes)
            if box is not None:
                projected[i, k] = box
    log.info("truth boxes of %d frames rendered", f)
    return TruthTable(world.key, tuple(o.name for o in world.objects), cam.width, cam.height,
                      pixels, visible, projected, thumbs)


def truth_table(world: TruthWorld, cache: Path | str | None = None) -> TruthTable:
    """:func:`render_truth`, read from ``cache`` when it holds this world's table and written
    there otherwise."""
    if cache is not None and Path(cache).is_file():
        try:
            table = TruthTable.load(cache)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring the truth cache %s: %s", cache, exc)
        else:
            if table.key == world.key:
                return table
            log.info("the truth cache %s is another world's; rendering again", cache)
    table = render_truth(world)
    if cache is not None:
        try:
            Path(cache).parent.mkdir(parents=True, exist_ok=True)
            table.save(cache)
        except OSError as exc:
            log.warning("cannot keep the truth in %s: %s", cache, exc.strerror or exc)
    return table

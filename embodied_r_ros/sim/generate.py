"""Render a world once and write all of it: bag, video, questions and a manifest.

Frames are rendered once, written to the bag and the video, and kept for the questions, which
are generated last: each is asked only where the text the robot writes for its clip decides it,
and the manifest counts what was skipped, by category and reason. That check is the caller's
(:data:`DecidesFor`: the rule reader's
:class:`~embodied_r_ros.reading.text_decides.TextDecides`), so the generator does not depend on
how a text is read. ``ensure_sample`` makes the project's shared sample on first use instead of
committing binaries to the repository.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from embodied_r_ros.sim.question_rows import Draft
from embodied_r_ros.sim.questions import CATEGORIES, generate_questions, parse_counts
from embodied_r_ros.sim.render import Renderer
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import EPOCH_NS, World, WorldSpec, body_twist, build_world
from embodied_r_ros.sim.writers import BagWriter, Mp4Writer, Topics, write_json, write_jsonl

log = logging.getLogger(__name__)

#: bump when the same spec would render differently or ask other questions (3: only those the
#: world's own perception text decides, read with the bag's intrinsics and the turn margins)
GENERATOR_VERSION = 3
SAMPLE_SPEC = WorldSpec(seed=7, frames=350)
SAMPLE_QUESTIONS = 30
BAG_DIR, VIDEO, QUESTIONS, MANIFEST = "bag", "video.mp4", "questions.jsonl", "world.json"


class DecidesCheck(Protocol):
    """Whether a rendered world's own perception text decides a question draft."""

    def __call__(self, draft: Draft) -> bool: ...

    def skipped_by_category(self) -> dict[str, dict[str, int]]:
        """What was left out, ``{category: {reason: count}}``, for the manifest."""
        ...

    def close(self) -> None: ...


#: makes the check of one world from its frames (in order); None asks every draft
DecidesFor = Callable[[World, Sequence[np.ndarray]], DecidesCheck]


@dataclass(frozen=True)
class WorldPaths:
    root: Path
    bag: Path | None
    video: Path | None
    questions: Path
    manifest: Path


def _paths(out_dir: Path, bag: bool, video: bool) -> WorldPaths:
    return WorldPaths(out_dir, out_dir / BAG_DIR if bag else None,
                      out_dir / VIDEO if video else None, out_dir / QUESTIONS,
                      out_dir / MANIFEST)


def prepare_out_dir(out_dir: Path, force: bool, bag: bool = True, video: bool = True) -> None:
    """Create ``out_dir`` and clear (with ``force``) or refuse existing outputs.

    Raises ``OSError`` for an unwritable directory and ``FileExistsError`` for outputs that
    exist without ``force``.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write to output directory {out_dir}")
    paths = _paths(out_dir, bag, video)
    existing = [p for p in (paths.bag, paths.video, paths.questions, paths.manifest)
                if p is not None and p.exists()]
    if existing and not force:
        names = ", ".join(p.name for p in existing)
        raise FileExistsError(f"{out_dir} already holds {names}; pass --force to overwrite")
    for p in existing:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


class OutputBusy(OSError):
    """Another run is writing the same output directory."""


LOCK_FILE = ".embodied-r-world.lock"


@contextmanager
def exclusive_output(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir`` for one run: a second run into it fails at once (OutputBusy)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_FILE
    with path.open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputBusy(errno.EBUSY, "another run is writing this directory",
                             str(out_dir)) from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            fcntl.flock(fh, fcntl.LOCK_UN)


def manifest(world: World, vis: Visibility, counts: Mapping[str, int],
             rows: list[dict], topics: Topics) -> dict:
    """Everything needed to understand or check the outputs without re-rendering."""
    scene, cam = world.scene, world.camera
    first = vis.first_seen()
    rate = world.spec.rate_hz
    return {
        "generator": "embodied_r_ros.sim",
        "generator_version": GENERATOR_VERSION,
        "spec": world.spec.to_dict(),
        "question_counts": {c: int(counts.get(c, 0)) for c in CATEGORIES},
        "questions_written": len(rows),
        "epoch_ns": EPOCH_NS,
        "topics": asdict(topics),
        "camera": {"width": cam.width, "height": cam.height, "fx": cam.fx, "fy": cam.fy,
                   "cx": cam.cx, "cy": cam.cy},
        "room": {"length": scene.length, "width": scene.width, "height": scene.height},
        "objects": [
            {"name": o.name, "colour": o.colour, "shape": o.shape, "x": round(o.x, 4),
             "y": round(o.y, 4), "size": [round(v, 4) for v in o.size],
             "yaw_deg": round(o.yaw_deg, 3),
             "first_seen_s": None if first[k] is None else round(first[k] / rate, 3)}
            for k, o in enumerate(scene.objects)
        ],
        "segments": [
            {"action": s.action, "amount": s.amount, "t0": round(s.t0, 4),
             "duration": round(s.duration, 4)}
            for s in world.trajectory.segments
        ],
        "frames": [
            {"t": round(float(t), 4), "x": round(p.x, 5), "y": round(p.y, 5),
             "z": round(p.z, 5), "yaw_deg": round(p.yaw_deg, 4),
             "pitch_deg": round(p.pitch_deg, 4)}
            for t, p in zip(world.times, world.poses, strict=True)
        ],
    }


def generate_world(spec: WorldSpec, out_dir: Path | str,
                   counts: Mapping[str, int] | str | int = SAMPLE_QUESTIONS, *,
                   bag: bool = True, raw: bool = True, compressed: bool = False,
                   video: bool = True, force: bool = False,
                   topics: Topics | None = None, decides: DecidesFor | None) -> WorldPaths:
    """Render ``spec`` and write its bag, video, questions and manifest under ``out_dir``;
    ``decides`` checks each question draft (None: every draft is asked)."""
    counts = parse_counts(counts)
    topics = topics or Topics()
    out = Path(out_dir)
    world = build_world(spec)
    with exclusive_output(out):
        return _write_world(world, out, counts, topics, decides, bag=bag, raw=raw,
                            compressed=compressed, video=video, force=force)


def _write_world(world: World, out: Path, counts: Mapping[str, int], topics: Topics,
                 decides: DecidesFor | None, *, bag: bool, raw: bool, compressed: bool,
                 video: bool, force: bool) -> WorldPaths:
    spec = world.spec
    prepare_out_dir(out, force, bag, video)
    paths = _paths(out, bag, video)
    renderer = Renderer(world.scene, world.camera)
    pixels = np.zeros((world.n_frames, len(world.scene.objects)), np.int64)
    images: list[np.ndarray] = []
    with ExitStack() as stack:
        bag_writer = stack.enter_context(BagWriter(
            paths.bag, world.camera, raw=raw, compressed=compressed, topics=topics
        )) if paths.bag else None
        mp4 = stack.enter_context(Mp4Writer(
            paths.video, spec.width, spec.height, spec.rate_hz
        )) if paths.video else None
        for i, pose in enumerate(world.poses):
            frame = renderer.render(pose)
            pixels[i] = frame.object_pixels
            images.append(frame.image)
            if bag_writer:
                bag_writer.write(world.stamp_ns(i), frame.image, pose, body_twist(world, i))
            if mp4:
                mp4.write(frame.image)
            if (i + 1) % 100 == 0:
                log.info("rendered %d/%d frames", i + 1, world.n_frames)
    vis = Visibility.from_pixels(pixels, spec.width * spec.height, spec.rate_hz)
    check = decides(world, images) if decides is not None else None
    try:
        rows = generate_questions(world, vis, counts, check)
    finally:
        if check is not None:
            check.close()
    short = {c: n for c, n in counts.items()
             if n > sum(1 for r in rows if r["category"] == c)}
    if short:
        log.warning("geometry allowed fewer questions than asked for: %s",
                    ", ".join(f"{c} ({n} asked)" for c, n in short.items()))
    write_jsonl(paths.questions, rows)
    write_json(paths.manifest, {**manifest(world, vis, counts, rows, topics),
                                "questions_skipped": check.skipped_by_category() if check
                                else {}})
    return paths


def default_sample_dir() -> Path:
    root = os.environ.get("EMBODIED_R_CACHE", "~/.cache/embodied_r")
    return Path(root).expanduser() / f"world-sample-seed{SAMPLE_SPEC.seed}"


def _is_current(out_dir: Path, spec: WorldSpec, counts: Mapping[str, int]) -> bool:
    paths = _paths(out_dir, True, True)
    if not all(p.exists() for p in (paths.bag, paths.video, paths.questions, paths.manifest)):
        return False
    try:
        data = json.loads(paths.manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (data.get("generator_version") == GENERATOR_VERSION
            and data.get("spec") == spec.to_dict()
            and data.get("question_counts") == dict(counts))


def ensure_sample(out_dir: Path | str | None = None, spec: WorldSpec = SAMPLE_SPEC,
                  questions: str | int | Mapping[str, int] = SAMPLE_QUESTIONS, *,
                  decides: DecidesFor | None) -> WorldPaths:
    """The shared sample world, generated on first use into ``out_dir`` and reused afterwards
    (its questions checked by ``decides``, as :func:`generate_world`'s).

    Defaults: seed 7, 350 frames (35 s at 10 Hz), 640x480, 30 questions, raw and JPEG images,
    in :func:`default_sample_dir`. Generation goes to a temporary sibling directory that is
    then renamed into place, so a crash or a concurrent caller never leaves half a sample.
    """
    out = Path(out_dir) if out_dir is not None else default_sample_dir()
    counts = parse_counts(questions)
    if _is_current(out, spec, counts):
        return _paths(out, True, True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    log.info("generating the sample world into %s", out)
    generate_world(spec, tmp, counts, compressed=True, decides=decides)
    if out.exists():
        if _is_current(out, spec, counts):  # another process won the race
            shutil.rmtree(tmp)
            return _paths(out, True, True)
        prepare_out_dir(out, force=True)
        for child in tmp.iterdir():
            child.rename(out / child.name)
        tmp.rmdir()
    else:
        try:
            tmp.rename(out)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not _is_current(out, spec, counts):
                raise
    return _paths(out, True, True)

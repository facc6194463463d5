"""``embodied-r world``: render a synthetic egocentric world and write its bag, video and QA.

Arguments are parsed as text and validated here, so every bad value ends in one clear line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from embodied_r_ros.sim.generate import generate_world
from embodied_r_ros.sim.questions import CATEGORIES, parse_counts
from embodied_r_ros.sim.world import WorldSpec

PROG = "embodied-r world"
_DEFAULTS = WorldSpec()


class UsageError(ValueError):
    """A bad command-line value; the message is the whole explanation."""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", default=str(_DEFAULTS.seed), help="scene and trajectory seed")
    p.add_argument("--out", default=None, help="output directory (required)")
    p.add_argument("--frames", default=str(_DEFAULTS.frames), help="number of frames")
    p.add_argument("--rate", default=str(_DEFAULTS.rate_hz), help="frame rate in Hz")
    p.add_argument("--resolution", default=f"{_DEFAULTS.width}x{_DEFAULTS.height}",
                   help="image size WIDTHxHEIGHT")
    p.add_argument("--hfov", default=str(_DEFAULTS.hfov_deg),
                   help="horizontal field of view in degrees")
    p.add_argument("--objects", default=str(_DEFAULTS.n_objects), help="objects in the room")
    p.add_argument("--questions", default="30",
                   help="a total split over the categories, or CATEGORY=N,... with categories "
                   + ", ".join(CATEGORIES))
    p.add_argument("--compressed", action="store_true",
                   help="also write sensor_msgs/CompressedImage (JPEG)")
    p.add_argument("--no-raw", action="store_true", help="omit raw sensor_msgs/Image")
    p.add_argument("--no-bag", action="store_true", help="skip the rosbag2 file")
    p.add_argument("--no-video", action="store_true", help="skip the mp4 video")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")


def add_world_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``world`` on the main CLI; the parser's ``func`` default is :func:`run_world`."""
    p = subparsers.add_parser(
        "world",
        help="render a synthetic egocentric world (bag, mp4, questions)",
        description="Render a procedural room from a seed with true poses and write a "
        "rosbag2 (mcap), an mp4 and ground-truth multiple-choice questions (JSONL).",
    )
    _add_arguments(p)
    p.set_defaults(func=run_world)
    return p


def _int(name: str, text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be an integer, got {text!r}") from None


def _float(name: str, text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number, got {text!r}") from None


def _resolution(text: str) -> tuple[int, int]:
    parts = str(text).lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--resolution must look like 640x480, got {text!r}")
    return int(parts[0]), int(parts[1])


def spec_from_args(args: argparse.Namespace) -> tuple[WorldSpec, dict[str, int], Path]:
    """Validated world spec, question counts and output directory (``UsageError`` if bad)."""
    if not args.out:
        raise UsageError("--out DIR is required")
    frames = _int("--frames", args.frames)
    if frames <= 0:
        raise UsageError(f"--frames must be a positive integer, got {frames}")
    width, height = _resolution(args.resolution)
    spec = WorldSpec(
        seed=_int("--seed", args.seed),
        frames=frames,
        rate_hz=_float("--rate", args.rate),
        width=width,
        height=height,
        hfov_deg=_float("--hfov", args.hfov),
        n_objects=_int("--objects", args.objects),
    )
    try:
        spec.validate()
        counts = parse_counts(args.questions)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.no_raw and not args.compressed and not args.no_bag:
        raise UsageError("--no-raw needs --compressed (the bag would have no images)")
    return spec, counts, Path(args.out)


def run_world(args: argparse.Namespace) -> int:
    """Run the ``world`` command; 0 on success, 2 on bad arguments or an unusable --out."""
    try:
        spec, counts, out = spec_from_args(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        paths = generate_world(
            spec, out, counts, bag=not args.no_bag, raw=not args.no_raw,
            compressed=args.compressed, video=not args.no_video, force=args.force,
        )
    except FileExistsError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        reason = exc.strerror or str(exc)
        target = exc.filename or out
        print(f"{PROG}: error: cannot write to {target}: {reason}", file=sys.stderr)
        return 2
    n_questions = sum(1 for _ in paths.questions.open(encoding="utf-8"))
    print(f"world seed {spec.seed}: {spec.frames} frames at {spec.rate_hz:g} Hz, "
          f"{spec.width}x{spec.height}, {n_questions} questions")
    for label, path in (("bag", paths.bag), ("video", paths.video),
                        ("questions", paths.questions), ("manifest", paths.manifest)):
        if path is not None:
            print(f"  {label:9s} {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    _add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_world(args)


if __name__ == "__main__":
    sys.exit(main())

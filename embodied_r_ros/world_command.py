"""``embodied-r world``: render a synthetic egocentric world and write its bag, video and QA.

Arguments are parsed as text and validated here, so every bad value ends in one clear line on
stderr and exit status 2, never a traceback. The command joins the generator to the rule reader:
each question is asked only where the world's own text decides it
(:class:`~embodied_r_ros.reading.text_decides.TextDecides`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.reading.text_decides import TextDecides
from embodied_r_ros.sim.generate import WorldPaths, generate_world
from embodied_r_ros.sim.questions import CATEGORIES, parse_counts
from embodied_r_ros.sim.world import WorldSpec

PROG = "embodied-r world"
_DEFAULTS = WorldSpec()
_QUESTIONS = "30"


class UsageError(ValueError):
    """A bad command-line value; the message is the whole explanation."""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", default=str(_DEFAULTS.seed), help="scene and trajectory seed")
    p.add_argument("--out", default=None, help="output directory (required)")
    p.add_argument("--frames", default=None,
                   help=f"number of frames (default {_DEFAULTS.frames})")
    p.add_argument("--rate", default=None,
                   help=f"frame rate in Hz (default {_DEFAULTS.rate_hz:g})")
    p.add_argument("--resolution", default=None,
                   help=f"image size WIDTHxHEIGHT (default {_DEFAULTS.width}x{_DEFAULTS.height})")
    p.add_argument("--hfov", default=str(_DEFAULTS.hfov_deg),
                   help="horizontal field of view in degrees")
    p.add_argument("--objects", default=None,
                   help=f"objects in the room (default {_DEFAULTS.n_objects})")
    p.add_argument("--questions", default=None,
                   help=f"a total split over the categories (default {_QUESTIONS}), or "
                   "CATEGORY=N,... with categories " + ", ".join(CATEGORIES))
    add_output_arguments(p)


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """What to write and whether to overwrite: :func:`output_options` reads them."""
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


def int_arg(name: str, text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be an integer, got {text!r}") from None


def float_arg(name: str, text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number, got {text!r}") from None


def resolution_arg(text: str) -> tuple[int, int]:
    parts = str(text).lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--resolution must look like 640x480, got {text!r}")
    return int(parts[0]), int(parts[1])


def given(value: str | None, default: object) -> str:
    return str(default) if value is None else value


def spec_from_args(args: argparse.Namespace) -> tuple[WorldSpec, dict[str, int], Path]:
    """Validated world spec, question counts and output directory (``UsageError`` if bad)."""
    if not args.out:
        raise UsageError("--out DIR is required")
    frames = int_arg("--frames", given(args.frames, _DEFAULTS.frames))
    if frames <= 0:
        raise UsageError(f"--frames must be a positive integer, got {frames}")
    width, height = resolution_arg(given(args.resolution, f"{_DEFAULTS.width}x{_DEFAULTS.height}"))
    spec = WorldSpec(
        seed=int_arg("--seed", args.seed),
        frames=frames,
        rate_hz=float_arg("--rate", given(args.rate, _DEFAULTS.rate_hz)),
        width=width,
        height=height,
        hfov_deg=float_arg("--hfov", args.hfov),
        n_objects=int_arg("--objects", given(args.objects, _DEFAULTS.n_objects)),
    )
    try:
        spec.validate()
        counts = parse_counts(given(args.questions, _QUESTIONS))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    check_outputs(args)
    return spec, counts, Path(args.out)


def check_outputs(args: argparse.Namespace) -> None:
    if args.no_raw and not args.compressed and not args.no_bag:
        raise UsageError("--no-raw needs --compressed (the bag would have no images)")


def run_world(args: argparse.Namespace) -> int:
    """Run the ``world`` command; 0 on success, 2 on bad arguments or an unusable --out."""
    try:
        spec, counts, out = spec_from_args(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return write_world(PROG, "world", spec, out,
                       lambda: generate_world(spec, out, counts, **output_options(args),
                                              decides=TextDecides))


def output_options(args: argparse.Namespace) -> dict[str, bool]:
    """What to write, from the output flags (:func:`add_output_arguments`)."""
    return {"bag": not args.no_bag, "raw": not args.no_raw, "compressed": args.compressed,
            "video": not args.no_video, "force": args.force}


def write_world(prog: str, kind: str, spec: Any, out: Path,
                generate: Callable[[], WorldPaths]) -> int:
    """Run ``generate`` and print what it wrote; 2 with one line where ``out`` is unusable.
    ``spec``: the world's spec (seed, frames, rate, size), for the summary line."""
    try:
        paths = generate()
    except FileExistsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        reason = exc.strerror or str(exc)
        target = exc.filename or out
        print(f"{prog}: error: cannot write to {target}: {reason}", file=sys.stderr)
        return 2
    n_questions = sum(1 for _ in paths.questions.open(encoding="utf-8"))
    print(f"{kind} seed {spec.seed}: {spec.frames} frames at {spec.rate_hz:g} Hz, "
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

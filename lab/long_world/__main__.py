"""``python -m lab.long_world``: render a long world and write its bag, video and questions.

A long world (:mod:`lab.long_world.world`: rooms off a corridor, a tour of many minutes with
revisits, memory questions labelled by horizon) is what the memory benchmark plays and the
memory reader's rows are built from. Its outputs are those of ``embodied-r world``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from embodied_r_ros.world_command import (
    UsageError,
    add_output_arguments,
    check_outputs,
    float_arg,
    given,
    int_arg,
    output_options,
    resolution_arg,
    write_world,
)
from lab.long_world import questions
from lab.long_world.generate import LONG_QUESTIONS, generate_long_world
from lab.long_world.world import LEAVING_SPEC, LONG_SPEC, NAMED_SPECS, REVISIT, LongWorldSpec

PROG = "python -m lab.long_world"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--seed", default=str(LONG_SPEC.seed), help="scene and tour seed")
    p.add_argument("--out", default=None, help="output directory (required)")
    p.add_argument("--long-world", choices=sorted(NAMED_SPECS), default=REVISIT,
                   help="the world whose rooms, objects and tour are the defaults: revisit "
                   "(every room again and again; the memory benchmark's) or leave (a wing "
                   "toured, then left for good; the object map's)")
    p.add_argument("--minutes", default=None,
                   help=f"tour length (default {LONG_SPEC.duration_s / 60:g})")
    p.add_argument("--rooms", default=None,
                   help=f"rooms, an even number (default {2 * LONG_SPEC.columns}; "
                   f"{2 * LEAVING_SPEC.columns} for leave)")
    p.add_argument("--rate", default=None, help=f"frame rate in Hz (default {LONG_SPEC.rate_hz:g})")
    p.add_argument("--resolution", default=None,
                   help=f"image size WIDTHxHEIGHT (default {LONG_SPEC.width}x{LONG_SPEC.height})")
    p.add_argument("--hfov", default=str(LONG_SPEC.hfov_deg),
                   help="horizontal field of view in degrees")
    p.add_argument("--objects", default=None,
                   help=f"objects, a quarter sharing a name (default {LONG_SPEC.n_objects}; "
                   f"{LEAVING_SPEC.n_objects} for leave, {LEAVING_SPEC.shared_names} names twice)")
    p.add_argument("--questions", default=None,
                   help=f"a total split over the categories (default {LONG_QUESTIONS}), or "
                   "CATEGORY=N,... with categories " + ", ".join(questions.CATEGORIES))
    add_output_arguments(p)
    return p


def spec_from_args(args: argparse.Namespace) -> tuple[LongWorldSpec, dict[str, int], Path]:
    """Validated spec, question counts and output directory (``UsageError`` if bad)."""
    if not args.out:
        raise UsageError("--out DIR is required")
    minutes = float_arg("--minutes", given(args.minutes, LONG_SPEC.duration_s / 60.0))
    base = NAMED_SPECS[args.long_world]
    rooms = int_arg("--rooms", given(args.rooms, 2 * base.columns))
    if rooms % 2 or not 2 <= rooms <= 12:
        raise UsageError(f"--rooms must be an even number from 2 to 12, got {rooms}")
    width, height = resolution_arg(given(args.resolution, f"{LONG_SPEC.width}x{LONG_SPEC.height}"))
    n_objects = int_arg("--objects", given(args.objects, base.n_objects))
    spec = LongWorldSpec(
        seed=int_arg("--seed", args.seed),
        duration_s=minutes * 60.0,
        rate_hz=float_arg("--rate", given(args.rate, LONG_SPEC.rate_hz)),
        width=width,
        height=height,
        hfov_deg=float_arg("--hfov", args.hfov),
        columns=rooms // 2,
        n_objects=n_objects,
        shared_names=base.shared_names if args.objects is None else n_objects // 4,
        tour=base.tour,
    )
    try:
        spec.validate()
        counts = questions.parse_counts(given(args.questions, LONG_QUESTIONS))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    check_outputs(args)
    return spec, counts, Path(args.out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        spec, counts, out = spec_from_args(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return write_world(PROG, "long world", spec, out,
                       lambda: generate_long_world(spec, out, counts, **output_options(args)))


if __name__ == "__main__":
    sys.exit(main())

"""``embodied-r-train``: datasets from bags and benchmarks, GRPO and SFT training, evaluation.

Every user error ends as one line on stderr and exit code 2 (no traceback), as in ``embodied-r``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_r_ros.cli import CliError, CliParser, run_cli
from embodied_r_ros.core.config import Config, ConfigError
from embodied_r_ros.core.profiles import load_config
from embodied_r_training.data.splits import SplitOptions
from embodied_r_training.export import GGUF_TYPES
from embodied_r_training.recipe import (
    TrainConfig,
    available_configs,
    load_train_config,
    parse_overrides,
)

if TYPE_CHECKING:
    from embodied_r_training.data.builders import Benchmark
    from embodied_r_training.rl.runs import TrainResult

log = logging.getLogger("embodied_r_training")


# -- shared options ------------------------------------------------------------------------------


def _add_pipeline_args(p: argparse.ArgumentParser, default: str) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--profile", "-p", help=f"perception profile (default {default})")
    group.add_argument("--config", "-c", help="a pipeline YAML config file")
    p.set_defaults(default_profile=default)
    p.add_argument("--cache-dir", help="perception cache directory (default: the profile's)")


def _add_split_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split-by", choices=("scene", "question"), default="scene",
                   help="keep whole scenes in one split (default) or split questions")
    p.add_argument("--seed", type=int, default=0, help="split seed")
    p.add_argument("--val-frac", type=float, default=0.05)
    p.add_argument("--test-frac", type=float, default=0.20)
    p.add_argument("--folds", type=int, default=5, help="k-fold splits to record (0: none)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default="paper",
                   help=f"training config name or YAML file ({', '.join(available_configs())})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", dest="overrides",
                   help="override a config key, e.g. --set grpo.max_steps=10 (repeatable)")


def _pipeline_config(args: argparse.Namespace) -> Config:
    """The perception config a build or a question file is made with."""
    from embodied_r_training.data.builders import perception_config

    return perception_config(args.profile, args.config, cache_dir=args.cache_dir,
                             default_profile=args.default_profile)


def _train_config(args: argparse.Namespace) -> TrainConfig:
    return load_train_config(args.config, parse_overrides(args.overrides))


def _splits(args: argparse.Namespace) -> SplitOptions:
    return SplitOptions(by=args.split_by, seed=args.seed, val_frac=args.val_frac,
                        test_frac=args.test_frac, folds=args.folds)


def _to_stderr(prefix: str = "") -> Callable[[str], None]:
    return lambda line: print(prefix + line, file=sys.stderr)


# -- commands --------------------------------------------------------------------------------------


def cmd_build(args: argparse.Namespace) -> int:
    from embodied_r_training.data.builders import build_from_bag

    report = build_from_bag(
        args.bag, args.questions, args.out, image_topic=args.image_topic,
        config=_pipeline_config(args), odom_topic=args.odom_topic,
        camera_info_topic=args.camera_info_topic, splits=_splits(args),
        progress=not args.no_progress, notice=_to_stderr("embodied-r-train: "))
    print(f"dataset {args.out}: {report.summary()}")
    return 0


def _cmd_import(args: argparse.Namespace, benchmark: Benchmark) -> int:
    from embodied_r_training.data.builders import import_benchmark

    report = import_benchmark(
        benchmark, args.root, args.out, config=_pipeline_config(args), robust=args.robust,
        report_motion=args.report_motion, all_categories=args.all_categories,
        splits=_splits(args), progress=not args.no_progress, notice=_to_stderr())
    print(f"dataset {args.out}: {report.summary()}")
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    from embodied_r_training.data.merge import pool_datasets

    parts = _labelled(args.data)
    splits = _splits(args)
    counts = pool_datasets([(label, Path(d)) for label, d in parts], Path(args.out),
                           by=splits.by, seed=splits.seed, fractions=splits.fractions,
                           folds=splits.folds)
    print(f"dataset {args.out}: {sum(counts.values())} rows pooled from {len(parts)} datasets; "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    from embodied_r_training.data.merge import mix_datasets

    parts = _labelled(args.data)
    counts = mix_datasets([(label, Path(d)) for label, d in parts], Path(args.out), args.rows,
                          seed=args.seed)
    print(f"dataset {args.out}: {sum(counts.values())} training rows mixed; "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def cmd_import_urbanvideo(args: argparse.Namespace) -> int:
    return _cmd_import(args, "UrbanVideo-Bench")


def cmd_import_vsibench(args: argparse.Namespace) -> int:
    return _cmd_import(args, "VSI-Bench")


def _print_result(result: TrainResult) -> None:
    print(f"trained {result.global_step} steps in {result.minutes:.1f} min -> {result.final_model}")
    if result.resumed_from:
        print(f"resumed from {result.resumed_from}")
    if result.deleted_rows:
        print(f"{result.deleted_rows} of {result.rows + result.deleted_rows} rows deleted: "
              "prompts over data.max_prompt_tokens")
    if result.shortened_rows:
        print(f"{result.shortened_rows} of {result.rows} prompts shortened to "
              "data.max_prompt_tokens (data.over_length)")
    for key in sorted(result.metrics):
        if key.endswith("/last"):
            print(f"  {key[:-5]}: first {result.metrics[key[:-5] + '/first']:.3f}, "
                  f"last {result.metrics[key]:.3f}")


def cmd_grpo(args: argparse.Namespace) -> int:
    from embodied_r_training.rl.grpo import run_grpo

    cfg = _train_config(args)
    result = run_grpo(cfg, args.data, output_dir=args.out, resume=not args.no_resume)
    _print_result(result)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from embodied_r_training.rl.sft import run_sft

    cfg = _train_config(args)
    result = run_sft(cfg, args.data, output_dir=args.out, resume=not args.no_resume)
    _print_result(result)
    return 0


def _labelled(models: list[str]) -> list[tuple[str, str]]:
    out = []
    for spec in models:
        label, sep, model = spec.partition("=")
        out.append((label, model) if sep and label and "/" not in label else (spec, spec))
    return out


def _pair(text: str) -> tuple[str, str]:
    """``A:B`` -> (A, B): two model labels."""
    a, sep, b = text.partition(":")
    if not sep:
        raise CliError(f"--paired {text!r}: expected A:B with two of the model labels")
    return a, b


def cmd_eval(args: argparse.Namespace) -> int:
    from embodied_r_training.evaluation.evaluate import evaluate_models
    from embodied_r_training.evaluation.report import summary_table

    done = evaluate_models(
        _labelled(args.model), _labelled(args.data), _train_config(args), args.out,
        split=args.split, fold=args.fold, kfold=args.kfold,
        consistency=not args.no_consistency, answer_mode=args.answer_mode,
        pairs=[_pair(p) for p in args.paired or []])
    if args.json:
        print(json.dumps(done.to_dict()))
    else:
        print("\n".join(summary_table(d, rs) for d, rs in done.results.items()))
        print("written: " + ", ".join(str(p) for p in done.paths.values()))
    return 0


def cmd_questions(args: argparse.Namespace) -> int:
    from embodied_r_ros.recordings.bags import BagReader
    from embodied_r_training.data.odometry_questions import (
        fields_help,
        odometry_questions,
        template_rows,
        write_rows,
    )

    if args.template:
        if args.bag:
            with BagReader(args.bag) as bag:
                rows = template_rows(bag)
        else:
            rows = template_rows()
        write_rows(args.out, rows)
        print(f"example questions written: {args.out}; the fields:\n{fields_help()}")
        return 0
    missing = [f"--{n.replace('_', '-')}" for n in ("bag", "image_topic", "odom_topic")
               if not getattr(args, n)]
    if missing:
        raise CliError(f"questions from odometry need {', '.join(missing)} (or --template)")
    spec = args.counts if args.counts is not None else args.count
    config = _pipeline_config(args)
    with BagReader(args.bag) as bag:
        try:
            rows, report = odometry_questions(
                bag, args.image_topic, args.odom_topic, spec, seed=args.seed,
                tolerance_sec=config.perception.odom_tolerance_sec, config=config)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if not rows:
        raise CliError(f"no questions: {report.summary()}")
    write_rows(args.out, rows)
    print(f"{args.out}: {report.summary()}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from embodied_r_training.export import export_run, profile_lines

    load_config(profile=args.profile)  # a bad --profile fails before anything is written
    done = export_run(args.run, args.name, base=args.base, cache_dir=args.model_cache,
                      force=args.force, revision=args.revision, subfolder=args.subfolder,
                      gguf=args.gguf)
    how = (f"LoRA adapter {done.source.path} merged into {done.source.base}"
           if done.source.kind == "lora" else f"full weights from {done.source.path}")
    if done.gguf:
        how += f", as GGUF {done.gguf} for llama.cpp"
    print(f"exported {done.name}: {done.path} ({how}, {done.megabytes:.1f} MB)")
    lines = profile_lines(done.name, args.profile, done.gguf)
    if args.config_out:
        Path(args.config_out).write_text(lines)
        print(f"config written: {args.config_out}")
    print("profile lines (a --config / config_file:= file):")
    print("\n".join("  " + line for line in lines.splitlines()))
    return 0


# -- parser ----------------------------------------------------------------------------------------

BAG_HELP = "rosbag2 directory, a .mcap / .db3 file, or a ROS 1 .bag"
POSES_HELP = ("nav_msgs/Odometry, a PoseStamped topic, or /tf (the chain from "
              "perception.tf.odom_frame to the camera's frame, mounts from /tf_static)")


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="embodied-r-train", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)

    b = sub.add_parser("build", help="build a training set from a recorded bag and questions",
                       description="Perceive the key frames of each question's window of a "
                       "recording (rosbag2 mcap or sqlite3, or a ROS 1 .bag) and write a "
                       "datasets-compatible table.")
    b.add_argument("--bag", required=True, help=BAG_HELP)
    b.add_argument("--questions", required=True, help="JSONL: id, question, options, answer, "
                   "category, stamp_start_ns/stamp_end_ns (or t_start/t_end)")
    b.add_argument("--image-topic", required=True, help="sensor_msgs/Image or CompressedImage")
    b.add_argument("--odom-topic", help="motions from poses, not vision: " + POSES_HELP)
    b.add_argument("--camera-info-topic", help="intrinsics (default: the bag's only CameraInfo)")
    b.add_argument("--out", required=True, help="dataset directory")
    _add_pipeline_args(b, "offline")
    _add_split_args(b)
    b.set_defaults(func=cmd_build)

    q = sub.add_parser("questions", help="questions about a bag from its odometry, or a "
                       "question-file template", description="Write multiple-choice questions "
                       "whose answers follow from the recorded odometry (for build), or, with "
                       "--template, an example question file to fill in by hand.")
    q.add_argument("--bag", help=BAG_HELP)
    q.add_argument("--image-topic", help="the camera (questions are about its frames)")
    q.add_argument("--odom-topic", help="the poses: " + POSES_HELP)
    q.add_argument("--out", required=True, help="the question file (JSONL) to write")
    how_many = q.add_mutually_exclusive_group()
    how_many.add_argument("--count", type=int, default=30,
                          help="questions in all, split evenly over the categories (30)")
    how_many.add_argument("--counts", help="per category, e.g. action_generation=10,"
                          "route_planning=5")
    q.add_argument("--seed", type=int, default=0, help="same seed, same questions")
    q.add_argument("--template", action="store_true",
                   help="write an example file to edit instead (times inside --bag if given)")
    _add_pipeline_args(q, "offline")
    q.set_defaults(func=cmd_questions)

    for name, func, text in (
        ("import-urbanvideo", cmd_import_urbanvideo, "UrbanVideo-Bench (MCQ.parquet + videos/)"),
        ("import-vsibench", cmd_import_vsibench, "VSI-Bench (parquet or jsonl + scene videos)"),
    ):
        p = sub.add_parser(name, help=f"build a training set from {text}",
                           description=f"Import {text}: the paper's task categories, key frames "
                           "and perception of each question's video.")
        p.add_argument("--root", required=True, help="the benchmark folder")
        p.add_argument("--out", required=True, help="dataset directory")
        p.add_argument("--all-categories", action="store_true",
                       help="keep every multiple-choice category, not only the paper's")
        p.add_argument("--report-motion", action="store_true",
                       help="write the visually measured motion beside the VLM's action "
                       "(off: the perception text is the paper's)")
        p.add_argument("--robust", action="store_true",
                       help="the robot route instead of the official one: VLM replies read "
                       "leniently (action matched to the vocabulary), key frames at the "
                       "profile's resolution (640 px), questions rewritten as 'Question: ... "
                       "Choices: ...'")
        _add_pipeline_args(p, "offline")
        _add_split_args(p)
        p.set_defaults(func=func)

    pl = sub.add_parser("pool", help="one dataset from several, split once over the pooled scenes",
                        description="Pool built datasets (e.g. UrbanVideo-Bench and VSI-Bench "
                        "imports) into one, shuffled once by seed and split over the pooled "
                        "scene list as the official preprocessing does.")
    pl.add_argument("--data", required=True, action="append",
                    help="a built dataset directory; LABEL=DIR to name it; at least two")
    pl.add_argument("--out", required=True, help="the pooled dataset directory (new)")
    _add_split_args(pl)
    pl.set_defaults(func=cmd_pool)

    mx = sub.add_parser("mix", help="a training set of so many rows of each of several datasets",
                        description="Mix the training rows of built datasets into one training "
                        "set: --rows of each, drawn evenly over its categories from rows whose "
                        "think text the oracle supports, shuffled together (fine-tuning on a new "
                        "kind of question while rehearsing the old).")
    mx.add_argument("--data", required=True, action="append",
                    help="a built dataset directory; LABEL=DIR to name it")
    mx.add_argument("--rows", type=int, required=True, help="training rows from each dataset")
    mx.add_argument("--seed", type=int, default=0, help="draw and shuffle seed")
    mx.add_argument("--out", required=True, help="the mixed dataset directory (new)")
    mx.set_defaults(func=cmd_mix)

    for name, func, text in (
        ("grpo", cmd_grpo, "train the reasoning LM with GRPO (the paper's recipe)"),
        ("sft", cmd_sft, "train the SFT baseline on the same rows"),
    ):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument("--data", required=True, help="a built dataset directory")
        p.add_argument("--out", help="run directory (default: the config's output.dir)")
        p.add_argument("--no-resume", action="store_true",
                       help="start afresh even if the run directory has checkpoints")
        _add_train_args(p)
        p.set_defaults(func=func)

    e = sub.add_parser("eval", help="accuracy per category, format and consistency rates",
                       description="Run reasoning LMs over a split (cached perception) and "
                       "report JSON, a markdown table beside the paper's and a bar chart.")
    e.add_argument("--model", required=True, action="append",
                   help="model dir, hub id or offline name; LABEL=MODEL to name it; repeatable; "
                   "'{fold}' in it is the fold number in k-fold mode; the rules chance, "
                   "first-option and oracle need no model")
    e.add_argument("--data", required=True, action="append",
                   help="a built dataset directory; LABEL=DIR to name it; repeatable (e.g. "
                   "--data ID=runs/syn/id --data OOD=runs/syn/ood: one table each)")
    e.add_argument("--split", default="test", choices=("train", "val", "test", "all"))
    folds = e.add_mutually_exclusive_group()
    folds.add_argument("--fold", type=int, help="the test part of this k-fold split")
    folds.add_argument("--kfold", type=int, metavar="K", help="average over the K folds")
    e.add_argument("--out", help="report directory (default: DATA/eval)")
    e.add_argument("--no-consistency", action="store_true", help="skip the reference LM")
    e.add_argument("--answer-mode", choices=("official", "tag"),
                   help="the headline accuracy: the official evaluation extractor or the "
                   "<answer> tag (default: the config's rewards.answer_mode); both are reported")
    e.add_argument("--paired", action="append", metavar="A:B",
                   help="report accuracy of model A minus model B on the same questions with a "
                   "paired bootstrap interval (model labels; repeatable)")
    e.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    _add_train_args(e)
    e.set_defaults(func=cmd_eval)

    x = sub.add_parser("export", help="install a trained run as a named model for the robot",
                       description="Merge a run's LoRA adapter into its base (or copy its full "
                       "weights) into the offline model cache as NAME, so that a profile's "
                       "reasoning.model.model can name it.")
    x.add_argument("run", help="a grpo/sft run directory (or a checkpoint, adapter or model "
                   "dir, or a hub checkpoint such as EmbodiedCity/Embodied-R)")
    x.add_argument("--name", required=True, help="the model's name in the cache")
    x.add_argument("--subfolder", help="the checkpoint's folder in the hub repository or "
                   "directory (EmbodiedCity/Embodied-R: Weight_1, the default, or Weight_2)")
    x.add_argument("--revision", help="the hub revision (branch, tag or commit)")
    x.add_argument("--gguf", choices=GGUF_TYPES,
                   help="install a GGUF file for llama.cpp of this type instead (int8: Q8_0; "
                   "q4_*: 4-bit, by llama.cpp's quantiser)")
    x.add_argument("--base", help="the model a LoRA adapter is merged into (default: the one "
                   "its adapter_config.json names)")
    x.add_argument("--profile", default="offline",
                   help="the profile the printed config extends (default offline)")
    x.add_argument("--config-out", help="also write the printed config to this file")
    x.add_argument("--model-cache", help="the model cache (default $EMBODIED_R_MODEL_CACHE or "
                   "~/.cache/embodied_r/models)")
    x.add_argument("--force", action="store_true", help="replace an exported model of that name")
    x.set_defaults(func=cmd_export)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    from embodied_r_ros.core.chat import BackendError
    from embodied_r_ros.core.pipeline import QueryError
    from embodied_r_ros.recordings.bags import BagError
    from embodied_r_ros.recordings.video import VideoError
    from embodied_r_training.data.dataset_files import BuildError
    from embodied_r_training.data.splits import SplitError
    from embodied_r_training.evaluation.evaluate import EvalError
    from embodied_r_training.export import ExportError

    return (CliError, ConfigError, BagError, BuildError, SplitError, VideoError, QueryError,
            BackendError, ExportError, EvalError)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("embodied-r-train", build_parser(), _user_errors(), argv, logging.INFO)


if __name__ == "__main__":
    sys.exit(main())

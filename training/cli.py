"""``embodied-r-train``: datasets from bags and benchmarks, GRPO and SFT training, evaluation.

Every user error ends as one line on stderr and exit code 2 (no traceback), as in ``embodied-r``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.recipe import (
    TrainConfig,
    available_configs,
    load_train_config,
    parse_overrides,
)

from embodied_r_ros.cli import CliError, CliParser, run_cli
from embodied_r_ros.core.config import Config, ConfigError, load_config

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


def _pipeline_config(args: argparse.Namespace, **sections: dict[str, Any]) -> Config:
    """The perception config of a build; ``sections`` override parts of it."""
    overrides: dict[str, Any] = dict(sections)
    if args.cache_dir:
        overrides["cache"] = {"dir": args.cache_dir}
    profile = args.profile if args.profile or args.config else args.default_profile
    return load_config(profile=profile, path=args.config, overrides=overrides or None)


def _train_config(args: argparse.Namespace) -> TrainConfig:
    return load_train_config(args.config, parse_overrides(args.overrides))


def _pipeline(config: Config) -> Any:
    """EmbodiedR with the perception model only (building never runs the reasoning LM)."""
    from embodied_r_ros.core.pipeline import EmbodiedR

    vlm = None
    if config.perception.backend == "vlm":
        from embodied_r_ros.core.backends.factory import create_backend

        assert config.perception.vlm is not None
        vlm = create_backend(config.perception.vlm)
    return EmbodiedR(config, vlm=vlm, load_models=False)


def _fractions(args: argparse.Namespace) -> tuple[float, float, float]:
    train = 1.0 - args.val_frac - args.test_frac
    if train <= 0 or args.val_frac < 0 or args.test_frac < 0:
        raise CliError("--val-frac and --test-frac must be >= 0 and leave room for training")
    return (train, args.val_frac, args.test_frac)


def _manifest(config: Config, pipeline: Any, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "profile": config.name,
        "perception_backend": config.perception.backend,
        "perception_model": pipeline.perceiver.model_id if pipeline.perceiver else "",
        "prompt_version": pipeline.prompts.version,
        "prompts": config.prompts,
        "report_motion": config.perception.report_motion,
        "keyframes": config.keyframes.model_dump(),
        **extra,
    }


def _preflight(args: argparse.Namespace, samples: list[Any]) -> None:
    """Everything a build can check before a model loads (ids, splits, folds)."""
    from embodied_r_training.data.build import check_build

    args.folds = check_build(samples, split_by=args.split_by, seed=args.seed,
                             fractions=_fractions(args), folds=args.folds)


def _build(args: argparse.Namespace, samples: list[Any], frames_for: Any, pipeline: Any,
           config: Config, manifest: dict[str, Any]) -> int:
    from embodied_r_training.data.build import build_dataset
    from embodied_r_training.data.journal import fingerprint_settings, settings_fingerprint

    keyed = (config, manifest["perception_model"], {"motion": manifest.get("motion")})
    report = build_dataset(
        samples, frames_for, pipeline, args.out,
        fingerprint=settings_fingerprint(*keyed), split_by=args.split_by, seed=args.seed,
        fractions=_fractions(args), folds=args.folds,
        manifest={**manifest, "fingerprint_settings": fingerprint_settings(*keyed)},
        progress=not args.no_progress,
    )
    print(f"dataset {args.out}: {report.summary()}")
    return 0


# -- commands --------------------------------------------------------------------------------------


def cmd_build(args: argparse.Namespace) -> int:
    from embodied_r_training.data.bag_source import (
        BagFrames,
        camera_info_topic,
        question_samples,
        read_questions,
    )

    from embodied_r_ros.core.bags import POSE_TYPES, BagReader

    config = _pipeline_config(args)
    rows = read_questions(args.questions)
    with BagReader(args.bag) as bag:
        samples, rejected = question_samples(rows, Path(args.bag), bag.start_ns, bag.end_ns)
        if not samples:
            more = f" (and {len(rejected) - 1} more bad rows)" if len(rejected) > 1 else ""
            raise CliError(f"{rejected[0]}{more}; no usable question rows in {args.questions}")
        for line in rejected:  # each bad row is left out, the rest builds
            print(f"embodied-r-train: skipping {line}", file=sys.stderr)
        # before any model loads or anything is written
        bag.require_topic(args.image_topic)
        if args.odom_topic:
            bag.require_topic(args.odom_topic, POSE_TYPES)
        _preflight(args, samples)
        info_topic = args.camera_info_topic or camera_info_topic(bag)
        camera = config.perception.camera
        # intrinsics the config names are the robot's too (the nodes read no CameraInfo)
        if info_topic and camera.fx is None:
            info = bag.camera_info(info_topic)
            if info is not None:
                camera = info.to_config(camera)
        pipeline = _pipeline(config)
        frames_for = BagFrames(bag, pipeline, args.image_topic, args.odom_topic, camera)
        manifest = _manifest(
            config, pipeline, "bag", bag=str(Path(args.bag).resolve()),
            image_topic=args.image_topic, odom_topic=args.odom_topic,
            motion="odometry" if args.odom_topic else "visual", rejected_rows=rejected,
        )
        return _build(args, samples, frames_for, pipeline, config, manifest)


def _cmd_import(args: argparse.Namespace, benchmark: str) -> int:
    from embodied_r_training.data.importers import (
        ImportReport,
        VideoFrames,
        urbanvideo_samples,
        vsibench_samples,
    )

    reader = urbanvideo_samples if benchmark == "UrbanVideo-Bench" else vsibench_samples
    official = not args.robust  # the paper route: the benchmark as the official code reads it
    report = ImportReport()
    samples = reader(args.root, all_categories=args.all_categories, report=report,
                     raw_question=official)
    print(f"{benchmark}: {report.summary()}", file=sys.stderr)
    if not samples:
        raise CliError(f"{benchmark}: no rows left to import ({report.summary()})")
    _preflight(args, samples)
    # benchmark videos have no odometry and no robot: the LM reads the VLM's own actions, as
    # in the paper, unless --report-motion adds the measured visual motion beside them; the
    # official route also reads the VLM's replies as the official code does and finds key
    # frames at the videos' full resolution (robots keep the robust reading and 640 px)
    perception: dict[str, Any] = {"report_motion": args.report_motion}
    sections: dict[str, Any] = {"perception": perception}
    if official:
        perception["reply_reading"] = "official"
        sections["keyframes"] = {"max_side": 0}
    config = _pipeline_config(args, **sections)
    pipeline = _pipeline(config)
    manifest = _manifest(config, pipeline, benchmark, root=str(Path(args.root).resolve()),
                         motion="visual", import_report=report.to_dict(),
                         reply_reading=config.perception.reply_reading,
                         question_text="benchmark" if official else "formatted")
    return _build(args, samples, VideoFrames(pipeline), pipeline, config, manifest)


def cmd_pool(args: argparse.Namespace) -> int:
    from embodied_r_training.data.merge import pool_datasets

    parts = _labelled(args.data)
    if len({label for label, _ in parts}) != len(parts):
        raise CliError("--data: each dataset needs its own label (LABEL=DIR)")
    counts = pool_datasets([(label, Path(d)) for label, d in parts], Path(args.out),
                           by=args.split_by, seed=args.seed, fractions=_fractions(args),
                           folds=args.folds)
    print(f"dataset {args.out}: {sum(counts.values())} rows pooled from {len(parts)} datasets; "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def cmd_import_urbanvideo(args: argparse.Namespace) -> int:
    return _cmd_import(args, "UrbanVideo-Bench")


def cmd_import_vsibench(args: argparse.Namespace) -> int:
    return _cmd_import(args, "VSI-Bench")


def _print_result(result: Any) -> None:
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


def _pair(text: str, labels: set[str]) -> tuple[str, str]:
    """``A:B`` -> (A, B), both model labels of this evaluation."""
    a, sep, b = text.partition(":")
    if not sep or a not in labels or b not in labels:
        raise CliError(f"--paired {text!r}: expected A:B with two of the model labels "
                       f"({', '.join(sorted(labels))})")
    return a, b


def cmd_eval(args: argparse.Namespace) -> int:
    from embodied_r_training.evaluation.evaluate import evaluate, generation_backend
    from embodied_r_training.evaluation.report import summary_table, write_reports
    from embodied_r_training.evaluation.scoring import BASELINES, average_folds
    from embodied_r_training.rl.reference import reference_backend

    cfg = _train_config(args)
    datasets = _labelled(args.data)
    if len({label for label, _ in datasets}) != len(datasets):
        raise CliError("--data: each dataset needs its own label (LABEL=DIR)")
    models = _labelled(args.model)
    pairs = [_pair(p, {label for label, _ in models}) for p in args.paired or []]
    reference = None
    if cfg.eval.consistency and not args.no_consistency and any(
        m not in BASELINES for _, m in models
    ):
        from embodied_r_training.recipe import device_name

        reference = reference_backend(cfg, device_name(cfg.eval.device))
    results: dict[str, dict[str, Any]] = {d: {} for d, _ in datasets}
    predictions: dict[str, dict[str, Any]] = {d: {} for d, _ in datasets}
    for label, model in models:
        # one load per model for every dataset (a k-fold model differs per fold)
        shared = None
        if model not in BASELINES and not args.kfold and "{fold}" not in model:
            shared = generation_backend(model, cfg)
        try:
            for data_label, data in datasets:
                if args.kfold:
                    runs = []
                    for fold in range(args.kfold):
                        result, preds = evaluate(
                            model.format(fold=fold), data, cfg, split="test", fold=fold,
                            reference=reference, answer_mode=args.answer_mode)
                        runs.append(result)
                        predictions[data_label][f"{label}-fold{fold}"] = preds
                    results[data_label][label] = average_folds(runs)
                else:
                    name = model.format(fold=args.fold) if args.fold is not None else model
                    judge = None if model in BASELINES else reference
                    results[data_label][label], predictions[data_label][label] = evaluate(
                        name, data, cfg, split=args.split, fold=args.fold, reference=judge,
                        answer_mode=args.answer_mode, backend=shared)
        finally:
            if shared is not None:
                shared.close()
    out = Path(args.out or Path(datasets[0][1]) / "eval")
    paths = write_reports(results, out, predictions, pairs)
    if args.json:
        as_json = {d: {k: r.to_dict() for k, r in rs.items()} for d, rs in results.items()}
        print(json.dumps(next(iter(as_json.values())) if len(as_json) == 1 else as_json))
    else:
        print("\n".join(summary_table(d, rs) for d, rs in results.items()))
        print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0


def cmd_questions(args: argparse.Namespace) -> int:
    from embodied_r_training.data.odometry_questions import (
        fields_help,
        odometry_questions,
        template_rows,
        write_rows,
    )

    from embodied_r_ros.core.bags import BagReader

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
                tolerance_sec=config.perception.odom_tolerance_sec)
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
                      force=args.force)
    how = (f"LoRA adapter {done.source.path} merged into {done.source.base}"
           if done.source.kind == "lora" else f"full weights from {done.source.path}")
    print(f"exported {done.name}: {done.path} ({how}, {done.megabytes:.1f} MB)")
    lines = profile_lines(done.name, args.profile)
    if args.config_out:
        Path(args.config_out).write_text(lines)
        print(f"config written: {args.config_out}")
    print("profile lines (a --config / config_file:= file):")
    print("\n".join("  " + line for line in lines.splitlines()))
    return 0


# -- parser ----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="embodied-r-train", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)

    b = sub.add_parser("build", help="build a training set from a recorded bag and questions",
                       description="Perceive the key frames of each question's window of a "
                       "rosbag2 recording (mcap or sqlite3) and write a datasets-compatible table.")
    b.add_argument("--bag", required=True, help="rosbag2 directory, or a .mcap / .db3 file")
    b.add_argument("--questions", required=True, help="JSONL: id, question, options, answer, "
                   "category, stamp_start_ns/stamp_end_ns (or t_start/t_end)")
    b.add_argument("--image-topic", required=True, help="sensor_msgs/Image or CompressedImage")
    b.add_argument("--odom-topic", help="nav_msgs/Odometry: motions from odometry, not vision")
    b.add_argument("--camera-info-topic", help="intrinsics (default: the bag's only CameraInfo)")
    b.add_argument("--out", required=True, help="dataset directory")
    _add_pipeline_args(b, "offline")
    _add_split_args(b)
    b.set_defaults(func=cmd_build)

    q = sub.add_parser("questions", help="questions about a bag from its odometry, or a "
                       "question-file template", description="Write multiple-choice questions "
                       "whose answers follow from the recorded odometry (for build), or, with "
                       "--template, an example question file to fill in by hand.")
    q.add_argument("--bag", help="rosbag2 directory, or a .mcap / .db3 file")
    q.add_argument("--image-topic", help="the camera (questions are about its frames)")
    q.add_argument("--odom-topic", help="nav_msgs/Odometry or a PoseStamped topic")
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
    x.add_argument("run", help="a grpo/sft run directory (or a checkpoint, adapter or model dir)")
    x.add_argument("--name", required=True, help="the model's name in the cache")
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
    from embodied_r_training.data.dataset_files import BuildError
    from embodied_r_training.data.splits import SplitError
    from embodied_r_training.export import ExportError

    from embodied_r_ros.core.backends.base import BackendError
    from embodied_r_ros.core.bags import BagError
    from embodied_r_ros.core.pipeline import QueryError
    from embodied_r_ros.core.video import VideoError

    return (CliError, ConfigError, BagError, BuildError, SplitError, VideoError, QueryError,
            BackendError, ExportError)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("embodied-r-train", build_parser(), _user_errors(), argv, logging.INFO)


if __name__ == "__main__":
    sys.exit(main())

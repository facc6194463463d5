"""Built datasets from their two sources: a recorded bag with a question file, or a benchmark
download (UrbanVideo-Bench, VSI-Bench).

Each builder checks everything it can before a model loads (the question rows, the topics,
the ids and the splits), builds the perception pipeline of ``config`` without its reasoning
LM, and hands the samples to :func:`~embodied_r_training.data.build.build_dataset` with a
manifest that records how the rows were perceived. ``embodied-r-train build`` and
``import-urbanvideo`` / ``import-vsibench`` are these functions behind arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from embodied_r_ros.backends.factory import load_pipeline
from embodied_r_ros.core.config import Config
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.profiles import config_from_dict, deep_merge, load_config
from embodied_r_training.data.build import BuildReport, build_dataset, check_build
from embodied_r_training.data.dataset_files import BuildError
from embodied_r_training.data.journal import fingerprint_settings, settings_fingerprint
from embodied_r_training.data.samples import FramesFn, Sample
from embodied_r_training.data.splits import SplitOptions

log = logging.getLogger(__name__)

Benchmark = Literal["UrbanVideo-Bench", "VSI-Bench"]
BENCHMARKS: tuple[Benchmark, ...] = ("UrbanVideo-Bench", "VSI-Bench")
DEFAULT_SPLITS = SplitOptions()
#: a line for the user before the models load (a question row left out, an import's counts)
Notice = Callable[[str], None]


def perception_config(profile: str | None = None, path: str | Path | None = None, *,
                      cache_dir: str | None = None, default_profile: str = "offline") -> Config:
    """The pipeline config a build perceives with: a profile or a config file (neither:
    ``default_profile``), with ``cache_dir`` as its perception cache when given."""
    overrides = {"cache": {"dir": cache_dir}} if cache_dir else None
    chosen = profile if profile or path else default_profile
    return load_config(profile=chosen, path=path, overrides=overrides)


def perception_pipeline(config: Config) -> EmbodiedR:
    """EmbodiedR with the perception model only (building never runs the reasoning LM)."""
    vlm = None
    if config.perception.backend == "vlm":
        from embodied_r_ros.backends.factory import create_backend

        assert config.perception.vlm is not None
        vlm = create_backend(config.perception.vlm)
    return load_pipeline(config, vlm=vlm, reasoning=False)


def perception_manifest(config: Config, pipeline: EmbodiedR, kind: str, **extra: Any
                        ) -> dict[str, Any]:
    """What a dataset's manifest records of the perception its rows were written with (the
    prompt layout training and evaluation check)."""
    return {
        "kind": kind,
        "profile": config.name,
        "perception_backend": config.perception.backend,
        "perception_model": pipeline.perceiver.model_id if pipeline.perceiver else "",
        "prompt_version": pipeline.prompts.version,
        "prompts": config.prompts,
        "report_motion": config.perception.report_motion,
        "frame_layout": config.perception.frame_layout,
        "keyframes": config.keyframes.model_dump(),
        **extra,
    }


def _preflight(samples: Sequence[Sample], splits: SplitOptions) -> SplitOptions:
    """``splits`` with the folds the samples allow, checked before a model loads."""
    folds = check_build(samples, split_by=splits.by, seed=splits.seed,
                        fractions=splits.fractions, folds=splits.folds)
    return replace(splits, folds=folds)


def _build(samples: Sequence[Sample], frames_for: FramesFn, pipeline: EmbodiedR,
           config: Config, out: str | Path, manifest: dict[str, Any], splits: SplitOptions,
           progress: bool) -> BuildReport:
    keyed = (config, manifest["perception_model"], {"motion": manifest.get("motion")})
    return build_dataset(
        samples, frames_for, pipeline, out,
        fingerprint=settings_fingerprint(*keyed), split_by=splits.by, seed=splits.seed,
        fractions=splits.fractions, folds=splits.folds,
        manifest={**manifest, "fingerprint_settings": fingerprint_settings(*keyed)},
        progress=progress,
    )


def build_from_bag(
    bag: str | Path,
    questions: str | Path,
    out: str | Path,
    *,
    image_topic: str,
    config: Config,
    odom_topic: str | None = None,
    camera_info_topic: str | None = None,
    splits: SplitOptions = DEFAULT_SPLITS,
    progress: bool = True,
    notice: Notice = log.warning,
) -> BuildReport:
    """A dataset of the question file's windows of a rosbag2 recording (mcap or sqlite3).

    A bad question row is left out with one line to ``notice`` naming the row and the field;
    the rest builds (none left is a :class:`BuildError`). With ``odom_topic`` the motions come
    from odometry, else from vision. The camera intrinsics are the config's, else the
    ``camera_info_topic`` (default: the bag's only CameraInfo topic)."""
    from embodied_r_ros.recordings.bags import POSE_TYPES, BagReader
    from embodied_r_training.data.bag_source import (
        BagFrames,
        question_samples,
        read_questions,
    )
    from embodied_r_training.data.bag_source import (
        camera_info_topic as find_camera_info,
    )

    rows = read_questions(questions)
    with BagReader(bag) as reader:
        samples, rejected = question_samples(rows, Path(bag), reader.start_ns, reader.end_ns)
        if not samples:
            more = f" (and {len(rejected) - 1} more bad rows)" if len(rejected) > 1 else ""
            raise BuildError(f"{rejected[0]}{more}; no usable question rows in {questions}")
        for line in rejected:
            notice(f"skipping {line}")
        reader.require_topic(image_topic)
        if odom_topic:
            reader.require_topic(odom_topic, POSE_TYPES)
        splits = _preflight(samples, splits)
        info_topic = camera_info_topic or find_camera_info(reader)
        camera = config.perception.camera
        # intrinsics the config names are the robot's too (the nodes read no CameraInfo)
        if info_topic and camera.fx is None:
            info = reader.camera_info(info_topic)
            if info is not None:
                camera = info.to_config(camera)
        pipeline = perception_pipeline(config)
        frames_for = BagFrames(reader, pipeline, image_topic, odom_topic, camera)
        manifest = perception_manifest(
            config, pipeline, "bag", bag=str(Path(bag).resolve()), image_topic=image_topic,
            odom_topic=odom_topic, motion="odometry" if odom_topic else "visual",
            rejected_rows=rejected,
        )
        return _build(samples, frames_for, pipeline, config, out, manifest, splits, progress)


def benchmark_config(config: Config, *, robust: bool = False,
                     report_motion: bool = False) -> Config:
    """``config`` as a benchmark import perceives with it.

    Benchmark videos have no odometry and no robot: the LM reads the VLM's own actions, as in
    the paper, unless ``report_motion`` adds the measured visual motion beside them. The
    official route (not ``robust``) also reads the VLM's replies as the official code does and
    finds key frames at the videos' full resolution; the robust route keeps the profile's
    lenient reading and resolution, as a robot does."""
    sections: dict[str, Any] = {"perception": {"report_motion": report_motion}}
    if not robust:
        sections["perception"]["reply_reading"] = "official"
        sections["keyframes"] = {"max_side": 0}
    # only what was set: a default stays a default (a model's generation settings read from
    # its checkpoint yield to explicit values only)
    ours = config.model_dump(mode="json", exclude_unset=True)
    return config_from_dict(deep_merge(ours, sections))


def import_benchmark(
    benchmark: Benchmark,
    root: str | Path,
    out: str | Path,
    *,
    config: Config,
    robust: bool = False,
    report_motion: bool = False,
    all_categories: bool = False,
    splits: SplitOptions = DEFAULT_SPLITS,
    progress: bool = True,
    notice: Notice = log.info,
) -> BuildReport:
    """A dataset of a benchmark folder: the paper's task categories (``all_categories``: every
    multiple-choice one), key frames and perception of each question's video, perceived with
    :func:`benchmark_config`. The import's counts go to ``notice`` before any model loads."""
    from embodied_r_training.data.importers import (
        ImportReport,
        VideoFrames,
        urbanvideo_samples,
        vsibench_samples,
    )

    if benchmark not in BENCHMARKS:
        raise BuildError(f"unknown benchmark {benchmark!r} ({', '.join(BENCHMARKS)})")
    reader = urbanvideo_samples if benchmark == "UrbanVideo-Bench" else vsibench_samples
    report = ImportReport()
    samples = reader(root, all_categories=all_categories, report=report,
                     raw_question=not robust)
    notice(f"{benchmark}: {report.summary()}")
    if not samples:
        raise BuildError(f"{benchmark}: no rows left to import ({report.summary()})")
    splits = _preflight(samples, splits)
    routed = benchmark_config(config, robust=robust, report_motion=report_motion)
    pipeline = perception_pipeline(routed)
    manifest = perception_manifest(routed, pipeline, benchmark, root=str(Path(root).resolve()),
                         motion="visual", import_report=report.to_dict(),
                         reply_reading=routed.perception.reply_reading,
                         question_text="formatted" if robust else "benchmark")
    return _build(samples, VideoFrames(pipeline), pipeline, routed, out, manifest, splits,
                  progress)

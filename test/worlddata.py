"""Rows of a small rendered world, built into a dataset by the real ``build`` command."""

from __future__ import annotations

import json
from pathlib import Path


def built_world_rows(out: Path, seed: int, questions: int | str) -> tuple[dict, ...]:
    """A 22 s, 320x240 world of ``seed`` with ``questions`` (a count or "cat=N,..."), perceived
    by the ``offline`` profile with odometry, as the synthetic training data is."""
    from embodied_r_ros.reading.text_decides import TextDecides
    from embodied_r_ros.sim.generate import generate_world
    from embodied_r_ros.sim.world import WorldSpec
    from embodied_r_training.cli import main

    paths = generate_world(WorldSpec(seed=seed, frames=220, width=320, height=240), out / "w",
                           questions, video=False, decides=TextDecides)
    assert main(["build", "--bag", str(paths.bag), "--questions", str(paths.questions),
                 "--image-topic", "/camera/image_raw", "--odom-topic", "/odom", "--profile",
                 "offline", "--out", str(out / "d"), "--split-by", "question", "--folds", "0",
                 "--no-progress"]) == 0
    return tuple(json.loads(line) for line in (out / "d" / "data.jsonl").open())

"""The README's and the docs' command recipes run as written, on a synthetic world and the tiny
models, so a recipe that breaks fails the suite (the "own-robot" recipe runs in
``test_own_robot.py``, where its export is asked over ROS)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_recipes import recipes, run

#: recipes run by another test module, which asserts more about their result
RUN_ELSEWHERE = {"own-robot": Path(__file__).with_name("test_own_robot.py")}
RUN_HERE = {"ask-video", "robot"}


def test_every_marked_recipe_is_run() -> None:
    assert set(recipes()) == RUN_HERE | set(RUN_ELSEWHERE)
    for name, module in RUN_ELSEWHERE.items():
        assert f'recipes()["{name}"]' in module.read_text(), module.name


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short synthetic world (bag, video, questions), made by the command the README names."""
    out = tmp_path_factory.mktemp("world") / "world"
    subprocess.run([str(Path(sys.executable).with_name("embodied-r")), "world", "--seed", "11",
                    "--frames", "60", "--resolution", "320x240", "--questions", "2", "--out",
                    str(out)], check=True, capture_output=True)
    return out


def test_ask_about_a_video(world: Path, tmp_path: Path, tiny_models_dir: Path) -> None:
    output = run(recipes()["ask-video"], {"VIDEO": str(world / "video.mp4"), "PROFILE": "tiny"},
                 tmp_path, timeout=120)
    # every stage ran and printed its part
    for part in ("--- thinking ---", "--- answer ---", "keyframes_sec=", "reasoning_sec="):
        assert part in output, output


def test_run_on_a_robot_and_ask_over_the_service(world: Path, tmp_path: Path,
                                                 tiny_models_dir: Path) -> None:
    from ros_helpers import LOCALHOST_ENV, domain_id, require_ros

    require_ros()
    env = {**LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__))}
    output = run(recipes()["robot"], {
        "PROFILE": "tiny", "CAMERA_TOPIC": "/camera/image_raw", "ODOM_TOPIC": "/odom",
        "BAG": str(world / "bag")}, tmp_path, timeout=240, env=env)
    # the client's line: success and an empty error code (the tiny model's answer is noise)
    assert re.search(r"^True  ", output, re.M), output

"""Installed, not only cloned: a non-editable pip install and a colcon install each run from
another directory and find their profiles, prompts and the Fast DDS profile."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from media import pan_frames, write_video
from ros_helpers import LOCALHOST_ENV, Spinner, call, domain_id, image_msg, ros_context, wait_until

pytestmark = pytest.mark.costly(140)  # seconds of one worker: started early

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


def _required(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        why = f"{tool} is not installed (make setup installs it with apt-get)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this test: {why}", pytrace=False)
        pytest.skip(why)
    return found


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install --no-deps --target DIR .``: a regular (non-editable) install."""
    out = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-compile", "--target", str(out), str(REPO)],
        check=True, capture_output=True, text=True, timeout=600,
    )
    return out


@pytest.fixture(scope="module")
def colcon_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``colcon build`` of both packages with the pip-installed ROS 2 as the underlay."""
    colcon = _required("colcon")
    ws = tmp_path_factory.mktemp("ws")
    (ws / "src").mkdir()
    os.symlink(REPO, ws / "src" / "embodied_r_ros")
    os.symlink(REPO / "embodied_r_interfaces", ws / "src" / "embodied_r_interfaces")
    env = {**os.environ, "AMENT_PREFIX_PATH": str(VENV), "CMAKE_PREFIX_PATH": str(VENV)}
    proc = subprocess.run(
        [colcon, "build", "--event-handlers", "console_direct-", "--cmake-args",
         f"-DPython3_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF"],
        cwd=ws, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return ws / "install"


def test_colcon_builds_both_packages_and_installs_the_share_files(colcon_install: Path) -> None:
    share = colcon_install / "embodied_r_ros" / "share" / "embodied_r_ros"
    for name in ("package.xml", "launch/embodied_r.launch.py", "config/ros_params.yaml",
                 "config/prompts.yaml", "config/profiles/offline.yaml"):
        assert (share / name).is_file(), name
    assert (colcon_install / "embodied_r_ros" / "lib" / "embodied_r_ros" / "embodied_r").is_file()
    index = colcon_install / "embodied_r_interfaces" / "share" / "ament_index"
    assert (index / "resource_index" / "packages" / "embodied_r_interfaces").is_file()


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    with ros_context(__name__) as context:
        yield context


def test_the_colcon_installed_executable_answers_a_query(
    colcon_install: Path, ctx: Any, tiny_models_dir: Path, tmp_path: Path
) -> None:
    """``ros2 run embodied_r_ros embodied_r`` as colcon installed it (run with the venv's
    Python: the script's ``#!/usr/bin/python3`` has no ROS here, the venv is the underlay)."""
    import rclpy
    from sensor_msgs.msg import Image

    from embodied_r_interfaces.srv import SpatialQuery

    site = f"lib/python3.{sys.version_info.minor}/site-packages"
    paths = [str(colcon_install / pkg / site) for pkg in ("embodied_r_ros",
                                                           "embodied_r_interfaces")]
    env = {**os.environ, **LOCALHOST_ENV, "ROS_DOMAIN_ID": str(domain_id(__name__)),
           "PYTHONPATH": os.pathsep.join(paths),
           "AMENT_PREFIX_PATH": os.pathsep.join([str(colcon_install / "embodied_r_ros"),
                                                 str(colcon_install / "embodied_r_interfaces"),
                                                 str(VENV)])}
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("base: tiny\ncache: {enabled: false}\n")
    exe = colcon_install / "embodied_r_ros" / "lib" / "embodied_r_ros" / "embodied_r"
    proc = subprocess.Popen(
        [sys.executable, str(exe), "--ros-args", "-p", "profile:=tiny",
         "-p", f"config_file:={cfg}", "-r", "__ns:=/installed"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    tester = rclpy.create_node("installed_tester", context=ctx)
    pub = tester.create_publisher(Image, "/installed/image", 10)
    client = tester.create_client(SpatialQuery, "/installed/query")
    spinner = Spinner(ctx, [tester])
    try:
        assert client.wait_for_service(timeout_sec=120), "the installed process never came up"
        wait_until(lambda: pub.get_subscription_count() > 0, 30, "its camera subscription")
        for i, frame in enumerate(pan_frames(6, 40)):
            pub.publish(image_msg(frame, 20.0 + i))
            time.sleep(0.1)  # best effort: give each frame its time
        deadline = time.monotonic() + 30
        while True:  # until the frames are in (NO_FRAMES before), then a real answer
            r = call(client, SpatialQuery.Request(question="What is ahead?"))
            if r.success or r.error_code != "NO_FRAMES" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.success, r.error
        assert len(r.key_frame_stamps) >= 1
        assert re.search(r"^Frame 0 \(\d+ s before the last key frame\): Observe:", r.perception,
                         re.M), r.perception
    finally:
        spinner.stop()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-2000:]
    assert str(colcon_install) in subprocess.run(
        [sys.executable, "-c", "import embodied_r_ros; print(embodied_r_ros.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True).stdout


# after the colcon build: the offline profile's model, converted by another worker meanwhile
def test_a_pip_install_answers_from_another_directory(target: Path, tmp_path: Path) -> None:
    video = write_video(tmp_path / "pan.mp4", pan_frames(24, 8), fps=8.0)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1"}
    where = subprocess.run(
        [sys.executable, "-c", "import embodied_r_ros.core.config as c; print(c.CONFIG_DIR)"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(target) and not Path(where).is_symlink()
    assert (Path(where) / "profiles" / "offline.yaml").is_file()
    proc = subprocess.run(
        [str(target / "bin" / "embodied-r"), "ask", str(video), "-q", "Which way did I move?",
         "-o", "A. left", "-o", "B. right", "--profile", "offline", "--json"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"profile": "offline"' in proc.stdout and "Frame 0 (" in proc.stdout  # timed lines
    profiles = subprocess.run(
        [str(target / "bin" / "embodied-r"), "ask", str(video), "-q", "x?", "-p", "nope"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )
    assert profiles.returncode == 2
    assert "known: jetson, offline, paper, server, tiny, workstation" in profiles.stderr

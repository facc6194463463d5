"""tools/setup_ros.py (path rewriting, idempotence) and the built interface package's fields."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from ros_helpers import require_ros

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("setup_ros", REPO / "tools" / "setup_ros.py")
assert spec and spec.loader
setup_ros = importlib.util.module_from_spec(spec)
sys.modules["setup_ros"] = setup_ros
spec.loader.exec_module(setup_ros)

PATHS = setup_ros.PythonPaths(
    include="/venv/py/include/python3.12",
    purelib="/venv/lib/python3.12/site-packages",
    numpy_include="/venv/lib/python3.12/site-packages/numpy/_core/include",
)


@pytest.mark.parametrize("tag", ["cp310-cp310", "cp311-cp311", "cp312-cp312", "cp313-cp313"])
def test_rewrites_any_baked_manylinux_prefix(tag: str) -> None:
    ver = "3." + tag[3:5]
    baked = (
        f'INTERFACE_INCLUDE_DIRECTORIES "/opt/python/{tag}/include/python{ver};'
        f'/opt/python/{tag}/lib/python{ver}/site-packages/numpy/_core/include"\n'
        f'set(_dir "/opt/python/{tag}/lib/python{ver}/site-packages/rclpy")\n'
    )
    out = setup_ros.rewrite_text(baked, PATHS)
    assert "/opt/python" not in out
    assert f'"{PATHS.include};{PATHS.numpy_include}"' in out
    assert f'"{PATHS.purelib}/rclpy"' in out


def test_rewrite_is_idempotent_and_touches_only_baked_files(tmp_path: Path) -> None:
    share = tmp_path / "share"
    (share / "std_msgs" / "cmake").mkdir(parents=True)
    baked = share / "std_msgs" / "cmake" / "export.cmake"
    baked.write_text('set(X "/opt/python/cp311-cp311/include/python3.11")\n')
    clean = share / "std_msgs" / "cmake" / "clean.cmake"
    clean.write_text("set(Y 1)\n")
    assert setup_ros.rewrite_cmake_exports(tmp_path, PATHS) == [baked]
    assert baked.read_text() == f'set(X "{PATHS.include}")\n'
    assert clean.read_text() == "set(Y 1)\n"
    assert setup_ros.rewrite_cmake_exports(tmp_path, PATHS) == []


def test_stamp_tracks_the_interface_sources(tmp_path: Path) -> None:
    (tmp_path / "share" / setup_ros.PACKAGE).mkdir(parents=True)
    assert not setup_ros.is_built(tmp_path)
    (tmp_path / "share" / setup_ros.PACKAGE / setup_ros.STAMP_NAME).write_text("stale\n")
    assert not setup_ros.is_built(tmp_path)
    (tmp_path / "share" / setup_ros.PACKAGE / setup_ros.STAMP_NAME).write_text(
        setup_ros.source_hash() + "\n"
    )
    assert setup_ros.is_built(tmp_path)


def test_the_vendored_tf2_msgs_is_built_only_where_none_exists(tmp_path: Path) -> None:
    pkg = setup_ros.TF2_MSGS
    assert pkg.vendored and (pkg.source / "COLCON_IGNORE").is_file()  # never a colcon overlay
    # an environment that imports a tf2_msgs it did not get from here keeps its own: one on
    # the path ahead of this environment's (a ROS install's)
    ros = tmp_path / "ros"
    (ros / "tf2_msgs").mkdir(parents=True)
    (ros / "tf2_msgs" / "__init__.py").write_text("")
    sys.path.insert(0, str(ros))
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] == "tf2_msgs"}
    try:
        importlib.invalidate_caches()
        assert setup_ros.provided_elsewhere(tmp_path, pkg)
    finally:
        sys.path.remove(str(ros))
        sys.modules.update(saved)
        importlib.invalidate_caches()
    assert not setup_ros.provided_elsewhere(tmp_path, setup_ros.INTERFACES)
    # one built here is ours: rebuilt when its sources change
    stamp = tmp_path / "share" / pkg.name / setup_ros.STAMP_NAME
    stamp.parent.mkdir(parents=True)
    stamp.write_text("stale\n")
    assert not setup_ros.provided_elsewhere(tmp_path, pkg)
    assert not setup_ros.is_built(tmp_path, pkg)
    stamp.write_text(setup_ros.source_hash(pkg.source) + "\n")
    assert setup_ros.is_built(tmp_path, pkg) and not setup_ros.is_built(tmp_path)


def test_missing_generators_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(setup_ros.SetupError, match="requirements-ros.txt"):
        setup_ros.build_interfaces(tmp_path, jobs=1)


def test_second_run_is_a_no_op() -> None:
    require_ros()
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "setup_ros.py")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "setup_ros.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "rewrote baked Python paths in 0 cmake file(s)" in proc.stderr
    assert "is up to date" in proc.stderr


def test_interface_fields_match_the_contract() -> None:
    require_ros()
    from builtin_interfaces.msg import Time

    from embodied_r_interfaces.action import SpatialQuery as QueryAction
    from embodied_r_interfaces.srv import SpatialQuery

    goal_fields = {"question": "string", "options": "sequence<string>",
                   "window_sec": "float", "camera": "string", "scope": "string"}
    result_fields = {
        "success": "boolean", "error_code": "string", "error": "string", "answer": "string",
        "answer_text": "string", "reasoning": "string", "perception": "string",
        "key_frame_stamps": "sequence<builtin_interfaces/Time>", "perception_sec": "float",
        "reasoning_sec": "float", "total_sec": "float",
        "memory_frames": "sequence<embodied_r_interfaces/MemoryFrame>",
    }
    assert SpatialQuery.Request.get_fields_and_field_types() == goal_fields
    assert SpatialQuery.Response.get_fields_and_field_types() == result_fields
    assert QueryAction.Goal.get_fields_and_field_types() == goal_fields
    assert QueryAction.Result.get_fields_and_field_types() == result_fields
    from tf2_msgs.msg import TFMessage

    assert TFMessage.get_fields_and_field_types() == {
        "transforms": "sequence<geometry_msgs/TransformStamped>"}
    assert QueryAction.Feedback.get_fields_and_field_types() == {
        "stage": "string", "frames_done": "uint32", "frames_total": "uint32",
        "partial_text": "string",
    }
    resp = SpatialQuery.Response(key_frame_stamps=[Time(sec=1, nanosec=5)])
    assert resp.key_frame_stamps[0].nanosec == 5


def test_package_manifest_is_valid() -> None:
    catkin_pkg = pytest.importorskip("catkin_pkg.package")
    pkg = catkin_pkg.parse_package(str(REPO / "embodied_r_interfaces" / "package.xml"))
    pkg.validate()
    assert pkg.name == "embodied_r_interfaces"
    assert any(g.name == "rosidl_interface_packages" for g in pkg.member_of_groups)
    srvs = sorted(p.name for p in (REPO / "embodied_r_interfaces").rglob("*.*")
                  if p.suffix in (".srv", ".action", ".msg"))
    cmake = (REPO / "embodied_r_interfaces" / "CMakeLists.txt").read_text()
    assert all(name in cmake for name in srvs), "every interface file must be generated"

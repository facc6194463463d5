"""``/embodied_r/memory/locate`` over DDS: the memory's writer serves where it placed the objects
some words name, each with its position and approach pose in the odometry frame; nothing
placed by that name is a success with no objects, a bad time phrase an error code and one
line, and the service keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from placed_memory import NEW_CHAIR, NOW, OLD_CHAIR, T0, write_memory
from ros_helpers import Spinner, call, require_ros, ros_context, stamp

require_ros()

import rclpy  # noqa: E402

from embodied_r_interfaces.srv import MemoryLocate  # noqa: E402
from embodied_r_ros.core.poses import Pose  # noqa: E402
from embodied_r_ros.core.profiles import load_config  # noqa: E402
from embodied_r_ros.memory import SqliteMemoryStore  # noqa: E402
from embodied_r_ros.memory.locate import Located, approach_pose  # noqa: E402
from embodied_r_ros.memory.service import MemoryWriter  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402
from embodied_r_ros.nodes.memory_services import MemoryServices, placed_object_msg  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_memory(tmp_path_factory.mktemp("locate") / "memory.sqlite3")


class Served(NamedTuple):
    """Clients of the locate service of a node that writes the memory, and of one whose
    process keeps none."""

    locate: Any
    off: Any


@pytest.fixture(scope="module")
def served(db: Path) -> Iterator[Served]:
    config = load_config("offline", overrides={"memory": {"enabled": True, "path": str(db),
                                                          "embedder": "off"}})
    with ros_context(__name__) as ctx:
        node = rclpy.create_node("memory_host", namespace="/embodied_r", context=ctx)
        services = MemoryServices(node, MemoryWriter(config), "")
        other = rclpy.create_node("memory_off", namespace="/off", context=ctx)
        MemoryServices(other, None, "memory.enabled is false")
        clients = Served(node.create_client(MemoryLocate, "/embodied_r/memory/locate"),
                         node.create_client(MemoryLocate, "/off/memory/locate"))
        spinner = Spinner(ctx, [node, other])
        try:
            yield clients
        finally:
            spinner.stop()
            services.close()


@pytest.fixture(scope="module")
def locate(served: Served) -> Any:
    return served.locate


def ask(client: Any, **fields: Any) -> Any:
    return call(client, MemoryLocate.Request(**fields))


def test_found_objects_carry_their_place_and_an_approach_pose(locate: Any, db: Path) -> None:
    response = ask(locate, object="the chair", max_results=5)
    assert response.success, response.error
    assert [(o.robot, o.id) for o in response.objects] == [("robot", NEW_CHAIR.id),
                                                          ("robot", OLD_CHAIR.id)]
    old = response.objects[1]
    assert old.label == "office chair"
    with SqliteMemoryStore(db) as store:  # the votes as the store keeps them
        stored = {p.id: p.votes for p in store.placements(["robot"])}
    assert [(v.label, v.count) for v in old.votes] == list(stored[OLD_CHAIR.id])
    assert old.position.header.frame_id == old.approach.header.frame_id == "odom"
    assert (old.position.point.x, old.position.point.y) == (6.0, -2.0)
    assert stamp_to_sec(old.first_stamp) == T0 and stamp_to_sec(old.last_stamp) == T0 + 20.0
    assert (old.triangulated, old.uncertainty_m, old.sightings) == (True, 0.3, 6)
    approach = old.approach.pose
    q = approach.orientation
    facing = Pose.from_quaternion((0.0, 0.0, 0.0), (q.x, q.y, q.z, q.w))
    assert (approach.position.x, approach.position.y) == OLD_CHAIR.seen_from
    assert facing.yaw_deg == pytest.approx(-45.0)
    # a time keeps the chair seen then; stamps likewise
    then = ask(locate, object="chair", time_phrase="about 10 minutes ago")
    assert then.success and [o.id for o in then.objects] == [OLD_CHAIR.id]
    late = ask(locate, object="chair", start_stamp=stamp(NOW - 60.0))
    assert late.success and [o.id for o in late.objects] == [NEW_CHAIR.id]
    fleet = ask(locate, object="chair", fleet=True, max_results=1)
    assert fleet.success and [(o.robot, o.id) for o in fleet.objects] == [("robot-b", 1)]


def test_a_placed_object_message_carries_the_label_votes() -> None:
    msg = placed_object_msg(Located(OLD_CHAIR, approach_pose(OLD_CHAIR)), "odom")
    assert [(v.label, v.count) for v in msg.votes] == [("office chair", 5), ("sofa", 1)]
    assert msg.position.header.stamp == msg.last_stamp and msg.colour == ""


def test_nothing_placed_by_that_name_is_a_success_with_no_objects(locate: Any) -> None:
    response = ask(locate, object="bicycle")
    assert (response.success, response.error_code, list(response.objects)) == (True, "", [])


def test_a_bad_time_phrase_is_an_error_and_the_service_serves_on(locate: Any) -> None:
    bad = ask(locate, object="chair", time_phrase="5 blorps ago")
    assert (bad.success, bad.error_code, list(bad.objects)) == (False, "BAD_TIME_PHRASE", [])
    assert "5 blorps ago" in bad.error and "\n" not in bad.error
    worse = ask(locate, object="chair", time_phrase="at the start", start_stamp=stamp(T0))
    assert (worse.success, worse.error_code) == (False, "BAD_REQUEST")
    assert ask(locate, object="sofa").success


def test_a_process_that_keeps_no_memory_says_so(served: Served) -> None:
    response = ask(served.off, object="chair")
    assert (response.success, response.error_code) == (False, "MEMORY_UNAVAILABLE")
    assert "memory.enabled" in response.error

"""Watching the robot think, with real clients: a long world's bag plays into ``python -m
embodied_r_ros`` (streaming perception by a scripted VLM that grounds objects, the memory on,
the viewer on); over DDS the boxes, the placed objects and the path arrive, and a question over
the service brings a trace with the response's answer and key frames; a plain WebSocket client
of Foxglove's protocol receives the same content and asks over ``/embodied_r/query``. With the
viewer off, the process never imports the SDK. One process serves the whole module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from http_helpers import free_port
from ros_helpers import (
    LOCALHOST_ENV,
    AllInOneProcess,
    BagRobot,
    call,
    domain_id,
    require_ros,
    ros_context,
    wait_until,
)

require_ros()

from nav_msgs.msg import Path as PathMsg  # noqa: E402
from scripted_robot import CONFIG, TOPICS  # noqa: E402
from sensor_msgs.msg import CompressedImage  # noqa: E402
from visualization_msgs.msg import ImageMarker, MarkerArray  # noqa: E402

from embodied_r_interfaces.msg import QueryTrace  # noqa: E402
from embodied_r_interfaces.srv import SpatialQuery  # noqa: E402
from embodied_r_ros.memory import SqliteMemoryStore  # noqa: E402
from embodied_r_ros.nodes.conversions import stamp_to_sec  # noqa: E402
from embodied_r_ros.nodes.viewer_topics import LATCHED  # noqa: E402
from embodied_r_ros.serving import serve  # noqa: E402
from embodied_r_ros.viewer.content import placed_objects  # noqa: E402
from lab.foxglove_client import FoxgloveClient  # noqa: E402
from lab.scripted_replies import ScriptSettings  # noqa: E402
from lab.scripted_vlm import ScriptedVLM  # noqa: E402

VIEWER = "viewer: {{enabled: true, port: {port}}}\n"
PLAY_SEC = 40.0
NS = "/embodied_r"
BOXES, OBJECTS = f"{NS}/perception/boxes/front", f"{NS}/memory/objects"
PATH, KEY_FRAMES = f"{NS}/frame_buffer/path", f"{NS}/frame_buffer/key_frames"
TRACE, ANSWER_FRAMES = f"{NS}/query/trace", f"{NS}/query/key_frames"
QUESTION = {"question": "Which way did I turn?", "options": ["A. left", "B. right"]}


@dataclass
class Watched:
    """What one robot run showed its watchers."""

    tester: BagRobot
    process: AllInOneProcess
    client: FoxgloveClient
    memory: Path
    got: dict[str, list[Any]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, tiny_models_dir: Path,
            scripted_world: Path) -> Iterator[Watched]:
    root = tmp_path_factory.mktemp("viewer")
    vlm = ScriptedVLM.for_world(scripted_world, ScriptSettings(box_noise=0.05), cache=None)
    port = free_port()
    with serve(vlm) as server, ros_context(__name__) as ctx:
        config = root / "viewer.yaml"
        config.write_text(CONFIG.format(url=server.url, path=root / "memory.sqlite3",
                                        extra=VIEWER.format(port=port)))
        tester = BagRobot(ctx, scripted_world / "bag", TOPICS, rate=6.0)
        got: dict[str, list[Any]] = {t: [] for t in (BOXES, OBJECTS, PATH, TRACE,
                                                    ANSWER_FRAMES)}
        for topic, kind, qos in ((BOXES, ImageMarker, 50), (OBJECTS, MarkerArray, LATCHED),
                                 (PATH, PathMsg, 50), (TRACE, QueryTrace, LATCHED),
                                 (ANSWER_FRAMES, CompressedImage, 50)):
            tester.node.create_subscription(kind, topic, got[topic].append, qos)
        process = AllInOneProcess(config, __name__, profile="tiny")
        client = None
        try:
            assert tester.query.wait_for_service(timeout_sec=180), process.stop()[-3000:]
            try:
                client = FoxgloveClient(f"ws://127.0.0.1:{port}")
            except OSError as exc:
                raise AssertionError(
                    f"{exc}; the process said: {process.stop()[-3000:]}") from None
            client.subscribe([KEY_FRAMES, BOXES, OBJECTS, PATH, TRACE])
            tester.play_into(process, PLAY_SEC)
            yield Watched(tester, process, client, root / "memory.sqlite3", got)
        finally:
            if client is not None:
                client.close()
            out = process.stop()
            tester.stop()
        assert process.proc.returncode == 0, out[-3000:]


def test_markers_path_and_boxes_arrive_over_dds(watched: Watched) -> None:
    got, keys = watched.got, watched.tester.keys
    wait_until(lambda: got[BOXES] and got[OBJECTS] and got[PATH], 30, "viewer topics")
    boxes = got[BOXES]
    assert {stamp_to_sec(m.header.stamp) for m in boxes} <= set(keys), "boxes off key frames"
    assert all(m.type == ImageMarker.LINE_LIST and len(m.points) % 8 == 0 and m.points
               for m in boxes)
    stored: list[str] = []

    def shown_as_stored() -> bool:
        """The last markers name what the memory holds now, read aside (key frames described
        late, on a slow machine, may still change it after the bag has played)."""
        with SqliteMemoryStore(watched.memory) as store:
            stored[:] = sorted(o.text for o in placed_objects(store.placements(["robot"])))
        shown = sorted(m.text for m in got[OBJECTS][-1].markers
                       if m.type == m.TEXT_VIEW_FACING)
        return bool(stored) and shown == stored

    wait_until(shown_as_stored, 30, "the markers to name the memory's placed objects", 0.25)
    markers = got[OBJECTS][-1].markers
    assert markers[0].action == markers[0].DELETEALL
    spheres = [m for m in markers if m.type == m.SPHERE]
    discs = [m for m in markers if m.type == m.CYLINDER]
    assert len(spheres) == len(discs) == len(stored)
    path = got[PATH][-1]
    stamps = [stamp_to_sec(p.header.stamp) for p in path.poses]
    assert len(stamps) >= len(keys) and stamps == sorted(stamps)


def test_a_trace_follows_each_answer(watched: Watched) -> None:
    got = watched.got
    r = call(watched.tester.query, SpatialQuery.Request(**QUESTION), timeout=120)
    assert r.success, f"{r.error_code}: {r.error}"
    wait_until(lambda: got[TRACE] and got[TRACE][-1].question == QUESTION["question"], 30,
               "trace")
    trace = got[TRACE][-1]
    assert (trace.answer, trace.answer_text, trace.thinking) == (r.answer, r.answer_text,
                                                                 r.reasoning)
    assert trace.key_frame_stamps == r.key_frame_stamps and r.key_frame_stamps
    assert trace.perception == r.perception and list(trace.options) == QUESTION["options"]
    assert list(trace.stage_names) == ["perception", "reasoning", "total"]
    want = [stamp_to_sec(s) for s in r.key_frame_stamps]
    wait_until(lambda: len(got[ANSWER_FRAMES]) >= len(want), 30, "the answer's key frames")
    assert [stamp_to_sec(m.header.stamp) for m in got[ANSWER_FRAMES][-len(want):]] == want


def test_a_foxglove_client_watches_and_asks(watched: Watched) -> None:
    client = watched.client
    client.wait(lambda: all(client.messages[t] for t in (KEY_FRAMES, BOXES, OBJECTS, PATH)),
                30, "key frames, boxes, objects and path")
    frame = client.messages[KEY_FRAMES][-1]
    assert frame["format"] == "jpeg" and frame["data"]
    assert client.messages[PATH][-1]["poses"]
    assert client.messages[BOXES][-1]["points"]
    client.wait(lambda: any(m["entities"] for m in client.messages[OBJECTS]), 30, "objects")
    entity = next(m for m in client.messages[OBJECTS] if m["entities"])["entities"][0]
    assert entity["spheres"] and entity["cylinders"] and entity["texts"][0]["text"]

    ok, answer = client.call("/embodied_r/query", json.dumps(QUESTION).encode())
    assert ok and answer["success"], answer
    client.wait(lambda: any(t["key_frame_stamps"] == answer["key_frame_stamps"]
                            for t in client.messages[TRACE]), 30, "the call's trace")
    ok, why = client.call("/embodied_r/query", b'{"question": 7}')
    assert not ok and "question" in why, why
    ok, refused = client.call("/embodied_r/query", json.dumps({"question": ""}).encode())
    assert ok and not refused["success"] and refused["error_code"] == "EMPTY_QUESTION"
    ok, again = client.call("/embodied_r/query", json.dumps(QUESTION).encode())
    assert ok and again["success"], again
    assert watched.process.proc.poll() is None


def test_viewer_off_never_imports_the_sdk(tmp_path: Path, tiny_models_dir: Path) -> None:
    config = tmp_path / "off.yaml"
    config.write_text("base: tiny\ncache: {enabled: false}\n")
    script = textwrap.dedent(f"""
        import sys, rclpy
        from rclpy.context import Context
        from rclpy.parameter import Parameter
        from embodied_r_ros.nodes.allinone import build_nodes
        ctx = Context()
        rclpy.init(context=ctx, domain_id={domain_id(__name__)})
        nodes = build_nodes(ctx, "/viewer_off", [Parameter("profile", value="tiny"),
                            Parameter("config_file", value={str(config)!r})])
        print("SDK", sorted(m for m in sys.modules if m.split(".")[0] == "foxglove"))
        for node in nodes:
            getattr(node, "close", lambda: None)()
            node.destroy_node()
        rclpy.shutdown(context=ctx)
    """)
    env = {**os.environ, **LOCALHOST_ENV, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SDK []" in out.stdout, out.stdout

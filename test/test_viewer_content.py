"""The viewer's content, built once for ROS and Foxglove, and its server's safe defaults:
what a call to ``/embodied_r/query`` may hold, the path's bound, an object's text, a trace of
an answer; another host warns, a taken port is one error line and no server."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from embodied_r_ros.agent.frame_store import Window
from embodied_r_ros.core.config import ViewerConfig
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.query_result import QueryResult
from embodied_r_ros.viewer.content import (
    BadCall,
    PathTrack,
    PlacedObject,
    ViewerFeed,
    query_trace,
    request_fields,
)


@pytest.mark.parametrize(("payload", "named"), [
    (b"{not json", "not JSON"), (b"[1, 2]", "JSON object"), (b'{"options": []}', "'question'"),
    (b'{"question": "q", "colour": "red"}', "colour"), (b'{"question": 3}', "'question'"),
    (b'{"question": "q", "options": [1]}', "'options'"),
    (b'{"question": "q", "window_sec": true}', "'window_sec'"),
])
def test_a_malformed_call_names_what_was_wrong(payload: bytes, named: str) -> None:
    with pytest.raises(BadCall, match=named):
        request_fields(payload)


def test_a_call_carries_spatial_query_fields() -> None:
    fields = request_fields(json.dumps({"question": "q", "options": ["A. x"], "window_sec": 5,
                                        "camera": "front", "scope": "memory"}).encode())
    assert fields["window_sec"] == 5 and fields["options"] == ["A. x"]


def test_the_path_keeps_the_newest_poses_in_order() -> None:
    track = PathTrack(size=3)
    for t in range(5):
        assert track.add(float(t), Pose(x=float(t)))
    assert not track.add(4.0, Pose())  # not newer: not kept
    assert [p.stamp for p in track.poses()] == [2.0, 3.0, 4.0]
    assert track.add(0.5, Pose())  # far back: a new timeline
    assert [p.stamp for p in track.poses()] == [0.5]


def test_an_object_shows_its_label_and_votes() -> None:
    mug = PlacedObject("robot/1", "mug", 1.0, 2.0, 0.3, (("mug", 3), ("cup", 1)))
    assert mug.text == "mug (mug 3, cup 1)"
    assert PlacedObject("robot/2", "box", 0.0, 0.0, 0.1, ()).text == "box"


def test_a_trace_carries_the_window_of_an_answer() -> None:
    window = Window(stamps=[1.0, 2.0], jpegs=[b"a", b"b"], motions=[None], n_sampled=2)
    ok = QueryResult(success=True, answer="A", answer_text="A. left", reasoning="why",
                     perception="seen", key_frame_stamps=[1.0, 2.0], perception_sec=0.5,
                     reasoning_sec=0.25, total_sec=1.0)
    trace = query_trace(9.0, "q", ["A. left"], "", "front", ok, window)
    assert trace.scope == "window" and trace.camera == "front"
    assert [k.stamp for k in trace.key_frames] == [1.0, 2.0]
    assert dict(trace.stages) == {"perception": 0.5, "reasoning": 0.25, "total": 1.0}
    failed = query_trace(9.0, "q", [], "memory", "front",
                         QueryResult.failure("BUSY", "busy"), None)
    assert failed.camera == "" and not failed.key_frames and failed.error_code == "BUSY"


def test_another_host_warns_and_a_taken_port_is_one_error_line(
        caplog: pytest.LogCaptureFixture) -> None:
    from embodied_r_ros.viewer.server import start_viewer

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.INFO, logger="embodied_r_ros.viewer.server"):
            server = start_viewer(ViewerConfig(enabled=True, host="0.0.0.0", port=port), {},
                                  ViewerFeed(), runner=None)  # type: ignore[arg-type]
    assert server is None
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in records] == [logging.WARNING, logging.ERROR], records
    assert "not loopback" in records[0][1] and "authenticate" in records[0][1]
    assert f":{port}" in records[1][1] and "\n" not in records[1][1]


def test_the_shipped_layout_is_the_one_the_export_writes() -> None:
    from embodied_r_ros.memory.export import foxglove_layout

    shipped = Path(__file__).resolve().parents[1] / "config" / "foxglove-layout.json"
    assert json.loads(shipped.read_text()) == foxglove_layout(), (
        "regenerate config/foxglove-layout.json from foxglove_layout()")


def test_a_late_client_gets_the_objects_and_the_last_trace_at_once() -> None:
    from embodied_r_ros.viewer.content import ObjectMap
    from embodied_r_ros.viewer.server import start_viewer
    from lab.foxglove_client import FoxgloveClient

    feed = ViewerFeed()
    topics = {"/r/memory/objects": "objects", "/r/query/trace": "trace", "/r/path": "path"}
    server = start_viewer(ViewerConfig(enabled=True, port=0), topics, feed,
                          runner=None)  # type: ignore[arg-type]
    assert server is not None
    try:
        mug = PlacedObject("robot/1", "mug", 1.0, 2.0, 0.3, (("mug", 2),))
        feed.emit("/r/memory/objects", ObjectMap(5.0, (mug,)))
        trace = query_trace(6.0, "q", [], "", "front", QueryResult.failure("BUSY", "busy"),
                            None)
        feed.emit("/r/query/trace", trace)
        feed.emit("/r/path", ())  # a stream: not kept for late clients
        client = FoxgloveClient(f"ws://127.0.0.1:{server.port}")
        try:
            client.subscribe(list(topics))
            client.wait(lambda: client.messages["/r/memory/objects"]
                        and client.messages["/r/query/trace"], 10, "the latched channels")
            entity = client.messages["/r/memory/objects"][-1]["entities"][0]
            assert entity["texts"][0]["text"] == "mug (mug 2)"
            assert client.messages["/r/query/trace"][-1]["error_code"] == "BUSY"
            assert not client.messages["/r/path"]
        finally:
            client.close()
    finally:
        server.stop()

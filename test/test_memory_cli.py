"""``embodied-r memory stats | search | plot | export`` on a real memory file, the export read
back as Foxglove reads it, and the process-side memory service (writer thread, reader, the
query runner's scope) without ROS."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path

import numpy as np
import pytest

from embodied_r_ros.agent.in_process_engine import LocalEngine
from embodied_r_ros.agent.query_runner import QueryRequest, QueryRunner
from embodied_r_ros.cli import main
from embodied_r_ros.core.poses import Pose, StampedPose
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.core.streaming import KeyFrameNote
from embodied_r_ros.memory import MemoryRecorder, SqliteMemoryStore
from embodied_r_ros.memory.export import (
    DESCRIPTION_TOPIC,
    OBJECTS_TOPIC,
    PATH_TOPIC,
    POSE_TOPIC,
    THUMBNAIL_TOPIC,
)
from embodied_r_ros.memory.places import LIVE_POSE_MAX_GAP_S
from embodied_r_ros.memory.service import MemoryReader, MemoryWriter

T0 = 1000.0
ROWS = 60


def scene(i: int) -> str:
    return "a red chair" if i < 10 else ("a blue bicycle" if i < 40 else "a green plant")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An hour-long memory: a red chair at the start, then a bicycle, then a plant, on a
    circle of 5 m, a key frame a minute."""
    path = tmp_path_factory.mktemp("memory") / "memory.sqlite3"
    with SqliteMemoryStore(path, writable=True) as store:
        recorder = MemoryRecorder(store, "robot")
        for i in range(ROWS):
            image = np.full((48, 64, 3), (40 * i) % 255, np.uint8)
            pose = Pose(5 * math.cos(i / 10), 5 * math.sin(i / 10), 0.0, 6.0 * i, 0.0)
            recorder.record(T0 + 60.0 * i, f"I see {scene(i)} near the wall.", camera="front",
                            pose=pose if i % 7 else None, pose_source="odometry", image=image)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["memory", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_stats(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "stats", str(db), "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["robots"] == {"robot": {"rows": ROWS, "first": T0,
                                         "last": T0 + 60.0 * (ROWS - 1),
                                         "span_sec": 60.0 * (ROWS - 1)}}
    assert stats["size_bytes"] > 0
    code, out, _ = run(capsys, "stats", str(db))
    assert code == 0 and "robot: 60 rows" in out and "59.0 min" in out


def test_search_lists_the_selected_frames_with_reasons(db: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, out, _ = run(capsys, "search", str(db), "Where was the red chair at the start?",
                       "--json", "--budget", "8")
    assert code == 0
    found = json.loads(out)
    frames = found["frames"]
    assert len(frames) == 8 and found["terms"] == ["red", "chair"]
    chairs = [f for f in frames if "red chair" in f["description"]]
    assert chairs and all(f["stamp"] < T0 + 600 for f in chairs)
    assert frames[0]["stamp"] == T0
    assert any(r.startswith("time:at the start") for r in frames[0]["reasons"])
    newest = frames[-1]
    assert newest["stamp"] == T0 + 60.0 * (ROWS - 1) and newest["age_sec"] == 0.0
    assert "latest" in newest["reasons"]
    code, out, _ = run(capsys, "search", str(db), "where is the plant")
    assert code == 0 and "[latest" in out and "green plant" in out


def test_plot_writes_a_png(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plots" / "path.png"
    code, _, _ = run(capsys, "plot", str(db), "--out", str(out), "-q",
                     "Where was the blue bicycle 30 minutes ago?")
    assert code == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_export_is_read_back_as_foxglove_messages(db: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from mcap.reader import make_reader

    out = tmp_path / "memory.mcap"
    code, printed, _ = run(capsys, "export", str(db), "--out", str(out))
    assert code == 0 and "60 key frames" in printed
    by_topic: dict[str, list[tuple[str, int, dict]]] = {}
    with open(out, "rb") as f:
        for schema, channel, message in make_reader(f).iter_messages():
            assert schema.encoding == "jsonschema" and channel.message_encoding == "json"
            assert json.loads(schema.data)["title"] == schema.name
            by_topic.setdefault(channel.topic, []).append(
                (schema.name, message.log_time, json.loads(message.data)))
    assert {t: {m[0] for m in msgs} for t, msgs in by_topic.items()} == {
        POSE_TOPIC: {"foxglove.PoseInFrame"}, PATH_TOPIC: {"foxglove.PosesInFrame"},
        THUMBNAIL_TOPIC: {"foxglove.CompressedImage"}, DESCRIPTION_TOPIC: {"foxglove.Log"}}
    with SqliteMemoryStore(db) as store:
        rows = store.latest("robot", ROWS)
        posed = [r for r in rows if r.pose is not None]
        thumbs = [t for _, _, t in by_topic[THUMBNAIL_TOPIC]]
        assert [base64.b64decode(t["data"]) for t in thumbs] == [
            store.thumbnail(r.id) for r in rows]
    assert len(by_topic[DESCRIPTION_TOPIC]) == ROWS
    assert [m["message"] for _, _, m in by_topic[DESCRIPTION_TOPIC]] == [
        r.description for r in rows]
    poses = by_topic[POSE_TOPIC]
    assert len(poses) == len(posed) < ROWS  # rows without a pose have none
    for (_, log_time, msg), row in zip(poses, posed, strict=True):
        assert log_time == round(row.stamp * 1e9)
        assert msg["pose"]["position"]["x"] == pytest.approx(row.pose.x)
        q = msg["pose"]["orientation"]
        yaw = 2 * math.atan2(q["z"], q["w"])  # pitch is 0: a rotation about z alone
        assert (math.cos(yaw), math.sin(yaw)) == pytest.approx(
            (math.cos(math.radians(row.pose.yaw_deg)), math.sin(math.radians(row.pose.yaw_deg))))
    assert len(by_topic[PATH_TOPIC][-1][2]["poses"]) == len(posed)
    layout = json.loads(out.with_suffix(".layout.json").read_text())
    shown = json.dumps(layout["configById"])
    assert all(topic in shown for topic in by_topic)


@pytest.mark.parametrize(("args", "code_name"), [
    (["stats", "{missing}"], "DB_MISSING"),
    (["search", "{corrupt}", "where?"], "DB_CORRUPT"),
    (["search", "{db}", "where was I 5 blorps ago?"], "BAD_TIME_PHRASE"),
    (["export", "{db}", "--robot", "rover", "--out", "{tmp}/x.mcap"], "DB_MISSING"),
])
def test_bad_input_is_one_line_and_exit_code_2(args: list[str], code_name: str, db: Path,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    corrupt = tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(b"not a database at all" * 50)
    before = corrupt.read_bytes()
    names = {"missing": tmp_path / "none.sqlite3", "corrupt": corrupt, "db": db, "tmp": tmp_path}
    code, out, err = run(capsys, *[a.format(**names) for a in args])
    assert code == 2 and not out
    assert err.count("\n") == 1 and f"error: {code_name}: " in err and code_name not in \
        err.split(f"{code_name}: ", 1)[1]
    assert corrupt.read_bytes() == before
    assert not (tmp_path / "none.sqlite3").exists()


def config_for(path: Path) -> object:
    return load_config("offline", overrides={"memory": {"enabled": True, "path": str(path),
                                                        "embedder": "off"}})


def test_a_failed_write_is_counted_and_loses_no_stored_row(tmp_path: Path) -> None:
    config = config_for(tmp_path / "m.sqlite3")
    writer = MemoryWriter(config)
    try:
        image = np.zeros((32, 32, 3), np.uint8)
        for stamp, text in ((1.0, "a red chair"), (2.0, "x" * 9000), (3.0, "a blue door")):
            writer.submit(KeyFrameNote("front", FrameRecord(stamp, vlm_text=text), None, 0.0,
                                       image),
                          image, lambda _s: Pose(1.0, 2.0, 0.0, 10.0, 0.0))
        assert writer.wait_idle(10)
        stats = writer.stats()
        assert (stats.rows, stats.recorded, stats.failed) == (2, 2, 1)
        assert "BAD_ROW" in writer.last_error
        deleted, left = writer.clear(before=2.5)
        assert (deleted, left) == (1, 1)
    finally:
        writer.close()
    with SqliteMemoryStore(tmp_path / "m.sqlite3") as store:
        (row,) = store.latest("robot", 5)
        assert (row.stamp, row.pose_source, row.pose) == (3.0, "odometry",
                                                          Pose(1.0, 2.0, 0.0, 10.0, 0.0))


class NoEngine:
    """Scope-memory questions never reach the window engine."""

    def window(self, *_args: object) -> object:
        raise AssertionError("the window was read")

    perceive = window

    def pose_now(self, *_args: object) -> None:
        return None  # the memory counts from its newest frame

    def reason(self, perception: str, options: object, cancel: object, scope: str) -> object:
        from embodied_r_ros.core.reasoning import Reasoning

        return Reasoning(think="t", answer="A", answer_text="A. red", raw=perception,
                         well_formed=True)


def test_the_query_runner_scopes(db: Path) -> None:
    off = QueryRunner(NoEngine(), ["front"])
    assert off.run(QueryRequest("What is ahead?", scope="memory")).error_code == \
        "MEMORY_UNAVAILABLE"
    assert off.run(QueryRequest("What is ahead?", scope="past")).error_code == "UNKNOWN_SCOPE"
    reader = MemoryReader(config_for(db))
    on = QueryRunner(NoEngine(), ["front"], memory=reader)
    try:
        r = on.run(QueryRequest("Where was the red chair at the start?", ["A. red", "B. blue"],
                                scope="memory"))
        assert r.success, r.error
        assert r.key_frame_stamps == [f.stamp for f in r.memory_frames]
        assert r.memory_frames[0].stamp == T0 and r.memory_frames[-1].age_sec == 0.0
        assert "red chair" in r.raw  # the reasoner read the stored descriptions
        bad = on.run(QueryRequest("Where was I 5 blorps ago?", scope="memory"))
        assert (bad.error_code, "\n" in bad.error) == ("BAD_TIME_PHRASE", False)
    finally:
        reader.close()
    missing = MemoryReader(config_for(db.parent / "absent.sqlite3"))
    r = QueryRunner(NoEngine(), ["front"], memory=missing).run(
        QueryRequest("What is ahead?", scope="memory"))
    assert r.error_code == "MEMORY_UNAVAILABLE" and "DB_MISSING" in r.error


RED_BOX, CHAIR = (4.0, 2.0), (6.0, -2.0)


def _toward(pose: Pose, target: tuple[float, float]) -> float:
    return math.degrees(math.atan2(target[1] - pose.y, target[0] - pose.x)) - pose.yaw_deg


@pytest.fixture(scope="module")
def placed_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A walk along x past a red box and an office chair, each key frame described by a VLM
    that grounded both (a colour region and a labelled object), written by the memory
    writer as on the robot."""
    path = tmp_path_factory.mktemp("placed") / "memory.sqlite3"
    writer = MemoryWriter(config_for(path))
    try:
        for i in range(5):
            pose = Pose(float(i), 0.0, 0.0, 0.0)
            objects = (SeenObject("red object", "red", bearing_deg=_toward(pose, RED_BOX)),
                       SeenObject("office chair", bearing_deg=_toward(pose, CHAIR),
                                  box=(10.0, 40.0, 60.0, 120.0), confidence=0.9,
                                  extent_deg=3.0))
            record = FrameRecord(T0 + 5.0 * i, vlm_text="a red box and an office chair",
                                 objects=objects)
            writer.submit(KeyFrameNote("front", record, None, 0.0), None,
                          lambda _s, p=pose: p)
        assert writer.wait_idle(10) and writer.failed == 0
    finally:
        writer.close()
    return path


def test_search_lists_the_placed_objects_the_question_names(
        placed_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "search", str(placed_db), "Where is the red box relative to you "
                       "now?", "--json")
    assert code == 0
    found = json.loads(out)
    (red,) = found["placed"]
    assert (red["label"], red["colour"], red["triangulated"]) == ("red object", "red", True)
    assert (red["x"], red["y"]) == pytest.approx(RED_BOX, abs=0.01) and red["sightings"] == 5
    assert red["last_age_sec"] == 0.0 and 0.0 < red["uncertainty_m"] < 0.5
    (line,) = found["places"]
    assert line.startswith("- red object seen 0 s ago (last 0 s ago); now 2.0 m away, "
                           "back-left (90 degrees left), within about ")  # at (4, 0), facing +x
    assert line.endswith("; seen from about here.")
    code, out, _ = run(capsys, "search", str(placed_db), "Where are the chairs?")
    assert code == 0 and "placed (1 named):" in out
    assert "  office chair [robot] at (6.00, -2.00) m, within " in out
    assert "places: - office chair seen 0 s ago (last 0 s ago); now 2.8 m away" in out


def test_a_memory_question_counts_from_the_robots_pose_now(placed_db: Path) -> None:
    """The places block is counted from the frame buffer's pose at the ask: the robot turned
    135 degrees after its newest key frame (at (4, 0) facing +x) has the red box at (4, 2) on
    its front-right. A pose from before that key frame (another timeline) or long after it
    (the memory stopped being written) is not taken."""
    reader = MemoryReader(config_for(placed_db))
    newest = T0 + 20.0
    question = "Where is the red box relative to you now?"
    quadrants = ["A. front-left", "B. front-right", "C. back-left", "D. back-right"]
    lines = []
    try:
        for live in (StampedPose(newest + 3.0, Pose(4.0, 0.0, 0.0, 135.0)), None,
                     StampedPose(newest - 3.0, Pose(4.0, 0.0, 0.0, 135.0)),
                     StampedPose(newest + LIVE_POSE_MAX_GAP_S + 1.0,
                                 Pose(4.0, 0.0, 0.0, 135.0))):
            engine = LocalEngine({}, lambda: pytest.fail("a window was perceived"),
                                 NoEngine().reason,
                                 {"front": lambda live=live: live})
            r = QueryRunner(engine, ["front"], memory=reader).run(
                QueryRequest(question, quadrants, scope="memory"))
            assert r.success, r.error
            lines.append(next(line for line in r.perception.splitlines()
                              if line.startswith("- red object seen")))
    finally:
        reader.close()
    turned, *kept = lines
    assert "; now 2.0 m away, front-right (45 degrees right)" in turned
    assert "(last 3 s ago)" in turned  # its age counted to the ask
    for line in kept:
        assert "; now 2.0 m away, back-left (90 degrees left)" in line, line


def test_plot_draws_the_placed_objects(placed_db: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    plain, named = tmp_path / "plain.png", tmp_path / "named.png"
    assert run(capsys, "plot", str(placed_db), "--out", str(plain))[0] == 0
    assert run(capsys, "plot", str(placed_db), "--out", str(named), "-q",
               "Where is the chair?")[0] == 0
    assert plain.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plain.read_bytes() != named.read_bytes()  # the retrieved frames circled


def test_export_carries_the_placed_objects_as_scene_entities(
        placed_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mcap.reader import make_reader

    out = tmp_path / "placed.mcap"
    code, printed, _ = run(capsys, "export", str(placed_db), "--out", str(out))
    assert code == 0 and "2 placed objects" in printed
    with open(out, "rb") as f:
        updates = [(schema.name, json.loads(schema.data), message.log_time,
                    json.loads(message.data)) for schema, channel, message in
                   make_reader(f).iter_messages(topics=[OBJECTS_TOPIC])]
    assert [u[0] for u in updates] == ["foxglove.SceneUpdate"] * 2
    assert updates[0][1]["properties"]["entities"]["items"]["title"] == "foxglove.SceneEntity"
    assert {u[2] for u in updates} == {round(T0 * 1e9)}  # when each was first seen
    entities = {e["metadata"][0]["value"]: e for *_, m in updates for e in m["entities"]}
    assert set(entities) == {"red object", "office chair"}
    for label, (x, y) in (("red object", RED_BOX), ("office chair", CHAIR)):
        entity = entities[label]
        (sphere,) = entity["spheres"]
        assert (sphere["pose"]["position"]["x"], sphere["pose"]["position"]["y"]) == \
            pytest.approx((x, y), abs=0.01)
        assert entity["texts"][0]["text"].startswith(f"{label} (within ")
        assert entity["frame_id"] == "odom" and entity["lifetime"] == {"sec": 0, "nsec": 0}
    assert entities["red object"]["spheres"][0]["color"]["r"] > 0.8
    layout = json.loads(out.with_suffix(".layout.json").read_text())
    assert OBJECTS_TOPIC in json.dumps(layout["configById"])

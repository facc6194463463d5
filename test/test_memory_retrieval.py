"""Selecting a question's key frames from hours of memory, and the text written from them:
time phrases, object terms, the budget, and ages and motions of frames that are not adjacent."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from memory_rows import memory_text

from embodied_r_ros.core.perception_text import render, stated_view
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory import (
    MemoryRecorder,
    MemoryRow,
    Retriever,
    SpatialMemoryError,
    SqliteMemoryStore,
    parse_time_phrases,
    records_from_rows,
)
from embodied_r_ros.memory.errors import BAD_TIME_PHRASE
from embodied_r_ros.memory.query_terms import objects_in, question_terms
from embodied_r_ros.memory.retrieval import by_visit, spread
from embodied_r_ros.memory.store import TextHit
from embodied_r_ros.reading.dead_reckoning import poses as reckoned_poses


@pytest.mark.parametrize(("text", "anchor", "lo", "hi"), [
    ("What did I see 10 minutes ago?", "now", -720.0, -480.0),
    ("where was it twenty seconds ago", "now", -30.0, -10.0),
    ("what was there 20 s before the last key frame?", "now", -30.0, -10.0),
    ("and 20 seconds before?", "now", -30.0, -10.0),
    ("half an hour ago", "now", -2160.0, -1440.0),
    ("an hour and a half ago", "now", -6480.0, -4320.0),
    ("In the last 5 minutes, which way did I turn?", "now", -300.0, 0.0),
    ("in the past hour", "now", -3600.0, 0.0),
    ("between 2 and 5 minutes ago", "now", -300.0, -120.0),
    ("2 minutes after the start", "start", 96.0, 144.0),
    ("Which object did I see at the start?", "start", 0.0, 60.0),
    ("less than 1 minute ago", "now", -60.0, 0.0),
])
def test_time_phrases_are_read(text: str, anchor: str, lo: float, hi: float) -> None:
    (spec,) = parse_time_phrases(text)
    assert (spec.anchor, spec.lo_s, spec.hi_s) == (anchor, lo, hi)


def test_a_question_without_a_time_names_none_and_ranges_resolve_on_the_timeline() -> None:
    assert parse_time_phrases("Where is the red chair relative to me now?") == []
    (start,) = parse_time_phrases("at the beginning")
    r = start.resolve(first=100.0, now=3700.0)
    assert (r.start, r.end) == (100.0, 100.0 + 60.0 + 0.05 * 3600.0)
    (ago,) = parse_time_phrases("5 minutes ago")
    assert ago.resolve(first=0.0, now=1000.0).centre == 700.0


def test_asking_how_long_ago_names_no_time_and_more_than_reaches_the_start() -> None:
    assert parse_time_phrases("How long ago did you last see the red box?") == []
    (more,) = parse_time_phrases("more than 15 minutes ago")
    r = more.resolve(first=100.0, now=3700.0)
    assert (r.start, r.end) == (100.0, 2800.0)


@pytest.mark.parametrize("text", ["What did I see 5 blorps ago?", "-5 minutes ago",
                                  "20 seconds before I turned left", "in the last blorp minutes",
                                  "a while ago"])
def test_a_time_phrase_that_cannot_be_read_is_a_one_line_error(text: str) -> None:
    with pytest.raises(SpatialMemoryError) as err:
        parse_time_phrases(text)
    assert err.value.code == BAD_TIME_PHRASE
    assert "\n" not in str(err.value) and "10 minutes ago" in str(err.value)


def test_question_terms_keep_objects_and_attributes_only() -> None:
    terms = question_terms("Where is the red chair relative to me now?",
                           ["A. to my left, near the wooden table", "B. behind me"])
    assert terms == ["red", "chair", "wooden", "table"]


def test_objects_are_named_by_the_record_or_read_from_free_text(tmp_path: Path) -> None:
    with SqliteMemoryStore(tmp_path / "o.sqlite3", writable=True) as store:
        recorder = MemoryRecorder(store)
        seen = (SeenObject("red object", "red", "small", "to the left", 25.0, 3.1),)
        recorder.record_frame(FrameRecord(1.0, objects=seen))
        # a row stored before records: its geometric description is read for its objects
        recorder.record(2.0, "I see a small red object to the left (25 degrees left, about 3.1 "
                             "m away); a large blue object straight ahead (2 degrees left).")
        rows = store.latest("robot", 2)
    assert rows[0].objects == ("red object",) and rows[0].seen == seen
    assert not rows[0].by_vlm and rows[0].frame_record().vlm_text is None
    assert rows[1].objects == ("red object", "blue object") and rows[1].seen is None
    assert [o.colour for o in rows[1].frame_record().objects] == ["red", "blue"]
    assert objects_in("A red chair stands next to the wooden table, and a lamp is on.") == (
        "red chair", "wooden table", "lamp")


def test_hits_are_picked_one_per_visit_newest_visit_first() -> None:
    hits = [TextHit(1, 10.0, 1.0), TextHit(2, 12.0, 3.0), TextHit(3, 500.0, 0.5),
            TextHit(4, 505.0, 0.7), TextHit(5, 900.0, 0.1)]
    assert by_visit(hits) == [5, 4, 2, 3, 1]
    # one visit: the best view, then the view farthest in time from it, then by score
    visit = [TextHit(1, 0.0, 0.5), TextHit(2, 5.0, 1.0), TextHit(3, 8.0, 0.9),
             TextHit(4, 25.0, 0.2)]
    assert by_visit(visit) == [2, 4, 3, 1]
    assert spread([(i, float(i)) for i in range(100)], 5) == [0, 25, 50, 74, 99]
    assert spread([(1, 0.0), (2, 1.0)], 5) == [1, 2]


def _walk(i: int) -> Pose:
    """A walk along a square of side 40 m, turning left at the corners, a metre a second."""
    side, along = divmod(i % 160, 40)
    heading = 90.0 * side
    corners = [(0.0, 0.0), (40.0, 0.0), (40.0, 40.0), (0.0, 40.0)]
    x0, y0 = corners[side]
    rad = math.radians(heading)
    return Pose(x0 + along * math.cos(rad), y0 + along * math.sin(rad), 0.0,
                (heading + 180.0) % 360.0 - 180.0)


@pytest.fixture
def store(tmp_path: Path) -> SqliteMemoryStore:
    """Half an hour at a key frame a second (1,800 rows): blue boxes, a red chair seen at
    frames 200-204 and 1500-1502."""
    writer = SqliteMemoryStore(tmp_path / "m.sqlite3", writable=True)
    for i in range(1800):
        text = ("I see a red chair next to a wooden table." if 200 <= i < 205 or
                1500 <= i < 1503 else "I see a blue box on the floor.")
        writer.add(MemoryRow(stamp=float(i), description=text, pose=_walk(i),
                             pose_source="odometry", action="move forward"))
    writer.close()
    reader = SqliteMemoryStore(tmp_path / "m.sqlite3")
    yield reader
    reader.close()


def test_a_question_without_cues_reads_the_last_key_frames(store: SqliteMemoryStore) -> None:
    sel = Retriever(store, budget=32).select("robot", "Which way did I turn?",
                                             ["A. left", "B. right"])
    assert [r.stamp for r in sel.rows] == [float(i) for i in range(1768, 1800)]
    assert all(sel.adjacent[1:]) and not sel.adjacent[0]


def test_the_selection_is_bounded_and_names_why(store: SqliteMemoryStore) -> None:
    sel = Retriever(store, budget=16, latest=3).select(
        "robot", "What did I see 10 minutes ago near the red chair?")
    assert len(sel.rows) == 16 and {1797.0, 1798.0, 1799.0} <= {r.stamp for r in sel.rows}
    reasons = {w for ws in sel.reasons.values() for w in ws}
    assert {"latest", "time:10 minutes ago", "text"} <= reasons
    assert any(r.stamp in (200.0, 201.0, 202.0, 203.0, 204.0) for r in sel.rows)


def test_a_range_with_nothing_stored_takes_the_nearest_frames_and_says_so(
        store: SqliteMemoryStore) -> None:
    sel = Retriever(store).select("robot", "What did I see 2 hours ago?")
    assert sel.notes and "2 hours ago" in sel.notes[0]
    assert {0.0, 1.0, 2.0, 3.0} <= {r.stamp for r in sel.rows}


def test_an_unreadable_time_in_an_option_fails_the_selection(store: SqliteMemoryStore) -> None:
    with pytest.raises(SpatialMemoryError) as err:
        Retriever(store).select("robot", "When did I see the chair?",
                                ["A. 10 minutes ago", "B. three fortnights ago"])
    assert err.value.code == BAD_TIME_PHRASE


def test_an_empty_memory_selects_nothing_and_says_so(tmp_path: Path) -> None:
    with SqliteMemoryStore(tmp_path / "e.sqlite3", writable=True) as empty:
        sel = Retriever(empty).select("robot", "Where is the chair?")
    assert sel.rows == [] and "empty" in sel.notes[0]


def test_the_text_states_ages_and_the_motion_between_frames_far_apart(
        store: SqliteMemoryStore) -> None:
    sel = Retriever(store, budget=32).select(
        "robot", "Where is the red chair relative to me now?", ["A. left", "B. right"])
    question, options = "Where is the red chair relative to me now?", ["A. left", "B. right"]
    record = sel.record(question, options, format_question(question, options))
    read = stated_view(record)
    assert render(record).count("s before the last key frame)") == len(sel.rows)
    assert len(read.frames) == len(sel.rows)
    last = sel.rows[-1].stamp
    assert [f.age_s for f in read.frames] == [round(last - r.stamp) for r in sel.rows]
    # frames minutes apart get the whole motion between them, from their poses: dead reckoning
    # the written motions recomputes where the robot is now relative to the first frame
    first, now = sel.rows[0].pose, sel.rows[-1].pose
    assert first is not None and now is not None
    rad = math.radians(first.yaw_deg)
    dx, dy = now.x - first.x, now.y - first.y
    truth = (dx * math.cos(rad) + dy * math.sin(rad), -dx * math.sin(rad) + dy * math.cos(rad))
    end = reckoned_poses(read.frames)[-1]
    assert math.hypot(end.x - truth[0], end.y - truth[1]) < 0.1 * len(read.frames)
    assert read.question.startswith("Where is the red chair")


def test_a_stored_action_is_kept_only_for_the_pair_it_describes() -> None:
    rows = [MemoryRow(stamp=float(s), description=f"view {s}", pose=_walk(s),
                      pose_source="odometry", action="rotate left") for s in (0, 1, 90)]
    frames = records_from_rows(rows, adjacent=[False, True, False])
    assert frames[1].vlm_action == "rotate left" and frames[2].vlm_action is None
    assert frames[2].motion is not None and frames[2].motion_source == "odometry"
    no_pose = [MemoryRow(stamp=0.0, description="a"), MemoryRow(stamp=5.0, description="b")]
    assert records_from_rows(no_pose)[1].motion is None
    assert "Frame 1: After an unknown motion, Observe: b" in memory_text(no_pose, "q?")
    text = memory_text(rows, "q?")
    assert "Frame 0 (90 s before the last key frame): Observe: view 0" in text
    assert ("Frame 2 (0 s before the last key frame): After move forward about 29.0 m and move "
            "left about 40.0 m, then rotate left about 180 degrees, Observe: view 90") in text

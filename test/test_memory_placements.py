"""Objects placed from the stored poses: bearing rays crossed in the world frame, a single view
kept as a guess along its ray, the geometric perception's colour regions and a VLM's labelled
objects alike; labels matched to a question's words; placements written as frames are stored,
kept across a restart, shared by a fleet on PostgreSQL, and stated in the places block."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from embodied_r_ros.core.perception_text import render
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, ObjectPlace, PerceptionRecord, SeenObject
from embodied_r_ros.memory import MemoryRecorder, Retriever, SqliteMemoryStore, memory_record
from embodied_r_ros.memory.embedder import MiniLMEmbedder
from embodied_r_ros.memory.labels import LabelMatcher, head_word, singular
from embodied_r_ros.memory.placements import LONE_WAIT_S, Placement, place_frames
from embodied_r_ros.memory.places import Now, place_notes
from embodied_r_ros.memory.store import MemoryStore

RED = (4.0, 2.0)


def bearing(pose: Pose, target: tuple[float, float], error: float = 0.0) -> float:
    """The bearing (left > 0) at which ``pose``'s camera sees ``target``, off by ``error``."""
    return math.degrees(math.atan2(target[1] - pose.y, target[0] - pose.x)) - pose.yaw_deg + error


def seen(stamp: float, pose: Pose, target: tuple[float, float], error: float = 0.0,
         name: str = "red object", **fields: object) -> tuple[FrameRecord, Pose]:
    """A frame at ``pose`` showing one object at ``target``: a colour region by default, a
    labelled object where ``name`` is a label."""
    colour = name.split()[0] if name.endswith(" object") else None
    obj = SeenObject(name, colour=colour, bearing_deg=bearing(pose, target, error), **fields)
    return FrameRecord(stamp, objects=(obj,)), pose


# ------------------------------------------------------------------------------ geometry


def test_three_views_from_two_places_cross_where_the_object_is_wider_surer() -> None:
    narrow = place_frames([seen(0.0, Pose(0.0, 0.0), RED), seen(2.0, Pose(0.0, -1.0), RED),
                           seen(5.0, Pose(0.0, -2.0), RED)])
    wide = place_frames([seen(0.0, Pose(0.0, 0.0), RED), seen(2.0, Pose(2.0, -1.0), RED),
                         seen(5.0, Pose(4.0, -2.0), RED)])
    for (p,) in (narrow, wide):
        assert p.triangulated and p.position == pytest.approx(RED, abs=1e-6)
        assert p.sightings == 3 and p.votes == (("red object", 3),)
    assert narrow[0].seen_from == (0.0, -2.0) and narrow[0].visits == ((0.0, 5.0),)
    assert 0.1 <= wide[0].uncertainty_m < narrow[0].uncertainty_m < 1.0


def test_a_bearing_off_by_degrees_widens_the_uncertainty_which_still_covers_the_error() -> None:
    views = [Pose(0.0, 0.0), Pose(0.0, -2.0), Pose(3.0, -2.0, 0.0, 60.0), Pose(1.0, -3.0)]
    (three,) = place_frames([seen(i, p, RED) for i, p in enumerate(views)])
    (off,) = place_frames([seen(0, views[0], RED, 4.0), *(seen(i, p, RED) for i, p in
                                                           enumerate(views) if i)])
    missed = math.dist(off.position, RED)
    assert off.triangulated and 0.02 < missed and off.uncertainty_m > three.uncertainty_m
    assert missed < off.uncertainty_m


def test_a_lone_ray_is_never_a_place_and_a_measured_distance_is_a_guess() -> None:
    here = Pose(1.0, 1.0, 0.0, 90.0)
    assert place_frames([seen(0.0, here, (1.0, 6.0))]) == []
    # the camera turned in place keeping it in view: one position, no crossing
    assert place_frames([seen(0.0, here, (1.0, 6.0)),
                         seen(2.0, Pose(1.0, 1.0, 0.0, 70.0), (1.0, 6.0))]) == []
    # two views from two places: still waiting for a third
    assert place_frames([seen(0.0, here, (1.0, 6.0)), seen(9.0, Pose(5.0, 2.0), (1.0, 6.0))]) == []
    # a lone measured distance (a wrong label now and then) places nothing at once; two that
    # agree, from one standpoint, place a guess there, as sure as that distance
    assert place_frames([seen(0.0, here, (1.0, 6.0), distance_m=5.0)]) == []
    (ranged,) = place_frames([seen(0.0, here, (1.0, 6.0), distance_m=5.0),
                              seen(2.0, Pose(1.0, 1.0, 0.0, 70.0), (1.0, 6.0), distance_m=5.0)])
    assert not ranged.triangulated and ranged.position == pytest.approx((1.0, 6.0))
    assert ranged.uncertainty_m == pytest.approx(2.0)  # two standard deviations of 20 %
    # a third view crosses the two waiting ones
    (crossed,) = place_frames([seen(0.0, here, (1.0, 6.0)), seen(9.0, Pose(5.0, 2.0), (1.0, 6.0)),
                               seen(12.0, Pose(4.0, 1.0), (1.0, 6.0))])
    assert crossed.triangulated and crossed.position == pytest.approx((1.0, 6.0), abs=1e-6)
    # rays that waited longer than the pool keeps them cross nothing
    late = place_frames([seen(0.0, here, (1.0, 6.0)), seen(9.0, Pose(5.0, 2.0), (1.0, 6.0)),
                         seen(1200.0, Pose(4.0, 1.0), (1.0, 6.0))])
    assert late == []


def test_a_lone_ranged_ray_left_alone_becomes_a_guess_stated_as_such() -> None:
    """A chair seen once with its distance measured, then nothing of it while the robot moves
    on: once it has waited long enough it is a guess at that distance, as sure as the distance,
    and the places block says it was guessed. Without a distance it never places."""
    here, on = Pose(1.0, 1.0, 0.0, 90.0), Pose(6.0, 0.0)
    ranged = seen(0.0, here, (1.0, 6.0), name="chair", distance_m=5.0)
    assert place_frames([ranged, (FrameRecord(LONE_WAIT_S - 1.0), on)]) == []  # still waiting
    (chair,) = place_frames([ranged, (FrameRecord(LONE_WAIT_S + 1.0), on)])
    assert not chair.triangulated and chair.sightings == 1 and chair.label == "chair"
    assert chair.position == pytest.approx((1.0, 6.0)) and chair.uncertainty_m == pytest.approx(2.0)
    notes = place_notes([chair], "Where is the chair?", [], Now(30.0, 6.0, 0.0, 0.0))
    text = render(PerceptionRecord((), "Where is the chair?", (), "", places=notes))
    assert "chair" in text and "guessed from one view, within about 2.0 m" in text
    bare = seen(0.0, here, (1.0, 6.0), name="chair")
    assert place_frames([bare, *((FrameRecord(t), on) for t in (30.0, 300.0, 590.0))]) == []


def test_a_vlms_labelled_objects_are_placed_the_same_way_by_their_labels() -> None:
    """Grounded objects carry a label, a box, a bearing and its width: "chair" then "office
    chair" is one chair, its votes counted as one label; a box's width widens its bearing's
    error."""
    sofa, chair = (2.0, 5.0), (6.0, 1.0)
    frames = []
    for t, (pose, name) in enumerate([(Pose(0.0, 0.0), "chair"), (Pose(0.0, 3.0), "office chair"),
                                      (Pose(-1.0, 1.0), "chair")]):
        frames += [seen(4.0 * t, pose, chair, name=name, box=(10, 20, 60, 90), confidence=0.8,
                        extent_deg=4.0),
                   seen(4.0 * t, pose, sofa, name="sofa", extent_deg=8.0)]
    placed = {p.key: p for p in place_frames(frames)}
    assert set(placed) == {"chair", "sofa"}
    assert placed["chair"].label == "chair" and placed["chair"].colour is None
    assert placed["chair"].votes == (("chair", 3),)
    assert placed["chair"].position == pytest.approx(chair, abs=1e-6)
    assert placed["sofa"].position == pytest.approx(sofa, abs=1e-6)
    assert placed["sofa"].uncertainty_m > placed["chair"].uncertainty_m  # a wide box
    (sofa_ray,) = {r.sigma_deg for r in placed["sofa"].rays}
    assert sofa_ray == 2.0


# -------------------------------------------------------------------------- labels


def test_words_name_a_label_by_its_head_noun_singular_and_colours_must_agree() -> None:
    assert [singular(w) for w in ("chairs", "boxes", "shelves", "glass", "bus", "cherries")] == [
        "chair", "box", "shelf", "glass", "bus", "cherry"]
    assert head_word("two red Office Chairs") == "chair" and head_word("the red") is None
    words = LabelMatcher()
    labels = ["office chair", "sofa", "blue chair", "table"]
    assert words.named(["red", "chairs"], labels) == [("chair", "office chair")]
    assert words.named(["blue", "chair", "couch"], labels) == [
        ("chair", "office chair"), ("chair", "blue chair")]
    assert words.named(["couch"], labels) == []  # no word of a sofa


def test_the_embedder_names_a_label_in_other_words(minilm: MiniLMEmbedder) -> None:
    matcher = LabelMatcher(minilm)
    labels = ["sofa", "office chair", "refrigerator", "dog"]
    assert matcher.named(["couch", "fridge"], labels) == [("couch", "sofa"),
                                                          ("fridge", "refrigerator")]
    assert matcher.named(["cat", "table"], labels) == []  # related, not the same (cos < 0.7)
    assert matcher.named(["red", "chair"], labels) == [("chair", "office chair")]


def test_the_places_block_names_labelled_objects_relative_to_the_robot_now(
        minilm: MiniLMEmbedder) -> None:
    sofa = (2.0, 5.0)
    placed = place_frames([seen(0.0, Pose(0.0, 0.0), sofa, name="sofa"),
                           seen(2.0, Pose(-1.0, 1.0), sofa, name="sofa"),
                           seen(4.0, Pose(0.0, 3.0), sofa, name="sofa"),
                           seen(6.0, Pose(0.0, 0.0), RED)])
    now = Now(126.0, 4.0, 5.0, 180.0)  # two metres east of the sofa, facing west
    question = "Where is the couch relative to you now?"
    for matcher, named in ((LabelMatcher(), False), (LabelMatcher(minilm), True)):
        notes = place_notes(placed, question, ["A. left", "B. ahead"], now, matcher)
        assert bool(notes) == named
    (note,) = place_notes(placed, question, [], now, LabelMatcher(minilm))
    assert isinstance(note, ObjectPlace) and note.name == "sofa" and note.colour is None
    assert note.now == pytest.approx((2.0, 0.0), abs=1e-6)
    assert note.last_s == pytest.approx(122.0) and note.uncertainty_m is not None
    assert note.seen_from == pytest.approx((math.hypot(4.0, 2.0), 26.565), abs=1e-3)


# ---------------------------------------------------------------- written as frames come


def _rows(recorder: MemoryRecorder, frames: Sequence[tuple[FrameRecord, Pose]]) -> None:
    for record, pose in frames:
        recorder.record_frame(record, pose=pose, pose_source="odometry")


ROUTE = [seen(float(t), Pose(x, y, 0.0, yaw), target, name=name)
         for t, (x, y, yaw, target, name) in enumerate([
             (0.0, 0.0, 0.0, RED, "red object"), (0.0, -2.0, 0.0, RED, "red object"),
             (2.0, -2.0, 0.0, RED, "red object"), (6.0, 0.0, 90.0, (7.0, 5.0), "blue object"),
             (8.0, 0.0, 90.0, (7.0, 5.0), "blue object"), (8.0, 0.0, 180.0, RED, "red object"),
             (5.0, 1.0, 90.0, (7.0, 5.0), "blue object")])]


def test_placements_are_written_as_frames_are_stored_and_kept_across_a_restart(
        tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    with SqliteMemoryStore(path, writable=True) as store:
        recorder = MemoryRecorder(store, "rover")
        _rows(recorder, ROUTE[:4])
        assert len(store.placements(["rover"])) == 1  # the red crossing; blue waits
        recorder.close()
    with SqliteMemoryStore(path, writable=True) as store:  # restarted: goes on from them
        recorder = MemoryRecorder(store, "rover")
        _rows(recorder, ROUTE[4:])  # blue's first ray waits again: three cross
        stored = store.placements(["rover"])
    batch = place_frames(ROUTE, "rover")
    assert [(p.key, round(p.x, 3), round(p.y, 3), p.triangulated, p.sightings)
            for p in stored] == [(p.key, round(p.x, 3), round(p.y, 3), p.triangulated,
                                  p.sightings) for p in batch]
    assert [p.triangulated for p in stored] == [True, True]
    assert [p.sightings for p in stored] == [4, 3]


def test_a_question_reads_the_stored_placements_not_only_its_frames(tmp_path: Path) -> None:
    """The red object was placed from three views twenty minutes ago; a budget of two frames
    selects one of them and the newest, from which alone it is no place (one ray); the
    places block states the stored crossing, and how sure it is."""
    with SqliteMemoryStore(tmp_path / "m.sqlite3", writable=True) as store:
        recorder = MemoryRecorder(store, "robot")
        _rows(recorder, [seen(0.0, Pose(0.0, 0.0), RED), seen(3.0, Pose(1.0, -1.0), RED),
                         seen(5.0, Pose(0.0, -2.0), RED),
                         (FrameRecord(1200.0), Pose(8.0, 0.0, 0.0, 180.0)),
                         (FrameRecord(1201.0), Pose(8.0, 0.0, 0.0, 180.0))])
        question = "Where is the red box relative to you now?"
        selection = Retriever(store, budget=2, latest=1).select("robot", question)
    block = format_question(question, [])
    assert len(selection.rows) == 2 and selection.rows[-1].stamp == 1201.0
    text = render(selection.record(question, [], block))
    line = re.search(r"- red object seen 20 min ago \(last 1196 s ago\); now (\S+) m away, "
                     r"front-right \((\d+) degrees right\), within about (\S+) m;", text)
    assert line is not None, text
    assert float(line[1]) == pytest.approx(math.dist((8, 0), RED), abs=0.05)
    assert int(line[2]) == 27 and 0.1 <= float(line[3]) < 1.0
    alone = render(memory_record(selection.rows, question, [], block))  # its frames only
    assert "within about" not in alone and "guessed" not in text


# ------------------------------------------------------------------------------ a fleet


def _fleet_store(dsn: str, robot: str, writable: bool = False) -> MemoryStore:
    from embodied_r_ros.memory.postgres_store import PostgresMemoryStore

    return PostgresMemoryStore(dsn, robot=robot, writable=writable)


def test_a_fleet_on_postgresql_shares_placements_where_it_says_so(postgres: object) -> None:
    """Robot A placed a red object; robot B, in the same map frame, never saw it. B's reader
    names it only with ``share_placements``; each robot's writer keeps its own placements."""
    dsn = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")  # type: ignore[attr-defined]
    with _fleet_store(dsn, "robot-a", True) as a, _fleet_store(dsn, "robot-b", True) as b:
        _rows(MemoryRecorder(a, "robot-a"), [seen(0.0, Pose(0.0, 0.0), RED),
                                             seen(3.0, Pose(1.0, -1.0), RED),
                                             seen(5.0, Pose(0.0, -2.0), RED)])
        _rows(MemoryRecorder(b, "robot-b"), [(FrameRecord(60.0), Pose(4.0, 6.0, 0.0, -90.0)),
                                             seen(60.5, Pose(4.0, 6.0, 0.0, -80.0), (9.0, 9.0),
                                                  name="blue object", distance_m=5.8),
                                             seen(61.0, Pose(4.0, 6.0, 0.0, -90.0), (9.0, 9.0),
                                                  name="blue object", distance_m=5.8)])
        assert [p.robot for p in b.placements()] == ["robot-a", "robot-b"]
    question = "Where is the red box relative to you now?"
    with _fleet_store(dsn, "robot-b") as reader:
        own = Retriever(reader).select("robot-b", question)
        fleet = Retriever(reader, share_placements=True).select("robot-b", question)
        placements: list[Placement] = fleet.placements or []
        assert {p.robot for p in own.placements or []} == {"robot-b"}
        assert {p.robot for p in placements} == {"robot-a", "robot-b"}
        block = format_question(question, [])
        alone = own.record(question, [], block).places
        shared = fleet.record(question, [], block).places
    assert alone is not None and shared is not None
    assert [type(n).__name__ for n in alone] == ["ColourNote"]  # in none of B's frames
    (red,) = shared
    assert isinstance(red, ObjectPlace) and red.now is not None
    assert red.now[0] == pytest.approx(4.0, abs=1e-3)  # B stands at (4, 6): 4 m ahead
    assert abs(red.now[1]) < 0.1

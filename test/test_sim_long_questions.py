"""Long-horizon questions: hand-checkable answers on a hand-made world, and on a rendered
three-minute world, answers recomputed from its manifest, horizons from its stamps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.image import message_to_cvimage
from rosbags.typesys import Stores, get_typestore

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.camera import PinholeCamera
from embodied_r_ros.sim.generate import WorldPaths
from embodied_r_ros.sim.scene import SceneObject
from embodied_r_ros.sim.trajectory import Trajectory
from embodied_r_ros.sim.visibility import Visibility
from embodied_r_ros.sim.world import EPOCH_NS
from lab.long_world.__main__ import main
from lab.long_world.floor_plan import make_floor_plan
from lab.long_world.generate import generate_long_world
from lab.long_world.questions import CATEGORIES, generate_long_questions
from lab.long_world.render import LongRenderer
from lab.long_world.sightings import Sightings
from lab.long_world.textures import make_atlases
from lab.long_world.world import SMALL_LONG_SPEC, LongWorld, LongWorldSpec

ALL = {c: 5000 for c in CATEGORIES}  # every candidate
QUESTIONS = 12 * len(CATEGORIES)


# ---------------------------------------------------------------- a hand-made world

def _hand_world(sighted: dict[int, tuple[int, int]]) -> tuple[LongWorld, Sightings]:
    """Room 1's centre, facing east for 4 minutes at 1 Hz; objects shown where ``sighted``."""
    plan = make_floor_plan(np.random.default_rng(5), columns=1)
    cx, cy = plan.areas[1].centre
    nx, ny = plan.areas[2].centre
    objects = (
        SceneObject("red box", "red", "box", cx + 2.5, cy + 1.5, (0.6, 0.5, 0.8)),
        SceneObject("blue sphere", "blue", "sphere", cx - 1.2, cy - 1.0, (0.6, 0.6, 0.6)),
        SceneObject("green cone", "green", "cone", nx, ny, (0.6, 0.6, 1.0)),
        SceneObject("red box", "red", "box", nx + 2.0, ny, (0.6, 0.5, 0.8)),
        SceneObject("yellow cylinder", "yellow", "cylinder", cx + 2.5, cy + 0.2,
                    (0.6, 0.6, 1.0)),
    )
    areas = (1, 1, 2, 2, 1)
    spec = LongWorldSpec(seed=1, duration_s=240.0, columns=1, n_objects=5, shared_names=1)
    pose = Pose(cx, cy, 1.5, 0.0, -10.0)
    world = LongWorld(spec, plan, objects, areas, PinholeCamera.from_hfov(320, 240),
                      Trajectory(()), np.arange(241.0), (pose,) * 241)
    shares = np.zeros((241, len(objects)))
    for k, (first, last) in sighted.items():
        shares[first:last + 1, k] = 0.01
    return world, Sightings(Visibility(shares, 1.0))


SIGHTED = {0: (5, 10), 1: (20, 25), 2: (30, 35), 3: (40, 45), 4: (12, 15)}


@pytest.fixture(scope="module")
def hand_rows() -> list[dict]:
    world, sightings = _hand_world(SIGHTED)
    rows, skipped = generate_long_questions(world, sightings, ALL)
    assert skipped["object_direction"]["near a quadrant edge"] > 0  # the cylinder, ahead
    return rows


BOX, SPHERE, CONE, OTHER_BOX, CYLINDER = range(5)


def _about(rows: list[dict], category: str, frame: int, k: int) -> list[dict]:
    return [r for r in rows if r["category"] == category and r["frame"] == frame
            and r["targets"][0]["object"] == k]


def test_direction_and_distance_of_hand_placed_objects(hand_rows) -> None:
    # blue sphere: behind right, 1.6 m
    (sphere,) = _about(hand_rows, "object_direction", 240, SPHERE)
    assert sphere["answer_text"] == "back-right" and sphere["horizon_s"] == 215.0
    (near,) = _about(hand_rows, "object_distance", 240, SPHERE)
    assert near["answer_text"] == "less than 2 m"
    assert not _about(hand_rows, "object_direction", 240, CYLINDER)  # 5 deg: skipped


def test_a_red_box_told_apart_by_its_time_has_its_direction_and_distance() -> None:
    """The other red box shown at 200 s: the time of the first (4 minutes) sets it apart."""
    world, sightings = _hand_world({**SIGHTED, 3: (200, 205)})
    rows, _ = generate_long_questions(world, sightings, ALL)
    # red box: 2.5 m ahead, 1.5 m left -> front-left, 2.9 m
    (box,) = _about(rows, "object_direction", 240, BOX)
    assert box["answer_text"] == "front-left" and box["horizon"] == "medium"
    assert box["horizon_s"] == 230.0
    assert "the red box you saw about 4 minutes ago" in box["question"]
    (far,) = _about(rows, "object_distance", 240, BOX)
    assert far["answer_text"] == "between 2 and 5 m"


def test_how_long_ago_in_bands_with_the_horizon_it_needs(hand_rows) -> None:
    for row in [r for r in hand_rows if r["category"] == "last_seen"
                and r["targets"][0]["object"] == BOX]:
        age = row["frame"] - 10
        assert row["horizon_s"] == age
        assert row["answer_text"] == ("less than 1 minute ago" if age < 60
                                      else "between 1 and 5 minutes ago")
        assert row["horizon"] == ("short" if age < 120 else "medium")
        assert abs(age - 60) >= 10 and abs(age - 120) >= 10  # edges skipped


def test_route_back_closer_and_next_to(hand_rows) -> None:
    # the camera stands still: the spot it saw the cone from is where it is
    assert not _about(hand_rows, "route_back", 240, CONE)
    pairs = [r for r in hand_rows if r["category"] == "closer" and r["frame"] == 240
             and {t["object"] for t in r["targets"]} == {SPHERE, CONE}]
    assert pairs and all(r["answer_text"] == "the blue sphere" for r in pairs)
    # a camera that never moved saw every object along one bearing: the text places none
    assert not [r for r in hand_rows if r["category"] == "next_to"]


def test_did_you_see_asks_about_names(hand_rows) -> None:
    seen = {r["question"]: r for r in hand_rows if r["category"] == "seen" and r["frame"] == 240}
    assert seen["Did you see a red box at all so far?"]["answer_text"] == "yes"
    assert seen["Did you see a red box at all so far?"]["horizon"] == "medium"
    assert seen["Did you see a red box in the last minute?"]["answer_text"] == "no"
    assert seen["Did you see a red box in the last minute?"]["horizon_s"] == 60.0
    assert seen["Did you see a purple cone at all so far?"]["answer_text"] == "no"
    frames = sorted(f for t in seen["Did you see a red box at all so far?"]["targets"]
                    for f in t["frames"])
    assert frames == [*range(5, 11), *range(40, 46)]  # both red boxes show one


def test_shared_names_say_which_one(hand_rows) -> None:
    """Both red boxes were seen within a minute of each other and the text names no rooms:
    only a question every red object answers alike (how long ago) asks about one."""
    about_boxes = [r for r in hand_rows if r["category"] != "seen"
                   and any(t["name"] == "red box" and t["reference"] for t in r["targets"])]
    assert about_boxes
    assert {r["category"] for r in about_boxes} == {"last_seen"}
    for row in about_boxes:
        refs = [t["reference"] for t in row["targets"] if t["name"] == "red box"]
        assert all(ref.startswith("the red box in room ") for ref in refs)


def test_a_time_names_one_of_two_when_the_other_was_not_seen_then() -> None:
    world, sightings = _hand_world({**SIGHTED, 3: (200, 205)})
    rows, _ = generate_long_questions(world, sightings, ALL)
    refs = {t["reference"] for r in rows if r["frame"] == 240 for t in r["targets"]
            if t["reference"] and "you saw" in t["reference"]}
    assert "the red box you saw about 1 minute ago" in refs  # the one in room 2
    assert "the red box you saw about 4 minutes ago" in refs  # the one in room 1
    for r in [r for r in rows if r["frame"] == 240]:
        for t in r["targets"]:
            if t["reference"] == "the red box you saw about 1 minute ago":
                assert t["object"] == OTHER_BOX
            if t["reference"] == "the red box you saw about 4 minutes ago":
                assert t["object"] == BOX


# ---------------------------------------------------------------- a rendered world

@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[WorldPaths, list[dict], dict]:
    out = tmp_path_factory.mktemp("long") / "world"
    paths = generate_long_world(SMALL_LONG_SPEC, out, QUESTIONS, video=False)
    rows = [json.loads(line) for line in paths.questions.read_text().splitlines()]
    return paths, rows, json.loads(paths.manifest.read_text())


def test_rows_have_the_benchmark_fields(small) -> None:
    _, rows, manifest = small
    assert len(rows) >= 5 * 12 and {r["category"] for r in rows} == set(CATEGORIES)
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        letters = [o.split(".")[0] for o in r["options"]]
        assert r["answer"] in letters and f"{r['answer']}. {r['answer_text']}" in r["options"]
        assert r["source"] in ("navqa", "embodied_r")
        assert r["stamp_ns"] == EPOCH_NS + round(r["frame"] * 1e9) == r["stamp_end_ns"]
        assert r["t_ask"] == r["frame"] == r["t_end"]
        for t in r["targets"]:
            assert t["frames"] and all(f <= r["frame"] for f in t["frames"])
            assert t["stamps_ns"] == [EPOCH_NS + round(f * 1e9) for f in t["frames"]]
    assert manifest["questions_written"] == len(rows)
    assert sum(n for reasons in manifest["questions_skipped"].values()
               for n in reasons.values()) > 0


def test_horizon_labels_follow_the_stamps(small) -> None:
    _, rows, _ = small
    for r in rows:
        if r["category"] == "seen":
            expected = r["why"]["window_s"]
        else:
            expected = max(r["frame"] - max(t["frames"]) for t in r["targets"])
        assert r["horizon_s"] == pytest.approx(expected)
        age = r["horizon_s"]
        assert r["horizon"] == ("short" if age < 120 else "medium" if age < 900 else "long")
        assert min(abs(age - 120), abs(age - 900)) >= 10


def test_answers_agree_with_the_manifest_geometry(small) -> None:
    _, rows, manifest = small
    objects, frames = manifest["objects"], manifest["frames"]
    checked = 0
    for r in rows:
        pose = frames[r["frame"]]
        where = [objects[t["object"]] for t in r["targets"]]
        dist = [math.hypot(o["x"] - pose["x"], o["y"] - pose["y"]) for o in where]
        if r["category"] == "object_direction":
            rel = (math.degrees(math.atan2(where[0]["y"] - pose["y"], where[0]["x"] - pose["x"]))
                   - pose["yaw_deg"] + 540.0) % 360.0 - 180.0
            side = "left" if rel > 0 else "right"
            assert r["answer_text"] == f"{'front' if abs(rel) < 90 else 'back'}-{side}"
        elif r["category"] == "object_distance":
            lo, hi = {"less than 2 m": (0, 2), "between 2 and 5 m": (2, 5),
                      "between 5 and 10 m": (5, 10), "more than 10 m": (10, 1e9)
                      }[r["answer_text"]]
            assert lo < dist[0] < hi
        elif r["category"] == "closer":
            nearest = r["targets"][int(np.argmin(dist))]["reference"]
            assert r["answer_text"] == nearest and abs(dist[0] - dist[1]) >= 0.5
        elif r["category"] == "route_back":
            first, last = r["why"]["spot_frames"]
            spots = [frames[f] for f in r["targets"][0]["frames"] if first <= f <= last]
            assert spots and last in r["targets"][0]["frames"]
            for spot in spots:  # every frame of the last sighting calls for the same turn
                rel = (math.degrees(math.atan2(spot["y"] - pose["y"], spot["x"] - pose["x"]))
                       - pose["yaw_deg"] + 540.0) % 360.0 - 180.0
                turn = ("Go straight ahead." if abs(rel) <= 20 else "Turn around."
                        if abs(rel) >= 155 else "Turn left." if rel > 0 else "Turn right.")
                assert r["answer_text"] == turn
        else:
            continue
        checked += 1
    assert checked >= 40


def test_the_frames_named_as_evidence_show_the_object(small) -> None:
    from lab.long_world.world import build_long_world

    _, rows, _ = small
    world = build_long_world(SMALL_LONG_SPEC)
    renderer = LongRenderer(world.plan, world.objects, make_atlases(world.plan, 7),
                            world.camera)
    area = world.spec.width * world.spec.height
    for r in rows[::15]:
        for t in r["targets"]:
            frame = t["frames"][len(t["frames"]) // 2]
            pixels = renderer.render(world.poses[frame]).object_pixels[t["object"]]
            assert pixels >= 0.003 * area


def test_the_bag_holds_every_frame_with_its_true_pose(small) -> None:
    from lab.long_world.world import build_long_world

    paths, _, _ = small
    world = build_long_world(SMALL_LONG_SPEC)
    images, poses = [], []
    with AnyReader([paths.bag], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        topics = {c.topic for c in reader.connections}
        assert topics == {"/camera/image_raw", "/camera/camera_info", "/odom"}
        for conn, stamp, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.topic == "/camera/image_raw":
                images.append((stamp, message_to_cvimage(msg, "rgb8")))
            elif conn.topic == "/odom":
                p, q = msg.pose.pose.position, msg.pose.pose.orientation
                poses.append(Pose.from_quaternion((p.x, p.y, p.z), (q.x, q.y, q.z, q.w)))
    assert [s for s, _ in images] == [world.stamp_ns(i) for i in range(world.n_frames)]
    assert images[0][1].shape == (240, 320, 3)
    assert len(poses) == world.n_frames
    for got, truth in zip(poses[::20], world.poses[::20], strict=True):
        assert np.allclose(got.position, truth.position, atol=1e-9)
        assert got.yaw_deg == pytest.approx(truth.yaw_deg, abs=1e-6)


def test_same_seed_same_bytes_through_the_command_line(small, tmp_path: Path, capsys) -> None:
    paths, _, _ = small
    args = ["--seed", "7", "--minutes", "3", "--rooms", "2", "--objects", "9",
            "--questions", str(QUESTIONS), "--no-video", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("long world seed 7: 181 frames at 1 Hz, 320x240")
    for name in ("questions.jsonl", "world.json", "bag/bag.mcap"):
        assert (tmp_path / name).read_bytes() == (paths.root / name).read_bytes(), name


@pytest.mark.parametrize(("extra", "message"), [
    (["--minutes", "x"], "--minutes must be a number"),
    (["--rooms", "3"], "--rooms must be an even number from 2 to 12"),
    (["--questions", "relative_direction=2"], "unknown question category"),
    (["--minutes", "0.1"], "duration must be at least 10 s"),
])
def test_bad_long_arguments_give_one_clear_line(extra: list[str], message: str,
                                                tmp_path: Path, capsys) -> None:
    assert main(["--out", str(tmp_path / "w"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not (tmp_path / "w").exists()

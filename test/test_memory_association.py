"""Rays associated with placed objects by geometry and label together: a wrong label is a
vote, not a second object; two kinds standing close stay two; labels the matcher joins are one
label; a lone ray is no place; the stated uncertainty covers the true place."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord, ObjectPlace, SeenObject
from embodied_r_ros.memory.embedder import MiniLMEmbedder
from embodied_r_ros.memory.labels import LabelMatcher
from embodied_r_ros.memory.placements import Placer, place_frames
from embodied_r_ros.memory.places import Now, place_notes

CHAIR, TABLE = (4.0, 2.0), (4.0, 3.0)


def view(stamp: float, pose: Pose, *things: tuple[str, tuple[float, float]],
         error: float = 0.0) -> tuple[FrameRecord, Pose]:
    """A frame at ``pose`` showing each labelled thing at its place, bearings off by
    ``error`` degrees."""
    objects = tuple(SeenObject(name, bearing_deg=math.degrees(math.atan2(
        q[1] - pose.y, q[0] - pose.x)) - pose.yaw_deg + error) for name, q in things)
    return FrameRecord(stamp, objects=objects), pose


POSES = [Pose(0.0, 0.0), Pose(0.0, -2.0), Pose(1.0, 5.0, 0.0, -45.0), Pose(-1.0, 2.5),
         Pose(2.0, -1.0, 0.0, 60.0), Pose(0.5, 4.0, 0.0, -30.0)]


def test_a_mislabelled_ray_through_a_placed_object_adds_a_vote_never_a_second_object() -> None:
    frames = [view(float(t), p, ("chair", CHAIR)) for t, p in enumerate(POSES)]
    # the VLM calls the chair a table twice, from two new places that cross wide
    frames += [view(10.0, Pose(6.0, -1.0, 0.0, 120.0), ("table", CHAIR)),
               view(11.0, Pose(7.0, 4.0, 0.0, 180.0), ("table", CHAIR)),
               view(12.0, Pose(6.5, 0.0, 0.0, 150.0), ("chair", CHAIR))]
    (chair,) = place_frames(frames)
    assert chair.label == "chair" and chair.votes == (("chair", 7), ("table", 2))
    assert chair.sightings == 9 and chair.position == pytest.approx(CHAIR, abs=1e-6)


def test_a_chair_beside_a_table_both_seen_often_stay_two_objects_with_their_names() -> None:
    frames = [view(float(t), p, ("chair", CHAIR), ("table", TABLE), error=(-1) ** t * 0.5)
              for t, p in enumerate(POSES)]
    placed = sorted(place_frames(frames), key=lambda p: p.label)
    assert [(p.label, p.votes) for p in placed] == [("chair", (("chair", 6),)),
                                                     ("table", (("table", 6),))]
    assert math.dist(placed[0].position, CHAIR) < 0.2 and math.dist(placed[1].position,
                                                                    TABLE) < 0.2


def test_labels_the_matcher_joins_are_counted_as_one(minilm: MiniLMEmbedder) -> None:
    names = ["sofa", "couch", "sofa", "couch", "sofa", "sofa"]
    frames = [view(float(t), p, (n, CHAIR)) for t, (p, n) in enumerate(zip(POSES, names,
                                                                          strict=True))]
    (joined,) = place_frames(frames, matcher=LabelMatcher(minilm))
    assert joined.votes == (("sofa", 6),) and joined.label == "sofa"
    (words,) = place_frames(frames)  # by head nouns alone: two labels of one object
    assert words.votes == (("sofa", 4), ("couch", 2)) and words.label == "sofa"


def test_a_lone_ray_is_never_answered_as_a_place() -> None:
    """A cup seen once, along one ray (no distance measured), is named only as seen; the
    chair, seen from three places, is placed."""
    frames = [view(float(t), p, ("chair", CHAIR)) for t, p in enumerate(POSES[:3])]
    frames.append(view(3.0, POSES[3], ("chair", CHAIR), ("cup", (3.0, 5.0))))
    placed = place_frames(frames)
    assert [p.label for p in placed] == ["chair"]
    placer = Placer("robot")
    for record, pose in frames:
        placer.add_frame(record, pose)
    assert [e.label for e in placer.pending] == ["cup"]  # waiting, not placed
    notes = place_notes(placed, "Where are the cup and the chair now?", [],
                        Now(60.0, 0.0, 0.0, 0.0))
    assert [n.name for n in notes if isinstance(n, ObjectPlace)] == ["chair"]


def test_the_stated_uncertainty_covers_the_true_place_on_a_small_world() -> None:
    """Forty objects, each seen on a walk past it from three to six places with bearings off
    by their stated error (1 degree, a quarter of a box's width): at least 90 % lie within
    the uncertainty stated, and none is placed twice."""
    rng = np.random.default_rng(7)
    frames, truth = [], []
    for k in range(40):
        target = (float(k) * 30.0, 0.0)  # far apart: one object per walk
        truth.append(target)
        extent = float(rng.uniform(2.0, 12.0))
        for j in range(int(rng.integers(3, 7))):
            spot = (target[0] + rng.uniform(-5.0, 5.0), rng.uniform(-6.0, -2.0))
            pose = Pose(spot[0], spot[1], 0.0, float(rng.uniform(60.0, 120.0)))
            sigma = max(1.0, extent / 4.0)
            bearing = math.degrees(math.atan2(target[1] - pose.y, target[0] - pose.x))
            obj = SeenObject("box", extent_deg=extent,
                             bearing_deg=bearing - pose.yaw_deg + float(rng.normal(0.0, sigma)))
            frames.append((FrameRecord(k * 100.0 + j * 5.0, objects=(obj,)), pose))
    placed = place_frames(frames)
    assert len(placed) <= len(truth)
    covered = [min(math.dist(p.position, t) for t in truth) <= p.uncertainty_m for p in placed]
    assert len(placed) >= 36 and sum(covered) >= 0.9 * len(placed)

"""Objects seen from one standpoint: a grounded box's bottom edge, with the camera's height and
pitch, is a floor distance; agreeing distances place a guess, stated as a guess, whose
uncertainty covers where the object truly is. A ray with no distance still places nothing."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from embodied_r_ros.core.config import CameraConfig
from embodied_r_ros.core.egomotion import camera_matrix
from embodied_r_ros.core.grounding import box_foot_deg, grounded_objects
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.records import FrameRecord, SeenObject
from embodied_r_ros.memory.placements import place_frames
from embodied_r_ros.memory.places import Now, place_notes
from embodied_r_ros.memory.rays import foot_range

HEIGHT_M, PITCH_DEG = 1.5, -10.0  # the long world's camera


def view(pose: Pose, target: tuple[float, float]) -> tuple[float, float]:
    """(bearing_deg, foot_deg) of the floor point ``target`` in the image of the camera at
    ``pose``: a pinhole projection, as a box's centre column and bottom edge give them."""
    dx, dy = target[0] - pose.x, target[1] - pose.y
    yaw, p = math.radians(pose.yaw_deg), math.radians(pose.pitch_deg)
    fwd = dx * math.cos(yaw) + dy * math.sin(yaw)
    left = -dx * math.sin(yaw) + dy * math.cos(yaw)
    up = -pose.z
    depth = fwd * math.cos(p) + up * math.sin(p)  # along the optical axis
    down = fwd * math.sin(p) - up * math.cos(p)
    return math.degrees(math.atan(left / depth)), math.degrees(math.atan(down / depth))


def test_a_box_bottom_edge_is_an_angle_below_the_axis_and_a_cut_off_box_has_none() -> None:
    k = camera_matrix(CameraConfig(hfov_deg=90.0), 640, 480)  # fy 320, cy 239.5
    assert box_foot_deg((0, 0, 10, 240), k, 480) == pytest.approx(0.0)
    assert box_foot_deg((0, 0, 10, 480), k, 480) is None  # it reaches the bottom row
    (obj,) = grounded_objects('[{"bbox_2d": [0, 0, 10, 400], "label": "chair"}]',
                              (640, 480), (640, 480), k, 8)
    assert obj.foot_deg == pytest.approx(math.degrees(math.atan((399.5 - 239.5) / 320.0)))


@pytest.mark.parametrize("bearing", [0.0, 20.0, -30.0])
def test_the_foot_angle_gives_back_the_floor_distance(bearing: float) -> None:
    pose = Pose(0.0, 0.0, HEIGHT_M, 0.0, PITCH_DEG)
    for distance in (1.5, 4.0, 9.0):
        # the floor point seen at that bearing's image column and that distance
        target = (distance * math.cos(math.radians(bearing)),
                  distance * math.sin(math.radians(bearing)))
        b, foot = view(pose, target)
        assert foot_range(b, foot, pose) == pytest.approx(distance, rel=1e-9)
    assert foot_range(0.0, 30.0, Pose(0.0, 0.0, 0.0, 0.0, PITCH_DEG)) is None  # no height
    assert foot_range(0.0, -15.0, pose) is None  # above the horizon: never meets the floor


def test_ranged_guesses_from_one_standpoint_are_guesses_whose_uncertainty_covers_the_truth(
) -> None:
    """A small world seen only from the doorway, the camera turning in place: every object is
    placed as a guess (not triangulated), its stated uncertainty covering its true place
    though each box edge is off by a Gaussian of half a degree, and no looser than the
    measured distance's error says."""
    rng = random.Random(5)
    objects = {"chair": (3.0, 1.0), "table": (5.5, -1.5), "lamp": (2.2, -0.8),
               "sofa": (7.0, 2.5)}
    frames = []
    for t, yaw in enumerate((-10.0, 0.0, 10.0)):
        pose = Pose(0.0, 0.0, HEIGHT_M, yaw, PITCH_DEG)
        seen = []
        for name, place in objects.items():
            b, foot = view(pose, place)
            seen.append(SeenObject(name, bearing_deg=b + rng.gauss(0.0, 0.5),
                                   foot_deg=foot + rng.gauss(0.0, 0.5), extent_deg=4.0))
        frames.append((FrameRecord(float(t), objects=tuple(seen)), pose))
    placed = {p.label: p for p in place_frames(frames)}
    assert set(placed) == set(objects)
    for name, p in placed.items():
        truth = objects[name]
        assert not p.triangulated
        error = math.dist(p.position, truth)
        distance = math.dist((0.0, 0.0), truth)
        assert error <= p.uncertainty_m <= 0.45 * distance
        assert p.sightings == 3
    here = Now(2.0, 0.0, 0.0, 10.0)
    notes = place_notes(list(placed.values()), "Where is the sofa?", [], here)
    (sofa,) = notes
    assert sofa.triangulated is False and sofa.uncertainty_m == placed["sofa"].uncertainty_m


def test_without_a_measured_distance_one_standpoint_places_nothing() -> None:
    """The same views with no foot angle (a box cut off by the image's bottom), or from a
    pose that states no height: rays alone, from one position, never place."""
    objects = {"chair": (3.0, 1.0), "table": (5.5, -1.5)}
    for height, with_foot in ((HEIGHT_M, False), (0.0, True)):
        frames = []
        for t, yaw in enumerate((-10.0, 0.0, 10.0)):
            pose = Pose(0.0, 0.0, height, yaw, PITCH_DEG)
            seen = []
            for name, place in objects.items():
                b, foot = view(Pose(0.0, 0.0, HEIGHT_M, yaw, PITCH_DEG), place)
                seen.append(SeenObject(name, bearing_deg=b,
                                       foot_deg=foot if with_foot else None))
            frames.append((FrameRecord(float(t), objects=tuple(seen)), pose))
        assert place_frames(frames) == []


def test_a_measured_distance_keeps_a_ray_off_an_object_behind_its_own() -> None:
    """A mislabelled ray (a "chair" called "lamp") through a well-placed lamp 4 m behind the
    chair: its measured distance says it is not the lamp, so the lamp keeps its place and
    votes."""
    lamp = (8.0, 0.0)
    frames = [(FrameRecord(float(t), objects=(SeenObject("lamp", bearing_deg=math.degrees(
        math.atan2(lamp[1] - y, lamp[0] - x))),)), Pose(x, y)) for t, (x, y) in
        enumerate([(0.0, 3.0), (0.0, -3.0), (1.0, 0.5), (0.5, -1.5)])]
    pose = Pose(0.0, 0.0, HEIGHT_M, 0.0, PITCH_DEG)
    b, foot = view(pose, (4.0, 0.0))  # the chair, in line with the lamp
    frames.append((FrameRecord(10.0, objects=(SeenObject("lamp", bearing_deg=b,
                                                         foot_deg=foot),)), pose))
    (placed,) = place_frames(frames)
    assert placed.votes == (("lamp", 4),)
    assert np.allclose(placed.position, lamp, atol=1e-6)


def test_a_measured_distance_and_a_ray_through_it_from_elsewhere_place_the_object() -> None:
    """A chair seen once from afar (its box's foot gives its distance) and once close up from
    another place (its foot below the image, no distance): the close ray passes through the
    measured place, so the two place the chair, within the stated uncertainty. Either ray
    alone places nothing, nor does a close ray that misses the measured place."""
    chair = (4.0, 1.0)
    far = Pose(0.0, 0.0, HEIGHT_M, 10.0, PITCH_DEG)
    b, foot = view(far, chair)
    first = (FrameRecord(0.0, objects=(SeenObject("chair", bearing_deg=b + 0.4,
                                                  foot_deg=foot + 0.3),)), far)
    near = Pose(2.5, -0.5, HEIGHT_M, 45.0, PITCH_DEG)
    close = [(FrameRecord(5.0, objects=(SeenObject("chair", bearing_deg=view(near, spot)[0]),)),
              near) for spot in (chair, (4.0, 3.0))]
    (placed,) = place_frames([first, close[0]])
    assert placed.sightings == 2 and placed.votes == (("chair", 2),)
    assert math.dist(placed.position, chair) <= placed.uncertainty_m <= 0.45 * 4.1
    assert place_frames([first]) == [] and place_frames([close[0]]) == []
    assert place_frames([first, close[1]]) == []

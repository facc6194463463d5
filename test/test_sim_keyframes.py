"""The core's key-frame extractor and visual ego-motion against the simulator's ground truth."""

from __future__ import annotations

import math

import pytest
from sim_fixtures import rendered

from embodied_r_ros.core.actions import primary_action
from embodied_r_ros.core.config import KeyframeConfig
from embodied_r_ros.core.keyframes import KeyframeExtractor
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.sim.trajectory import apply_action
from lab.true_overlap import true_homography_overlap, true_overlap

BAND = 0.06  # tolerance around the 0.5 threshold: ORB corners are off by a pixel or two


def test_true_overlap_measures_agree_for_a_pure_rotation() -> None:
    """A rotation induces an exact homography, so both ground truths must coincide."""
    r = rendered()
    w = r.world
    ref = Pose(w.scene.length / 2, w.scene.width / 2, 1.5, 20.0, -10.0)
    for action, amount in (("rotate left", 30.0), ("rotate right", 45.0),
                           ("tilt upward", 20.0), ("rotate right", 15.0)):
        cur = apply_action(ref, action, amount)
        coverage = true_overlap(w.scene, w.camera, ref, cur)
        fitted = true_homography_overlap(w.scene, w.camera, ref, cur)
        assert fitted == pytest.approx(coverage, abs=0.03), (action, amount)
    assert true_overlap(w.scene, w.camera, ref, ref) == 1.0
    # Turned so far that the current view reaches 90 degrees from the reference axis: the
    # warped rectangle crosses the line at infinity, which the official measure cannot score.
    far = apply_action(ref, "rotate left", 60.0)
    assert true_homography_overlap(w.scene, w.camera, ref, far) is None
    assert 0.0 < true_overlap(w.scene, w.camera, ref, far) < 0.3
    assert true_overlap(w.scene, w.camera, ref, apply_action(ref, "rotate left", 180.0)) == 0.0


def test_key_frames_are_where_true_overlap_with_the_last_key_frame_drops_below_half() -> None:
    r = rendered()
    w = r.world
    ex = KeyframeExtractor(KeyframeConfig(sample_fps=1.0, min_frames=0, max_frames=0))
    ref: int | None = None
    checked = keys = 0
    for i, (image, t) in enumerate(zip(r.images, w.times, strict=True)):
        d = ex.push(image, float(t))
        if not d.sampled:
            continue
        if ref is None:
            assert d.keyframe and d.reason == "first"
        else:
            truth = true_homography_overlap(w.scene, w.camera, w.poses[ref], w.poses[i])
            coverage = true_overlap(w.scene, w.camera, w.poses[ref], w.poses[i])
            if d.reason in ("overlap", "overlap_ok"):
                assert truth is not None
                # the extractor's own estimate tracks the truth ...
                assert d.overlap == pytest.approx(truth, abs=0.15), (i, d)
                # ... and so does its decision, outside a narrow band around 0.5
                if d.keyframe:
                    assert truth < 0.5 + BAND, (i, d.overlap, truth)
                else:
                    assert truth >= 0.5 - BAND, (i, d.overlap, truth)
                checked += 1
            else:
                # no usable homography: only where the views have really drifted apart
                assert d.keyframe and coverage < 0.7, (i, d.reason, coverage)
            keys += d.keyframe
        if d.keyframe:
            ref = i
    assert checked >= 20 and keys >= 4


def test_visual_ego_motion_names_the_true_action_of_each_segment() -> None:
    egomotion = pytest.importorskip("embodied_r_ros.core.egomotion")
    r = rendered()
    w = r.world
    kf = KeyframeConfig()
    cam = w.camera.to_config()
    results = []
    for seg in w.trajectory.segments:
        i0 = math.ceil(seg.t0 * 10 - 1e-9)
        i1 = min(i0 + 10, math.floor(seg.t1 * 10 + 1e-9), w.n_frames - 1)
        if i1 - i0 < 5:
            continue
        est = egomotion.motion_between(r.images[i0], r.images[i1], kf, cam)
        results.append((seg.action, primary_action(est) if est is not None else None))
    rotations = [(t, e) for t, e in results if not t.startswith("move")]
    assert rotations and all(t == e for t, e in rotations), rotations
    accuracy = sum(t == e for t, e in results) / len(results)
    assert accuracy >= 0.8, results

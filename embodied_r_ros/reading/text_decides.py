"""Whether the synthetic world's own perception text decides a question: the world asks only
those (the generator's check, :data:`~embodied_r_ros.sim.generate.DecidesFor`).

A question about a clip is answered by a reader of the text the robot writes for that clip: the
clip's key frames as the frame buffer keeps them, the odometry motions between them, and what
the ``offline`` profile's geometric perception finds in each (:meth:`EmbodiedR.robot_keyframes
<embodied_r_ros.core.pipeline.EmbodiedR.robot_keyframes>` and :meth:`~embodied_r_ros.core
.pipeline.EmbodiedR.perceive_window`, as ``embodied-r-train build`` does for the world's bag).
The generator draws its candidates as before and keeps one only where the rule reader reaches
the answer from that record clear of every decision boundary
(:func:`~embodied_r_ros.reading.text_margins.reason_to_skip`, the margins the odometry
questions keep), reading what the draft asks from its basis, and counts what it skips by
category and reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.perception_text import stated_view
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.profiles import load_config
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord
from embodied_r_ros.reading.text_margins import reason_to_skip
from embodied_r_ros.recordings.bags import CameraInfo
from embodied_r_ros.sim.question_basis import QuestionBasis
from embodied_r_ros.sim.question_rows import Draft
from embodied_r_ros.sim.world import World


def odometry_pose(pose: Pose) -> Pose:
    """``pose`` as the world's bag carries it (a quaternion) and a reader takes it back."""
    return Pose.from_quaternion((pose.x, pose.y, pose.z), pose.quaternion())


class TextDecides:
    """The check of one rendered world (``frames``: its images in order); call it on a draft.

    ``config``: the perception the world's datasets and demo run (default: ``offline``); it
    must be the geometric one, which needs no model.
    """

    def __init__(self, world: World, frames: Sequence[np.ndarray],
                 config: Config | None = None) -> None:
        config = config or load_config("offline")
        if config.perception.backend != "geometric":
            raise ValueError("the world's questions are checked with the geometric perception")
        self.world = world
        self.frames = frames
        self.pipeline = EmbodiedR(config)
        assert self.pipeline.perceiver is not None  # geometric: no model to load
        self.style = self.pipeline.perceiver.style
        cam = world.camera  # the intrinsics the world's bag carries, as a build reads them
        self.camera = CameraInfo(cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy
                                 ).to_config(config.perception.camera)
        self.track = [(world.stamp_ns(i) / 1e9, odometry_pose(p))
                      for i, p in enumerate(world.poses)]
        self.skipped: Counter[tuple[str, str]] = Counter()
        self._clips: dict[tuple[int, int], tuple[FrameRecord, ...] | None] = {}

    def clip(self, start: int, end: int) -> tuple[FrameRecord, ...] | None:
        """The records of the frames ``start..end`` (indices) as the robot perceives them;
        None where no key frame is left."""
        if (start, end) not in self._clips:
            frames = ((self.frames[i], self.world.stamp_ns(i) / 1e9)
                      for i in range(start, end + 1))
            selection, images, motions = self.pipeline.robot_keyframes(frames, self.track)
            record = None
            if selection.images:
                result = self.pipeline.perceive_window(images, selection.stamps, None, motions,
                                                       camera=self.camera)
                record = result.record.frames
            self._clips[(start, end)] = record
        return self._clips[(start, end)]

    def reason_to_skip(self, d: Draft) -> str | None:
        """None where the clip's text decides ``d``'s answer (its first choice), else why not."""
        frames = self.clip(int(d.start), int(d.end))
        if frames is None:
            return "no key frame in the clip"
        options = tuple(f"{chr(65 + i)}. {c}" for i, c in enumerate(d.choices))
        record = PerceptionRecord(frames, d.question, options,
                                  format_question(d.question, options), self.style)
        return reason_to_skip(d.category, stated_view(record), QuestionBasis.from_dict(d.basis),
                              "A")

    def __call__(self, d: Draft) -> bool:
        why = self.reason_to_skip(d)
        if why is not None:
            self.skipped[(d.category, why)] += 1
        return why is None

    def close(self) -> None:
        self.pipeline.close()

    def skipped_by_category(self) -> dict[str, dict[str, int]]:
        """What was skipped, ``{category: {reason: count}}``, for the manifest."""
        out: dict[str, dict[str, int]] = {}
        for (category, why), n in sorted(self.skipped.items()):
            out.setdefault(category, {})[why] = n
        return out

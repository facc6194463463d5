"""Whether the perception text a question will be built with decides its answer.

A question drawn from a recording's odometry is true of the robot's path, but the reasoning LM
reads only the perception text: the key frames ``build`` will select for the question's clip,
the motions between them rounded as the text rounds them, and their ages. :class:`TextCheck`
makes that text's record for a draft exactly as ``build`` does (the same key-frame selection, the
same odometry rule), reads it as the text states it with the rule reader, and keeps the draft
only when the text decides the same answer clear of every decision boundary; otherwise it names
the reason, for the report to count.
"""

from __future__ import annotations

import math
from typing import Any

from embodied_r_ros.core.config import Config
from embodied_r_ros.core.perception_text import PerceptionText, stated_view
from embodied_r_ros.core.pipeline import EmbodiedR
from embodied_r_ros.core.reasoning import format_question
from embodied_r_ros.core.records import FrameRecord, PerceptionRecord, TextStyle
from embodied_r_ros.reading.dead_reckoning import poses
from embodied_r_ros.reading.rule_reader import (
    bearing_from_last,
    place_of,
    progress_step,
    solve_action_generation,
)
from embodied_r_ros.reading.text_margins import (
    DISAGREES,
    NEAR,
    UNDECIDED,
    UNSEEN,
    reason_to_skip,
)
from embodied_r_ros.sim import question_basis
from embodied_r_ros.sim.question_basis import QuestionBasis
from embodied_r_ros.sim.question_rows import Draft
from embodied_r_ros.sim.question_rules import (
    DISTANCE_BANDS,
    DISTANCE_MARGIN_M,
    clear_quadrant,
    turn_of,
)
from embodied_r_training.data.bag_source import BagFrames
from embodied_r_training.data.row_records import perception_of
from embodied_r_training.data.samples import Sample, SkipSample

#: how near a band edge the text's distance from the start may be (metres), as the odometry's
BAND_MARGIN_M = 0.25
GAP = "a key frame has no odometry"
OFF_PLAN = "the key frames do not follow the plan"
UNPLACED = "the text does not locate the place"


class TextCheck:
    """The text ``build`` will write for each clip of a recording, and what it decides."""

    def __init__(self, bag: Any, image_topic: str, odom_topic: str, config: Config,
                 exact_ns: dict[float, int]) -> None:
        # key frames and odometry only: no perception model is loaded (a VLM profile's too)
        self.frames_for = BagFrames(bag, EmbodiedR(config), image_topic,
                                    odom_topic)
        self.layout = config.perception.frame_layout
        self.exact_ns = exact_ns
        self._clips: dict[tuple[int, int], tuple[FrameRecord, ...] | None] = {}

    def _frames(self, draft: Draft) -> tuple[FrameRecord, ...] | None:
        clip = (self.exact_ns[draft.start], self.exact_ns[draft.end])
        if clip not in self._clips:
            sample = Sample("check", "", "", "", [], "A", "", {"window_ns": clip})
            try:
                kf = self.frames_for(sample)
            except SkipSample:
                kf = None
            if kf is None or any(m is None for m in kf.motions):
                self._clips[clip] = None
            else:  # the motions alone: what the objects show does not decide these
                self._clips[clip] = (FrameRecord(kf.stamps[0]), *(
                    FrameRecord(s, motion=m, motion_source="odometry")
                    for s, m in zip(kf.stamps[1:], kf.motions, strict=True)))
        return self._clips[clip]

    def text(self, draft: Draft) -> PerceptionText | None:
        """The draft as the LM will read it, its first choice lettered A; None without one."""
        frames = self._frames(draft)
        if frames is None:
            return None
        options = [f"{chr(65 + i)}. {c}" for i, c in enumerate(draft.choices)]
        return stated_view(PerceptionRecord(frames, draft.question, tuple(options),
                                            format_question(draft.question, options),
                                            TextStyle(self.layout)))

    def reason_to_skip(self, draft: Draft) -> str | None:
        """None when the text decides the draft's answer (its first choice) clearly."""
        p = self.text(draft)
        if p is None:
            return GAP
        path = poses(p.frames)
        last = path[-1]
        answer = draft.choices[0]
        asks = _asks(draft)
        if draft.category in ("relative_direction", "route_planning"):
            place = place_of(p, path, asks.places[0]) if asks.places else None
            if place is None:
                return UNPLACED
            bearing = bearing_from_last(path, place)
            if draft.category == "relative_direction":
                decided = clear_quadrant(bearing)
            else:
                decided = "Go forward" if abs(bearing) <= 15.0 else turn_of(bearing)
            return NEAR if decided is None else None if decided == answer else DISAGREES
        if draft.category == "relative_distance":
            if asks.kind == "how_far":
                d = math.dist((last.x, last.y), (path[0].x, path[0].y))
                edges = [e for lo, hi, _ in DISTANCE_BANDS for e in (lo, hi) if 0 < e < math.inf]
                if min(abs(d - e) for e in edges) < BAND_MARGIN_M:
                    return NEAR
                band = next(text for lo, hi, text in DISTANCE_BANDS if lo <= d < hi)
                return None if band == answer else DISAGREES
            places = [place_of(p, path, str(said[0])) if said else None
                      for said in asks.options]
            if any(pl is None for pl in places):
                return UNPLACED
            dist = [math.dist((last.x, last.y), (pl.x, pl.y)) for pl in places if pl]
            if abs(dist[0] - dist[1]) < DISTANCE_MARGIN_M:
                return NEAR
            return None if dist[0] < dist[1] else DISAGREES
        if draft.category == "progress_evaluation":
            return None if progress_step(p, asks) == draft.basis.get("step") else OFF_PLAN
        if draft.category == "action_generation":
            return None if solve_action_generation(p, asks).letter == "A" else DISAGREES
        return None


def _asks(draft: Draft) -> QuestionBasis:
    """What an odometry draft asks (its basis; its options in the draft's order)."""
    return QuestionBasis.from_dict(draft.basis)



# ------------------------------------------------- built rows (the synthetic world's questions)

__all__ = ["DISAGREES", "GAP", "NEAR", "OFF_PLAN", "UNDECIDED", "UNPLACED", "UNSEEN",
           "TextCheck", "row_reason_to_skip"]


def row_reason_to_skip(row: dict[str, Any]) -> str | None:
    """None when the built row's perception text decides its answer clearly
    (:func:`~embodied_r_ros.reading.text_margins.reason_to_skip`), else why not."""
    stated = perception_of(row)
    return reason_to_skip(str(row.get("category")), stated, question_basis.of_row(row, stated),
                          str(row["solution"]))

"""The result of one spatial question, one type for every way of asking it.

:meth:`EmbodiedR.ask <embodied_r_ros.core.pipeline.EmbodiedR.ask>` returns it, the query runner
answers a service call or an action goal with it, and the Python client turns a ``SpatialQuery``
response back into it. Its fields are named as those of ``SpatialQuery.srv`` (stamps and
durations in seconds); the fields a response does not carry keep their defaults on the client's
side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embodied_r_ros.core.reasoning import Reasoning
from embodied_r_ros.core.records import FrameRecord


@dataclass(frozen=True)
class MemoryFrameUsed:
    """A stored key frame a scope-memory answer read (``SpatialQuery``'s ``memory_frames``)."""

    stamp: float
    #: seconds before the newest stored frame, the "now" time phrases count from
    age_sec: float
    camera: str = ""
    #: why the retrieval selected it ("latest", "time:10 minutes ago", "text", ...)
    reasons: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class QueryResult:
    """An answer, or (``success`` false) an error code and one line saying why there is none."""

    success: bool = False
    error_code: str = ""
    error: str = ""
    #: the option letter ("B"), or the text of an open answer
    answer: str = ""
    #: the option's text ("B. behind you"), or the open answer
    answer_text: str = ""
    #: the text of the reasoning LM's ``<think>`` block
    reasoning: str = ""
    #: the reasoning LM's whole reply, and whether it has the ``<think>``/``<answer>`` format
    raw: str = ""
    well_formed: bool = False
    #: the perception text the reasoning LM read, and the records of its key frames
    perception: str = ""
    frames: tuple[FrameRecord, ...] = ()
    key_frame_stamps: list[float] = field(default_factory=list)
    #: positions of the key frames in the video (a video file's answer only)
    key_frame_indices: list[int] = field(default_factory=list)
    keyframes_sec: float = 0.0
    perception_sec: float = 0.0
    reasoning_sec: float = 0.0
    total_sec: float = 0.0
    #: the perception text came from the reply cache (no VLM call was made)
    perception_from_cache: bool = False
    #: scope memory: the stored key frames the answer was read from, oldest first
    memory_frames: list[MemoryFrameUsed] = field(default_factory=list)

    @classmethod
    def failure(cls, code: str, error: str, total_sec: float = 0.0) -> QueryResult:
        return cls(success=False, error_code=code, error=error, total_sec=total_sec)

    @classmethod
    def answered(cls, reasoning: Reasoning, perception: str, **fields: Any) -> QueryResult:
        """A successful result from the reasoning LM's parsed reply; ``fields`` add the
        perception's parts, stamps and timings."""
        return cls(success=True, answer=reasoning.answer, answer_text=reasoning.answer_text,
                   reasoning=reasoning.think, raw=reasoning.raw,
                   well_formed=reasoning.well_formed, perception=perception, **fields)

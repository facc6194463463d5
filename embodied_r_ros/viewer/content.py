"""What an operator watches, built once for both ROS topics and the Foxglove channels.

The nodes turn what they already hold into these records (a key frame's grounded boxes, the
memory's placed objects, the robot's path, one trace per answered question) and hand them to
their ROS publishers and to a :class:`ViewerFeed`; the feed passes them to the in-process
Foxglove server when the viewer is on, and does nothing when it is off. Nothing here imports
ROS or the Foxglove SDK.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied_r_ros.agent.frame_store import Window
from embodied_r_ros.core.poses import Pose
from embodied_r_ros.core.query_result import QueryResult
from embodied_r_ros.core.records import FrameRecord
from embodied_r_ros.core.request import SCOPE_MEMORY, SCOPE_WINDOW
from embodied_r_ros.memory.placements import Placement

#: poses the path keeps (the newest)
PATH_POSES = 2000
#: the frame poses, the path and placed objects are in (odometry's)
WORLD_FRAME = "odom"


@dataclass(frozen=True)
class KeyFrameImage:
    """A key frame as its JPEG (what the frame buffer stored), and as RGB where the publisher
    has it (the frame buffer's ``~/key_frames`` is a raw image)."""

    camera: str
    stamp: float
    jpeg: bytes = field(repr=False)
    image: np.ndarray | None = field(default=None, repr=False, compare=False)
    frame_id: str = ""


@dataclass(frozen=True)
class ImageBox:
    """One object a VLM grounded: its label and box in the key frame's pixels."""

    label: str
    box: tuple[float, float, float, float]
    confidence: float | None = None


@dataclass(frozen=True)
class FrameBoxes:
    """The boxes of one key frame, stamped like it."""

    camera: str
    stamp: float
    boxes: tuple[ImageBox, ...]


def frame_boxes(camera: str, record: FrameRecord) -> FrameBoxes:
    """The boxes of a described key frame's objects (those without a box are left out)."""
    return FrameBoxes(camera, record.stamp, tuple(
        ImageBox(o.name, o.box, o.confidence) for o in record.objects if o.box is not None))


@dataclass(frozen=True)
class PlacedObject:
    """Where the memory believes an object is, how sure it is, and which labels said so."""

    key: str
    label: str
    x: float
    y: float
    uncertainty_m: float
    votes: tuple[tuple[str, int], ...]
    colour: str | None = None
    triangulated: bool = True

    @property
    def text(self) -> str:
        """``mug (mug 3, cup 1)``: the label and the labels its sightings gave, counted."""
        votes = ", ".join(f"{label} {n}" for label, n in self.votes)
        return f"{self.label} ({votes})" if votes else self.label


def placed_objects(placements: Iterable[Placement]) -> tuple[PlacedObject, ...]:
    """The placements as viewer objects, in a stable order (so a change is seen as one)."""
    return tuple(sorted(
        (PlacedObject(f"{p.robot}/{p.id}", p.label, p.x, p.y, p.uncertainty_m,
                      tuple(p.votes), p.colour, p.triangulated) for p in placements),
        key=lambda o: o.key))


@dataclass(frozen=True)
class ObjectMap:
    """Every placed object of the memory, as read at ``stamp``."""

    stamp: float
    objects: tuple[PlacedObject, ...]


@dataclass(frozen=True)
class PathPose:
    stamp: float
    pose: Pose


class PathTrack:
    """The robot's last :data:`PATH_POSES` poses, one per stored frame; thread-safe."""

    def __init__(self, size: int = PATH_POSES) -> None:
        self._poses: deque[PathPose] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, stamp: float, pose: Pose) -> bool:
        """Keep ``pose``; False (not kept) when it is not newer than the last one."""
        with self._lock:
            if self._poses and stamp <= self._poses[-1].stamp:
                if stamp < self._poses[-1].stamp - 1.0:  # a new timeline (a bag replayed)
                    self._poses.clear()
                else:
                    return False
            self._poses.append(PathPose(stamp, pose))
            return True

    def poses(self) -> tuple[PathPose, ...]:
        with self._lock:
            return tuple(self._poses)

    def __len__(self) -> int:
        return len(self._poses)


@dataclass(frozen=True)
class QueryTrace:
    """Everything that made one answer (``embodied_r_interfaces/msg/QueryTrace``)."""

    stamp: float
    question: str
    options: tuple[str, ...]
    scope: str
    camera: str
    key_frame_stamps: tuple[float, ...]
    perception: str
    thinking: str
    answer: str
    answer_text: str
    stages: tuple[tuple[str, float], ...]
    success: bool
    error_code: str
    error: str
    #: the window's key frames (JPEG), in the order of ``key_frame_stamps``; none for scope
    #: memory (its frames are thumbnails in the memory)
    key_frames: tuple[KeyFrameImage, ...] = field(default=(), repr=False)


def query_trace(stamp: float, question: str, options: Sequence[str], scope: str, camera: str,
                result: QueryResult, window: Window | None) -> QueryTrace:
    """The trace of one answer: the request as read, the result, and the window's frames."""
    scope = scope or SCOPE_WINDOW
    frames: tuple[KeyFrameImage, ...] = ()
    if window is not None and result.success:
        frames = tuple(KeyFrameImage(camera, s, j)
                       for s, j in zip(window.stamps, window.jpegs, strict=True))
    return QueryTrace(
        stamp=stamp, question=question, options=tuple(options), scope=scope,
        camera="" if scope == SCOPE_MEMORY else camera,
        key_frame_stamps=tuple(result.key_frame_stamps), perception=result.perception,
        thinking=result.reasoning, answer=result.answer, answer_text=result.answer_text,
        stages=(("perception", result.perception_sec), ("reasoning", result.reasoning_sec),
                ("total", result.total_sec)),
        success=result.success, error_code=result.error_code, error=result.error,
        key_frames=frames)


def trace_json(trace: QueryTrace) -> dict[str, Any]:
    """The trace as the viewer's JSON (the message's fields; stamps in seconds)."""
    return {"stamp": trace.stamp, "question": trace.question, "options": list(trace.options),
            "scope": trace.scope, "camera": trace.camera,
            "key_frame_stamps": list(trace.key_frame_stamps), "perception": trace.perception,
            "thinking": trace.thinking, "answer": trace.answer,
            "answer_text": trace.answer_text,
            "stage_names": [name for name, _ in trace.stages],
            "stage_sec": [sec for _, sec in trace.stages], "success": trace.success,
            "error_code": trace.error_code, "error": trace.error}


Sink = Callable[[str, object], None]


class ViewerFeed:
    """Where nodes hand the viewer what they publish, by resolved topic name. With no sink
    (the viewer off) :attr:`active` is false and callers build nothing for it."""

    def __init__(self) -> None:
        self._sinks: list[Sink] = []

    @property
    def active(self) -> bool:
        return bool(self._sinks)

    def add_sink(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, topic: str, item: object) -> None:
        for sink in self._sinks:
            sink(topic, item)


#: the JSON fields of a ``/embodied_r/query`` call, as in ``SpatialQuery.srv``, and their types
REQUEST_FIELDS: dict[str, tuple[type, ...]] = {
    "question": (str,), "options": (list,), "window_sec": (int, float), "camera": (str,),
    "scope": (str,)}


class BadCall(ValueError):
    """A viewer service call that is not a SpatialQuery request; the message says why."""


def request_fields(payload: bytes) -> dict[str, Any]:
    """A ``/embodied_r/query`` call's JSON as SpatialQuery's fields; raises :class:`BadCall`
    naming what was wrong (the request contract itself is the query runner's)."""
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadCall(f"the request is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadCall("the request must be a JSON object of SpatialQuery's fields")
    unknown = sorted(set(data) - set(REQUEST_FIELDS))
    if unknown:
        raise BadCall(f"unknown field(s) {unknown}; SpatialQuery has {list(REQUEST_FIELDS)}")
    for name, value in data.items():
        kinds = REQUEST_FIELDS[name]
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise BadCall(f"field '{name}' must be {' or '.join(k.__name__ for k in kinds)}, "
                          f"not {type(value).__name__}")
    if not all(isinstance(o, str) for o in data.get("options", [])):
        raise BadCall("field 'options' must be a list of strings")
    if "question" not in data:
        raise BadCall("field 'question' is missing")
    return data


def result_json(result: QueryResult) -> dict[str, Any]:
    """A query's result as SpatialQuery's response fields (stamps in seconds)."""
    return {"success": result.success, "error_code": result.error_code, "error": result.error,
            "answer": result.answer, "answer_text": result.answer_text,
            "reasoning": result.reasoning, "perception": result.perception,
            "key_frame_stamps": list(result.key_frame_stamps),
            "perception_sec": result.perception_sec, "reasoning_sec": result.reasoning_sec,
            "total_sec": result.total_sec,
            "memory_frames": [{"stamp": f.stamp, "age_sec": f.age_sec, "camera": f.camera,
                               "reasons": list(f.reasons), "description": f.description}
                              for f in result.memory_frames]}

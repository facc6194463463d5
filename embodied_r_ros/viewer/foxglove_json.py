"""The viewer's records as JSON messages in Foxglove's own schemas, as the memory's MCAP export
writes them (:mod:`embodied_r_ros.memory.export`): the 3D, Image and Raw Messages panels read
them with no plug-in. Key frames are ``foxglove.CompressedImage``, boxes
``foxglove.ImageAnnotations``, the path ``foxglove.PosesInFrame``, placed objects
``foxglove.SceneUpdate`` (each a sphere, a disc as wide as its uncertainty, its label and label
votes), a trace the ``QueryTrace`` message's fields. The SDK is not imported here.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

from embodied_r_ros.memory.export import SCHEMAS, foxglove_pose, foxglove_time
from embodied_r_ros.viewer.content import (
    WORLD_FRAME,
    FrameBoxes,
    KeyFrameImage,
    ObjectMap,
    PathPose,
    trace_json,
)

_COLOR = {"type": "object", "properties": {k: {"type": "number"} for k in "rgba"}}
_POINT2 = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
#: the JSON schemas beside the export's (the fields written here)
VIEWER_SCHEMAS: dict[str, dict[str, Any]] = {
    **SCHEMAS,
    "foxglove.ImageAnnotations": {
        "title": "foxglove.ImageAnnotations", "type": "object",
        "properties": {
            "points": {"type": "array", "items": {"type": "object", "properties": {
                "timestamp": SCHEMAS["foxglove.Log"]["properties"]["timestamp"],
                "type": {"type": "integer"}, "points": {"type": "array", "items": _POINT2},
                "outline_color": _COLOR, "thickness": {"type": "number"}}}},
            "texts": {"type": "array", "items": {"type": "object", "properties": {
                "timestamp": SCHEMAS["foxglove.Log"]["properties"]["timestamp"],
                "position": _POINT2, "text": {"type": "string"}, "font_size": {"type": "number"},
                "text_color": _COLOR, "background_color": _COLOR}}}}},
    "embodied_r_interfaces.QueryTrace": {"title": "embodied_r_interfaces.QueryTrace",
                                         "type": "object"},
}
_LINE_LOOP = 2  # foxglove.PointsAnnotationType
_GREEN = {"r": 0.1, "g": 0.9, "b": 0.2, "a": 1.0}
_WHITE = {"r": 1.0, "g": 1.0, "b": 1.0, "a": 1.0}
_SHADE = {"r": 0.0, "g": 0.0, "b": 0.0, "a": 0.6}
_GREY = {"r": 0.6, "g": 0.6, "b": 0.6}
_UP = {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}


def key_frame(item: KeyFrameImage) -> dict[str, Any]:
    return {"timestamp": foxglove_time(item.stamp), "frame_id": item.camera, "format": "jpeg",
            "data": base64.b64encode(item.jpeg).decode("ascii")}


def boxes(item: FrameBoxes) -> dict[str, Any]:
    t = foxglove_time(item.stamp)
    points, texts = [], []
    for b in item.boxes:
        x1, y1, x2, y2 = b.box
        points.append({"timestamp": t, "type": _LINE_LOOP, "thickness": 2.0,
                       "outline_color": _GREEN,
                       "points": [{"x": x1, "y": y1}, {"x": x2, "y": y1}, {"x": x2, "y": y2},
                                  {"x": x1, "y": y2}]})
        label = b.label if b.confidence is None else f"{b.label} {b.confidence:.2f}"
        texts.append({"timestamp": t, "position": {"x": x1, "y": y1}, "text": label,
                      "font_size": 12.0, "text_color": _WHITE, "background_color": _SHADE})
    return {"points": points, "texts": texts}


def path(poses: Sequence[PathPose]) -> dict[str, Any]:
    last = poses[-1].stamp if poses else 0.0
    return {"timestamp": foxglove_time(last), "frame_id": WORLD_FRAME,
            "poses": [foxglove_pose(p.pose) for p in poses]}


def _at(x: float, y: float, z: float) -> dict[str, Any]:
    return {"position": {"x": x, "y": y, "z": z}, "orientation": _UP}


def objects(item: ObjectMap) -> dict[str, Any]:
    """Every placed object, replacing what was shown (a deletion of all first)."""
    t = foxglove_time(item.stamp)
    entities = []
    for o in item.objects:
        wide = 2.0 * o.uncertainty_m
        rgb = _GREY
        entities.append({
            "timestamp": t, "frame_id": WORLD_FRAME, "id": o.key,
            "lifetime": {"sec": 0, "nsec": 0}, "frame_locked": False,
            "metadata": [{"key": "label", "value": o.label},
                         {"key": "uncertainty_m", "value": f"{o.uncertainty_m:.2f}"}],
            "spheres": [{"pose": _at(o.x, o.y, 0.2), "size": {"x": 0.4, "y": 0.4, "z": 0.4},
                         "color": {**rgb, "a": 1.0}}],
            "cylinders": [{"pose": _at(o.x, o.y, 0.01),
                           "size": {"x": wide, "y": wide, "z": 0.02}, "bottom_scale": 1.0,
                           "top_scale": 1.0, "color": {**rgb, "a": 0.25}}],
            "texts": [{"pose": _at(o.x, o.y, 0.7), "billboard": True, "font_size": 14.0,
                       "scale_invariant": True, "color": _WHITE, "text": o.text}]})
    return {"deletions": [{"timestamp": t, "type": 1, "id": ""}], "entities": entities}


#: each kind of channel: its schema and how its record becomes a message
RENDER: dict[str, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    "key_frames": ("foxglove.CompressedImage", key_frame),
    "boxes": ("foxglove.ImageAnnotations", boxes),
    "path": ("foxglove.PosesInFrame", path),
    "objects": ("foxglove.SceneUpdate", objects),
    "trace": ("embodied_r_interfaces.QueryTrace", trace_json),
}

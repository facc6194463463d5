"""One robot's memory as an MCAP file Foxglove opens: the path, each key frame's pose, thumbnail
and description, the objects the memory placed, with a layout that shows them.

Messages are JSON in Foxglove's own schemas (``foxglove.PoseInFrame``, ``foxglove.PosesInFrame``,
``foxglove.CompressedImage``, ``foxglove.Log``, ``foxglove.SceneUpdate``), so the 3D, Image and
Log panels read them with no plug-in and any MCAP reader can read them back; the file is written
with ``mcap``, the format's reference Python library. Each placed object is one scene entity on
:data:`OBJECTS_TOPIC`, published when it was first seen, at the place the memory holds now: a
sphere in its colour (grey for a labelled object), a flat disc as wide as its uncertainty, and
its label as text.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.memory.placements import Placement
from embodied_r_ros.memory.store import MemoryRow, MemoryStore

#: the topics of an export
POSE_TOPIC = "/memory/pose"
PATH_TOPIC = "/memory/path"
THUMBNAIL_TOPIC = "/memory/thumbnail"
DESCRIPTION_TOPIC = "/memory/description"
OBJECTS_TOPIC = "/memory/objects"
#: the frame poses are expressed in (odometry's)
FRAME_ID = "odom"
_CHUNK = 256
#: poses of the path message written with each key frame (the path so far, up to this many)
_PATH_TAIL = 2000

_TIME = {"type": "object", "title": "time",
         "properties": {"sec": {"type": "integer", "minimum": 0},
                        "nsec": {"type": "integer", "minimum": 0, "maximum": 999999999}}}
_VECTOR3 = {"type": "object", "title": "foxglove.Vector3",
            "properties": {k: {"type": "number"} for k in "xyz"}}
_QUATERNION = {"type": "object", "title": "foxglove.Quaternion",
               "properties": {k: {"type": "number"} for k in "xyzw"}}
_POSE = {"type": "object", "title": "foxglove.Pose",
         "properties": {"position": _VECTOR3, "orientation": _QUATERNION}}
_COLOR = {"type": "object", "title": "foxglove.Color",
          "properties": {k: {"type": "number"} for k in "rgba"}}
_DURATION = {"type": "object", "title": "duration",
             "properties": {"sec": {"type": "integer"},
                            "nsec": {"type": "integer", "minimum": 0, "maximum": 999999999}}}


def _items(title: str, **properties: Any) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "object", "title": title,
                                       "properties": properties}}


_NUMBER = {"type": "number"}
_SCENE_ENTITY = {
    "timestamp": _TIME, "frame_id": {"type": "string"}, "id": {"type": "string"},
    "lifetime": _DURATION, "frame_locked": {"type": "boolean"},
    "metadata": _items("foxglove.KeyValuePair", key={"type": "string"},
                       value={"type": "string"}),
    "spheres": _items("foxglove.SpherePrimitive", pose=_POSE, size=_VECTOR3, color=_COLOR),
    "cylinders": _items("foxglove.CylinderPrimitive", pose=_POSE, size=_VECTOR3,
                        bottom_scale=_NUMBER, top_scale=_NUMBER, color=_COLOR),
    "texts": _items("foxglove.TextPrimitive", pose=_POSE, billboard={"type": "boolean"},
                    font_size=_NUMBER, scale_invariant={"type": "boolean"}, color=_COLOR,
                    text={"type": "string"}),
}
#: Foxglove's JSON schemas of the messages written (the fields an export uses)
SCHEMAS: dict[str, dict[str, Any]] = {
    "foxglove.PoseInFrame": {
        "title": "foxglove.PoseInFrame", "type": "object",
        "properties": {"timestamp": _TIME, "frame_id": {"type": "string"}, "pose": _POSE}},
    "foxglove.PosesInFrame": {
        "title": "foxglove.PosesInFrame", "type": "object",
        "properties": {"timestamp": _TIME, "frame_id": {"type": "string"},
                       "poses": {"type": "array", "items": _POSE}}},
    "foxglove.CompressedImage": {
        "title": "foxglove.CompressedImage", "type": "object",
        "properties": {"timestamp": _TIME, "frame_id": {"type": "string"},
                       "data": {"type": "string", "contentEncoding": "base64"},
                       "format": {"type": "string"}}},
    "foxglove.Log": {
        "title": "foxglove.Log", "type": "object",
        "properties": {"timestamp": _TIME, "level": {"type": "integer", "minimum": 0},
                       "message": {"type": "string"}, "name": {"type": "string"},
                       "file": {"type": "string"}, "line": {"type": "integer", "minimum": 0}}},
    "foxglove.SceneUpdate": {
        "title": "foxglove.SceneUpdate", "type": "object",
        "properties": {"deletions": _items("foxglove.SceneEntityDeletion", timestamp=_TIME,
                                           type={"type": "integer"}, id={"type": "string"}),
                       "entities": _items("foxglove.SceneEntity", **_SCENE_ENTITY)}},
}
#: RGB of the colour names a colour region can have; a labelled object is grey
_RGB = {"red": (0.9, 0.1, 0.1), "orange": (1.0, 0.55, 0.0), "yellow": (0.95, 0.85, 0.1),
        "green": (0.1, 0.7, 0.2), "cyan": (0.0, 0.8, 0.85), "blue": (0.15, 0.3, 0.95),
        "purple": (0.55, 0.2, 0.8), "magenta": (0.9, 0.1, 0.75)}
_GREY = (0.6, 0.6, 0.6)
_LEVEL = {"position": {"x": 0.0, "y": 0.0, "z": 0.0},
          "orientation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}}
_LOG_INFO = 2


@dataclass(frozen=True)
class ExportCounts:
    rows: int
    poses: int
    thumbnails: int
    objects: int = 0


def foxglove_time(stamp: float) -> dict[str, int]:
    ns = max(0, round(stamp * 1e9))
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def foxglove_pose(p: Pose) -> dict[str, Any]:
    """A planar-and-pitch pose as Foxglove's position and orientation (yaw about z, then
    pitch about the body's y; positive pitch looks up, so the rotation about y is negative)."""
    y, pch = math.radians(p.yaw_deg) / 2, -math.radians(p.pitch_deg) / 2
    cy, sy, cp, sp = math.cos(y), math.sin(y), math.cos(pch), math.sin(pch)
    return {"position": {"x": p.x, "y": p.y, "z": p.z},
            "orientation": {"x": -sy * sp, "y": cy * sp, "z": sy * cp, "w": cy * cp}}


def _at(x: float, y: float, z: float) -> dict[str, Any]:
    return {"position": {"x": x, "y": y, "z": z}, "orientation": _LEVEL["orientation"]}


def object_entity(p: Placement) -> dict[str, Any]:
    """A placed object as a Foxglove scene entity (see the module notes)."""
    r, g, b = _RGB.get(p.colour or "", _GREY)
    wide = 2.0 * p.uncertainty_m
    how = "" if p.triangulated else ", one view"
    return {
        "timestamp": foxglove_time(p.first), "frame_id": FRAME_ID, "id": f"{p.robot}/{p.id}",
        "lifetime": {"sec": 0, "nsec": 0}, "frame_locked": False,
        "metadata": [{"key": k, "value": str(v)} for k, v in (
            ("label", p.label), ("robot", p.robot), ("uncertainty_m", round(p.uncertainty_m, 2)),
            ("triangulated", p.triangulated), ("sightings", p.sightings),
            ("first_seen", p.first), ("last_seen", p.last))],
        "spheres": [{"pose": _at(p.x, p.y, 0.2), "size": {"x": 0.4, "y": 0.4, "z": 0.4},
                     "color": {"r": r, "g": g, "b": b, "a": 1.0}}],
        "cylinders": [{"pose": _at(p.x, p.y, 0.01), "size": {"x": wide, "y": wide, "z": 0.02},
                       "bottom_scale": 1.0, "top_scale": 1.0,
                       "color": {"r": r, "g": g, "b": b, "a": 0.25}}],
        "texts": [{"pose": _at(p.x, p.y, 0.7), "billboard": True, "font_size": 14.0,
                   "scale_invariant": True, "color": {"r": 1.0, "g": 1.0, "b": 1.0, "a": 1.0},
                   "text": f"{p.label} (within {p.uncertainty_m:.1f} m{how})"}],
    }


def rows_of(store: MemoryStore, robot: str, thumbnails: bool = True) -> Iterator[MemoryRow]:
    """Every row of ``robot``, oldest first, read in chunks."""
    ids = [i for i, _ in store.stamps(robot, -math.inf, math.inf)]
    for k in range(0, len(ids), _CHUNK):
        yield from store.get(ids[k:k + _CHUNK], thumbnails=thumbnails)


def export_mcap(store: MemoryStore, robot: str, out: Path) -> ExportCounts:
    """Write ``robot``'s rows to ``out`` (see the module notes)."""
    from mcap.well_known import MessageEncoding, SchemaEncoding
    from mcap.writer import Writer

    rows = poses = thumbs = 0
    path: list[dict[str, Any]] = []
    first: float | None = None
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        writer = Writer(f)
        writer.start(profile="", library="embodied_r_ros memory export")
        channels: dict[str, int] = {}
        for topic, schema in ((POSE_TOPIC, "foxglove.PoseInFrame"),
                              (PATH_TOPIC, "foxglove.PosesInFrame"),
                              (THUMBNAIL_TOPIC, "foxglove.CompressedImage"),
                              (DESCRIPTION_TOPIC, "foxglove.Log"),
                              (OBJECTS_TOPIC, "foxglove.SceneUpdate")):
            schema_id = writer.register_schema(name=schema, encoding=SchemaEncoding.JSONSchema,
                                               data=json.dumps(SCHEMAS[schema]).encode())
            channels[topic] = writer.register_channel(topic=topic,
                                                      message_encoding=MessageEncoding.JSON,
                                                      schema_id=schema_id)

        def write(topic: str, stamp: float, message: dict[str, Any]) -> None:
            ns = max(0, round(stamp * 1e9))
            writer.add_message(channel_id=channels[topic], log_time=ns, publish_time=ns,
                               data=json.dumps(message).encode())

        placed = sorted(store.placements([robot]), key=lambda p: p.first)
        shown = 0

        def objects_until(stamp: float) -> None:
            """The objects first seen up to ``stamp``, each when it was first seen."""
            nonlocal shown
            while shown < len(placed) and placed[shown].first <= stamp:
                p = placed[shown]
                write(OBJECTS_TOPIC, p.first, {"deletions": [], "entities": [object_entity(p)]})
                shown += 1

        for row in rows_of(store, robot):
            objects_until(row.stamp)
            rows += 1
            first = row.stamp if first is None else first
            t = foxglove_time(row.stamp)
            if row.pose is not None:
                poses += 1
                pose = foxglove_pose(row.pose)
                path.append(pose)
                write(POSE_TOPIC, row.stamp, {"timestamp": t, "frame_id": FRAME_ID,
                                              "pose": pose})
                write(PATH_TOPIC, row.stamp, {"timestamp": t, "frame_id": FRAME_ID,
                                              "poses": path[-_PATH_TAIL:]})
            if row.thumbnail:
                thumbs += 1
                write(THUMBNAIL_TOPIC, row.stamp, {
                    "timestamp": t, "frame_id": row.camera, "format": "jpeg",
                    "data": base64.b64encode(row.thumbnail).decode("ascii")})
            action = f"after {row.action}: " if row.action else ""
            write(DESCRIPTION_TOPIC, row.stamp, {
                "timestamp": t, "level": _LOG_INFO, "message": action + row.description,
                "name": f"{robot}/{row.camera}", "file": "", "line": 0})
        objects_until(math.inf)
        writer.finish()
    return ExportCounts(rows, poses, thumbs, len(placed))


#: the live robot's topics the layout shows too (docs/ros.md, "Watching the robot")
LIVE_PATH = "/embodied_r/frame_buffer/path"
LIVE_OBJECTS = "/embodied_r/memory/objects"
LIVE_KEY_FRAMES = "/embodied_r/frame_buffer/key_frames"
LIVE_BOXES = "/embodied_r/perception/boxes/front"
LIVE_TRACE = "/embodied_r/query/trace"
LIVE_ANSWER_FRAMES = "/embodied_r/query/key_frames"


def foxglove_layout() -> dict[str, Any]:
    """The shipped Foxglove layout (``config/foxglove-layout.json``; import it with Layouts
    -> Import from file), for an export and for the live robot alike: the path, the pose and
    the placed objects in 3D; the key frames with their grounded boxes, the latest query's
    trace and its key frames (live); the thumbnails and descriptions (an export)."""
    return {
        "configById": {
            "3D!memory": {
                "followMode": "follow-pose", "followTf": FRAME_ID,
                "topics": {POSE_TOPIC: {"visible": True},
                           PATH_TOPIC: {"visible": True, "type": "line", "lineWidth": 0.05},
                           OBJECTS_TOPIC: {"visible": True},
                           LIVE_PATH: {"visible": True, "type": "line", "lineWidth": 0.05},
                           LIVE_OBJECTS: {"visible": True}},
                "cameraState": {"distance": 20, "perspective": False, "phi": 0, "thetaOffset": 0,
                                "targetOffset": [0, 0, 0]},
            },
            "Image!memory": {"imageMode": {"imageTopic": LIVE_KEY_FRAMES,
                                           "annotations": {LIVE_BOXES: {"visible": True}}}},
            "Image!answer": {"imageMode": {"imageTopic": LIVE_ANSWER_FRAMES}},
            "Image!thumbnail": {"imageMode": {"imageTopic": THUMBNAIL_TOPIC}},
            "RawMessages!trace": {"topicPath": LIVE_TRACE, "diffEnabled": False,
                                  "expansion": "all"},
            "RosOut!memory": {"searchTerms": [], "minLogLevel": 1, "topicToRender":
                              DESCRIPTION_TOPIC},
        },
        "globalVariables": {},
        "userNodes": {},
        "playbackConfig": {"speed": 1},
        "layout": {"direction": "row",
                   "first": {"direction": "column", "first": "3D!memory",
                             "second": "RawMessages!trace", "splitPercentage": 60},
                   "second": {"direction": "column",
                              "first": {"direction": "row", "first": "Image!memory",
                                        "second": {"direction": "column",
                                                   "first": "Image!answer",
                                                   "second": "Image!thumbnail"},
                                        "splitPercentage": 60},
                              "second": "RosOut!memory", "splitPercentage": 60},
                   "splitPercentage": 55},
    }

"""One robot's memory as an MCAP file Foxglove opens: the path, each key frame's pose, thumbnail
and description, with a layout that shows them.

Messages are JSON in Foxglove's own schemas (``foxglove.PoseInFrame``, ``foxglove.PosesInFrame``,
``foxglove.CompressedImage``, ``foxglove.Log``), so the 3D, Image and Log panels read them with
no plug-in and any MCAP reader can read them back; the file is written with ``mcap``, the
format's reference Python library.
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
from embodied_r_ros.memory.store import MemoryRow, MemoryStore

#: the topics of an export
POSE_TOPIC = "/memory/pose"
PATH_TOPIC = "/memory/path"
THUMBNAIL_TOPIC = "/memory/thumbnail"
DESCRIPTION_TOPIC = "/memory/description"
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
}
_LOG_INFO = 2


@dataclass(frozen=True)
class ExportCounts:
    rows: int
    poses: int
    thumbnails: int


def _time(stamp: float) -> dict[str, int]:
    ns = max(0, round(stamp * 1e9))
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def _pose(p: Pose) -> dict[str, Any]:
    """A planar-and-pitch pose as Foxglove's position and orientation (yaw about z, then
    pitch about the body's y; positive pitch looks up, so the rotation about y is negative)."""
    y, pch = math.radians(p.yaw_deg) / 2, -math.radians(p.pitch_deg) / 2
    cy, sy, cp, sp = math.cos(y), math.sin(y), math.cos(pch), math.sin(pch)
    return {"position": {"x": p.x, "y": p.y, "z": p.z},
            "orientation": {"x": -sy * sp, "y": cy * sp, "z": sy * cp, "w": cy * cp}}


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
                              (DESCRIPTION_TOPIC, "foxglove.Log")):
            schema_id = writer.register_schema(name=schema, encoding=SchemaEncoding.JSONSchema,
                                               data=json.dumps(SCHEMAS[schema]).encode())
            channels[topic] = writer.register_channel(topic=topic,
                                                      message_encoding=MessageEncoding.JSON,
                                                      schema_id=schema_id)

        def write(topic: str, stamp: float, message: dict[str, Any]) -> None:
            ns = max(0, round(stamp * 1e9))
            writer.add_message(channel_id=channels[topic], log_time=ns, publish_time=ns,
                               data=json.dumps(message).encode())

        for row in rows_of(store, robot):
            rows += 1
            first = row.stamp if first is None else first
            t = _time(row.stamp)
            if row.pose is not None:
                poses += 1
                pose = _pose(row.pose)
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
        writer.finish()
    return ExportCounts(rows, poses, thumbs)


def foxglove_layout() -> dict[str, Any]:
    """A Foxglove layout for an export: the path and pose in 3D, the thumbnail and the
    descriptions beside it (import it with Layouts -> Import from file)."""
    return {
        "configById": {
            "3D!memory": {
                "followMode": "follow-pose", "followTf": FRAME_ID,
                "topics": {POSE_TOPIC: {"visible": True},
                           PATH_TOPIC: {"visible": True, "type": "line", "lineWidth": 0.05}},
                "cameraState": {"distance": 20, "perspective": False, "phi": 0, "thetaOffset": 0,
                                "targetOffset": [0, 0, 0]},
            },
            "Image!memory": {"imageMode": {"imageTopic": THUMBNAIL_TOPIC}},
            "RosOut!memory": {"searchTerms": [], "minLogLevel": 1, "topicToRender":
                              DESCRIPTION_TOPIC},
        },
        "globalVariables": {},
        "userNodes": {},
        "playbackConfig": {"speed": 1},
        "layout": {"direction": "row", "first": "3D!memory",
                   "second": {"direction": "column", "first": "Image!memory",
                              "second": "RosOut!memory", "splitPercentage": 50},
                   "splitPercentage": 55},
    }

"""The viewer's records (:mod:`embodied_r_ros.viewer.content`) as ROS messages, and the
publishers that send each to its topic and to the process's :class:`ViewerFeed`: RViz, bags
and ``foxglove_bridge`` see the topics, the in-process Foxglove server the feed.

A topic nobody subscribes to (and a feed with no server) costs a counter read: nothing is
built for it. Topics, relative to the publishing node (docs/ros.md has the table):

- frame buffer: ``~/path`` (``nav_msgs/Path``, the last 2,000 poses, one per stored frame);
- perception: ``~/boxes/<camera>`` (``visualization_msgs/ImageMarker``, a LINE_LIST of every
  box of a described key frame, stamped like it);
- the memory's writer: ``memory/objects`` (``visualization_msgs/MarkerArray``: per object a
  sphere, a disc of its uncertainty and a text of its label and label votes, after a
  DELETEALL; republished when the placements change, latched);
- query server: ``query/trace`` (``embodied_r_interfaces/msg/QueryTrace``, latched) and
  ``query/key_frames`` (``sensor_msgs/CompressedImage``, the answer's key frames).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from geometry_msgs.msg import Point, PoseStamped
from nav_msgs.msg import Path
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import ImageMarker, Marker, MarkerArray

from embodied_r_ros.core.poses import Pose
from embodied_r_ros.nodes.conversions import (
    jpeg_to_compressed,
    pose_to_msg,
    rgb_to_image,
    sec_to_stamp,
)
from embodied_r_ros.viewer.content import (
    WORLD_FRAME,
    FrameBoxes,
    KeyFrameImage,
    ObjectMap,
    PathPose,
    PathTrack,
    QueryTrace,
    ViewerFeed,
)

#: the last message stays for a late subscriber (RViz opened after the answer)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
_GREEN = ColorRGBA(r=0.1, g=0.9, b=0.2, a=1.0)
_GREY = ColorRGBA(r=0.6, g=0.6, b=0.6, a=1.0)


def boxes_msg(item: FrameBoxes) -> ImageMarker:
    points: list[Point] = []
    for b in item.boxes:
        x1, y1, x2, y2 = b.box
        corners = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
        for (ax, ay), (bx, by) in zip(corners, corners[1:] + corners[:1], strict=True):
            points += [Point(x=float(ax), y=float(ay)), Point(x=float(bx), y=float(by))]
    return ImageMarker(header=Header(stamp=sec_to_stamp(item.stamp), frame_id=item.camera),
                       ns=item.camera, id=0, type=ImageMarker.LINE_LIST,
                       action=ImageMarker.ADD, scale=2.0, outline_color=_GREEN, points=points)


def _marker(header: Header, ns: str, i: int, kind: int, at: tuple[float, float, float],
            size: tuple[float, float, float], alpha: float) -> Marker:
    m = Marker(header=header, ns=ns, id=i, type=kind, action=Marker.ADD)
    m.pose.position.x, m.pose.position.y, m.pose.position.z = at
    m.pose.orientation.w = 1.0
    m.scale.x, m.scale.y, m.scale.z = size
    m.color = ColorRGBA(r=_GREY.r, g=_GREY.g, b=_GREY.b, a=alpha)
    return m


def objects_msg(item: ObjectMap) -> MarkerArray:
    """Every placed object after a DELETEALL: a sphere, a disc of its uncertainty, its text."""
    header = Header(stamp=sec_to_stamp(item.stamp), frame_id=WORLD_FRAME)
    markers = [Marker(header=header, action=Marker.DELETEALL)]
    for i, o in enumerate(item.objects):
        wide = max(2.0 * o.uncertainty_m, 0.01)
        markers.append(_marker(header, "objects", i, Marker.SPHERE, (o.x, o.y, 0.2),
                               (0.4, 0.4, 0.4), 1.0))
        markers.append(_marker(header, "uncertainty", i, Marker.CYLINDER, (o.x, o.y, 0.01),
                               (wide, wide, 0.02), 0.25))
        text = _marker(header, "labels", i, Marker.TEXT_VIEW_FACING, (o.x, o.y, 0.7),
                       (0.0, 0.0, 0.3), 1.0)
        text.text = o.text
        markers.append(text)
    return MarkerArray(markers=markers)


def path_msg(poses: Sequence[PathPose]) -> Path:
    last = poses[-1].stamp if poses else 0.0
    header = Header(stamp=sec_to_stamp(last), frame_id=WORLD_FRAME)
    return Path(header=header, poses=[
        PoseStamped(header=Header(stamp=sec_to_stamp(p.stamp), frame_id=WORLD_FRAME),
                    pose=pose_to_msg(p.pose)) for p in poses])


def trace_msg(trace: QueryTrace) -> Any:
    from embodied_r_interfaces.msg import QueryTrace as QueryTraceMsg

    return QueryTraceMsg(
        header=Header(stamp=sec_to_stamp(trace.stamp), frame_id=trace.camera),
        question=trace.question, options=list(trace.options), scope=trace.scope,
        camera=trace.camera, key_frame_stamps=[sec_to_stamp(s) for s in trace.key_frame_stamps],
        perception=trace.perception, thinking=trace.thinking, answer=trace.answer,
        answer_text=trace.answer_text, stage_names=[n for n, _ in trace.stages],
        stage_sec=[float(s) for _, s in trace.stages], success=trace.success,
        error_code=trace.error_code, error=trace.error)


def key_frame_msg(item: KeyFrameImage) -> CompressedImage:
    return jpeg_to_compressed(item.jpeg, item.stamp, item.frame_id or item.camera)


def key_frame_image(item: KeyFrameImage) -> Image:
    """The frame buffer's raw key frame (its RGB), as ``~/key_frames`` always carried it."""
    assert item.image is not None
    return rgb_to_image(item.image, item.stamp, item.frame_id)


class ViewerTopic:
    """One viewer topic of ``node``: a ROS publisher and the feed's channel of the same
    name. :meth:`publish` builds the message (``to_msg``) only for a subscriber, and passes the
    record to the feed only while it is active."""

    def __init__(self, node: Node, msg_type: Any, name: str, to_msg: Callable[[Any], Any],
                 kind: str, feed: ViewerFeed | None = None, qos: QoSProfile | int = 5) -> None:
        self.publisher = node.create_publisher(msg_type, name, qos)
        self.topic: str = self.publisher.topic_name
        self.kind = kind
        self.feed = feed
        self._to_msg = to_msg

    @property
    def wanted(self) -> bool:
        """Someone would receive a message now."""
        return (self.publisher.get_subscription_count() > 0
                or (self.feed is not None and self.feed.active))

    def publish(self, item: Any) -> None:
        if self.publisher.get_subscription_count():
            self.publisher.publish(self._to_msg(item))
        if self.feed is not None and self.feed.active:
            self.feed.emit(self.topic, item)


class PathTopic:
    """The robot's path: each stored frame's pose kept, the whole tail published."""

    def __init__(self, node: Node, feed: ViewerFeed | None = None) -> None:
        self.track = PathTrack()
        self.topic = ViewerTopic(node, Path, "~/path", path_msg, "path", feed)
        #: the newest stored frame whose pose had not arrived with it (odometry stamped like
        #: the frame often comes a moment after the image)
        self._waiting: float | None = None

    def add(self, stamp: float, pose: Pose | None) -> None:
        """A stored frame at ``stamp`` with its pose, or None while that has not arrived."""
        if pose is None:
            self._waiting = stamp
            return
        self._waiting = None
        self._keep(stamp, pose)

    def pose_arrived(self, pose_at: Callable[[float], Pose | None]) -> None:
        """A pose came in: place the frame that waited for it, if ``pose_at`` now has one."""
        stamp = self._waiting
        if stamp is not None and (pose := pose_at(stamp)) is not None:
            self._waiting = None
            self._keep(stamp, pose)

    def _keep(self, stamp: float, pose: Pose) -> None:
        if self.track.add(stamp, pose) and self.topic.wanted:
            self.topic.publish(self.track.poses())


def now_sec() -> float:
    return time.time()

"""The spatial memory's ROS side in the process that writes it: the writer, the
``memory/stats``, ``memory/clear`` and ``memory/locate`` services, and the writer's diagnostics
values.

One process writes a memory. In the all-in-one that is the query server's process; in separate
processes it is the perception node's, which describes the key frames the memory stores and
receives them, with their poses, from the frame buffers. Either way the services keep their
names under the node's namespace (``/embodied_r/memory/stats``), so a client does not need to
know which layout runs. The writer's process also publishes the memory's placed objects on
``memory/objects`` (:mod:`embodied_r_ros.nodes.viewer_topics`), checked each second and
republished when they change.
"""

from __future__ import annotations

from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from embodied_r_ros.agent.guard import fail, guard_service
from embodied_r_ros.core.config import Config
from embodied_r_ros.core.error_codes import BAD_REQUEST, BAD_TIME_PHRASE, MEMORY_UNAVAILABLE
from embodied_r_ros.memory import errors
from embodied_r_ros.memory.errors import SpatialMemoryError
from embodied_r_ros.memory.locate import Located, LocateRequest
from embodied_r_ros.memory.service import MemoryWriter
from embodied_r_ros.nodes.conversions import sec_to_stamp, stamp_to_sec
from embodied_r_ros.nodes.viewer_topics import LATCHED, ViewerTopic, now_sec, objects_msg
from embodied_r_ros.viewer.content import ObjectMap, PlacedObject, placed_objects

#: how often the placed objects are checked for changes (only while someone watches)
OBJECTS_PERIOD_SEC = 1.0


def open_writer(config: Config, logger: Any) -> tuple[MemoryWriter | None, str]:
    """The memory's writer, or None and why (memory off, or the store refused: logged, the
    node runs on without recording)."""
    if not config.memory.enabled:
        return None, "memory.enabled is false"
    try:
        writer = MemoryWriter(config)
    except SpatialMemoryError as err:
        logger.error(f"spatial memory not recorded: {err}")
        return None, str(err)
    logger.info(f"recording the spatial memory of '{config.memory.robot}' in {writer.location}")
    return writer, ""


def answer_code(err: SpatialMemoryError) -> str:
    """The response's code for a memory error: the asker's ``BAD_TIME_PHRASE`` or
    ``BAD_REQUEST``, else ``MEMORY_UNAVAILABLE`` (the memory's own code stays in the line)."""
    return {errors.BAD_TIME_PHRASE: BAD_TIME_PHRASE,
            errors.BAD_REQUEST: BAD_REQUEST}.get(err.code, MEMORY_UNAVAILABLE)


def _optional_sec(stamp: Any) -> float | None:
    """A request's stamp in seconds, None where it is zero (unset)."""
    return None if stamp.sec == 0 and stamp.nanosec == 0 else stamp_to_sec(stamp)


def placed_object_msg(found: Located, frame_id: str) -> Any:
    """``found`` as a ``PlacedObject``: its centre and approach pose in ``frame_id`` (the
    odometry frame its poses were stored in), stamped at its last sighting."""
    from embodied_r_interfaces.msg import LabelVote, PlacedObject

    p, pose = found.placement, found.approach
    msg = PlacedObject(label=p.label, colour=p.colour or "", robot=p.robot, id=p.id,
                       uncertainty_m=float(p.uncertainty_m), sightings=p.sightings,
                       triangulated=p.triangulated, first_stamp=sec_to_stamp(p.first),
                       last_stamp=sec_to_stamp(p.last))
    msg.votes = [LabelVote(label=label, count=count) for label, count in p.votes]
    for header in (msg.position.header, msg.approach.header):
        header.frame_id, header.stamp = frame_id, msg.last_stamp
    msg.position.point.x, msg.position.point.y = float(p.x), float(p.y)
    msg.approach.pose.position.x, msg.approach.pose.position.y = pose.x, pose.y
    q = msg.approach.pose.orientation
    q.x, q.y, q.z, q.w = pose.quaternion()
    return msg


class MemoryServices:
    """``memory/stats``, ``memory/clear`` and ``memory/locate`` on ``node`` for ``writer``
    (None: each answers ``MEMORY_UNAVAILABLE`` with ``why_not``); :meth:`close` closes the
    writer."""

    def __init__(self, node: Node, writer: MemoryWriter | None, why_not: str) -> None:
        from embodied_r_interfaces.srv import MemoryClear, MemoryLocate, MemoryStats

        self.writer = writer
        self.why_not = why_not
        self._log = node.get_logger()
        group = MutuallyExclusiveCallbackGroup()  # one store user at a time anyway
        node.create_service(MemoryStats, "memory/stats",
                            guard_service(self._log, "memory stats", self._on_stats),
                            callback_group=group)
        node.create_service(MemoryClear, "memory/clear",
                            guard_service(self._log, "memory clear", self._on_clear),
                            callback_group=group)
        node.create_service(MemoryLocate, "memory/locate",
                            guard_service(self._log, "memory locate", self._on_locate),
                            callback_group=group)
        from visualization_msgs.msg import MarkerArray

        self.objects = ViewerTopic(node, MarkerArray, "memory/objects", objects_msg, "objects",
                                   qos=LATCHED)
        self._shown: tuple[PlacedObject, ...] | None = None
        self._seen = (-1, 0)  # (rows recorded, subscribers) at the last check
        self._timer = node.create_timer(OBJECTS_PERIOD_SEC, self.publish_objects,
                                        callback_group=group)

    def publish_objects(self) -> None:
        """The placed objects, when they changed since the last check or someone new
        listens; nothing is read while nobody does."""
        writer, topic = self.writer, self.objects
        if writer is None or not topic.wanted:
            return
        seen = (writer.recorded, topic.publisher.get_subscription_count())
        if seen == self._seen:
            return
        fresh = seen[1] > self._seen[1]
        self._seen = seen
        try:
            objects = placed_objects(writer.placements())
        except SpatialMemoryError as err:
            self._log.warning(f"placed objects not read: {err}", throttle_duration_sec=30.0)
            return
        if objects != self._shown or fresh:
            self._shown = objects
            topic.publish(ObjectMap(now_sec(), objects))

    def _on_stats(self, _request: Any, response: Any) -> Any:
        if self.writer is None:
            return fail(response, MEMORY_UNAVAILABLE, self.why_not)
        try:
            st = self.writer.stats()
        except SpatialMemoryError as err:
            return fail(response, MEMORY_UNAVAILABLE, str(err))
        response.success = True
        response.robot, response.robots, response.rows = st.robot, st.robots, st.rows
        if st.first is not None and st.last is not None:
            response.first_stamp = sec_to_stamp(st.first)
            response.last_stamp = sec_to_stamp(st.last)
        response.span_sec = st.span_sec
        response.size_bytes = st.size_bytes
        response.recorded, response.failed, response.dropped = st.recorded, st.failed, st.dropped
        response.location = st.location
        return response

    def _on_clear(self, request: Any, response: Any) -> Any:
        if self.writer is None:
            return fail(response, MEMORY_UNAVAILABLE, self.why_not)
        if request.before.sec < 0:
            return fail(response, BAD_REQUEST, "before must be zero (every row) or a stamp "
                        "after the epoch")
        before = stamp_to_sec(request.before)
        try:
            response.deleted, response.rows = self.writer.clear(before if before > 0 else None)
        except SpatialMemoryError as err:
            return fail(response, MEMORY_UNAVAILABLE, str(err))
        self._seen = (-1, 0)  # the objects are read again
        self._log.info(f"memory cleared: {response.deleted} rows deleted, {response.rows} left")
        response.success = True
        return response

    def _on_locate(self, request: Any, response: Any) -> Any:
        if self.writer is None:
            return fail(response, MEMORY_UNAVAILABLE, self.why_not)
        try:
            wanted = LocateRequest.checked(
                request.object, request.time_phrase, _optional_sec(request.start_stamp),
                _optional_sec(request.end_stamp), request.fleet, request.max_results or None)
            found = self.writer.locate(wanted)
        except SpatialMemoryError as err:
            return fail(response, answer_code(err), str(err))
        frame = self.writer.config.perception.tf.odom_frame
        response.objects = [placed_object_msg(f, frame) for f in found]
        response.success = True
        return response

    def diagnostics(self) -> tuple[dict[str, Any], str]:
        """The writer's counters (no database read on a diagnostics timer) and a warning
        ("" when there is none to give)."""
        w = self.writer
        if w is None:
            return {}, ""
        values = {"memory_rows_recorded": w.recorded, "memory_write_failures": w.failed,
                  "memory_key_frames_dropped": w.dropped, "memory_last_error": w.last_error}
        warning = (f"memory: {w.failed} writes failed, {w.dropped} dropped"
                   if w.failed or w.dropped else "")
        return values, warning

    def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()

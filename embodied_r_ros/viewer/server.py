"""Foxglove's WebSocket protocol served from the robot's own process (``foxglove-sdk``), so
Foxglove shows it live with no ``foxglove_bridge``: one JSON channel per viewer topic, named as
the ROS topic, and a service ``/embodied_r/query`` that asks the robot a question through the
same query runner as the ROS service.

Safe by default: it listens on loopback unless ``viewer.host`` says otherwise, and another host
logs one warning, since anyone who reaches the port can ask the robot questions (TLS encrypts;
it does not authenticate). A server that cannot start (the port taken, by ``foxglove_bridge``
say) logs one error line and the robot runs on without it. The SDK is imported only here, and
this module only when the viewer is on.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import foxglove
from foxglove import Capability, Channel, MessageSchema, Schema, Service, ServiceSchema

from embodied_r_ros.agent.query_runner import QueryRequest, QueryRunner
from embodied_r_ros.core.config import ViewerConfig
from embodied_r_ros.viewer.content import ViewerFeed, request_fields, result_json
from embodied_r_ros.viewer.foxglove_json import RENDER, VIEWER_SCHEMAS

log = logging.getLogger(__name__)

#: the service's name: the ROS service's full name
QUERY_SERVICE = "/embodied_r/query"
_JSON_OBJECT = Schema(name="embodied_r_interfaces.SpatialQuery", encoding="jsonschema",
                      data=json.dumps({"type": "object"}).encode())


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: kinds whose latest message a client that subscribes late gets at once (a state, not a
#: stream: the placed objects change rarely, a trace comes once per question)
LATCHED_KINDS = frozenset({"objects", "trace"})


class ViewerServer:
    """The running server: its channels fed from a :class:`ViewerFeed`."""

    def __init__(self, context: Any, channels: Mapping[str, tuple[Channel, str]]) -> None:
        #: the SDK's server, once started
        self.server: Any = None
        self._context = context  # the channels live while their context does
        self._channels = channels
        self._latest: dict[str, object] = {}  # a latched kind's last item, by topic

    def on_subscribe(self, _client: Any, channel: Any) -> None:
        """A late subscriber to a latched channel gets its latest message (the others on
        the channel get it again: harmless for a state)."""
        found = self._channels.get(channel.topic)
        item = self._latest.get(channel.topic)
        if found is not None and item is not None:
            found[0].log(RENDER[found[1]][1](item))

    @property
    def port(self) -> int:
        return int(self.server.port) if self.server is not None else 0

    def publish(self, topic: str, item: object) -> None:
        """``item`` on ``topic``'s channel, rendered only while a client subscribes to it."""
        found = self._channels.get(topic)
        if found is None:
            return
        channel, kind = found
        if kind in LATCHED_KINDS:
            self._latest[topic] = item
        if channel.has_sinks():
            channel.log(RENDER[kind][1](item))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _query_handler(runner: QueryRunner) -> Callable[[Any], bytes]:
    def handle(request: Any) -> bytes:
        """A malformed call raises (the client gets an error response with the message); a
        refused question answers like the ROS service, ``success`` false and its code."""
        fields = request_fields(request.payload)
        query = QueryRequest(
            question=fields["question"], options=list(fields.get("options", [])),
            window_sec=float(fields.get("window_sec", 0.0)), camera=fields.get("camera", ""),
            scope=fields.get("scope", ""))
        return json.dumps(result_json(runner.run(query))).encode()

    return handle


def start_viewer(cfg: ViewerConfig, topics: Mapping[str, str], feed: ViewerFeed,
                 runner: QueryRunner, logger: Any = log) -> ViewerServer | None:
    """Serve ``topics`` (resolved name -> kind of :data:`RENDER`) and the query service; None
    (one error line logged) when the server cannot start."""
    if not is_loopback(cfg.host):
        logger.warning(
            f"viewer: listening on {cfg.host}, not loopback: anyone who reaches port "
            f"{cfg.port} can watch the robot and ask it questions (TLS encrypts, it does not "
            "authenticate)")
    try:
        tls = ({"tls_cert": Path(cfg.tls_cert).expanduser().read_bytes(),
                "tls_key": Path(cfg.tls_key).expanduser().read_bytes()}
               if cfg.tls_cert and cfg.tls_key else {})
        context = foxglove.Context()
        channels = {
            topic: (Channel(topic, schema=Schema(
                name=RENDER[kind][0], encoding="jsonschema",
                data=json.dumps(VIEWER_SCHEMAS[RENDER[kind][0]]).encode()),
                message_encoding="json", context=context), kind)
            for topic, kind in topics.items()}
        service = Service(QUERY_SERVICE, schema=ServiceSchema(
            "embodied_r_interfaces/srv/SpatialQuery",
            request=MessageSchema(encoding="json", schema=_JSON_OBJECT),
            response=MessageSchema(encoding="json", schema=_JSON_OBJECT)),
            handler=_query_handler(runner))
        viewer = ViewerServer(context, channels)
        viewer.server = foxglove.start_server(
            name="embodied_r", host=cfg.host, port=cfg.port, context=context,
            capabilities=[Capability.Services], supported_encodings=["json"],
            services=[service], server_listener=viewer, **tls)
    except Exception as exc:  # the robot runs on without its viewer
        logger.error(f"viewer: not started on {cfg.host}:{cfg.port}: "
                     f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return None
    feed.add_sink(viewer.publish)
    scheme = "wss" if tls else "ws"
    logger.info(f"viewer: Foxglove at {scheme}://{cfg.host}:{viewer.port}, "
                f"{len(channels)} channels and the service {QUERY_SERVICE}")
    return viewer

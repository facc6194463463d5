"""All nodes in one process under ``/embodied_r``: ``python -m embodied_r_ros`` or
``ros2 run embodied_r_ros embodied_r``.

The query server reads ``profile``/``config_file`` and ``cameras``; the perception and reasoning
nodes are managed nodes of this process that load their model on ``configure`` (at start with
``autostart``, the default) and keep serving their actions to other processes; the query server
calls the frame buffers and the models in-process. Standard ``--ros-args`` apply to every node,
e.g. ``-p profile:=tiny -r image:=/camera/image_raw``; with several cameras, remap per node:
``-r frame_buffer_rear:image:=/rear/image_raw``. With several cameras every frame buffer starts
from the ``frame_buffer`` section of the parameter files, and its own ``frame_buffer_<camera>``
section overrides that for one camera.

With ``memory.enabled`` this process is the spatial memory's one writer: each key frame's
question-agnostic description (the perception node's background describer) is stored with the
frame buffer's pose for its stamp and a thumbnail, and the query server answers ``scope:
memory`` questions and the ``memory/stats`` and ``memory/clear`` services.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter

from embodied_r_ros.agent.in_process_engine import LocalEngine
from embodied_r_ros.agent.model_loading import describe_models
from embodied_r_ros.core.config import Config
from embodied_r_ros.memory.service import MemoryReader, MemoryWriter
from embodied_r_ros.nodes.frame_buffer import FrameBufferNode
from embodied_r_ros.nodes.memory_services import open_writer
from embodied_r_ros.nodes.params import load_node_config
from embodied_r_ros.nodes.perception_node import PerceptionNode
from embodied_r_ros.nodes.query_server import QueryServerNode
from embodied_r_ros.nodes.reasoning_node import ReasoningNode
from embodied_r_ros.nodes.runtime import start_nodes
from embodied_r_ros.viewer.content import ViewerFeed

NAMESPACE = "/embodied_r"


def frame_buffer_name(camera: str, cameras: Sequence[str]) -> str:
    """``frame_buffer`` for a single camera; ``frame_buffer_<camera>`` for each of several."""
    return "frame_buffer" if len(cameras) == 1 else f"frame_buffer_{camera}"


def frame_buffer_presets(context: Context, namespace: str) -> dict[str, Any]:
    """The parameters a node named ``frame_buffer`` would get here from the process's
    ``--params-file`` sections and ``-p`` arguments, matched by rcl itself: the presets each
    ``frame_buffer_<camera>`` starts from, under its own section. Read from a short-lived probe
    node (no parameter services, no /rosout)."""
    probe = Node("frame_buffer", context=context, namespace=namespace,
                 start_parameter_services=False, enable_rosout=False,
                 automatically_declare_parameters_from_overrides=True)
    try:
        values = {name: param.value
                  for name, param in probe.get_parameters_by_prefix("").items()}
    finally:
        probe.destroy_node()
    values.pop("use_sim_time", None)  # every node reads its own
    return values


def record_memory(config: Config, perception: PerceptionNode,
                  buffers: Sequence[FrameBufferNode], logger: Any
                  ) -> tuple[MemoryWriter | None, str]:
    """The memory writer fed with the perception node's key-frame descriptions and the
    buffers' poses (looked up when a row is written), or None and why."""
    writer, why_not = open_writer(config, logger)
    if writer is not None:
        poses = {b.camera_name: b.store.pose_at for b in buffers}
        perception.note_listeners.append(
            lambda note: writer.submit(note, note.image, poses.get(note.camera)))
    return writer, why_not


def build_nodes(
    context: Context,
    namespace: str = NAMESPACE,
    parameter_overrides: Sequence[Parameter] = (),
) -> list[Node]:
    """Create every node. The perception and reasoning nodes are started first (their models
    load, with ``autostart``), before the camera is subscribed and the query service offered:
    a client that sees the service finds the process ready.

    ``parameter_overrides`` go to every node (on top of the context's ``--ros-args``), which
    lets one process hold several independent instances under different namespaces.
    """
    common = {"context": context, "namespace": namespace,
              "parameter_overrides": list(parameter_overrides)}
    query = QueryServerNode(local=True, **common)
    made: list[Node] = [query]
    try:
        config = load_node_config(query.params)
        query.get_logger().info(f"profile '{config.name}': {describe_models(config)}")
        # stored frames reach streaming perception in-process, not over the topic
        perception = PerceptionNode(config=config, **{**common, "parameter_overrides": [
            *parameter_overrides, Parameter("subscribe_frames", value=False)]})
        made.append(perception)
        reasoning = ReasoningNode(config=config, **common)
        made.append(reasoning)
        start_nodes([perception, reasoning], destroy=False)
        presets = frame_buffer_presets(context, namespace) if len(query.cameras) > 1 else {}
        for cam in query.cameras:
            made.append(FrameBufferNode(
                frame_buffer_name(cam, query.cameras),
                config=config,
                defaults=presets,
                context=context,
                namespace=namespace,
                parameter_overrides=[*parameter_overrides, Parameter("camera_name", value=cam)],
            ))
    except BaseException:
        for node in made:
            getattr(node, "close", lambda: None)()
            node.destroy_node()
        raise
    buffers = [n for n in made if isinstance(n, FrameBufferNode)]
    if config.perception.mode == "streaming" or config.memory.enabled:
        for buffer in buffers:
            buffer.store.on_frame = (
                lambda stamp, image, key, cam=buffer.camera_name: perception.submit_frame(
                    cam, stamp, image, key))
    writer, why_not = record_memory(config, perception, buffers, query.get_logger())
    query.attach(LocalEngine({b.camera_name: b.window for b in buffers},
                             perception.serving, reasoning.reason,
                             {b.camera_name: b.store.pose_now for b in buffers}),
                 memory=MemoryReader(config) if config.memory.enabled else None)
    query.serve_memory(writer, why_not)
    nodes: list[Node] = [perception, reasoning, query, *buffers]
    if config.viewer.enabled:
        for cam in query.cameras:
            perception.boxes_topic(cam)
        query.viewer = serve_viewer(config, nodes, query)
    return nodes


def serve_viewer(config: Config, nodes: Sequence[Node], query: QueryServerNode) -> Any:
    """The Foxglove server of the nodes' viewer topics and the query service, or None (it
    could not start: logged, the robot runs on)."""
    from embodied_r_ros.viewer.server import start_viewer

    feed = ViewerFeed()
    topics: dict[str, str] = {}
    for node in nodes:
        for topic in getattr(node, "viewer_topics", ()):
            topic.feed = feed
            topics[topic.topic] = topic.kind
    assert query.runner is not None
    return start_viewer(config.viewer, topics, feed, query.runner, query.get_logger())


def main(args: Sequence[str] | None = None) -> int:
    from embodied_r_ros.nodes.runtime import run_nodes

    return run_nodes(build_nodes, args)


if __name__ == "__main__":
    raise SystemExit(main())

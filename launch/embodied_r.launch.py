"""Embodied-R on a robot: ``ros2 launch embodied_r_ros embodied_r.launch.py``.

Arguments (``ros2 launch ... --show-args``):
  camera_topic     raw image topic; its ``/compressed`` sibling is subscribed too
  odom_topic       nav_msgs/Odometry for metric actions between key frames
  profile          pipeline profile (tiny, offline, workstation, server, paper, jetson)
  config_file      YAML layered over the profile (empty = none)
  params_file      ROS parameters for the nodes (default: the package's config/ros_params.yaml)
  namespace        namespace of every node; the query service is <namespace>/query
  mode             allinone: one process; separate: one process per node
  run_perception   separate mode: false when the perception node runs on another machine
  run_reasoning    separate mode: false when the reasoning node runs on another machine
  use_sim_time     follow /clock

In separate mode the perception and reasoning nodes are lifecycle nodes that the launch drives,
in the order nav2's lifecycle manager uses: ``configure`` (the model loads) once the process is
up, ``activate`` once it is configured; their ``autostart`` is off. A model that cannot load
leaves its node unconfigured, with one error line, and the query server answers BACKEND_DOWN.
In allinone mode the one process drives its own managed nodes (``autostart``).
"""

from launch import Action, LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, GroupAction, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import (
    AndSubstitution,
    EqualsSubstitution,
    LaunchConfiguration,
    PathJoinSubstitution,
)
from launch_ros.actions import LifecycleNode, Node, PushRosNamespace
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare
from lifecycle_msgs.msg import Transition

PACKAGE = "embodied_r_ros"


def generate_launch_description() -> LaunchDescription:
    camera_topic = LaunchConfiguration("camera_topic")
    mode = LaunchConfiguration("mode")
    separate = EqualsSubstitution(mode, "separate")
    remappings = [
        ("image", camera_topic),
        ("image/compressed", [camera_topic, "/compressed"]),
        ("odom", LaunchConfiguration("odom_topic")),
    ]
    parameters = [
        LaunchConfiguration("params_file"),
        {
            # typed: an empty config_file must stay "" rather than parse as YAML null
            "profile": ParameterValue(LaunchConfiguration("profile"), value_type=str),
            "config_file": ParameterValue(LaunchConfiguration("config_file"), value_type=str),
            "use_sim_time": LaunchConfiguration("use_sim_time"),
        },
    ]

    def node(executable: str, name: str | None, condition: IfCondition) -> Node:
        return Node(
            package=PACKAGE,
            executable=executable,
            name=name,
            parameters=parameters,
            remappings=remappings,
            output="screen",
            emulate_tty=True,
            condition=condition,
        )

    def managed(executable: str, name: str, condition: IfCondition) -> list[Action]:
        """A lifecycle node, its ``configure`` requested at once (the request waits for the
        node's service) and its ``activate`` when that configure has succeeded."""
        lifecycle = LifecycleNode(
            package=PACKAGE,
            executable=executable,
            name=name,
            namespace="",  # under the pushed namespace
            parameters=[*parameters, {"autostart": False}],  # the transitions come from here
            remappings=remappings,
            output="screen",
            emulate_tty=True,
            condition=condition,
        )

        def change(transition: int) -> EmitEvent:
            return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(lifecycle),
                                               transition_id=transition), condition=condition)

        return [
            lifecycle,
            RegisterEventHandler(OnStateTransition(
                target_lifecycle_node=lifecycle, start_state="configuring", goal_state="inactive",
                entities=[change(Transition.TRANSITION_ACTIVATE)],
            ), condition=condition),
            change(Transition.TRANSITION_CONFIGURE),
        ]

    return LaunchDescription([
        DeclareLaunchArgument("camera_topic", default_value="/camera/image_raw"),
        DeclareLaunchArgument("odom_topic", default_value="/odom"),
        DeclareLaunchArgument("profile", default_value="offline"),
        DeclareLaunchArgument("config_file", default_value=""),
        DeclareLaunchArgument(
            "params_file",
            default_value=PathJoinSubstitution(
                [FindPackageShare(PACKAGE), "config", "ros_params.yaml"]
            ),
        ),
        DeclareLaunchArgument("namespace", default_value="embodied_r"),
        DeclareLaunchArgument("mode", default_value="allinone",
                              choices=["allinone", "separate"]),
        DeclareLaunchArgument("run_perception", default_value="true"),
        DeclareLaunchArgument("run_reasoning", default_value="true"),
        DeclareLaunchArgument("use_sim_time", default_value="false"),
        GroupAction([
            PushRosNamespace(LaunchConfiguration("namespace")),
            # all nodes in one process (the node names are set inside it)
            node("embodied_r", None, IfCondition(EqualsSubstitution(mode, "allinone"))),
            # one process per node, so the VLM can run on another machine
            node("frame_buffer", "frame_buffer", IfCondition(separate)),
            node("query_server", "query_server", IfCondition(separate)),
            *managed("perception_node", "perception", IfCondition(
                AndSubstitution(separate, LaunchConfiguration("run_perception")))),
            *managed("reasoning_node", "reasoning", IfCondition(
                AndSubstitution(separate, LaunchConfiguration("run_reasoning")))),
        ]),
    ])

"""Embodied-R on a robot: ``ros2 launch embodied_r_ros embodied_r.launch.py``.

Arguments (``ros2 launch ... --show-args``):
  camera_topic     raw image topic; its ``/compressed`` sibling is subscribed too
  odom_topic       nav_msgs/Odometry for metric actions between key frames
  profile          pipeline profile (tiny, offline, workstation, server)
  config_file      YAML layered over the profile (empty = none)
  params_file      ROS parameters for the nodes (default: the package's config/ros_params.yaml)
  namespace        namespace of every node; the query service is <namespace>/query
  mode             allinone: one process; separate: one process per node
  run_perception   separate mode: false when the perception node runs on another machine
  run_reasoning    separate mode: false when the reasoning node runs on another machine
  use_sim_time     follow /clock
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction
from launch.conditions import IfCondition
from launch.substitutions import (
    AndSubstitution,
    EqualsSubstitution,
    LaunchConfiguration,
    PathJoinSubstitution,
)
from launch_ros.actions import Node, PushRosNamespace
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

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
            node("perception_node", "perception", IfCondition(
                AndSubstitution(separate, LaunchConfiguration("run_perception")))),
            node("reasoning_node", "reasoning", IfCondition(
                AndSubstitution(separate, LaunchConfiguration("run_reasoning")))),
        ]),
    ])

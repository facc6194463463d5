"""ROS 2 nodes: thin adapters between topics/services/actions and the ROS-free core.

``frame_store``, ``query`` and ``local_engine`` do not import rclpy; everything else does.
"""

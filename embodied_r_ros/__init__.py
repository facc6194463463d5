"""Embodied-R for ROS 2: the ROS-free core lives in :mod:`embodied_r_ros.core`."""

__version__ = "0.1.0"

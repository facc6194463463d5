"""The ROS-free algorithm core shared by the CLI, the ROS nodes and the trainer.

Nothing under this package may import rclpy (a test enforces it).
"""

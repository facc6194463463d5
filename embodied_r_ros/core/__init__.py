"""The method: key frames, perception, reasoning, their records, the perception text, the
pipeline that joins them, its configuration and the request.

Nothing under this package may import rclpy (a test enforces it).
"""

"""What a robot recorded, read without ROS: rosbag2 and ROS 1 bags, ROS image and tf messages
as plain data (the live nodes convert theirs the same way), and video files or image folders.
"""

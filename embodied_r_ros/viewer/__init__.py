"""What an operator watches live: content built once, served to ROS topics and Foxglove."""

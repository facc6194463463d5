"""The robot-side runtime without ROS: the key-frame store, the query runner, the engines that
answer from a window and the guard around callbacks. The nodes adapt it to ROS."""

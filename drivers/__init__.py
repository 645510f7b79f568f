"""ROS 2 drivers for cameras and arms (real and sim backends). Arrives with the ROS 2 issue."""

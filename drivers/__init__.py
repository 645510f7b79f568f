"""ROS 2 drivers for cameras and arms (real and sim backends)."""

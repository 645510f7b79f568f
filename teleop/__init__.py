"""Teleoperation devices, the intervention node and the operator console. Arrives with the teleop issue."""

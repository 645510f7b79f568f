"""Teleoperation: devices, the simulated human, the intervention node and the operator console."""

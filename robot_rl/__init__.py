"""robot_rl: human-in-the-loop reinforcement learning for real robot arms, with a simulated twin."""

import os

# MuJoCo picks its OpenGL platform when it is first imported: default to headless EGL
# (no display needed) unless the user chose one. Import robot_rl before mujoco for this.
os.environ.setdefault("MUJOCO_GL", "egl")

__version__ = "0.1.0"

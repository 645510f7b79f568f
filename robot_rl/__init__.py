"""robot_rl: human-in-the-loop reinforcement learning for real robot arms, with a simulated twin."""

import os

# MuJoCo picks its OpenGL platform when it is first imported: default to headless EGL
# (no display needed) unless the user chose one. Import robot_rl before mujoco for this.
os.environ.setdefault("MUJOCO_GL", "egl")
# torch's OpenMP threads spin while they wait for each other (300,000 turns by default); when another
# process holds a core, a descheduled thread stalls the rest: the classifier's training with 2 threads
# ran 0.42 steps/s beside three other jobs on 2 cores, 2.7 with 10,000 turns, 14.7 and 14.3 alone
# (docs/CALIBRATION.md). Read when torch loads: import robot_rl before torch for this.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

__version__ = "0.1.0"

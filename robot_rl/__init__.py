"""robot_rl: human-in-the-loop reinforcement learning for real robot arms, with a simulated twin."""

__version__ = "0.1.0"

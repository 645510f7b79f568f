"""The simulated twin of the Panda work cell (``import robot_rl.sim``).

    env = robot_rl.sim.make("PickCube", backend="mujoco", images=True)
    env = gymnasium.make("robot_rl/PickCube-v0", backend="pybullet")

Observation/action contract: ``robot_rl.contract``.
"""

from __future__ import annotations

import gymnasium as gym

from robot_rl.sim.env import BACKENDS, PandaCellEnv, UnknownBackendError
from robot_rl.sim.tasks import TASKS, UnknownTaskError, get_task

__all__ = ["BACKENDS", "TASKS", "PandaCellEnv", "UnknownBackendError", "UnknownTaskError", "get_task", "make"]


def make(task: str = "PickCube", backend: str = "mujoco", **kwargs) -> PandaCellEnv:
    """Create the twin for ``task`` on ``backend``; kwargs go to ``PandaCellEnv``."""
    return PandaCellEnv(task=task, backend=backend, **kwargs)


def env_id(task: str) -> str:
    return f"robot_rl/{task}-v0"


for _name in TASKS:
    if env_id(_name) not in gym.registry:
        gym.register(id=env_id(_name), entry_point="robot_rl.sim.env:PandaCellEnv", kwargs={"task": _name})
# the SO-101 twin (sim/so101_env.py): PickCube sized for the SO-101, the same contract
if env_id("PickCubeSO101") not in gym.registry:
    gym.register(id=env_id("PickCubeSO101"), entry_point="robot_rl.sim.so101_env:So101CellEnv")

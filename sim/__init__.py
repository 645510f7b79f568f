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


def make(task: str = "PickCube", backend: str = "mujoco", **kwargs) -> gym.Env:
    """Create the twin for ``task`` on ``backend``; kwargs go to ``PandaCellEnv`` (or, for an
    SO-101 task, MuJoCo only, to ``so101_env.So101CellEnv``)."""
    if get_task(task).robot == "so101":
        if backend != "mujoco":
            raise UnknownBackendError(f"task {task} (the SO-101's twin) runs on mujoco only, not {backend!r}")
        from robot_rl.sim.so101_env import So101CellEnv

        return So101CellEnv(task=task, **kwargs)
    return PandaCellEnv(task=task, backend=backend, **kwargs)


def env_id(task: str) -> str:
    return f"robot_rl/{task}-v0"


for _name, _cls in TASKS.items():
    if env_id(_name) not in gym.registry:
        _entry = "robot_rl.sim.so101_env:So101CellEnv" if _cls.robot == "so101" else "robot_rl.sim.env:PandaCellEnv"
        gym.register(id=env_id(_name), entry_point=_entry, kwargs={"task": _name})

"""Small Gymnasium envs of someone else's for the ``--env`` tests (tests/test_foreign_env.py):
registered on import, as a package registers its envs, under the namespace ``robot_rl_test``.
The worker imports this module by name (``foreign_envs:robot_rl_test/Reach-v0``), with this
folder on its PYTHONPATH; so does gym.make in process, with the folder on sys.path.

``Reach-v0``: a point finger moves in the plane (action dims 0, 1; dim 2 is ignored, like
gym_hil's rotations) to a goal, then closes its gripper (dim 3, a delta on the gripper's
command like gym_hil's); success (``info["is_success"]``, terminated) is a closed gripper
within 10 cm of the goal. Observation: ``agent`` (finger x, y, gripper 0..1), ``goal`` (x, y)
and ``camera`` (16 x 16 x 3 uint8, the finger and goal drawn). ``die_at_step`` kills the
process at that step (a crashing env), ``bad_camera`` makes the camera float32, ``run_to_limit``
never terminates: success is reported and the episode runs on to its time limit (as
gymnasium-robotics' Fetch tasks do). ``FreshEntropyReach-v0``: Reach whose unseeded reset draws
fresh entropy (panda-gym 3's).
"""

import os
import sys

import gymnasium as gym
import numpy as np

STEP = 0.05
RADIUS = 0.1  # success: the gripper closed this near the goal


class Reach(gym.Env):
    metadata = {"render_fps": 20, "render_modes": []}

    def __init__(self, die_at_step: int = 0, bad_camera: bool = False, run_to_limit: bool = False):
        self.die_at_step, self.run_to_limit = die_at_step, run_to_limit
        camera = gym.spaces.Box(0.0, 1.0, (16, 16, 3), np.float32) if bad_camera else \
            gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
        self.observation_space = gym.spaces.Dict({
            "agent": gym.spaces.Box(-1, 1, (3,), np.float32),
            "goal": gym.spaces.Box(-1, 1, (2,), np.float32),
            "camera": camera})
        self.action_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.bad_camera = bad_camera

    def _obs(self):
        image = np.zeros((16, 16, 3), np.uint8)
        for value, channel in ((self.pos, 0), (self.goal, 1)):
            i, j = np.clip(((value + 1) * 8).astype(int), 0, 15)
            image[i, j, channel] = 255
        return {"agent": np.array([*self.pos, self.grip], np.float32), "goal": self.goal.astype(np.float32),
                "camera": image.astype(np.float32) / 255 if self.bad_camera else image}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.5, 0.5, 2)
        self.goal = self.np_random.uniform(-0.5, 0.5, 2)
        self.grip, self.t = 0.0, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        if self.die_at_step and self.t >= self.die_at_step:
            sys.stderr.write(f"Reach: simulated crash at step {self.t}\n")
            sys.stderr.flush()
            os._exit(3)
        action = np.clip(np.asarray(action, np.float64), -1, 1)
        self.pos = np.clip(self.pos + STEP * action[:2], -1, 1)
        self.grip = float(np.clip(self.grip + action[3], 0, 1))
        success = bool(self.grip > 0.5 and np.linalg.norm(self.pos - self.goal) < RADIUS)
        info = {"is_success": success, "distance": float(np.linalg.norm(self.pos - self.goal))}
        return self._obs(), float(success), success and not self.run_to_limit, False, info


class FreshEntropyReach(Reach):
    """Reach whose unseeded reset draws fresh OS entropy, as panda-gym 3's does
    (``seeding.np_random(None)`` at every reset): seeded once, it still goes on differently."""

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed)
        rng = np.random.default_rng(seed)  # None: fresh entropy
        self.pos, self.goal = rng.uniform(-0.5, 0.5, 2), rng.uniform(-0.5, 0.5, 2)
        return self._obs(), info


class Discrete(Reach):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Discrete(5)


def scripted_reach(obs):
    """The demonstrator: straight to the goal, then close."""
    delta = obs["goal"] - obs["agent"][:2]
    close = np.linalg.norm(delta) < RADIUS / 2
    move = np.zeros(2) if close else np.clip(delta / STEP, -1, 1)
    return np.array([*move, 0.0, 1.0 if close else -1.0])


def reach_progress(obs):
    """How far the finger has come: 1 at the goal, 0 a metre or more from it."""
    return 1.0 - min(float(np.linalg.norm(obs["goal"] - obs["agent"][:2])), 1.0)


def scripted_reach_with_progress(obs):
    """The demonstrator, saying its progress too (``progress``), as a simulated human can judge it."""
    return scripted_reach(obs)


scripted_reach_with_progress.progress = reach_progress


def scripted_reach_lost(obs):
    """The demonstrator, whose progress is not a number (a broken progress function)."""
    return scripted_reach(obs)


scripted_reach_lost.progress = lambda obs: float("nan")


gym.register("robot_rl_test/Reach-v0", entry_point=Reach, max_episode_steps=40)
gym.register("robot_rl_test/FreshEntropyReach-v0", entry_point=FreshEntropyReach, max_episode_steps=40)
gym.register("robot_rl_test/Discrete-v0", entry_point=Discrete, max_episode_steps=40)

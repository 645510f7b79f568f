"""A scripted pick for gym_hil's ``PandaPickCubeBase-v0`` (its raw 7-D action: metres of end-effector
motion per step, three ignored rotations, a gripper delta): the demonstrator of
``robot-rl train --env gym_hil/PandaPickCubeBase-v0 --env-expert examples/gym_hil/scripted_pick.py:policy``.

It runs in the env's own interpreter (``--env-python``), so it imports numpy alone. It reads the
cube's position from the observation's ``environment_state`` (state mode) or, in camera mode,
which has none, from the simulator (``policy(obs, env)``: the second argument is the unwrapped
env, as the twin's scripted experts read the sim's object poses).

Approach 6 cm above the cube, descend until the pinch point reaches its centre, close for 3
steps, lift to 25 cm (success is the cube 10 cm above where it started). 100 of 100 episodes with
a random cube position (docs/CALIBRATION.md).
"""

import numpy as np

MAX_STEP_M = 0.03


class ScriptedPick:
    def __init__(self):
        self.reset()

    def reset(self):
        self.phase, self.closing = "approach", 0

    def __call__(self, obs, env=None):
        agent = np.asarray(obs["agent_pos"], np.float64)
        tcp = agent[15:18]
        if "environment_state" in obs:
            block = np.asarray(obs["environment_state"], np.float64)
        else:
            block = np.array(env._data.sensor("block_pos").data, np.float64)
        grasp = -1.0
        if self.phase == "approach":
            target = block + [0.0, 0.0, 0.06]
            if np.linalg.norm(target - tcp) < 0.01:
                self.phase = "descend"
        if self.phase == "descend":
            target = block.copy()
            if np.linalg.norm(target - tcp) < 0.008:
                self.phase = "close"
        if self.phase == "close":
            target, grasp = tcp.copy(), 1.0
            self.closing += 1
            if self.closing >= 3:
                self.phase = "lift"
        if self.phase == "lift":
            target, grasp = np.array([block[0], block[1], 0.25]), 1.0
        action = np.zeros(7)
        action[:3] = np.clip(target - tcp, -MAX_STEP_M, MAX_STEP_M)
        action[6] = grasp
        return action


policy = ScriptedPick()

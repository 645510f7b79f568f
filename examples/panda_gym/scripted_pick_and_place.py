"""A scripted pick and place for panda-gym's ``PandaPickAndPlace-v3`` (action: 3 numbers of
end-effector displacement, 5 cm each at full scale, and the fingers' width change, -1 closing,
+1 opening; observation ``observation``: end-effector position (0:3) and velocity (3:6), the
fingers' width (6), then the cube's position (7:10), rotation and velocities; ``desired_goal``:
where the cube's centre should go, on the table or up to 20 cm above it). The demonstrator of
``robot-rl train --env panda_gym:PandaPickAndPlace-v3
--env-expert examples/panda_gym/scripted_pick_and_place.py:policy``.

Open the fingers over the cube, descend to its centre, close, carry it to the goal; if the cube
is not between the fingers while carrying (a slip), open and go back for it.
"""

import numpy as np

STEP_M = 0.05  # the env's displacement at action 1
CUBE = 0.04  # the cube's side
HOVER = 0.05  # above the cube's centre before descending
CARRY_SPEED = 0.5


class ScriptedPickAndPlace:
    def __init__(self):
        self.reset()

    def reset(self):
        self.phase, self.closing = "approach", 0

    @staticmethod
    def progress(obs):
        """How far the task has come, in [0, 1], for a simulated human that judges progress: half for
        the hand at the cube, half for the cube's way to the goal."""
        o = np.asarray(obs["observation"], np.float64)
        ee, cube, goal = o[0:3], o[7:10], np.asarray(obs["desired_goal"], np.float64)
        reach = 1.0 - min(float(np.linalg.norm(ee - cube)) / 0.3, 1.0)
        return 0.5 * reach + 0.5 * (1.0 - min(float(np.linalg.norm(goal - cube)) / 0.5, 1.0))

    def __call__(self, obs):
        o = np.asarray(obs["observation"], np.float64)
        ee, width, cube = o[0:3], o[6], o[7:10]
        goal = np.asarray(obs["desired_goal"], np.float64)
        fingers = 1.0  # open
        if self.phase == "carry" and (np.linalg.norm(cube - ee) > 0.04 or width < CUBE - 0.01):
            self.phase, self.closing = "approach", 0  # not in the hand: go back for it
        if self.phase == "approach":
            target = cube + [0.0, 0.0, HOVER]
            if ee[2] < cube[2] + 0.02 and np.linalg.norm(ee[:2] - cube[:2]) > 0.02:
                target = np.array([*ee[:2], cube[2] + HOVER])  # low beside the cube: up first
            if np.linalg.norm(ee[:2] - cube[:2]) < 0.008 and abs(ee[2] - target[2]) < 0.02 and width > CUBE + 0.02:
                self.phase = "descend"
        if self.phase == "descend":
            target = cube.copy()
            if abs(ee[2] - cube[2]) < 0.006:
                self.phase = "close"
            elif np.linalg.norm(ee[:2] - cube[:2]) > 0.015:
                self.phase = "approach"
        if self.phase == "close":
            target, fingers = cube.copy(), -1.0
            self.closing += 1
            if self.closing >= 3:
                self.phase = "carry"
        if self.phase == "carry":
            target, fingers = goal, -1.0
        action = np.zeros(4)
        speed = CARRY_SPEED if self.phase == "carry" else 1.0  # a cube swung at full speed slips
        action[:3] = np.clip((target - ee) / STEP_M, -speed, speed)
        action[3] = fingers
        return action


policy = ScriptedPickAndPlace()

"""A scripted push for panda-gym's ``PandaPush-v3`` (action: 3 numbers in [-1, 1], end-effector
displacement of 5 cm each at full scale; observation ``observation``: end-effector position and
velocity, then the cube's position, rotation and velocities; ``desired_goal``: where the cube
should go). The demonstrator of ``robot-rl train --env panda_gym:PandaPush-v3
--env-expert examples/panda_gym/scripted_push.py:policy``.

Go above a point behind the cube (on the far side from the goal), descend to the table, push the
cube to the goal; if the cube drifts off the line, back off and line up again.
"""

import numpy as np

STEP_M = 0.05  # the env's displacement at action 1
PUSH_SPEED = 0.5


class ScriptedPush:
    def __init__(self):
        self.reset()

    def reset(self):
        self.phase = "line_up"

    @staticmethod
    def progress(obs):
        """How far the task has come, in [0, 1], for a simulated human that judges progress: half for
        the hand behind the cube on its line to the goal, half for the cube's way to the goal."""
        o = np.asarray(obs["observation"], np.float64)
        ee, cube, goal = o[0:3], o[6:9], np.asarray(obs["desired_goal"], np.float64)
        to_goal = goal[:2] - cube[:2]
        dist = np.linalg.norm(to_goal)
        direction = to_goal / dist if dist > 1e-6 else np.array([1.0, 0.0])
        behind = cube[:2] - direction * 0.04
        reach = 1.0 - min(float(np.linalg.norm(ee[:2] - behind)) / 0.3, 1.0)
        return 0.5 * reach + 0.5 * (1.0 - min(float(dist) / 0.5, 1.0))

    def __call__(self, obs):
        o = np.asarray(obs["observation"], np.float64)
        ee, cube, goal = o[0:3], o[6:9], np.asarray(obs["desired_goal"], np.float64)
        to_goal = goal[:2] - cube[:2]
        dist = np.linalg.norm(to_goal)
        direction = to_goal / dist if dist > 1e-6 else np.array([1.0, 0.0])
        behind = np.array([*(cube[:2] - direction * 0.06), 0.02])
        if self.phase == "push":
            offset = ee[:2] - cube[:2]
            lateral = abs(offset[0] * direction[1] - offset[1] * direction[0])
            if lateral > 0.02 or np.dot(offset, direction) > -0.01:  # off the line: line up again
                self.phase = "line_up"
        if self.phase == "line_up":
            gap = np.linalg.norm(ee[:2] - behind[:2])
            far = gap > 0.04
            if far and ee[2] < 0.05:  # down at the cube's height: up first, or the move sweeps the cube along
                target = np.array([*ee[:2], 0.07])
            elif gap > 0.015:
                target = np.array([*behind[:2], max(0.07, ee[2]) if far else 0.02])
            else:
                target = behind
                if abs(ee[2] - 0.02) < 0.01:
                    self.phase = "push"
        if self.phase == "push":  # a point on the cube's line to the goal, a little ahead: the hand stays on the line
            target = np.array([*(cube[:2] - direction * 0.03 + direction * min(dist, 0.025)), 0.02])
            # at most PUSH_SPEED of the full step: a cube struck at full speed slides on past the goal
            return np.clip((target - ee) / STEP_M, -PUSH_SPEED, PUSH_SPEED)
        return np.clip((target - ee) / STEP_M, -1.0, 1.0)


policy = ScriptedPush()

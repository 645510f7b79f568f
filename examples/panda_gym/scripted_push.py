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


class ScriptedPush:
    def __init__(self):
        self.reset()

    def reset(self):
        self.phase = "line_up"

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
            if np.linalg.norm(ee[:2] - behind[:2]) > 0.015:
                target = np.array([*behind[:2], 0.07]) if ee[2] < 0.05 and np.linalg.norm(ee[:2] - behind[:2]) > 0.04 \
                    else np.array([*behind[:2], max(0.07, ee[2]) if np.linalg.norm(ee[:2] - behind[:2]) > 0.04 else 0.02])
            else:
                target = behind
                if abs(ee[2] - 0.02) < 0.01:
                    self.phase = "push"
        if self.phase == "push":
            target = np.array([*(goal[:2] - direction * 0.03), 0.02])
        return np.clip((target - ee) / STEP_M, -1.0, 1.0)


policy = ScriptedPush()

"""The SO-101 twin: PickCube sized for the SO-101 (a 2.5 cm cube within its reach) as a gymnasium
env of the same contract as the Panda's (``robot_rl.contract``), on the MuJoCo SO-101
(sim/so101_description.py, its kinematics and physics beside it), with the same motion the real
arm's backend makes (drivers/so101.py):
each step the TCP target (the last target moved by the action's displacement, clipped to the
workspace box - the displacements add up from the TCP at the episode's start, so an arm still
on its way loses none; its yaw turned by the action's, within the bound) becomes joint goals by
the same task-priority IK (``solve_ik``: the position first, then the tool pointing down where the
joints allow; roll and pitch commands are dropped), which the servos reach at their own speed
over one control period. The task (``robot_rl.sim.tasks.PickCubeSO101``) randomises the cube and
says what success is; its scripted expert is ``robot_rl.sim.experts.PickCubeSO101Expert``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl import contract
from robot_rl.contract import ControlLimits, GripperCommand, gripper_command, validate_action
from robot_rl.errors import InputError
from robot_rl.sim import so101_description as model
from robot_rl.sim import so101_kinematics as kinematics
from robot_rl.sim.so101_physics import So101Sim
from robot_rl.sim.tasks import Layout, get_task

CAMERAS = ("front", "wrist", "side")  # side: level with the lift line, for the success classifier


class So101CellEnv(gym.Env):
    """The SO-101 picking a cube: ``images`` renders ``cameras`` (front, wrist) at ``image_size``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, task: str = "PickCubeSO101", images: bool = False, image_size: tuple[int, int] = (64, 64),
                 cameras: tuple[str, ...] = ("front", "wrist"), privileged: bool = True, limits: ControlLimits = ControlLimits(),
                 render_mode: str | None = None, max_episode_steps: int | None = None):
        self.task = get_task(task)
        if self.task.robot != "so101":
            raise InputError(f"task {task} is not the SO-101's (its robot: {self.task.robot})")
        unknown = set(cameras) - set(CAMERAS)
        if unknown:
            raise InputError(f"unknown cameras {sorted(unknown)}; the SO-101 twin has {list(CAMERAS)}")
        self.physics = So101Sim(cube=True, cameras=True)
        self.images, self.image_size, self.cameras = images, (int(image_size[0]), int(image_size[1])), tuple(cameras)
        self.with_privileged, self.limits, self.render_mode = privileged, limits, render_mode
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self.action_space = contract.action_space()
        self.observation_space = contract.observation_space(self.image_size if images else None, self.cameras,
                                                            self.task.privileged_sizes() if privileged else None)
        self._gripper = model.GRIPPER_OPEN
        self._layout: Layout | None = None
        self._steps = 0
        self._started = False
        self.succeeded = False  # the ground truth's success at some step of this episode (sim/env.py's)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng, task = self.np_random, self.task
        start = np.asarray(task.home_tcp_pos) + rng.uniform(-1.0, 1.0, 3) * np.asarray(task.start_randomise_m)
        joints, _ = kinematics.solve_ik(task.safety_box.clip_position(start), 0.0, model.HOME)
        joints[5] = model.GRIPPER_OPEN
        self._layout = task.sample_layout(rng)
        cube_pos, cube_quat = self._layout.object_poses["cube"]
        self.physics.reset(joints, cube_pos=cube_pos)
        a = self.physics._cube_qpos
        self.physics.data.qpos[a + 3:a + 7] = cube_quat
        self.physics.step(0.05)  # the cube settles
        self._gripper, self._steps, self._started, self.succeeded = model.GRIPPER_OPEN, 0, True, False
        pos, rot = kinematics.forward_kinematics(self.physics.joint_positions())
        self._target = (pos, kinematics.tcp_yaw(rot))
        return self._observation(), {"success": False, "safety_clipped": False}

    def step(self, action):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        act = validate_action(action)
        q = self.physics.joint_positions()
        pos, last_yaw = self._target
        desired = pos + act[:3] * self.limits.max_translation_m
        target = self.task.safety_box.clip_position(desired)
        bound = float(self.task.safety_box.max_rotation_rad[2])
        yaw = float(np.clip(last_yaw + act[5] * self.limits.max_rotation_rad, -bound, bound))
        goal, error = kinematics.solve_ik(target, yaw, q)
        if error > kinematics.IK_TOLERANCE_M:  # out of reach: the last reachable target holds, as on the arm
            goal, _ = kinematics.solve_ik(pos, last_yaw, q)
        else:
            self._target = (target, yaw)
        command = gripper_command(act[6])
        if command is GripperCommand.CLOSE:
            self._gripper = model.LIMITS_LOW[5]  # past the cube: its stall torque squeezes it
        elif command is GripperCommand.OPEN:
            self._gripper = model.GRIPPER_OPEN
        goal[5] = self._gripper
        self.physics.set_targets(goal)
        self.physics.step(1.0 / self.limits.control_hz)
        self._steps += 1
        success = self.task.is_success({"cube": self.physics.cube_pose()}, self._layout)
        self.succeeded = self.succeeded or success
        truncated = self._steps >= self.max_episode_steps and not success
        info = {"success": success, "safety_clipped": not np.allclose(target, desired), "gripper_command": int(command)}
        return self._observation(), float(success), success, truncated, info

    def _observation(self) -> dict:
        p = self.physics
        obs: dict = {"state": kinematics.contract_state(p.joint_positions(), p.joint_velocities(), p.joint_efforts())}
        if self.images:
            obs["images"] = {cam: p.render(cam, *self.image_size) for cam in self.cameras}
        if self.with_privileged:
            pos, quat = p.cube_pose()
            obs["privileged"] = {"cube": np.concatenate([pos, quat]).astype(np.float32)}
        return obs

    def render(self):
        return self.physics.render("front", *self.image_size) if self.render_mode == "rgb_array" else None

    def close(self):
        self.physics.close()

    @property
    def layout(self) -> Layout | None:
        return self._layout

"""The SO-101 twin: PickCube sized for the SO-101 (a 2.5 cm cube within its reach) as a gymnasium
env of the same contract as the Panda's (``robot_rl.contract``), on the MuJoCo SO-101
(sim/so101_description.py), with the same motion the real arm's backend makes (drivers/so101.py):
each step the TCP target (the measured TCP moved by the action's displacement, clipped to the
workspace box; its yaw turned by the action's, within the bound) becomes joint goals by the
same task-priority IK (``solve_ik``: the position first, then the tool pointing down where the
joints allow; roll and pitch commands are dropped), which the servos reach at their own speed
over one control period. ``PickCubeSO101Expert`` picks the cube from the privileged poses.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl import contract
from robot_rl.contract import STATE_SLICES, ControlLimits, GripperCommand, SafetyBox, gripper_command, validate_action
from robot_rl.errors import InputError
from robot_rl.geometry import quat_to_matrix, quat_to_yaw, yaw_to_quat
from robot_rl.sim import so101_description as model
from robot_rl.sim.experts import ScriptedExpert

CAMERAS = ("front", "wrist")


class PickCubeSO101:
    """A 2.5 cm cube at a random place and yaw in front of the SO-101; success when lifted 5 cm.
    The values match robot_rl/tasks/pick_cube_so101.yaml (the real cell's task file)."""

    name = "PickCubeSO101"
    max_episode_steps = 100
    uses_gripper = True
    safety_box = SafetyBox(low=(0.1, -0.1, 0.01), high=(0.25, 0.1, 0.2), max_rotation_rad=(0.3, 0.3, 1.0))
    start_position = (0.2, 0.0, 0.1)
    start_randomise_m = (0.02, 0.02, 0.0)
    cube_half = model.CUBE_SIZE / 2
    cube_region_low = (0.15, -0.06)
    cube_region_high = (0.23, 0.06)
    cube_yaw_range = np.pi / 4
    lift_height = 0.05
    classifier_cameras = CAMERAS

    def privileged_sizes(self) -> dict[str, int]:
        return {"cube": 7}


class So101CellEnv(gym.Env):
    """The SO-101 picking a cube: ``images`` renders ``cameras`` (front, wrist) at ``image_size``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, images: bool = False, image_size: tuple[int, int] = (64, 64), cameras: tuple[str, ...] = CAMERAS,
                 privileged: bool = True, limits: ControlLimits = ControlLimits(), render_mode: str | None = None,
                 max_episode_steps: int | None = None):
        self.task = PickCubeSO101()
        unknown = set(cameras) - set(CAMERAS)
        if unknown:
            raise InputError(f"unknown cameras {sorted(unknown)}; the SO-101 twin has {list(CAMERAS)}")
        self.physics = model.So101Sim(cube=True, cameras=True)
        self.images, self.image_size, self.cameras = images, (int(image_size[0]), int(image_size[1])), tuple(cameras)
        self.with_privileged, self.limits, self.render_mode = privileged, limits, render_mode
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self.action_space = contract.action_space()
        self.observation_space = contract.observation_space(self.image_size if images else None, self.cameras,
                                                            self.task.privileged_sizes() if privileged else None)
        self._gripper = model.GRIPPER_OPEN
        self._cube_start_z = 0.0
        self._steps = 0
        self._started = False

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng, task = self.np_random, self.task
        start = np.asarray(task.start_position) + rng.uniform(-1.0, 1.0, 3) * np.asarray(task.start_randomise_m)
        joints, _ = model.solve_ik(task.safety_box.clip_position(start), 0.0, model.HOME)
        joints[5] = model.GRIPPER_OPEN
        xy = rng.uniform(task.cube_region_low, task.cube_region_high)
        self.physics.reset(joints, cube_pos=(xy[0], xy[1], task.cube_half))
        a = self.physics._cube_qpos
        self.physics.data.qpos[a + 3:a + 7] = yaw_to_quat(rng.uniform(-task.cube_yaw_range, task.cube_yaw_range))
        self.physics.step(0.05)  # the cube settles
        self._gripper, self._steps, self._started = model.GRIPPER_OPEN, 0, True
        self._cube_start_z = task.cube_half
        return self._observation(), {"success": False, "safety_clipped": False}

    def step(self, action):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        act = validate_action(action)
        q = self.physics.joint_positions()
        pos, rot = model.forward_kinematics(q)
        desired = pos + act[:3] * self.limits.max_translation_m
        target = self.task.safety_box.clip_position(desired)
        bound = float(self.task.safety_box.max_rotation_rad[2])
        yaw = float(np.clip(model.tcp_yaw(rot) + act[5] * self.limits.max_rotation_rad, -bound, bound))
        goal, _ = model.solve_ik(target, yaw, q)
        command = gripper_command(act[6])
        if command is GripperCommand.CLOSE:
            self._gripper = model.LIMITS_LOW[5]  # past the cube: its stall torque squeezes it
        elif command is GripperCommand.OPEN:
            self._gripper = model.GRIPPER_OPEN
        goal[5] = self._gripper
        self.physics.set_targets(goal)
        self.physics.step(1.0 / self.limits.control_hz)
        self._steps += 1
        success = bool(self.physics.cube_pose()[0][2] >= self._cube_start_z + self.task.lift_height)
        truncated = self._steps >= self.max_episode_steps and not success
        info = {"success": success, "safety_clipped": not np.allclose(target, desired), "gripper_command": int(command)}
        return self._observation(), float(success), success, truncated, info

    def _observation(self) -> dict:
        p = self.physics
        obs: dict = {"state": model.contract_state(p.joint_positions(), p.joint_velocities(), p.joint_efforts())}
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


class PickCubeSO101Expert(ScriptedExpert):
    """Over the cube with the jaws square to its faces, down, close, lift: the contract's actions
    from the privileged cube pose (100 of 100 picks, about 12 steps each). The cube sits between
    the jaws ``model.CUBE_IN_TCP`` from the TCP (the moving jaw swings toward the fixed one), so
    the TCP aims that far off the cube. ``noise`` as every scripted expert's (robot_rl.sim.experts)."""

    hover = 0.05
    close_steps = 5

    @staticmethod
    def progress(obs: dict) -> float:
        tcp = obs["state"][STATE_SLICES["tcp_pos"]].astype(np.float64)
        cube = obs["privileged"]["cube"][:3].astype(np.float64)
        reach = 1.0 - min(float(np.linalg.norm(cube - tcp)) / 0.15, 1.0)
        lift = float(np.clip((cube[2] - PickCubeSO101.cube_half) / PickCubeSO101.lift_height, 0.0, 1.0))
        return 0.5 * reach + 0.5 * lift

    def _clean_action(self, obs: dict) -> np.ndarray:
        state = obs["state"]
        tcp = state[STATE_SLICES["tcp_pos"]].astype(np.float64)
        rot = quat_to_matrix(state[STATE_SLICES["tcp_quat"]].astype(np.float64)) @ model.TCP_TO_CONTRACT.T
        cube = obs["privileged"]["cube"].astype(np.float64)
        tcp_yaw = model.tcp_yaw(rot)
        # a cube looks the same every 90 degrees: the nearest face-aligned yaw
        yaw = tcp_yaw + (np.mod(quat_to_yaw(cube[3:7]) - tcp_yaw + np.pi / 4, np.pi / 2) - np.pi / 4)
        aim = cube[:3] - model.down_rotation(yaw) @ np.asarray(model.CUBE_IN_TCP)  # the cube between the jaws
        gripper = -1.0
        self._phase_steps += 1
        if self.phase == "approach":
            target = aim + [0.0, 0.0, self.hover]
            if np.linalg.norm(target - tcp) < 0.006 and abs(yaw - tcp_yaw) < 0.05:
                self._set_phase("descend")
        if self.phase == "descend":
            target = aim
            if np.linalg.norm(target - tcp) < 0.004:
                self._set_phase("close")
        if self.phase == "close":
            target, gripper = aim, 1.0
            if self._phase_steps >= self.close_steps:
                self._set_phase("lift")
        if self.phase == "lift":
            target, gripper = aim + [0.0, 0.0, 0.12], 1.0
        action = np.zeros(7)
        action[:3] = np.clip((target - tcp) / self.limits.max_translation_m, -1.0, 1.0)
        action[5] = np.clip((yaw - tcp_yaw) / self.limits.max_rotation_rad, -1.0, 1.0)
        action[6] = gripper
        return action

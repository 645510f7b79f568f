"""The twin as a gymnasium env: one class for every task and both physics engines.

The env turns a 7-D action into an end-effector target (clipped to the task's safety
box), hands it to the backend's 500 Hz impedance controller for one 10 Hz control
period, and assembles the observation of ``robot_rl.contract``.

With ``collision_reflex=True`` (off by default; ``robot-rl train --collision-reflex``) the env acts
as a Franka's collision reflex does: where the external wrench from the end effector's contacts,
averaged over a control period, passes one of the per-axis thresholds
(``contract.COLLISION_FORCE_THRESHOLDS``, libfranka's defaults, the real driver's), the arm stops
and the episode ends there as a failure (``terminated``, reward 0, ``info["reflex"]`` true).

``max_force`` bounds the Cartesian force the impedance controller asks for, per axis (default
``ImpedanceGains.max_force``, 60 N; ``robot-rl train --arm-max-force``): what a Franka's
impedance controller with SERL's reference clipping allows (its pose error clipped to about a
centimetre at 2000 N/m, so about 20 N), the compliance under which a policy can press without
passing the reflex's thresholds.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl import contract
from robot_rl.contract import (CAMERAS, COLLISION_FORCE_THRESHOLDS, SIM_CAMERAS, ControlLimits, GripperCommand,
                               gripper_command, validate_action)
from robot_rl.sim.controller import PHYSICS_DT, ImpedanceGains
from robot_rl.geometry import HOME_ROTATION, matrix_to_quat, matrix_to_rotvec, rotvec_to_matrix
from robot_rl.sim.tasks import GRIPPER_OPEN_WIDTH, Layout, Task, get_task
from robot_rl.errors import InputError

BACKENDS = ("mujoco", "pybullet")


class UnknownBackendError(InputError):
    pass


def make_backend(name: str, task: Task, gains: ImpedanceGains = ImpedanceGains()):
    if name == "mujoco":
        from robot_rl.sim.mujoco_backend import MujocoBackend

        return MujocoBackend(task, gains)
    if name == "pybullet":
        from robot_rl.sim.pybullet_backend import PybulletBackend

        return PybulletBackend(task, gains)
    raise UnknownBackendError(f"unknown backend {name!r}; available backends: {', '.join(BACKENDS)}")


class PandaCellEnv(gym.Env):
    """Franka Panda work cell. ``images=True`` renders the ``front`` and ``wrist`` cameras
    (uint8 H x W x 3, ``image_size`` = (H, W)); without it observations are state-only."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        task: str = "PickCube",
        backend: str = "mujoco",
        images: bool = False,
        image_size: tuple[int, int] = (128, 128),
        cameras: tuple[str, ...] = CAMERAS,
        privileged: bool = True,
        limits: ControlLimits = ControlLimits(),
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        collision_reflex: bool = False,
        collision_thresholds: tuple[float, ...] = COLLISION_FORCE_THRESHOLDS,
        max_force: float = ImpedanceGains.max_force,
    ):
        self.task = get_task(task)
        if self.task.robot != "panda":
            raise InputError(f"task {task} is the {self.task.robot}'s, not the Panda's: robot_rl.sim.make({task!r}) or "
                             "robot_rl.envs.make_cell_env build its twin")
        unknown = set(cameras) - set(SIM_CAMERAS)
        if unknown:
            raise InputError(f"unknown cameras {sorted(unknown)}; the twin has {list(SIM_CAMERAS)}")
        if len(image_size) != 2 or min(image_size) < 8:
            raise InputError(f"image_size must be (height, width) with both >= 8, got {image_size}")
        if len(collision_thresholds) != 6 or min(collision_thresholds) <= 0:
            raise InputError(f"collision_thresholds must be 6 positive values (N along x y z, Nm about x y z), "
                             f"got {tuple(collision_thresholds)}")
        if not max_force > 0:
            raise InputError(f"max_force (the arm's force bound, N per axis) must be > 0, got {max_force}")
        if render_mode not in (None, "rgb_array"):
            raise InputError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.backend_name = backend
        self.backend = make_backend(backend, self.task, ImpedanceGains(max_force=float(max_force)))
        self.max_force = float(max_force)
        self.images = images
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.cameras = tuple(cameras)
        self.with_privileged = privileged
        self.limits = limits
        self.render_mode = render_mode
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self.collision_reflex = bool(collision_reflex)
        self.collision_thresholds = np.asarray(collision_thresholds, dtype=np.float64)
        self.n_substeps = int(round(1.0 / (limits.control_hz * PHYSICS_DT)))
        self.action_space = contract.action_space()
        self.observation_space = contract.observation_space(
            self.image_size if images else None, self.cameras, self.task.privileged_sizes() if privileged else None
        )
        self._layout: Layout | None = None
        self._gripper_target = GRIPPER_OPEN_WIDTH
        self._steps = 0
        # the ground truth's success at some step of this episode: a wrapper that decides success
        # itself (the classifier's reward) runs the episode on where the classifier misses it, and
        # the simulated human stands by from here, as a person watching the cell would
        self.succeeded = False

    # ---- gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._layout = self.task.sample_layout(self.np_random)
        self.backend.reset(self._layout)
        self._gripper_target = 0.0 if self._layout.held_object else self._layout.gripper_width
        self._steps = 0
        self.succeeded = False
        return self._observation(), {"success": False, "safety_clipped": False, "reflex": False}

    def step(self, action):
        if self._layout is None:
            raise RuntimeError("call reset() before step()")
        act = validate_action(action)
        pos, rot = self.backend.tcp_pose()
        target_pos, target_rot, clipped = self._target(pos, rot, act)
        command = gripper_command(act[6]) if self.task.uses_gripper else GripperCommand.STAY
        if command is GripperCommand.CLOSE:
            self._gripper_target = 0.0
        elif command is GripperCommand.OPEN:
            self._gripper_target = GRIPPER_OPEN_WIDTH
        peak = self.backend.step(target_pos, target_rot, self._gripper_target, self.n_substeps,
                                 track_peak_wrench=self.collision_reflex)
        reflex = peak is not None and bool(np.any(peak > self.collision_thresholds))
        self._steps += 1
        poses = self.backend.object_poses()
        success = not reflex and self.task.is_success(poses, self._layout)
        self.succeeded = self.succeeded or success
        terminated = success or reflex
        truncated = self._steps >= self.max_episode_steps and not terminated
        info = {"success": success, "safety_clipped": clipped, "gripper_command": int(command), "reflex": reflex}
        return self._observation(poses), float(success), terminated, truncated, info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return self.backend.render("front", *self.image_size)

    def close(self):
        self.backend.close()

    # ---- internals ----------------------------------------------------------------------
    def _target(self, pos, rot, act):
        """Delta action -> TCP target, clipped to the safety box (position and rotation)."""
        box = self.task.safety_box
        desired = pos + act[:3] * self.limits.max_translation_m
        target_pos = box.clip_position(desired)
        desired_rot = rotvec_to_matrix(act[3:6] * self.limits.max_rotation_rad) @ rot
        deviation = matrix_to_rotvec(desired_rot @ HOME_ROTATION.T)
        clipped_dev = box.clip_rotation(deviation)
        rot_clipped = not np.allclose(clipped_dev, deviation)
        target_rot = rotvec_to_matrix(clipped_dev) @ HOME_ROTATION if rot_clipped else desired_rot
        clipped = rot_clipped or not np.allclose(target_pos, desired)
        return target_pos, target_rot, clipped

    def _state(self) -> np.ndarray:
        pos, rot = self.backend.tcp_pose()
        linvel, angvel = self.backend.tcp_velocity()
        force, torque = self.backend.wrench()
        width = self.backend.gripper_width()
        return np.concatenate([pos, contract.state_quat(matrix_to_quat(rot)), linvel, angvel, [width], force,
                               torque]).astype(np.float32)

    def _observation(self, poses: dict | None = None) -> dict:
        obs: dict = {"state": self._state()}
        if self.images:
            h, w = self.image_size
            obs["images"] = {cam: self.backend.render(cam, h, w) for cam in self.cameras}
        if self.with_privileged:
            poses = poses if poses is not None else self.backend.object_poses()
            obs["privileged"] = self.task.privileged(poses, self._layout)
        return obs

    @property
    def layout(self) -> Layout | None:
        return self._layout

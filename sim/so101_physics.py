"""``So101Sim``: the SO-101 on its table (so101_description.py) as physics, driven like the real
arm: six position servos whose commands move toward their targets no faster than the STS3215's top
speed, torque that can be switched off, the cube placed per episode, and the cameras rendered.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.sim.so101_description import (
    CUBE_POS,
    HOME,
    JOINTS,
    LIMITS_HIGH,
    LIMITS_LOW,
    SERVO_MAX_SPEED_RAD_S,
    so101_spec,
)
from robot_rl.sim.so101_kinematics import joint_addresses, tcp_jacobian_of, tcp_pose_of


class So101Sim:
    """The SO-101 on its table, driven like the real arm: six position servos whose commanded
    positions move toward their targets no faster than the STS3215's top speed."""

    def __init__(self, cube: bool = True, cameras: bool = True):
        self.spec = so101_spec(cube=cube, cameras=cameras)
        self.model = self.spec.compile()
        self.data = mujoco.MjData(self.model)
        self.has_cube = cube
        self._qpos, self._dof = joint_addresses(self.model)
        self._act = np.array([self.model.actuator(j).id for j in JOINTS])
        self._tcp = self.model.site("tcp").id
        if cube:
            jnt = self.model.joint("cube").id
            self._cube_qpos = self.model.jnt_qposadr[jnt]
            self._cube_dof = self.model.jnt_dofadr[jnt]
            self._cube_body = self.model.body("cube").id
        self._renderer: mujoco.Renderer | None = None
        self._scratch = mujoco.MjData(self.model)  # for forward_kinematics() and jacobian()
        self._targets = HOME.copy()
        self._command = HOME.copy()
        self._gain = self.model.actuator_gainprm[self._act, 0].copy()
        self._bias = self.model.actuator_biasprm[self._act, 1:3].copy()
        self.torque = np.ones(len(JOINTS), bool)
        self.reset()

    @property
    def timestep(self) -> float:
        return float(self.model.opt.timestep)

    @property
    def time(self) -> float:
        return float(self.data.time)

    def reset(self, joints=HOME, cube_pos=None) -> None:
        """The arm at rest at ``joints`` (clipped to LIMITS), targets there, the cube (if any) at
        rest at ``cube_pos`` (default CUBE_POS), unrotated."""
        mujoco.mj_resetData(self.model, self.data)
        joints = np.clip(np.asarray(joints, dtype=float).ravel(), LIMITS_LOW, LIMITS_HIGH)
        self.data.qpos[self._qpos] = joints
        if self.has_cube:
            a = self._cube_qpos
            self.data.qpos[a: a + 3] = CUBE_POS if cube_pos is None else np.asarray(cube_pos, dtype=float)
            self.data.qpos[a + 3: a + 7] = (1.0, 0.0, 0.0, 0.0)
        self._targets = joints.copy()
        self._command = joints.copy()
        self.data.ctrl[self._act] = joints
        mujoco.mj_forward(self.model, self.data)

    def set_targets(self, targets) -> None:
        """Six joint targets (radians), clipped to LIMITS; reached at the servos' speed by step()."""
        targets = np.asarray(targets, dtype=float).ravel()
        if targets.shape != (6,):
            raise ValueError(f"expected 6 joint targets, got shape {targets.shape}")
        self._targets = np.clip(targets, LIMITS_LOW, LIMITS_HIGH)

    def hold(self, joints) -> None:
        """The joints put at ``joints`` and held there, at rest (a hand moving a limp arm: the
        calibration's poses); the cube, if any, simulated on. The servos' commands follow."""
        joints = np.clip(np.asarray(joints, dtype=float).ravel(), LIMITS_LOW, LIMITS_HIGH)
        self.data.qpos[self._qpos] = joints
        self.data.qvel[self._dof] = 0.0
        self._command, self._targets = joints.copy(), joints.copy()
        self.data.ctrl[self._act] = joints
        mujoco.mj_forward(self.model, self.data)

    def set_torque_enabled(self, enabled) -> None:
        """Servos whose torque is off go limp (an STS3215 with Torque_Enable 0, or after its
        overload protection): no force; their command follows the joint, so a servo whose torque
        comes back holds where it was pushed to."""
        enabled = np.asarray(enabled, bool).ravel()
        q = self.joint_positions()
        for i, act in enumerate(self._act):
            self.model.actuator_gainprm[act, 0] = self._gain[i] if enabled[i] else 0.0
            self.model.actuator_biasprm[act, 1:3] = self._bias[i] if enabled[i] else 0.0
            if not enabled[i]:
                self._command[i] = self._targets[i] = q[i]
        self.torque = enabled.copy()

    @property
    def targets(self) -> np.ndarray:
        return self._targets.copy()

    @property
    def commands(self) -> np.ndarray:
        """What each servo is commanded now: its target, rate-limited."""
        return self._command.copy()

    def step(self, dt: float) -> None:
        """Advance the physics by dt seconds (rounded to whole timesteps, at least one)."""
        n = max(1, int(round(dt / self.timestep)))
        max_move = SERVO_MAX_SPEED_RAD_S * self.timestep
        for _ in range(n):
            self._command += np.clip(self._targets - self._command, -max_move, max_move)
            self.data.ctrl[self._act] = self._command
            mujoco.mj_step(self.model, self.data)

    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._qpos].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._dof].copy()

    def joint_efforts(self) -> np.ndarray:
        """Each servo's torque (N.m), within +-SERVO_STALL_TORQUE_NM."""
        return self.data.actuator_force[self._act].copy()

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.site_xpos[self._tcp].copy(), self.data.site_xmat[self._tcp].reshape(3, 3).copy()

    def cube_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The cube's world position (3,) and quaternion wxyz (4,)."""
        if not self.has_cube:
            raise RuntimeError("this sim has no cube (So101Sim(cube=False))")
        return self.data.xpos[self._cube_body].copy(), self.data.xquat[self._cube_body].copy()

    def place_cube(self, pos, quat=(1.0, 0.0, 0.0, 0.0)) -> None:
        """The cube put at rest at ``pos`` (3,) turned by ``quat`` (wxyz): a new episode's scene."""
        if not self.has_cube:
            raise RuntimeError("this sim has no cube (So101Sim(cube=False))")
        a, d = self._cube_qpos, self._cube_dof
        self.data.qpos[a:a + 3] = np.asarray(pos, dtype=float)
        self.data.qpos[a + 3:a + 7] = np.asarray(quat, dtype=float)
        self.data.qvel[d:d + 6] = 0.0
        mujoco.mj_forward(self.model, self.data)

    def scene_state(self) -> np.ndarray:
        """What a camera needs to render the scene: the model's positions (qpos)."""
        return self.data.qpos.copy()

    def set_scene_state(self, state) -> None:
        """The scene put where ``scene_state()`` of a sim of the same model said (a camera's copy)."""
        state = np.asarray(state, dtype=float).ravel()
        if state.shape != (self.model.nq,):
            raise ValueError(f"an SO-101 scene state has {self.model.nq} values, got {state.size}")
        self.data.qpos[:] = state
        mujoco.mj_forward(self.model, self.data)

    def camera_fovy(self, camera: str) -> float:
        """A named camera's vertical field of view (degrees)."""
        return float(self.model.cam_fovy[self.model.camera(camera).id])

    def forward_kinematics(self, joints) -> tuple[np.ndarray, np.ndarray]:
        """forward_kinematics() on this sim's model, with a scratch MjData (the sim is untouched)."""
        return tcp_pose_of(self.model, self._scratch, joints)

    def jacobian(self, joints) -> np.ndarray:
        return tcp_jacobian_of(self.model, self._scratch, joints)

    def render(self, camera: str = "front", height: int = 240, width: int = 320) -> np.ndarray:
        """An RGB image (uint8, [height, width, 3]) from a named camera ("front", "wrist" or "side")."""
        r = self._renderer
        if r is None or (r.height, r.width) != (height, width):
            if r is not None:
                r.close()
            r = self._renderer = mujoco.Renderer(self.model, height, width)
        r.update_scene(self.data, camera=camera)
        return r.render().copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

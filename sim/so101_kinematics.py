"""The SO-101's kinematics on its MuJoCo model (so101_description.py): the TCP's pose and jacobian
at given joint angles, the torques gravity asks of the servos, the yaw of a downward grasp, the
contract's robot state from the servos' readings, and the IK the backend and the twin move by.
Each runs on a kinematic copy of the model with this thread's own scratch data: no sim is touched.
"""

from __future__ import annotations

import functools
import math
import threading

import mujoco
import numpy as np

from robot_rl.geometry import matrix_to_rotvec
from robot_rl.sim.so101_description import (
    HOME_ROTATION,
    JOINTS,
    LIMITS_HIGH,
    LIMITS_LOW,
    gripper_width,
    rotz,
    so101_spec,
)


@functools.cache
def _kinematic_model() -> mujoco.MjModel:
    return so101_spec(cube=False, cameras=False).compile()


_scratch = threading.local()


def _kinematic_data() -> mujoco.MjData:
    """This thread's own MjData for the kinematic model (allocating one per call costs ~0.4 ms)."""
    data = getattr(_scratch, "data", None)
    if data is None:
        data = _scratch.data = mujoco.MjData(_kinematic_model())
    return data


def joint_addresses(model: mujoco.MjModel):
    """The six joints' qpos and dof addresses in a model built by so101_spec()."""
    qpos = np.array([model.jnt_qposadr[model.joint(j).id] for j in JOINTS])
    dof = np.array([model.jnt_dofadr[model.joint(j).id] for j in JOINTS])
    return qpos, dof


def _kinematics(model: mujoco.MjModel, data: mujoco.MjData, joints) -> None:
    joints = np.asarray(joints, dtype=float).ravel()
    if joints.shape not in ((5,), (6,)):
        raise ValueError(f"expected 5 or 6 joint values, got shape {joints.shape}")
    qpos, _ = joint_addresses(model)
    data.qpos[qpos[: joints.size]] = joints
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)


def tcp_pose_of(model, data, joints):
    """forward_kinematics() on a given model and scratch data (whose positions it overwrites)."""
    _kinematics(model, data, joints)
    site = model.site("tcp").id
    return data.site_xpos[site].copy(), data.site_xmat[site].reshape(3, 3).copy()


def tcp_jacobian_of(model, data, joints):
    """jacobian() on a given model and scratch data (whose positions it overwrites)."""
    _kinematics(model, data, joints)
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    mujoco.mj_jacSite(model, data, jacp, jacr, model.site("tcp").id)
    _, dof = joint_addresses(model)
    return np.vstack([jacp, jacr])[:, dof[:5]]


def forward_kinematics(joints) -> tuple[np.ndarray, np.ndarray]:
    """The tcp's world position (3,) and rotation matrix (3, 3) at ``joints`` (5 arm joints, or 6
    with the gripper, which does not move the tcp). Uses its own model and data: no sim is touched."""
    return tcp_pose_of(_kinematic_model(), _kinematic_data(), joints)


def jacobian(joints) -> np.ndarray:
    """(6, 5) world-frame jacobian of the tcp for the 5 arm joints: linear rows, then angular rows."""
    return tcp_jacobian_of(_kinematic_model(), _kinematic_data(), joints)


def gravity_torques(joints) -> np.ndarray:
    """(6,) joint torques (N.m) that hold the arm still against gravity at ``joints`` (5 or 6
    values; nothing in the jaws): what the servos' efforts read when the arm rests there."""
    model, data = _kinematic_model(), _kinematic_data()
    _kinematics(model, data, joints)
    data.qvel[:] = 0.0
    out = np.zeros(model.nv)
    mujoco.mj_rne(model, data, 0, out)
    return out[joint_addresses(model)[1]]


def down_rotation(yaw: float) -> np.ndarray:
    """The tcp rotation with the fingers straight down (tcp -y = world -z), turned ``yaw`` radians
    about the world z axis from HOME's (yaw 0: the jaws open along world +x)."""
    return rotz(yaw) @ HOME_ROTATION


def tcp_yaw(rotation) -> float:
    """The yaw of a tcp rotation about the world z axis, as down_rotation() counts it: the heading
    of the tcp's z axis (the jaws' opening direction) in the world xy plane."""
    rotation = np.asarray(rotation, dtype=float)
    return float(math.atan2(rotation[1, 2], rotation[0, 2]))


# the model's tcp frame (-y along the fingers, z the jaws' opening direction) -> the contract's
# TCP frame (z along the fingers, x forward: at HOME the contract's HOME_QUAT, as the Franka's)
TCP_TO_CONTRACT = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
IK_ITERATIONS = 50


def contract_state(joints, velocities, efforts) -> np.ndarray:
    """The contract's robot state (``robot_rl.contract.STATE_LAYOUT``) of the SO-101 at these
    joint angles, velocities (rad/s) and servo torques (N.m), 6 each: the TCP's pose in the
    contract's frame, its twist (the jacobian's), the jaws' gap, and the external wrench
    estimated from the torques less what gravity asks of them."""
    from robot_rl.contract import STATE_DIM, STATE_SLICES, state_quat
    from robot_rl.geometry import matrix_to_quat

    q = np.asarray(joints, np.float64)
    pos, rot = forward_kinematics(q)
    jac = jacobian(q)
    twist = jac @ np.asarray(velocities, np.float64)[:5]
    state = np.zeros(STATE_DIM, np.float32)
    state[STATE_SLICES["tcp_pos"]] = pos
    state[STATE_SLICES["tcp_quat"]] = state_quat(matrix_to_quat(rot @ TCP_TO_CONTRACT))
    state[STATE_SLICES["tcp_linvel"]] = twist[:3]
    state[STATE_SLICES["tcp_angvel"]] = twist[3:]
    state[STATE_SLICES["gripper_width"]] = gripper_width(q[5])
    wrench = np.linalg.pinv(jac.T) @ (np.asarray(efforts, np.float64)[:5] - gravity_torques(q)[:5])
    state[STATE_SLICES["ee_force"]] = wrench[:3]
    state[STATE_SLICES["ee_torque"]] = wrench[3:]
    return state


IK_TOLERANCE_M = 0.002  # a target the IK leaves further than this is out of reach (the arm keeps the last one)


def solve_ik(pos, yaw: float, start) -> tuple[np.ndarray, float]:
    """Joint angles putting the TCP at ``pos`` and, as far as the five joints and their limits
    allow, pointing down turned ``yaw`` about the vertical: damped least squares with the
    position first and the orientation in what the position leaves free (task priority), from
    ``start``. Returns them and the position error left (m)."""
    target_rot = down_rotation(yaw)
    q = np.array(start, np.float64)
    low, high = LIMITS_LOW[:5], LIMITS_HIGH[:5]
    eye = np.eye(5)
    for _ in range(IK_ITERATIONS):
        p, r = forward_kinematics(q)
        e_pos, e_rot = pos - p, matrix_to_rotvec(target_rot @ r.T)
        if np.linalg.norm(e_pos) < 1e-4 and np.linalg.norm(e_rot) < 1e-3:
            break
        jac = jacobian(q)
        free = np.ones(5, bool)
        for _ in range(3):  # a joint at its limit that the step pushes further is left out
            j = jac * free
            jp, jo = j[:3], j[3:]
            jp_pinv = jp.T @ np.linalg.inv(jp @ jp.T + 1e-6 * np.eye(3))
            step = jp_pinv @ e_pos
            null = eye - jp_pinv @ jp
            jo_null = jo @ null
            step += null @ (jo_null.T @ np.linalg.solve(jo_null @ jo_null.T + 1e-3 * np.eye(3), e_rot - jo @ step))
            blocked = free & (((q[:5] <= low + 1e-6) & (step < 0)) | ((q[:5] >= high - 1e-6) & (step > 0)))
            if not blocked.any():
                break
            free &= ~blocked
        biggest = np.abs(step).max()
        if biggest > 0.2:  # small steps: the linearisation holds
            step *= 0.2 / biggest
        q[:5] = np.clip(q[:5] + step, low, high)
    p, _ = forward_kinematics(q)
    return q, float(np.linalg.norm(pos - p))

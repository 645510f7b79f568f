"""Small rotation helpers (numpy, engine-agnostic). Quaternions are (w, x, y, z)."""

from __future__ import annotations

import numpy as np


def rotvec_to_matrix(rotvec: np.ndarray) -> np.ndarray:
    """Rodrigues' formula."""
    theta = float(np.linalg.norm(rotvec))
    if theta < 1e-12:
        return np.eye(3)
    k = np.asarray(rotvec) / theta
    kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + np.sin(theta) * kx + (1.0 - np.cos(theta)) * (kx @ kx)


def matrix_to_rotvec(mat: np.ndarray) -> np.ndarray:
    quat = matrix_to_quat(mat)
    w, v = quat[0], quat[1:]
    n = float(np.linalg.norm(v))
    if n < 1e-12:
        return np.zeros(3)
    return 2.0 * np.arctan2(n, w) * v / n


def matrix_to_quat(mat: np.ndarray) -> np.ndarray:
    """Rotation matrix -> unit quaternion (w, x, y, z) with w >= 0."""
    m = np.asarray(mat, dtype=np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2.0 * np.sqrt(trace + 1.0)
        q = np.array([0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s])
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = np.array([(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s])
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = np.array([(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s])
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = np.array([(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s])
    q /= np.linalg.norm(q)
    return -q if q[0] < 0 else q


def quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    w, x, y, z = np.asarray(quat, dtype=np.float64) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def yaw_to_quat(yaw: float) -> np.ndarray:
    return np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def quat_to_yaw(quat: np.ndarray) -> float | np.ndarray:
    """The heading about the base's z axis of a quaternion (w, x, y, z), or of quaternions in rows."""
    w, x, y, z = np.moveaxis(np.asarray(quat), -1, 0)
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return float(yaw) if np.ndim(yaw) == 0 else yaw


# The TCP orientation at home: gripper pointing straight down, fingers closing along base y.
# Columns are the TCP frame's axes in the base frame: x forward, y = z cross x, z down.
HOME_ROTATION = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])


END_POSE_SCALE = 10.0  # an end pose's offset in decimetres: about unit scale over a work cell


def end_pose_offset(state: np.ndarray, end_state: np.ndarray) -> np.ndarray:
    """Rows of robot states (the contract's layout: TCP position, then its quaternion) -> where
    ``end_state`` has the TCP relative to them: the position's offset in decimetres and the yaw
    still to turn (radians, wrapped): [N, 4]. What a take's end says of where its goal is."""
    turn = (quat_to_yaw(end_state[:, 3:7]) - quat_to_yaw(state[:, 3:7]) + np.pi) % (2 * np.pi) - np.pi
    return np.concatenate([END_POSE_SCALE * (end_state[:, :3] - state[:, :3]), turn[:, None]], 1).astype(np.float32)

"""Cartesian impedance control, the law a real Franka runs in its 1 kHz loop:

    tau = J^T (K (x_d - x) - D J qdot) + tau_nullspace,

with gravity compensated separately. Engine-agnostic; each backend calls ``torques`` at
every physics substep (500 Hz) with its own Jacobian and joint state.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PHYSICS_DT = 0.002  # s: physics and this controller both run at 500 Hz in both engines



@dataclasses.dataclass(frozen=True)
class ImpedanceGains:
    translational_stiffness: float = 1500.0  # N/m
    rotational_stiffness: float = 80.0  # Nm/rad
    translational_damping: float = 110.0  # Ns/m
    rotational_damping: float = 8.0  # Nms/rad
    nullspace_stiffness: float = 5.0  # Nm/rad, pulls the elbow towards the home posture
    nullspace_damping: float = 1.0
    max_force: float = 60.0  # N, clamp on the Cartesian force the controller asks for
    max_torque: float = 8.0  # Nm


class CartesianImpedance:
    """Called at every physics substep, so written for few numpy calls (~10 us)."""

    def __init__(self, effort_limits, gains: ImpedanceGains = ImpedanceGains()):
        self.gains = gains
        self._tau_max = np.asarray(effort_limits, dtype=np.float64)
        g = gains
        self._k = np.array([g.translational_stiffness] * 3 + [g.rotational_stiffness] * 3)
        self._d = np.array([g.translational_damping] * 3 + [g.rotational_damping] * 3)
        self._wrench_max = np.array([g.max_force] * 3 + [g.max_torque] * 3)
        self._error = np.zeros(6)
        n = len(self._tau_max)
        self._posture_bias, self._posture_k, self._posture_d = np.zeros(n), np.zeros((n, n)), np.zeros((n, n))

    def update_nullspace(self, jac: np.ndarray, q_rest: np.ndarray) -> None:
        """Recompute the posture torque N (k (q_rest - q) - d qdot), with the projector
        N = I - J^T pinv(J)^T that keeps it out of the Cartesian task. Called once per
        control period (J changes little in 0.1 s), pre-multiplied so the 500 Hz law stays cheap."""
        g = self.gains
        nullspace = np.eye(jac.shape[1]) - jac.T @ np.linalg.pinv(jac, rcond=1e-3).T
        self._posture_k = g.nullspace_stiffness * nullspace
        self._posture_d = g.nullspace_damping * nullspace
        self._posture_bias = self._posture_k @ q_rest

    def torques(self, jac, qpos, qvel, tcp_pos, tcp_rot, target_pos, target_rot, out=None) -> np.ndarray:
        """jac: 6 x n (linear rows first); returns n joint torques within the effort limits
        (written into ``out`` when given, e.g. the engine's control buffer)."""
        err = self._error
        np.subtract(target_pos, tcp_pos, out=err[:3])
        # Small-angle orientation error: 0.5 * sum_i cross(R[:, i], R_d[:, i]) = 0.5 * vee(S - S^T), S = R_d R^T.
        s = target_rot @ tcp_rot.T
        err[3] = 0.5 * (s[2, 1] - s[1, 2])
        err[4] = 0.5 * (s[0, 2] - s[2, 0])
        err[5] = 0.5 * (s[1, 0] - s[0, 1])
        wrench = self._k * err - self._d * (jac @ qvel)
        wrench = np.minimum(np.maximum(wrench, -self._wrench_max), self._wrench_max)
        tau = jac.T @ wrench + self._posture_bias - self._posture_k @ qpos - self._posture_d @ qvel
        np.maximum(tau, -self._tau_max, out=tau)
        return np.minimum(tau, self._tau_max, out=tau if out is None else out)

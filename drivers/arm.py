"""The arm driver's logic, ROS-free: a backend that moves an arm, and the supervisor that
stands between every command and that backend.

    ArmBackend     what a real arm implements (the sim twin's ``SimArm`` is the first):
                   ``state()`` (the contract's robot state vector), ``apply(action)`` (one
                   control period of the contract action), ``reset()``, ``joint_state()``.
    ArmSupervisor  safety, identical for every backend:
                   - commands: an end-effector velocity (the contract's delta per control
                     period) or a target pose; velocity limits clip them to the contract's
                     per-period bounds, the workspace box clips the resulting target;
                   - watchdog: no command for ``watchdog_periods`` control periods -> hold the
                     pose where the silence began;
                   - e-stop: latches on a stop request; the arm holds until ``release()``;
                     commands received meanwhile are ignored (counted);
                   - operator required (``operator_timeout_s``): without an operator's
                     heartbeat for that long (the teleop node died or hangs; or none yet)
                     the arm holds like an e-stop and ignores commands (counted) until the
                     heartbeat is back; then it holds until the next command;
                   - teleop first: while the operator intervenes (and their action is no
                     older than the watchdog allows), their action is executed, whatever the
                     policy commands (twist_mux's priority rule): an operator's input reaches
                     the arm without waiting for the policy's next step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from robot_rl.contract import (ARM_STOPPED_BY_REFLEX, STATE_SLICES, ControlLimits, GripperCommand, OperatorTakeover,
                               SafetyBox, gripper_command)
from robot_rl.geometry import matrix_to_rotvec, quat_to_matrix
from robot_rl.errors import InputError


class ArmBackend(Protocol):
    control_hz: float

    def state(self) -> np.ndarray: ...

    def apply(self, action: np.ndarray) -> None: ...

    def reset(self) -> np.ndarray: ...

    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray]: ...


@dataclass
class Hold:
    position: np.ndarray
    rotation: np.ndarray


class ArmSupervisor:
    """Turns the latest commands into the action to execute this control period."""

    def __init__(self, limits: ControlLimits, box: SafetyBox, watchdog_periods: float = 2.0, clock=time.monotonic,
                 operator_timeout_s: float | None = None):
        self.limits, self.box, self.clock = limits, box, clock
        if operator_timeout_s is not None and not operator_timeout_s > 0:
            raise InputError(f"operator_timeout_s must be > 0, got {operator_timeout_s}")
        self.operator_timeout_s = operator_timeout_s  # None: no operator required
        self._operator_seen = -np.inf
        self._operator_was_present = operator_timeout_s is None
        self.watchdog_s = watchdog_periods / limits.control_hz
        self._delta: np.ndarray | None = None  # [6] in contract units, from a velocity command
        self._target: tuple[np.ndarray, np.ndarray] | None = None  # (pos, rotation matrix)
        self._gripper = GripperCommand.STAY
        self._last_command = -np.inf
        self.estopped = False
        self._hold: Hold | None = None
        self.mode = "idle"  # idle (never commanded) | velocity | pose | teleop | watchdog | estop | operator_lost
        self._teleop: np.ndarray | None = None  # the operator's contract action [7]
        self._teleop_time = -np.inf
        self.takeover = OperatorTakeover()  # teleop/intervening, read as a takeover that ends with its episode
        self.counts = {"clipped_velocity": 0, "clipped_workspace": 0, "ignored_estopped": 0, "watchdog_holds": 0,
                       "ignored_operator_lost": 0, "operator_losses": 0}

    # ---- commands ----------------------------------------------------------------------
    def command_velocity(self, delta: np.ndarray) -> None:
        """The contract's 6 delta entries (per control period, unclipped)."""
        if self._ignored():
            return
        delta = np.asarray(delta, np.float64)
        clipped = np.clip(delta, -1.0, 1.0)
        if not np.allclose(clipped, delta):
            self.counts["clipped_velocity"] += 1
        self._delta, self._target = clipped, None
        self._fresh()

    def command_pose(self, position: np.ndarray, quat_wxyz: np.ndarray) -> None:
        if self._ignored():
            return
        self._target, self._delta = (np.asarray(position, np.float64), quat_to_matrix(np.asarray(quat_wxyz))), None
        self._fresh()

    def command_gripper(self, value: float) -> None:
        if self._ignored():
            return
        self._gripper = gripper_command(float(np.clip(value, -1.0, 1.0)))
        self._fresh()

    def command_teleop(self, action: np.ndarray) -> None:
        """The operator's action (the contract's 7 entries); used while they intervene."""
        if self._ignored():
            return
        self._teleop = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        self._teleop_time = self.clock()

    def set_intervening(self, intervening: bool) -> None:
        self.takeover.set(intervening)

    def operator_heartbeat(self) -> None:
        """The operator's teleop node is alive (its heartbeat arrived)."""
        self._operator_seen = self.clock()

    @property
    def operator_present(self) -> bool:
        """True when no operator is required, or their heartbeat is no older than the timeout."""
        return self.operator_timeout_s is None or self.clock() - self._operator_seen <= self.operator_timeout_s

    def _check_operator(self) -> bool:
        """Whether the operator is present; on a change, forget every command (a lost operator's
        last intervention, or the policy's commands from before the loss, never resume)."""
        present = self.operator_present
        if present != self._operator_was_present:
            self._operator_was_present = present
            self._delta = self._target = None
            self._gripper = GripperCommand.STAY
            self._last_command = -np.inf
            self._teleop, self._teleop_time, self.takeover.on = None, -np.inf, False
            if not present:
                self.counts["operator_losses"] += 1
        return present

    @property
    def teleop_live(self) -> bool:
        return (self.takeover.on and self._teleop is not None
                and self.clock() - self._teleop_time <= self.watchdog_s)

    def _ignored(self) -> bool:
        if self.estopped:
            self.counts["ignored_estopped"] += 1
            return True
        if not self._check_operator():
            self.counts["ignored_operator_lost"] += 1
            return True
        return False

    def _fresh(self) -> None:
        self._last_command = self.clock()
        self._hold = None

    def estop(self) -> None:
        self.estopped = True
        self._delta = self._target = None
        self._gripper = GripperCommand.STAY

    def release(self) -> None:
        """Clear the e-stop; the arm keeps holding until the next command."""
        self.estopped = False
        self._last_command = -np.inf

    def reset(self) -> None:
        """After the arm was reset: forget old commands and holds (silence is not a watchdog
        event), and the operator's takeover: it ended with its episode."""
        self.mode = "idle"
        self._delta = self._target = self._hold = None
        self._gripper = GripperCommand.STAY
        self._last_command = -np.inf
        self._teleop, self._teleop_time = None, -np.inf
        self.takeover.episode_start()

    # ---- the action of this control period --------------------------------------------
    def action(self, state: np.ndarray) -> np.ndarray:
        pos = state[STATE_SLICES["tcp_pos"]].astype(np.float64)
        rot = quat_to_matrix(state[STATE_SLICES["tcp_quat"]].astype(np.float64))
        lost = not self._check_operator()
        if not self.estopped and not lost and self.teleop_live:
            self.mode, self._hold = "teleop", None
            action = self._teleop.copy()
            action[6] = float(gripper_command(float(action[6])))
            return self._clip_workspace(pos, action)
        stale = self.clock() - self._last_command > self.watchdog_s
        if self.estopped or lost or stale:
            if self._hold is None:
                self._hold = Hold(pos.copy(), rot.copy())
                if not self.estopped and not lost and self.mode in ("velocity", "pose"):
                    self.counts["watchdog_holds"] += 1
            if self.estopped or lost:
                self.mode = "estop" if self.estopped else "operator_lost"
            else:
                self.mode = "watchdog" if self.mode != "idle" else "idle"
            return self._towards(pos, rot, self._hold.position, self._hold.rotation, GripperCommand.STAY)
        if self._target is not None:
            self.mode = "pose"
            return self._towards(pos, rot, *self._target, self._gripper)
        self.mode = "velocity"
        delta = self._delta if self._delta is not None else np.zeros(6)
        return self._clip_workspace(pos, np.concatenate([delta, [float(self._gripper)]]))

    def _towards(self, pos, rot, target_pos, target_rot, gripper) -> np.ndarray:
        """The velocity-limited step from the current pose toward a target pose."""
        lim = self.limits
        move = (np.asarray(target_pos) - pos) / lim.max_translation_m
        turn = matrix_to_rotvec(np.asarray(target_rot) @ rot.T) / lim.max_rotation_rad
        delta = np.concatenate([np.clip(move, -1, 1), np.clip(turn, -1, 1)])
        return self._clip_workspace(pos, np.concatenate([delta, [float(gripper)]]))

    def _clip_workspace(self, pos: np.ndarray, action: np.ndarray) -> np.ndarray:
        desired = pos + action[:3] * self.limits.max_translation_m
        target = self.box.clip_position(desired)
        if not np.allclose(target, desired):
            self.counts["clipped_workspace"] += 1
            action = action.copy()
            action[:3] = (target - pos) / self.limits.max_translation_m
        return action.astype(np.float32)


class SimArm:
    """The sim twin as an arm: one ``apply`` = one control period of physics (the impedance
    controller runs inside at the physics rate). It also reports what only a simulator knows:
    the success flag, object poses, and the scene state a sim camera renders from.

    ``collision_reflex``: the twin stops as a Franka's collision reflex does (``sim/env.py``): the
    period whose contact wrench passes the thresholds is the last one executed; ``status()`` then
    reports the fault as ``drivers/franka.py`` does (not connected, ``last_fault`` of kind
    ``contract.ARM_STOPPED_BY_REFLEX``, ``counts["faults"]``), so the actor ends its episode there
    as a failure; the arm stands through the next period (the command is dropped, as while libfranka
    recovers) and takes commands again after it, or at the next reset."""

    def __init__(self, task: str = "PickCube", backend: str = "mujoco", seed: int = 0,
                 limits: ControlLimits = ControlLimits(), collision_reflex: bool = False):
        from robot_rl.sim.env import PandaCellEnv
        from robot_rl.sim.tasks import get_task

        if get_task(task).robot != "panda":
            raise InputError(f"the sim arm backend is the Panda's twin; task {task} is the {get_task(task).robot}'s "
                             "(an SO-101 cell on ROS 2: arm_node backend:=so101 on the simulated arm, "
                             "python -m robot_rl.drivers.so101_sim)")
        self.env = PandaCellEnv(task=task, backend=backend, images=False, privileged=True, limits=limits,
                                collision_reflex=collision_reflex)
        self.control_hz = limits.control_hz
        self.seed = seed
        self.episode = 0
        self.success = False
        self._obs: dict = {}
        self.counts = {"faults": 0, "recoveries": 0}
        self.last_fault: dict | None = None
        self.stopped = False  # by the collision reflex, until the next period or reset

    @property
    def safety_box(self) -> SafetyBox:
        return self.env.task.safety_box

    def reset(self) -> np.ndarray:
        self._recover()
        self._obs, _ = self.env.reset(seed=self.seed + self.episode)
        self.episode += 1
        self.success = False
        return self._obs["state"]

    def state(self) -> np.ndarray:
        if not self._obs:
            self.reset()
        return self._obs["state"]

    def apply(self, action: np.ndarray) -> None:
        if self.stopped:  # the period after a reflex: the arm stands while it recovers
            self._recover()
            return
        self._obs, _, _, _, info = self.env.step(action)
        self.success = bool(info["success"])  # not ``terminated``: a reflex ends the episode too
        if info["reflex"]:
            self.stopped = True
            self.counts["faults"] += 1
            self.last_fault = {"kind": ARM_STOPPED_BY_REFLEX,
                               "message": "collision reflex: the end effector's contact wrench passed "
                                          f"{list(self.env.collision_thresholds)} (N, Nm)"}

    def _recover(self) -> None:
        if self.stopped:
            self.stopped = False
            self.counts["recoveries"] += 1

    def status(self) -> dict:
        """What ``arm/status`` carries of the backend (the shape of ``FrankaArm.status``)."""
        return {"backend": "sim", "connected": not self.stopped, "collision_reflex": self.env.collision_reflex,
                "counts": dict(self.counts), "last_fault": self.last_fault}

    def privileged(self) -> dict[str, np.ndarray]:
        return self._obs.get("privileged", {})

    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        return self.env.backend.joint_state()

    def scene_state(self) -> np.ndarray:
        """Everything a twin camera needs to render this instant (see ``SimCamera``)."""
        return self.env.backend.get_scene_state()

    def close(self) -> None:
        self.env.close()

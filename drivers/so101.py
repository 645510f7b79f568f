"""The SO-101 arm backend: six Feetech STS3215 servos on one serial bus, driven through Feetech's
own SDK (``scservo_sdk``, the one LeRobot uses), behind the same ``ArmSupervisor`` and action
contract as the twin and the Franka.

- **The bus and the calibration**: drivers/so101_bus.py (``So101Bus``, ``So101Calibration``,
  LeRobot's calibration file, ``calibrate()``).
- **The contract on a 5-DoF arm**: an action is a TCP displacement per control period and the
  gripper's close/stay/open, as on every arm. Five joints cannot hold every orientation: the
  contract keeps the TCP's position first, then the tool pointing down (the home orientation)
  turned by its yaw about the vertical (the wrist's roll), as far as the joints allow: where the
  wrist's flex limit stops a down-pointing tool (far out, or close in), the tool tilts in the
  arm's vertical plane and the state says so. The roll and pitch parts of a rotation command
  are dropped (counted, ``rotations_projected``); its yaw part turns the target. Each period the
  target (the displacements added up, clipped to the workspace box and the yaw bound) becomes
  joint goals by damped least squares on the arm's kinematic model
  (robot_rl/sim/so101_kinematics.py), the position first and the orientation in what it leaves
  free; a target the arm cannot reach within ``IK_TOLERANCE_M`` keeps the last reachable one
  (counted, ``ik_misses``).
- **Faults**, read from the bus each period, stop the arm safely with one line on ``arm/status``:
  a servo that does not answer, replies that fail their checksum three times in a row, a servo's
  overload or overheat flag (its Status register), a temperature above ``max_temperature_c``, a
  joint outside its calibrated range, and the bus gone (the port closed). The arm then sends no
  goals (each servo holds its last; an overloaded one has dropped its torque) until the fault
  clears and ``release()`` or the next reset.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from robot_rl.contract import STATE_DIM, ControlLimits, GripperCommand, SafetyBox, gripper_command
from robot_rl.drivers import feetech as ft
from robot_rl.drivers.so101_bus import JOINTS, READ_BLOCK_S, RETRIES, BusError, So101Bus, So101Calibration, So101Error
from robot_rl.errors import InputError, UserFacingError
from robot_rl.sim import so101_kinematics as kinematics
from robot_rl.sim.so101_description import HOME, LIMITS, SERVO_STALL_TORQUE_NM
from robot_rl.sim.so101_kinematics import IK_TOLERANCE_M, TCP_TO_CONTRACT

log = logging.getLogger("robot_rl.so101")


@dataclass
class So101Settings:
    port: str = "/dev/ttyACM0"
    calibration: str = ""  # LeRobot's calibration file of this arm
    max_temperature_c: float = 65.0  # a servo above this stops the arm
    torque_limit: int = 800  # per mille of the servos' maximum torque, the arm's joints
    gripper_torque_limit: int = 500  # the gripper's: it squeezes a cube without overloading
    gripper_open_rad: float = 1.0  # the jaw's angle when open (7.6 cm between the jaws; its range: the model's limits)
    gripper_closed_rad: float = -0.1  # when closing (past the cube: the torque limit stops it)
    reset_speed_rad_s: float = 1.0  # the reset's joint speed
    latency_timer_ms: float = 16.0  # how long the SDK waits for a reply, twice, plus its bytes' time
    read_block_s: float = READ_BLOCK_S  # a read of a reply blocks this long for its bytes (0: the SDK's busy-wait)
    connect_timeout_s: float = 5.0  # on connecting, a silent servo is pinged this long before it is an error


class So101Arm:
    """An ``ArmBackend`` for the SO-101 on ``settings.port`` with ``calibration``. The arm's
    kinematics: its model's (``robot_rl.sim.so101_kinematics``); ``start_pose(rng) -> (position, quat)``
    as the Franka's: where each episode starts."""

    def __init__(self, settings: So101Settings, calibration: So101Calibration, safety_box: SafetyBox,
                 start_pose: Callable, limits: ControlLimits = ControlLimits(), uses_gripper: bool = True,
                 seed: int = 0):
        self.settings, self.calibration = settings, calibration
        self.safety_box, self.limits, self.control_hz = safety_box, limits, limits.control_hz
        self.start_pose, self.uses_gripper = start_pose, uses_gripper
        self.joint_limits = np.array([LIMITS[name] for name in JOINTS])
        self.rng = np.random.default_rng(seed)
        self.episode = 0
        self.counts = {"reads": 0, "commands": 0, "faults": 0, "retries": 0, "ik_misses": 0,
                       "rotations_projected": 0, "reconnects": 0}
        self.faults: list[dict] = []
        self.fault: dict | None = None  # the standing fault: the arm holds while it is there
        self._halted = False
        self._target: tuple[np.ndarray, float] | None = None  # TCP position, yaw
        self._goal = None
        self._gripper = GripperCommand.OPEN
        self._state = np.zeros(STATE_DIM, np.float32)
        self._q = np.zeros(len(JOINTS))
        self._qd = np.zeros(len(JOINTS))
        self._reference_yaw = 0.0
        self.check_reach(safety_box)
        self.bus = self._connect(answer_within_s=self.settings.connect_timeout_s)
        self._read()

    def check_reach(self, box: SafetyBox) -> None:
        """Every corner of the workspace box reachable (the TCP there, tilted if it must be):
        else one ``InputError`` naming the corner, before the arm is opened."""
        import itertools

        for corner in itertools.product(*zip(box.low, box.high)):
            corner = np.asarray(corner, np.float64)
            errors = [self.solve(corner, 0.0, start)[1] for start in (HOME, np.r_[np.zeros(5), 1.0])]
            if min(errors) > IK_TOLERANCE_M:
                raise InputError(f"workspace box corner {[round(float(v), 3) for v in corner]} is out of the SO-101's reach "
                                 f"({min(errors) * 1000:.0f} mm short); shrink the box (its base frame: x forward, "
                                 "z up from the table)")

    # ---- connection ------------------------------------------------------------------
    def _connect(self, answer_within_s: float = 0.0) -> So101Bus:
        """The bus opened and the calibration written to the servos, as LeRobot does on connecting
        (torque off, EEPROM unlocked: homing offsets and position limits; locked again), and the
        torque limits set. ``reset`` turns the torque on. ``answer_within_s``: how long a silent
        servo is pinged (the first connect's; a reconnect, each period, pings only CONNECT_TRIES)."""
        bus = So101Bus(self.settings.port, self.calibration.ids, latency_timer_ms=self.settings.latency_timer_ms,
                       answer_within_s=answer_within_s, read_block_s=self.settings.read_block_s)
        try:
            bus.write_calibration(self.calibration)
            bus.write("Torque_Limit", [self.settings.torque_limit] * 5 + [self.settings.gripper_torque_limit])
        except BusError as e:
            bus.close()
            raise So101Error(f"{self.settings.port}: the calibration could not be written to the servos: {e}") from None
        return bus

    def _raise_fault(self, kind: str, message: str) -> None:
        if self.fault is not None and self.fault["kind"] == kind:
            return
        self.fault = {"kind": kind, "message": message}
        self.faults.append(self.fault)
        del self.faults[:-20]
        self.counts["faults"] += 1
        self._target = None
        log.debug("so101 %s fault: %s; holding", kind, message)  # the arm node says it, in one line

    # ---- state -----------------------------------------------------------------------
    def _read(self) -> None:
        """Read the servos (retrying a failed transaction); a failure that persists, a fault flag,
        a hot servo or a joint out of its range is a fault."""
        for attempt in range(RETRIES + 1):
            try:
                ticks, vel, load = self.bus.read_state()
                volts, temps, status = self.bus.read_health()
                break
            except BusError as e:
                if attempt < RETRIES:
                    self.counts["retries"] += 1
                    continue
                silent = ", ".join(f"{sid} ({JOINTS[self.calibration.ids.index(sid)]})" for sid in e.silent)
                if len(e.silent) == len(JOINTS):
                    self._raise_fault("connection", f"no servo answers on {self.settings.port}: the bus is unplugged "
                                                    "or unpowered")
                    self._reconnect()
                elif e.silent:
                    self._raise_fault("servo", f"servo {silent} does not answer on {self.settings.port}")
                else:
                    self._raise_fault("bus", f"{self.settings.port}: {e} ({RETRIES + 1} tries)")
                return
            except Exception as e:  # noqa: BLE001 - the port gone (unplugged): pyserial's error
                self._raise_fault("connection", f"{self.settings.port}: {type(e).__name__}: {e}")
                self._reconnect()
                return
        self.counts["reads"] += 1
        q = self.calibration.to_radians(ticks, self.joint_limits)
        self._q, self._qd = q, vel / ft.TICKS_PER_RAD
        self._check_health(temps, status, ticks)
        self._state = self._state_vector(q, self._qd, load)

    def _check_health(self, temps: np.ndarray, status: np.ndarray, ticks: np.ndarray) -> None:
        for i, name in enumerate(JOINTS):
            flags = ft.error_names(int(status[i]))
            if flags:
                return self._raise_fault("servo", f"servo {self.calibration.ids[i]} ({name}) reports "
                                                  f"{' and '.join(flags)}")
            if temps[i] > self.settings.max_temperature_c:
                return self._raise_fault("temperature", f"servo {self.calibration.ids[i]} ({name}) at {temps[i]:.0f} C "
                                                        f"(limit {self.settings.max_temperature_c:g} C)")
            m = self.calibration.motors[name]
            margin = 0.05 * (m.range_max - m.range_min)
            if not m.range_min - margin <= ticks[i] <= m.range_max + margin:
                return self._raise_fault("joint_limit", f"{name} at {int(ticks[i])} ticks, outside its calibrated "
                                                        f"range {m.range_min} .. {m.range_max}")
        if self.fault is not None and self.fault["kind"] in ("servo", "temperature", "joint_limit", "bus", "connection"):
            log.warning("so101: the %s fault cleared", self.fault["kind"])
            self.fault = None

    def _reconnect(self) -> None:
        """Open the bus again (each period while the connection fault stands)."""
        try:
            self.bus.close()
            self.bus = self._connect()
            self.counts["reconnects"] += 1
        except UserFacingError as e:
            log.debug("so101: reconnecting: %s", e)

    def _state_vector(self, q: np.ndarray, qd: np.ndarray, load: np.ndarray) -> np.ndarray:
        """The contract's state from the servos: their loads (per mille of the stall torque) as torques."""
        return kinematics.contract_state(q, qd, load / ft.LOAD_PER_MILLE * SERVO_STALL_TORQUE_NM)

    def state(self) -> np.ndarray:
        self._read()
        return self._state

    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        return list(JOINTS), self._q.copy(), self._qd.copy()

    # ---- commands --------------------------------------------------------------------
    def apply(self, action: np.ndarray) -> None:
        """One control period: the target pose moved by the action's displacement (position and
        yaw), its joint goals written to the servos; the gripper closed or opened."""
        if self._halted or self.fault is not None:
            return
        action = np.asarray(action, np.float64)
        if np.any(np.abs(action[3:5]) > 1e-6):
            self.counts["rotations_projected"] += 1
        pos, yaw = self._target if self._target is not None else self._measured_target()
        pos = np.clip(pos + action[:3] * self.limits.max_translation_m, self.safety_box.low, self.safety_box.high)
        bound = float(np.asarray(self.safety_box.max_rotation_rad)[2])
        yaw = float(np.clip(yaw + action[5] * self.limits.max_rotation_rad, self._reference_yaw - bound,
                            self._reference_yaw + bound))
        goal, error = self.solve(pos, yaw, self._goal if self._goal is not None else self._q)
        if error > IK_TOLERANCE_M:
            self.counts["ik_misses"] += 1
            goal = self._goal if self._goal is not None else self._q.copy()  # keep the last reachable target
        else:
            self._target = (pos, yaw)
        if self.uses_gripper:
            command = gripper_command(float(action[6]))
            if command != GripperCommand.STAY:
                self._gripper = command
        goal = goal.copy()
        goal[5] = self.settings.gripper_closed_rad if self._gripper == GripperCommand.CLOSE else self.settings.gripper_open_rad
        self._send(goal)

    def _measured_target(self) -> tuple[np.ndarray, float]:
        pos, rot = kinematics.forward_kinematics(self._q)
        return pos.copy(), kinematics.tcp_yaw(rot)

    def solve(self, pos: np.ndarray, yaw: float, start: np.ndarray) -> tuple[np.ndarray, float]:
        """``robot_rl.sim.so101_description.solve_ik``: joints for the TCP at ``pos``, pointing down
        turned ``yaw`` where the joints allow, and the position error left (m)."""
        return kinematics.solve_ik(pos, yaw, start)

    def _send(self, goal: np.ndarray) -> None:
        try:
            self.bus.write("Goal_Position", self.calibration.to_ticks(goal, self.joint_limits))
            self._goal = goal
            self.counts["commands"] += 1
        except BusError as e:
            self._raise_fault("bus", f"{self.settings.port}: goals not written: {e}")
        except Exception as e:  # noqa: BLE001 - the port gone
            self._raise_fault("connection", f"{self.settings.port}: {type(e).__name__}: {e}")

    def halt(self) -> None:
        """E-stop: no goals until ``release()``; each servo holds the goal it has (its own loop)."""
        self._halted = True
        self._target = None

    def release(self) -> None:
        self._halted = False
        self._goal = None

    def reset(self) -> np.ndarray:
        """Torque on, the gripper open, then to this episode's start pose (in steps a servo can
        follow), and the state read there."""
        position, quat = self.start_pose(self.rng)
        self.episode += 1
        self._read()
        if self.fault is not None:
            raise So101Error(f"the SO-101 is faulted: {self.fault['message']}")
        self.bus.write("Torque_Enable", [1] * len(JOINTS))
        self._gripper = GripperCommand.OPEN
        from robot_rl.geometry import quat_to_matrix

        yaw = kinematics.tcp_yaw(quat_to_matrix(np.asarray(quat, np.float64)) @ TCP_TO_CONTRACT.T)
        goal, error = self.solve(np.asarray(position, np.float64), yaw, HOME)
        if error > IK_TOLERANCE_M:
            raise So101Error(f"the start pose {list(np.round(position, 3))} is out of the SO-101's reach "
                             f"({error * 1000:.0f} mm off)")
        goal[5] = self.settings.gripper_open_rad
        self._move_to(goal)
        self._reference_yaw = yaw
        self._target, self._goal = (np.asarray(position, np.float64), yaw), goal
        return self._state

    def _move_to(self, goal: np.ndarray) -> None:
        """Joint space to ``goal`` at ``reset_speed_rad_s`` (goals each control period), then read
        until the arm is there and at rest (a reset's motion, blocking as the Franka's does)."""
        period = 1.0 / self.control_hz
        start = self._q.copy()
        steps = max(1, int(np.ceil(np.abs(goal - start)[:5].max() / (self.settings.reset_speed_rad_s * period))))
        pace = threading.Event()
        for k in range(1, steps + 1):
            if self._halted:
                raise So101Error("the reset was stopped (e-stop)")
            self._send(start + (goal - start) * k / steps)
            pace.wait(period)
            self._read()
        for _ in range(int(2.0 / period)):
            if self.fault is not None:
                raise So101Error(f"the SO-101 faulted during its reset: {self.fault['message']}")
            if np.abs(self._q - goal)[:5].max() < 0.02 and np.abs(self._qd[:5]).max() < 0.05:
                return
            pace.wait(period)
            self._read()
        log.warning("so101: the reset ended %.0f mrad from its goal", 1000 * np.abs(self._q - goal)[:5].max())

    def status(self) -> dict:
        return {"backend": "so101", "port": self.settings.port, "connected": self.fault is None
                or self.fault["kind"] != "connection", "halted": self._halted, "fault": self.fault,
                "gripper_target": self._gripper.name.lower(), "counts": dict(self.counts),
                "last_fault": self.faults[-1] if self.faults else None}

    def close(self) -> None:
        self.bus.close()


def contract_yaw(quat_wxyz) -> float:
    """The yaw (about the vertical, the kinematic model's convention) of a contract TCP orientation."""
    from robot_rl.geometry import quat_to_matrix

    return kinematics.tcp_yaw(quat_to_matrix(np.asarray(quat_wxyz, np.float64)) @ TCP_TO_CONTRACT.T)

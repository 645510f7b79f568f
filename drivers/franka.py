"""A Franka arm (Panda or FR3) as an :class:`~robot_rl.drivers.arm.ArmBackend`, through franky-control
(a libfranka wrapper). ROS-free; ``arm_node`` serves it on the same topics as the sim twin.

    apply(action)   the contract action is a displacement of the TCP target, as on the twin: the
                    target accumulates the commanded deltas (from the TCP after a reset, a hold or a
                    fault) and each period's Cartesian velocity is the delta over the period plus
                    ``tracking_gain`` of the TCP's distance from the target over the period (a
                    velocity alone lost the acceleration ramps: ~6-15 mm short per 10 cm leg against
                    franky-sim; tracked, a 10 cm square's corners are within 2 mm), streamed as
                    franky motion updates (asynchronous: the call returns at once). Each update lasts
                    ``hold_periods`` control periods, so if updates stop (the node stalls) the
                    robot's own motion generator brings it to rest. The supervisor's velocity
                    limits, workspace box, watchdog and e-stop act before this, unchanged; here
                    the orientation is kept within the workspace's rotation bound around the
                    start orientation (as the twin does around its home). The gripper grasps
                    with a set force or opens, asynchronously, only when the command changes.
    state()         TCP pose and twist, gripper width and the estimated external wrench
                    (``O_F_ext_hat_K``: base frame), in the contract's layout.
    reset()         opens the gripper, moves to the home joints, then to the task's start pose
                    (with its randomisation).
    halt()          stops motion at once (e-stop), from any thread.

Faults (a reflex, a rejected command, a lost connection): the arm is held (no motion is
sent), the fault is logged, counted and kept in ``faults`` for ``arm/status``; the backend
recovers (``recover_from_errors``) or reconnects, on a thread, and takes commands again.
Connecting to an unreachable ``robot_ip`` fails within ``connect_timeout_s`` with one
:class:`FrankaConnectionError`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from robot_rl.contract import (COLLISION_FORCE_THRESHOLDS, STATE_DIM, STATE_SLICES, ControlLimits, GripperCommand,
                               SafetyBox, gripper_command, state_quat)
from robot_rl.errors import InputError, UserFacingError
from robot_rl.geometry import matrix_to_rotvec, quat_to_matrix, rotvec_to_matrix

log = logging.getLogger(__name__)

JOINT_NAMES = [f"fr3_joint{i}" for i in range(1, 8)]
# libfranka's default thresholds of set_collision_behavior (Nm per joint, N / Nm per Cartesian axis)
DEFAULT_TORQUE_THRESHOLDS = (20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0)
DEFAULT_FORCE_THRESHOLDS = COLLISION_FORCE_THRESHOLDS


class FrankaConnectionError(UserFacingError):
    """The robot could not be reached (wrong robot_ip, FCI off, cable, another client)."""


@dataclass(frozen=True)
class FrankaSettings:
    robot_ip: str
    velocity_factor: float = 0.3  # fractions of the Franka's Cartesian and joint limits
    acceleration_factor: float = 0.3
    jerk_factor: float = 0.3
    torque_thresholds: tuple[float, ...] = DEFAULT_TORQUE_THRESHOLDS  # collision reflex, per joint (Nm)
    force_thresholds: tuple[float, ...] = DEFAULT_FORCE_THRESHOLDS  # collision reflex, x y z rx ry rz (N, Nm)
    gripper_speed: float = 0.1  # m/s
    grasp_force: float = 20.0  # N
    realtime_kernel: bool = True  # libfranka refuses to run without one unless False (franky-sim: False)
    connect_timeout_s: float = 5.0
    hold_periods: float = 2.0  # each velocity update runs this many control periods unless renewed
    # the contract's action is a displacement of the TCP target: the target accumulates the
    # commanded deltas and each period's velocity also closes this share of the TCP's distance from
    # it (0: velocity only, as before; the TCP then lags by the acceleration ramps, ~6 mm per 10 cm)
    tracking_gain: float = 0.7
    tracking_speed_factor: float = 1.5  # the speed the catching up may reach, x the contract's top speed
    miss_tolerance_m: float = 0.001  # a step this far from its target for 3 periods in a row is a tracking miss

    def __post_init__(self):
        for name in ("velocity_factor", "acceleration_factor", "jerk_factor"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise InputError(f"{name} must be in (0, 1], got {value}")
        if len(self.torque_thresholds) != 7 or len(self.force_thresholds) != 6:
            raise InputError(f"collision thresholds: 7 joint torques and 6 Cartesian forces, got "
                             f"{len(self.torque_thresholds)} and {len(self.force_thresholds)}")
        if not self.robot_ip:
            raise InputError("robot_ip is empty: the Franka's FCI address (the robot's IP, e.g. 172.16.0.2)")
        if not 0.0 <= self.tracking_gain <= 1.0:
            raise InputError(f"tracking_gain must be in [0, 1], got {self.tracking_gain}")
        if self.tracking_speed_factor < 1.0:
            raise InputError(f"tracking_speed_factor must be >= 1, got {self.tracking_speed_factor}")


@dataclass
class Fault:
    kind: str  # reflex | command | connection
    message: str
    when: float = field(default_factory=time.time)


def _connect(settings: FrankaSettings):
    """franky.Robot and franky.Gripper, or one FrankaConnectionError within connect_timeout_s. A
    refused connection is retried until then (a robot or simulator still starting up)."""
    import franky

    result: dict = {}
    deadline = time.monotonic() + settings.connect_timeout_s

    def attempt():
        rt = franky.RealtimeConfig.Enforce if settings.realtime_kernel else franky.RealtimeConfig.Ignore
        while True:
            try:
                robot = franky.Robot(settings.robot_ip, realtime_config=rt)
                result["robot"], result["gripper"] = robot, franky.Gripper(settings.robot_ip)
                return
            except Exception as e:  # noqa: BLE001 - every libfranka failure becomes one error below
                result["error"] = e
                if not _is_connection_error(e) or time.monotonic() + 0.2 > deadline:
                    return
                time.sleep(0.2)

    thread = threading.Thread(target=attempt, daemon=True, name="franka-connect")
    thread.start()
    thread.join(settings.connect_timeout_s + 0.5)
    where = f"cannot reach the Franka at robot_ip {settings.robot_ip!r}"
    hint = "check robot_ip, that FCI is enabled in Desk and the brakes are open, and that no other client is connected"
    if "robot" in result:
        return result["robot"], result["gripper"]
    if "error" not in result:
        raise FrankaConnectionError(f"{where}: no answer within {settings.connect_timeout_s:g} s; {hint}")
    err = result["error"]
    if type(err).__name__ == "RealtimeException":
        raise FrankaConnectionError(f"{where}: {err} (a real arm needs a real-time kernel; a simulator such as "
                                    "franky-sim runs with realtime_kernel:=false)")
    raise FrankaConnectionError(f"{where}: {err}; {hint}")


class FrankaArm:
    """``start_pose(rng) -> (position, quat wxyz)``: where each episode starts (the task's start
    pose with its randomisation); its orientation at rest is the reference of the rotation bound."""

    def __init__(self, settings: FrankaSettings, safety_box: SafetyBox, home_joints, start_pose: Callable,
                 limits: ControlLimits = ControlLimits(), uses_gripper: bool = True, seed: int = 0):
        if len(home_joints) != 7:
            raise InputError(f"home_joints: 7 joint angles, got {len(home_joints)}")
        self.settings, self.safety_box, self.limits = settings, safety_box, limits
        self.home_joints = np.asarray(home_joints, np.float64)
        self.start_pose, self.uses_gripper = start_pose, uses_gripper
        self.control_hz = limits.control_hz
        self.rng = np.random.default_rng(seed)
        self.episode = 0
        self.reads = 0  # robot states read
        self.faults: list[Fault] = []
        self.counts = {"commands": 0, "commands_failed": 0, "faults": 0, "recoveries": 0, "reconnects": 0,
                       "gripper_commands": 0, "tracking_misses": 0, "reset_retries": 0}
        self._target: np.ndarray | None = None  # the TCP position the commanded deltas add up to
        self._target_time = -np.inf  # robot time of the last command (a stale target is dropped)
        self._missed_periods = 0
        self._lock = threading.RLock()  # one caller at a time talks to libfranka
        self._halted = threading.Event()
        self._recovering: threading.Thread | None = None
        self._gripper_target = GripperCommand.STAY
        self._gripper_future = None
        self._gripper_wanted = GripperCommand.STAY
        self._reference_rot = quat_to_matrix(np.asarray(start_pose(np.random.default_rng(0))[1], np.float64))
        self._state = np.zeros(STATE_DIM, np.float32)
        self._joints = (np.zeros(7), np.zeros(7))
        self.robot, self.gripper = _connect(settings)
        self._configure()
        self._read()

    # ---- connection ------------------------------------------------------------------
    def _configure(self) -> None:
        import franky

        s = self.settings
        self.robot.relative_dynamics_factor = franky.RelativeDynamicsFactor(s.velocity_factor, s.acceleration_factor,
                                                                           s.jerk_factor)
        self.robot.set_collision_behavior(list(s.torque_thresholds), list(s.force_thresholds))
        self._braking_acceleration = 0.5 * s.acceleration_factor * self.robot.translation_acceleration_limit.get()

    @property
    def connected(self) -> bool:
        return self._recovering is None

    def _fault(self, kind: str, err: BaseException | str) -> None:
        message = str(err)
        self._target = None  # after a fault the arm starts again from where it is
        self.faults.append(Fault(kind, message))
        del self.faults[:-20]
        self.counts["faults"] += 1
        log.error("franka %s fault: %s; holding and recovering", kind, message)
        if self._recovering is None:
            self._recovering = threading.Thread(target=self._recover, args=(kind,), daemon=True, name="franka-recover")
            self._recovering.start()

    def _recover(self, kind: str) -> None:
        """Recover from a reflex (``recover_from_errors``) or, when the connection is gone,
        reconnect; retried until it works or the arm is closed."""
        delay = 0.2
        while not self._closed:
            try:
                with self._lock:
                    if self._closed:
                        break
                    if kind == "connection":
                        self.robot, self.gripper = _connect(self.settings)
                        self._configure()
                        self.counts["reconnects"] += 1
                    elif self.robot.has_errors or kind == "reflex":
                        self.robot.recover_from_errors()
                        self.counts["recoveries"] += 1
                    self._gripper_target = GripperCommand.STAY
                    self._read()
                log.warning("franka recovered from the %s fault", kind)
                break
            except Exception as e:  # noqa: BLE001 - keep trying; the arm holds meanwhile
                kind = "connection" if _is_connection_error(e) else kind
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self._recovering = None

    # ---- state -----------------------------------------------------------------------
    def _read(self) -> None:
        rs = self.robot.state
        pose = rs.O_T_EE
        quat_xyzw = np.asarray(pose.quaternion, np.float64)
        quat = state_quat([quat_xyzw[3], *quat_xyzw[:3]])
        twist = self.robot.current_cartesian_velocity.end_effector_twist
        state = np.zeros(STATE_DIM, np.float32)
        state[STATE_SLICES["tcp_pos"]] = np.asarray(pose.translation)
        state[STATE_SLICES["tcp_quat"]] = quat
        state[STATE_SLICES["tcp_linvel"]] = np.asarray(twist.linear)
        state[STATE_SLICES["tcp_angvel"]] = np.asarray(twist.angular)
        state[STATE_SLICES["gripper_width"]] = self.gripper.width
        wrench = np.asarray(rs.O_F_ext_hat_K, np.float64)
        state[STATE_SLICES["ee_force"]] = wrench[:3]
        state[STATE_SLICES["ee_torque"]] = wrench[3:]
        self._state = state
        self._joints = (np.asarray(rs.q, np.float64), np.asarray(rs.dq, np.float64))
        self.robot_time_s = rs.time.to_sec()  # the robot's own clock
        self.reads += 1

    def refresh(self) -> np.ndarray:
        """Read the robot now (a fault is reported; the last state is kept)."""
        if self._recovering is None:
            with self._lock:
                try:
                    self._read()
                except Exception as e:  # noqa: BLE001
                    self._fault("connection" if _is_connection_error(e) else "command", e)
        return self._state

    def state(self) -> np.ndarray:
        return self.refresh()

    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        return list(JOINT_NAMES), *self._joints

    # ---- commands --------------------------------------------------------------------
    def apply(self, action: np.ndarray) -> None:
        """One control period of the contract action: a velocity update, and the gripper."""
        if self._halted.is_set() or self._recovering is not None:
            return
        import franky

        action = np.asarray(action, np.float64)
        period = 1.0 / self.control_hz
        linear = self._braking_limited(self._tracking_velocity(action[:3] * self.limits.max_translation_m, period),
                                       period)
        angular = self._bounded_rotation(action[3:6] * self.limits.max_rotation_rad) / period
        duration_ms = max(1, int(round(1000 * self.settings.hold_periods * period)))
        motion = franky.CartesianVelocityMotion(franky.RobotVelocity(franky.Twist(linear, angular)),
                                                duration=franky.Duration(duration_ms))
        with self._lock:
            try:
                self.robot.move(motion, asynchronous=True)
                self.counts["commands"] += 1
                if self.uses_gripper:
                    self._command_gripper(gripper_command(float(action[6])))
            except Exception as e:  # noqa: BLE001 - a fault holds the arm; the node keeps running
                self.counts["commands_failed"] += 1
                self._fault(_fault_kind(e), e)

    def _tracking_velocity(self, delta: np.ndarray, period: float) -> np.ndarray:
        """This period's TCP velocity: the commanded displacement over the period, plus
        ``tracking_gain`` of the distance between the TCP and the target the earlier
        displacements added up to (the target starts at the TCP after a reset, a hold or a
        fault). A TCP more than ``miss_tolerance_m`` from its target three periods in a row
        counts one tracking miss."""
        s = self.settings
        pos = self._state[STATE_SLICES["tcp_pos"]].astype(np.float64)
        now = self.robot_time_s
        if self._target is None or now - self._target_time > s.hold_periods * period:
            self._target, self._missed_periods = pos.copy(), 0
        error = self._target - pos
        self._missed_periods = self._missed_periods + 1 if np.linalg.norm(error) > s.miss_tolerance_m else 0
        if self._missed_periods == 3:
            self.counts["tracking_misses"] += 1
        self._target = np.clip(self._target + delta, self.safety_box.low, self.safety_box.high)
        self._target_time = now
        velocity = (delta + s.tracking_gain * error) / period
        top = s.tracking_speed_factor * self.limits.max_translation_m / period
        speed = np.linalg.norm(velocity)
        return velocity if speed <= top else velocity * (top / speed)

    def _braking_limited(self, linear: np.ndarray, period: float) -> np.ndarray:
        """Slow down, per axis, where moving on for one period and then braking (at half the
        acceleration the arm may use) would carry the TCP past a wall of the workspace box: a
        velocity interface with bounded acceleration would otherwise overshoot the target the
        supervisor clipped to the wall."""
        pos = self._state[STATE_SLICES["tcp_pos"]].astype(np.float64)
        ahead = np.where(linear > 0, np.asarray(self.safety_box.high) - pos, pos - np.asarray(self.safety_box.low))
        a = self._braking_acceleration
        allowed = a * (np.sqrt(period ** 2 + 2.0 * np.maximum(ahead, 0.0) / a) - period)
        return np.sign(linear) * np.minimum(np.abs(linear), allowed)

    def _bounded_rotation(self, rotvec: np.ndarray) -> np.ndarray:
        """The rotation of this period, cut where it would take the TCP past the workspace's
        rotation bound around the start orientation."""
        rot = quat_to_matrix(self._state[STATE_SLICES["tcp_quat"]].astype(np.float64))
        desired = rotvec_to_matrix(rotvec) @ rot
        deviation = matrix_to_rotvec(desired @ self._reference_rot.T)
        clipped = self.safety_box.clip_rotation(deviation)
        if np.allclose(clipped, deviation):
            return rotvec
        return matrix_to_rotvec(rotvec_to_matrix(clipped) @ self._reference_rot @ rot.T)

    def _command_gripper(self, command: GripperCommand) -> None:
        """Grasp (with the set force) or open, asynchronously, when the command changes. libfranka's
        gripper runs one command at a time: one that arrives while the last is still moving is
        kept and sent when that one is done (never blocking the control loop)."""
        if command != GripperCommand.STAY:
            self._gripper_wanted = command
        wanted = self._gripper_wanted
        if wanted == GripperCommand.STAY or wanted == self._gripper_target:
            return
        if self._gripper_future is not None and not self._gripper_future.wait(0):
            return  # still moving: sent on a later period
        s = self.settings
        if wanted == GripperCommand.CLOSE:  # grasp whatever is between the fingers, with the set force
            self._gripper_future = self.gripper.grasp_async(0.0, s.gripper_speed, s.grasp_force, epsilon_inner=0.1,
                                                            epsilon_outer=0.1)
        else:
            self._gripper_future = self.gripper.open_async(s.gripper_speed)
        self._gripper_target = wanted
        self.counts["gripper_commands"] += 1

    def halt(self) -> None:
        """E-stop: stop the running motion now (libfranka's stop: the robot brakes by itself);
        callable from any thread, also during a reset's blocking motion. ``apply`` sends nothing
        until ``release()``."""
        self._halted.set()
        self._target = None
        try:
            self.robot.stop()
        except Exception as e:  # noqa: BLE001 - a stopped or lost robot is not moving either
            log.warning("franka stop: %s", e)

    def release(self) -> None:
        with self._lock:
            self._settle()
        self._halted.clear()

    def _settle(self) -> None:
        """Stop any running motion and collect its end (a preempted motion reports an error
        that must not be taken for a fault of the next one)."""
        self.robot.stop()
        try:
            self.robot.join_motion(1.0)
        except Exception as e:  # noqa: BLE001 - the stop itself: "Move command preempted"
            if _is_connection_error(e):
                raise

    def reset(self) -> np.ndarray:
        """Open the gripper, move to the home joints, then to this episode's start pose."""
        import franky

        position, quat = self.start_pose(self.rng)
        self.episode += 1
        with self._lock:
            self._wait_recovered()
            self._settle()
            if self.robot.has_errors:
                self.robot.recover_from_errors()
            if self.uses_gripper:
                if self._gripper_future is not None:
                    self._gripper_future.wait(5.0)
                self.gripper.open(self.settings.gripper_speed)
                self._gripper_target = self._gripper_wanted = GripperCommand.OPEN
                self._gripper_future = None
            self._reset_move(lambda: franky.JointMotion(self.home_joints.tolist()))
            q = np.asarray(quat, np.float64)
            target = franky.Affine(np.asarray(position, np.float64), np.array([q[1], q[2], q[3], q[0]]))
            self._reset_move(lambda: franky.CartesianMotion(target))
            self._read_at_rest()
            self._target = None  # the next command's target starts where the TCP came to rest
        return self._state

    def _reset_move(self, motion: Callable) -> None:
        """One of reset's motions (``motion()`` makes it). franky's planner can fail to plan from a
        state still settling after the previous motion ("Motion planner failed with error code
        -111", seen with the 2 cores oversubscribed): the arm is read at rest and the motion tried
        once more; a second failure is the error."""
        try:
            self.robot.move(motion())
        except RuntimeError as e:
            if "Motion planner failed" not in str(e):
                raise
            log.warning("franka reset: %s; moving again from rest", e)
            self.counts["reset_retries"] += 1
            if self.robot.has_errors:
                self.robot.recover_from_errors()
            self._read_at_rest()
            self.robot.move(motion())

    def _read_at_rest(self, speed_m_s: float = 0.002, max_reads: int = 1000) -> None:
        """Read until the TCP has come to rest (impedance tracking lags the motion generator);
        each read waits for the robot's next state (1 ms on a real arm)."""
        for _ in range(max_reads):
            self._read()
            if np.linalg.norm(self._state[STATE_SLICES["tcp_linvel"]]) < speed_m_s:
                return

    def _wait_recovered(self) -> None:
        thread = self._recovering
        if thread is not None:
            thread.join(self.settings.connect_timeout_s * 2)
            if self._recovering is not None:
                raise FrankaConnectionError(f"the Franka at {self.settings.robot_ip} is still faulted: "
                                            f"{self.faults[-1].message if self.faults else 'recovering'}")

    # ---- status ------------------------------------------------------------------------
    def status(self) -> dict:
        return {"backend": "franka", "robot_ip": self.settings.robot_ip, "connected": self._recovering is None,
                "halted": self._halted.is_set(), "gripper_target": self._gripper_target.name.lower(),
                "counts": dict(self.counts),
                "last_fault": None if not self.faults else {"kind": self.faults[-1].kind,
                                                            "message": self.faults[-1].message}}

    _closed = False

    def close(self) -> None:
        """Stop the robot and let go of its connection. The robot takes one client at a time, so
        the next one (a restarted node, the next test) can connect even while this object lives on
        (a failed test's traceback keeps it); any later use of this arm is one clear error."""
        self._closed = True
        with self._lock:  # a reconnection under way finishes first, and is let go below
            try:
                self.robot.stop()
            except Exception:  # noqa: BLE001 - closing a lost connection
                pass
            closed = _ClosedConnection(self.settings.robot_ip)
            self.robot, self.gripper, self._gripper_future = closed, closed, None


class _ClosedConnection:
    """The robot and gripper of a closed arm: whatever is asked of them is one FrankaConnectionError."""

    def __init__(self, robot_ip: str):
        self.robot_ip = robot_ip

    def __getattr__(self, name: str):
        raise FrankaConnectionError(f"the Franka arm at robot_ip {self.robot_ip!r} was closed")


def _is_connection_error(err: BaseException) -> bool:
    return type(err).__name__ in ("NetworkException", "ProtocolException", "IncompatibleVersionException") or isinstance(
        err, (ConnectionError, OSError, FrankaConnectionError))


def _fault_kind(err: BaseException) -> str:
    if _is_connection_error(err):
        return "connection"
    return "reflex" if type(err).__name__ == "ControlException" else "command"

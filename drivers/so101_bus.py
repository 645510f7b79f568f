"""The SO-101's servo bus: six Feetech STS3215 servos on one serial port, read and written through
Feetech's own SDK (``scservo_sdk``, the one LeRobot uses), and the arm's calibration.

- **Calibration** (``So101Calibration``): LeRobot's SO-101 calibration file (per motor: id,
  drive_mode, homing_offset, range_min, range_max), read and written as LeRobot does. An arm
  joint's angle is (present ticks - its range's middle) / (4096 / 2 pi), negated when
  ``drive_mode`` is 1 (LeRobot's degrees mode, whose zero is the kinematic model's zero); the
  gripper's jaw angle is its range's fraction mapped onto the jaw's limits. ``calibrate()`` walks
  a user through making one (``robot-rl arm calibrate --backend so101``).
- **The bus** (``So101Bus``): the port locked against a second user, sync reads of the servos'
  state and sync writes of their goals, each failed transaction retried ``RETRIES`` times before
  it is a ``BusError`` naming the silent servos. The arm backend (drivers/so101.py) and the
  leader arm (teleop/devices.py) both use it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from robot_rl.drivers import feetech as ft
from robot_rl.errors import InputError, UserFacingError

log = logging.getLogger("robot_rl.so101")

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
BAUDRATE = 1_000_000
RETRIES = 2  # a failed bus transaction is tried again this many times before it is a fault
# pings of each servo before it is said not to answer, at least (about 0.6 s at a 16 ms latency timer; 5
# were too few for a simulated bus starved for a second by a loaded machine); So101Bus's
# ``answer_within_s`` pings on for longer
CONNECT_TRIES = 20
# each read of a reply blocks in the kernel (select) up to this long for its bytes, then the SDK checks its
# timeout: the SDK's own port reads return at once (pyserial timeout 0), so waiting for a reply spins a
# core (``bench ros``: so101_arm_cpu_share against so101_arm_cpu_share_busy_wait)
READ_BLOCK_S = 0.002


class So101Error(UserFacingError):
    """The SO-101 cannot be used: its port, its calibration, its servos."""


@dataclass(frozen=True)
class MotorCalibration:
    id: int
    drive_mode: int
    homing_offset: int
    range_min: int
    range_max: int


class So101Calibration:
    """LeRobot's SO-101 calibration file: ``{motor: {id, drive_mode, homing_offset, range_min,
    range_max}}`` for the six motors. ``load`` checks it names this arm's six motors, with
    distinct ids and sensible ranges: one ``InputError`` line naming the file."""

    def __init__(self, motors: dict[str, MotorCalibration]):
        self.motors = motors

    @classmethod
    def load(cls, path: str | Path) -> "So101Calibration":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"calibration {path}: no such file") from None
        except (OSError, ValueError) as e:
            raise InputError(f"calibration {path}: not a JSON file ({e})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data, where: str = "calibration") -> "So101Calibration":
        if not isinstance(data, dict):
            raise InputError(f"{where}: a mapping of the SO-101's motors expected")
        missing = [name for name in JOINTS if name not in data]
        unknown = [name for name in data if name not in JOINTS]
        if unknown:
            raise InputError(f"{where}: motors {unknown} are not an SO-101's (it has {list(JOINTS)}): a calibration "
                             "file for another arm?")
        if missing:
            raise InputError(f"{where}: motors {missing} are missing (an SO-101 has {list(JOINTS)})")
        motors = {}
        for name in JOINTS:
            entry = data[name]
            try:
                motor = MotorCalibration(**{key: int(entry[key]) for key in
                                            ("id", "drive_mode", "homing_offset", "range_min", "range_max")})
            except (KeyError, TypeError, ValueError) as e:
                raise InputError(f"{where}: {name}: needs integer id, drive_mode, homing_offset, range_min and "
                                 f"range_max ({type(e).__name__}: {e})") from None
            if not 0 <= motor.range_min < motor.range_max < ft.TICKS_PER_TURN:
                raise InputError(f"{where}: {name}: range_min {motor.range_min} .. range_max {motor.range_max} is "
                                 f"not a range of 0 .. {ft.TICKS_PER_TURN - 1} ticks")
            if motor.drive_mode not in (0, 1):
                raise InputError(f"{where}: {name}: drive_mode is 0 or 1, got {motor.drive_mode}")
            motors[name] = motor
        ids = [m.id for m in motors.values()]
        if len(set(ids)) != len(ids):
            raise InputError(f"{where}: motor ids {ids} are not distinct")
        return cls(motors)

    def to_dict(self) -> dict:
        return {name: {"id": m.id, "drive_mode": m.drive_mode, "homing_offset": m.homing_offset,
                       "range_min": m.range_min, "range_max": m.range_max} for name, m in self.motors.items()}

    def write(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=4) + "\n")
        os.replace(tmp, path)

    @property
    def ids(self) -> list[int]:
        return [self.motors[name].id for name in JOINTS]

    def to_radians(self, ticks: np.ndarray, limits: np.ndarray) -> np.ndarray:
        """Present ticks [6] -> the model's joint angles [6] (``limits``: [6, 2], the model's)."""
        q = np.zeros(len(JOINTS))
        for i, name in enumerate(JOINTS):
            m = self.motors[name]
            if name == "gripper":
                fraction = (ticks[i] - m.range_min) / (m.range_max - m.range_min)
                q[i] = limits[i, 0] + fraction * (limits[i, 1] - limits[i, 0])
            else:
                sign = -1.0 if m.drive_mode else 1.0
                q[i] = sign * (ticks[i] - (m.range_min + m.range_max) / 2) / ft.TICKS_PER_RAD
        return q

    def to_ticks(self, q: np.ndarray, limits: np.ndarray) -> np.ndarray:
        """The model's joint angles [6] -> goal ticks [6], inside each motor's calibrated range."""
        ticks = np.zeros(len(JOINTS), np.int64)
        for i, name in enumerate(JOINTS):
            m = self.motors[name]
            if name == "gripper":
                fraction = (q[i] - limits[i, 0]) / (limits[i, 1] - limits[i, 0])
                value = m.range_min + fraction * (m.range_max - m.range_min)
            else:
                sign = -1.0 if m.drive_mode else 1.0
                value = (m.range_min + m.range_max) / 2 + sign * q[i] * ft.TICKS_PER_RAD
            ticks[i] = int(round(np.clip(value, m.range_min, m.range_max)))
        return ticks


class So101Bus:
    """The servos' bus through ``scservo_sdk``: the port locked for this process (a second user
    is refused, not interleaved), each servo pinged and its model checked, then sync reads of
    the present state and sync writes of the goals."""

    STATE_ADDRESS, STATE_BYTES = 56, 6  # Present_Position, Present_Velocity, Present_Load
    HEALTH_ADDRESS, HEALTH_BYTES = 62, 4  # Present_Voltage, Present_Temperature, (64), Status

    def __init__(self, port: str, ids: list[int], names=JOINTS, latency_timer_ms: float = 16.0,
                 answer_within_s: float = 0.0, read_block_s: float = READ_BLOCK_S):
        """``answer_within_s``: each servo is pinged CONNECT_TRIES times, and on until this long
        after the port opened (a simulated arm still starting on a loaded machine), before it is
        said not to answer. ``read_block_s``: how long one read of a reply blocks for its bytes (0:
        the SDK's busy-wait)."""
        import scservo_sdk as scs
        from scservo_sdk import port_handler

        # the SDK waits this (twice) plus the bytes' time for a reply: a USB adapter's latency timer
        # (16 ms, the SDK's default); a simulated bus on a loaded machine needs longer
        port_handler.LATENCY_TIMER = latency_timer_ms
        self.scs, self.port_name, self.ids, self.names = scs, port, list(ids), tuple(names)
        if not os.path.exists(port):
            raise So101Error(f"serial port {port} does not exist (is the arm's USB cable in? `ls /dev/ttyACM* "
                             "/dev/ttyUSB*` lists the ports)")
        try:
            self._lock_fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as e:
            raise So101Error(f"serial port {port} cannot be opened: {e.strerror}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise So101Error(f"serial port {port} is busy: another process holds it (another arm node, or LeRobot)")
        self.port = scs.PortHandler(port)
        self.packets = scs.PacketHandler(0)
        try:
            opened = self.port.openPort() and self.port.setBaudRate(BAUDRATE)
        except Exception as e:  # noqa: BLE001 - pyserial's error as one line
            self.close()
            raise So101Error(f"serial port {port} cannot be opened: {e}") from None
        if not opened:
            self.close()
            raise So101Error(f"serial port {port} cannot be opened at {BAUDRATE} baud")
        self.port.ser.timeout = read_block_s  # setBaudRate opened it with 0: a read returning at once
        deadline = time.monotonic() + answer_within_s
        for sid, name in zip(self.ids, self.names):
            tries = 0
            while True:
                model, result = self._ping(sid)
                tries += 1
                if result == scs.COMM_SUCCESS or (tries >= CONNECT_TRIES and time.monotonic() > deadline):
                    break
            if result != scs.COMM_SUCCESS:
                self.close()
                raise So101Error(f"servo {sid} ({name}) does not answer on {port}: "
                                 f"{self.packets.getTxRxResult(result)}")
            if model != ft.STS3215_MODEL:
                self.close()
                raise So101Error(f"servo {sid} ({name}) on {port} is model {model}, not an STS3215 ({ft.STS3215_MODEL})")

    def _ping(self, sid: int) -> tuple[int, int]:
        """(model number, the SDK's result) of one ping; a reply the SDK misparses is a corrupt one."""
        self._fresh()
        try:
            model, result, _ = self.packets.ping(self.port, sid)
        except (IndexError, ValueError):
            return 0, self.scs.COMM_RX_CORRUPT
        return model, result

    def _fresh(self) -> None:
        """Drop bytes a failed transaction left unread (the SDK flushes only its output), so the
        next reply is read as itself."""
        self.port.ser.reset_input_buffer()

    def _sync_read(self, address: int, size: int) -> dict[int, bytes]:
        scs = self.scs
        self._fresh()
        group = scs.GroupSyncRead(self.port, self.packets, address, size)
        for sid in self.ids:
            group.addParam(sid)
        try:
            result = group.txRxPacket()
        except (IndexError, ValueError) as e:  # the SDK misparses a torn reply now and then
            raise BusError(scs.COMM_RX_CORRUPT, f"{type(e).__name__} in the SDK: {e}", []) from None
        if result != scs.COMM_SUCCESS:
            raise BusError(result, self.packets.getTxRxResult(result), self._silent(group))
        return {sid: bytes(group.data_dict[sid]) for sid in self.ids}

    def _silent(self, group) -> list[int]:
        """After a failed sync read: the servos that do not answer a ping (a sync read stops at the
        first missing reply, so it cannot say which)."""
        answered = (self.scs.COMM_SUCCESS, self.scs.COMM_RX_CORRUPT)  # a corrupt reply is an answer
        silent = []
        for sid in self.ids:
            for _ in range(RETRIES + 1):  # a reply lost is not a servo lost
                _, result = self._ping(sid)
                if result in answered:
                    break
            if result not in answered:
                silent.append(sid)
        return silent

    def read_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Present position (ticks), velocity (ticks/s) and load (per mille of the maximum torque), [6] each."""
        data = self._sync_read(self.STATE_ADDRESS, self.STATE_BYTES)
        pos = np.array([ft.decode("Present_Position", data[s][0:2]) for s in self.ids], np.float64)
        vel = np.array([ft.decode("Present_Velocity", data[s][2:4]) for s in self.ids], np.float64)
        load = np.array([ft.decode("Present_Load", data[s][4:6]) for s in self.ids], np.float64)
        return pos, vel, load

    def read_health(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Voltage (V), temperature (C) and the Status register's error bits, [6] each."""
        data = self._sync_read(self.HEALTH_ADDRESS, self.HEALTH_BYTES)
        volts = np.array([data[s][0] * ft.VOLTAGE_UNIT_V for s in self.ids])
        temps = np.array([data[s][1] for s in self.ids], np.float64)
        status = np.array([data[s][3] for s in self.ids], np.int64)
        return volts, temps, status

    def write_calibration(self, calibration: "So101Calibration") -> None:
        """The calibration written to the servos, as LeRobot does on connecting: torque off (the arm
        goes limp), EEPROM unlocked, the homing offsets and position limits, locked again."""
        motors = [calibration.motors[name] for name in self.names]
        self.write("Torque_Enable", [0] * len(motors))
        self.write("Lock", [0] * len(motors))
        self.write("Homing_Offset", [m.homing_offset for m in motors])
        self.write("Min_Position_Limit", [m.range_min for m in motors])
        self.write("Max_Position_Limit", [m.range_max for m in motors])
        self.write("Lock", [1] * len(motors))

    def write(self, name: str, values) -> None:
        """One register on every servo (sync write: no replies)."""
        scs = self.scs
        address, size = ft.REGISTERS[name]
        group = scs.GroupSyncWrite(self.port, self.packets, address, size)
        for sid, value in zip(self.ids, values):
            group.addParam(sid, list(ft.encode(name, int(value))))
        result = group.txPacket()
        if result != scs.COMM_SUCCESS:
            raise BusError(result, self.packets.getTxRxResult(result), [])

    def write_one(self, sid: int, name: str, value: int) -> None:
        address, size = ft.REGISTERS[name]
        self._fresh()
        result, error = self.packets.writeTxRx(self.port, sid, address, size, list(ft.encode(name, value)))
        if result != self.scs.COMM_SUCCESS:
            raise BusError(result, self.packets.getTxRxResult(result), [sid])

    def close(self) -> None:
        try:
            if getattr(self, "port", None) is not None:
                self.port.closePort()
        except Exception:  # noqa: BLE001 - a port already gone
            pass
        if getattr(self, "_lock_fd", None) is not None:
            try:
                os.close(self._lock_fd)
            except OSError:
                pass
            self._lock_fd = None


class BusError(Exception):
    def __init__(self, result: int, text: str, silent: list[int]):
        super().__init__(text)
        self.result, self.silent = result, silent


# ---------------------------------------------------------------------------- calibration
HALF_TURN = 2047  # LeRobot's: a servo reads this at the middle of its range once calibrated


def calibrate(port: str, prompt: Callable[[str], threading.Event], latency_timer_ms: float = 16.0,
              ids=(1, 2, 3, 4, 5, 6)) -> So101Calibration:
    """An SO-101's calibration, as LeRobot makes one: the torque off, the user puts the arm in the
    middle of its range (``prompt`` returns an event set when they have: the CLI's Enter), which
    sets each servo's homing offset (it then reads HALF_TURN there); then the user moves every
    joint through its whole range while the positions are read, whose extremes are the ranges.
    The homing offsets are written to the servos; the caller writes the file."""
    bus = So101Bus(port, list(ids), latency_timer_ms=latency_timer_ms)
    try:
        bus.write("Torque_Enable", [0] * len(ids))
        bus.write("Lock", [0] * len(ids))
        bus.write("Homing_Offset", [0] * len(ids))
        prompt("Move the arm to the middle of its range (every joint halfway between its limits, the gripper "
               "half open), then press Enter").wait()
        raw = _read_positions(bus)
        offsets = [int(r) - HALF_TURN for r in raw]
        bus.write("Homing_Offset", offsets)
        done = prompt("Move every joint through its whole range, slowly, then press Enter")
        low, high = np.full(len(ids), np.inf), np.full(len(ids), -np.inf)
        reads = 0
        while not done.is_set() or reads == 0:
            ticks = _read_positions(bus)
            low, high = np.minimum(low, ticks), np.maximum(high, ticks)
            reads += 1
        ticks = _read_positions(bus)
        low, high = np.minimum(low, ticks), np.maximum(high, ticks)
        bus.write("Lock", [1] * len(ids))
    finally:
        bus.close()
    narrow = [JOINTS[i] for i in range(len(ids)) if high[i] - low[i] < 100]
    if narrow:
        raise So101Error(f"joints {narrow} hardly moved during the sweep (under 100 ticks, 9 degrees): move each "
                         "joint from one end of its range to the other, then calibrate again")
    return So101Calibration({name: MotorCalibration(id=int(ids[i]), drive_mode=0, homing_offset=offsets[i],
                                                    range_min=int(low[i]), range_max=int(high[i]))
                             for i, name in enumerate(JOINTS)})


def _read_positions(bus: So101Bus, tries: int = 5) -> np.ndarray:
    """The servos' present positions, a failed read tried again (a person waits at the terminal)."""
    for attempt in range(tries):
        try:
            return bus.read_state()[0]
        except BusError as e:
            if attempt == tries - 1:
                raise So101Error(f"{bus.port_name}: reading the servos' positions failed {tries} times: {e}") from None
    raise AssertionError("unreachable")

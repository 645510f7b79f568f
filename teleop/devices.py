"""Teleop devices: each turns what the operator does into our 7-D action
``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` in [-1, 1] (fractions of the per-step limits;
gripper > 0.5 close, < -0.5 open), whether the operator is touching the controls, and the
events its buttons send.

- ``SpaceMouse``: 3Dconnexion over USB HID (hidapi). Moving it intervenes (as HIL-SERL's
  operators do); left button closes the gripper, right button opens it.
- ``Gamepad``: any joystick SDL knows (pygame), Xbox layout by default: left stick x/y,
  right stick up/down z and sideways yaw; A close, B open; LB held = intervene; Start
  success, Back failure, Y reset, X pause.
- ``KeyboardDevice``: the keys held in the operator console (W/S x, A/D y, R/F z, Q/E yaw,
  C close, V open).
- ``So101Leader``: the SO-101 leader arm (the same servos, torque off, moved by hand) on its own
  serial bus: its joints through the SO-101's kinematics give a TCP; when it starts moving the
  follower is anchored to it, and the action takes the follower along the leader's path (its
  position and yaw); its gripper closed closes the follower's. Moving it intervenes.

Every device applies a dead zone (readings below it are 0, the rest rescaled so the output
starts from 0) and per-part scales, then clips to [-1, 1]. A device that is absent or
unplugged raises ``DeviceUnavailable`` naming what to check; ``open_device`` callers log it
and go on without the device.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from robot_rl.errors import InputError, UserFacingError


class DeviceUnavailable(UserFacingError):
    """The device is not plugged in, not permitted, or its library is missing."""


@dataclass
class Mapping:
    dead_zone: float = 0.1  # of full deflection
    translation_scale: float = 1.0
    rotation_scale: float = 0.5  # 0: position-only teleop
    yaw_deg: float = 0.0  # the device's frame turned about z onto the robot's base frame

    def validate(self) -> None:
        if not 0.0 <= self.dead_zone < 1.0:
            raise InputError(f"dead_zone must lie in [0, 1), got {self.dead_zone}")


@dataclass
class TeleopInput:
    """One reading: the action the operator asks for, whether they are on the controls
    (moving, or holding the intervene button), and button events since the last reading."""

    action: np.ndarray
    active: bool
    events: tuple[str, ...] = ()
    toggle_intervention: bool = False


def dead_zone(values: np.ndarray, zone: float) -> np.ndarray:
    values = np.clip(np.asarray(values, np.float64), -1.0, 1.0)
    magnitude = np.maximum(np.abs(values) - zone, 0.0) / (1.0 - zone)
    return np.sign(values) * magnitude


def to_action(translation, rotation, gripper: float, mapping: Mapping) -> np.ndarray:
    """Device-frame translation/rotation in [-1, 1] (x forward, y left, z up) -> contract action."""
    t = dead_zone(translation, mapping.dead_zone) * mapping.translation_scale
    r = dead_zone(rotation, mapping.dead_zone) * mapping.rotation_scale
    if mapping.yaw_deg:
        c, s = np.cos(np.radians(mapping.yaw_deg)), np.sin(np.radians(mapping.yaw_deg))
        turn = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        t, r = turn @ t, turn @ r
    return np.clip(np.concatenate([t, r, [gripper]]), -1.0, 1.0).astype(np.float32)


# ---- SpaceMouse ------------------------------------------------------------------------
SPACEMOUSE_VENDORS = (0x046D, 0x256F)  # Logitech-era and 3Dconnexion USB vendor ids
SPACEMOUSE_FULL_SCALE = 350.0


def decode_spacemouse_report(report: bytes | list[int], axes: np.ndarray, buttons: list[bool]) -> None:
    """Update ``axes`` (raw x, y, z, rx, ry, rz) and ``buttons`` from one HID input report.
    Report 1 carries translation (and on newer models rotation too, 13 bytes), report 2
    rotation, report 3 the button bitmask; values are little-endian int16."""
    data = bytes(report)
    if not data:
        return
    kind = data[0]
    if kind in (1, 2) and len(data) >= 7:
        values = np.frombuffer(data[1:1 + 2 * ((len(data) - 1) // 2)], "<i2").astype(np.float64)
        if kind == 1:
            axes[: min(6, len(values))] = values[:6]
        else:
            axes[3:6] = values[:3]
    elif kind == 3 and len(data) >= 2:
        mask = int.from_bytes(data[1:], "little")
        for i in range(len(buttons)):
            buttons[i] = bool(mask >> i & 1)


class SpaceMouse:
    name = "spacemouse"

    def __init__(self, mapping: Mapping | None = None, path: bytes | None = None, device=None):
        """``device``: an already opened hidapi device (tests pass a recorded one)."""
        self.mapping = mapping or Mapping()
        self.mapping.validate()
        self.axes = np.zeros(6)
        self.buttons = [False, False]
        self.device = device or self._open(path)

    @staticmethod
    def _open(path: bytes | None):
        try:
            import hid
        except ImportError as e:  # pragma: no cover - hidapi is a teleop dependency
            raise DeviceUnavailable("the SpaceMouse needs hidapi: pip install 'robot-rl[teleop]'") from e
        found = [d for d in hid.enumerate() if d["vendor_id"] in SPACEMOUSE_VENDORS
                 and "space" in (d.get("product_string") or "").lower()] if path is None else [{"path": path}]
        if not found:
            raise DeviceUnavailable("no SpaceMouse found on USB: plug it in, and let your user read it "
                                    "(a udev rule for vendor 256f/046d, or the plugdev group)")
        device = hid.device()
        try:
            device.open_path(found[0]["path"])
        except OSError as e:
            raise DeviceUnavailable(f"cannot open the SpaceMouse ({e}): check its udev permissions") from e
        device.set_nonblocking(True)
        return device

    def read(self) -> TeleopInput:
        try:
            while True:  # every report waiting since the last read; the newest state wins
                report = self.device.read(64)
                if not report:
                    break
                decode_spacemouse_report(report, self.axes, self.buttons)
        except OSError as e:
            raise DeviceUnavailable(f"the SpaceMouse stopped answering ({e}): was it unplugged?") from e
        raw = np.clip(self.axes / SPACEMOUSE_FULL_SCALE, -1.0, 1.0)
        # HID frame: x right, y toward the user, z down -> ours: x forward, y left, z up
        translation = np.array([-raw[1], -raw[0], -raw[2]])
        rotation = np.array([-raw[4], -raw[3], -raw[5]])
        gripper = 1.0 if self.buttons[0] else -1.0 if self.buttons[1] else 0.0
        action = to_action(translation, rotation, gripper, self.mapping)
        return TeleopInput(action, bool(np.any(action[:6] != 0) or gripper != 0))

    def close(self) -> None:
        self.device.close()


# ---- gamepad ---------------------------------------------------------------------------
@dataclass
class GamepadLayout:
    """Axis and button indices (SDL joystick numbering); defaults: Xbox pad on Linux."""

    left_x: int = 0
    left_y: int = 1
    right_x: int = 3
    right_y: int = 4
    close: int = 0  # A
    open: int = 1  # B
    pause: int = 2  # X
    reset: int = 3  # Y
    intervene: int = 4  # LB, held
    failure: int = 6  # Back
    success: int = 7  # Start


def gamepad_action(axes: list[float], buttons: list[bool], layout: GamepadLayout, mapping: Mapping) -> np.ndarray:
    def axis(i):
        return float(axes[i]) if i < len(axes) else 0.0

    def button(i):
        return bool(buttons[i]) if i < len(buttons) else False

    # sticks: up is negative in SDL; left stick up = forward (+x), left = +y; right stick up = +z, left = +yaw
    translation = [-axis(layout.left_y), -axis(layout.left_x), -axis(layout.right_y)]
    rotation = [0.0, 0.0, -axis(layout.right_x)]
    gripper = 1.0 if button(layout.close) else -1.0 if button(layout.open) else 0.0
    return to_action(translation, rotation, gripper, mapping)


class Gamepad:
    name = "gamepad"

    def __init__(self, mapping: Mapping | None = None, layout: GamepadLayout | None = None, index: int = 0,
                 joystick=None):
        """``joystick``: an object with pygame's Joystick methods (tests pass a recorded one)."""
        self.mapping, self.layout = mapping or Mapping(), layout or GamepadLayout()
        self.mapping.validate()
        self._pygame = None
        self.joystick = joystick or self._open(index)
        self.pressed = [False] * self.joystick.get_numbuttons()

    def _open(self, index: int):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        try:
            import pygame
        except ImportError as e:  # pragma: no cover - pygame is a teleop dependency
            raise DeviceUnavailable("the gamepad needs pygame: pip install 'robot-rl[teleop]'") from e
        pygame.joystick.init()
        count = pygame.joystick.get_count()
        if index >= count:
            raise DeviceUnavailable(f"no gamepad {index} found ({count} connected): plug one in (USB or paired "
                                    "Bluetooth) and check that /dev/input/js* is readable")
        self._pygame = pygame
        joystick = pygame.joystick.Joystick(index)
        joystick.init()
        return joystick

    def read(self) -> TeleopInput:
        if self._pygame is not None:
            self._pygame.event.pump()  # SDL refreshes joystick state on event pumping
            if not self.joystick.get_init():
                raise DeviceUnavailable("the gamepad was unplugged")
        axes = [self.joystick.get_axis(i) for i in range(self.joystick.get_numaxes())]
        buttons = [bool(self.joystick.get_button(i)) for i in range(self.joystick.get_numbuttons())]
        pressed_now = [b and not was for b, was in zip(buttons, self.pressed)]
        self.pressed = buttons
        lay = self.layout
        events = tuple(name for name, i in (("success", lay.success), ("failure", lay.failure), ("reset", lay.reset),
                                            ("pause", lay.pause)) if i < len(pressed_now) and pressed_now[i])
        action = gamepad_action(axes, buttons, lay, self.mapping)
        held = lay.intervene < len(buttons) and buttons[lay.intervene]
        return TeleopInput(action, bool(held), events)

    def close(self) -> None:
        self.joystick.quit()


# ---- keyboard (the operator console's) ---------------------------------------------------
KEYS = {"w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0), "r": (2, 1.0), "f": (2, -1.0),
        "q": (5, 1.0), "e": (5, -1.0)}


@dataclass
class KeyboardDevice:
    """Keys held in the console's browser tab (pushed to ``set_keys``) as a device."""

    mapping: Mapping = field(default_factory=lambda: Mapping(dead_zone=0.0))
    speed: float = 0.6  # a held key moves at this fraction of the per-step limit
    keys: frozenset = frozenset()
    name: str = "keyboard"

    def set_keys(self, keys) -> None:
        self.keys = frozenset(str(k).lower() for k in keys)

    def read(self) -> TeleopInput:
        values = np.zeros(6)
        for key in self.keys:
            if key in KEYS:
                axis, sign = KEYS[key]
                values[axis] += sign * self.speed
        gripper = 1.0 if "c" in self.keys else -1.0 if "v" in self.keys else 0.0
        action = to_action(values[:3], values[3:], gripper, self.mapping)
        return TeleopInput(action, bool(np.any(action != 0)))

    def close(self) -> None:
        pass


# ---- the SO-101 leader arm ---------------------------------------------------------------
class So101Leader:
    """The SO-101 leader arm on ``port`` with its ``calibration`` file (LeRobot's leader format:
    the same six motors). Each ``read`` reads its joints (torque stays off: it is moved by hand)
    and puts its TCP through the SO-101's kinematics. ``follower()`` (the follower's TCP position
    and yaw now, or None) makes it a position device: when the leader starts moving, the
    follower's pose is anchored to the leader's, and from then on the action takes the follower
    to the leader's pose plus that offset (fractions of ``limits``' per-step bounds, clipped),
    whatever the rate it is read at. Without a follower it is a velocity device: the leader's TCP
    velocity over one control period. Its gripper closed past a quarter is a close command, open
    past half an open one. ``active`` while it moves (over ``moving_m`` since the last reading)
    and for ``hold_readings`` readings after, so a still hand does not hand the arm back at once."""

    name = "so101_leader"

    def __init__(self, port: str, calibration: str, latency_timer_ms: float = 16.0, limits=None,
                 follower=None, moving_m: float = 0.002, hold_readings: int = 25):
        from robot_rl.contract import ControlLimits
        from robot_rl.drivers.so101_bus import JOINTS, So101Bus, So101Calibration, So101Error
        from robot_rl.sim import so101_kinematics as kinematics
        from robot_rl.sim.so101_description import LIMITS

        if not port or not calibration:
            raise InputError("the so101_leader device needs leader_port (its bus's serial port) and "
                             "leader_calibration (its calibration file: robot-rl arm calibrate writes one)")
        self.kinematics, self.limits, self.follower = kinematics, limits or ControlLimits(), follower
        self.calibration = So101Calibration.load(calibration)
        self.joint_limits = np.array([LIMITS[n] for n in JOINTS])
        try:
            self.bus = So101Bus(port, self.calibration.ids, latency_timer_ms=latency_timer_ms)
        except So101Error as e:
            raise DeviceUnavailable(f"the SO-101 leader arm: {e}") from e
        self.moving_m, self.hold_readings = moving_m, hold_readings
        self.bus.write_calibration(self.calibration)  # its torque off: it is moved by hand
        self.last: tuple[np.ndarray, float, float] | None = None  # position, yaw, time
        self.quiet = hold_readings
        self.anchor: tuple[np.ndarray, float] | None = None  # follower - leader, when the takeover began

    def joints(self) -> np.ndarray:
        from robot_rl.drivers.so101_bus import RETRIES, BusError

        for attempt in range(RETRIES + 1):  # a reply lost is retried, as the arm's backend does
            try:
                ticks = self.bus.read_state()[0]
                break
            except (BusError, OSError) as e:
                if attempt == RETRIES:
                    raise DeviceUnavailable(f"the SO-101 leader arm stopped answering ({e}): was it unplugged?") from e
        return self.calibration.to_radians(ticks, self.joint_limits)

    def read(self) -> TeleopInput:
        q = self.joints()
        pos, rot = self.kinematics.forward_kinematics(q)
        yaw, now = self.kinematics.tcp_yaw(rot), time.monotonic()
        action = np.zeros(7)
        was_active = self.quiet < self.hold_readings
        if self.last is not None:
            moved = np.linalg.norm(pos - self.last[0]) > self.moving_m
            self.quiet = 0 if moved else self.quiet + 1
        active = self.quiet < self.hold_readings
        follower = self.follower() if self.follower is not None else None
        step_m, step_rad = self.limits.max_translation_m, self.limits.max_rotation_rad
        if active and follower is not None:
            if not was_active or self.anchor is None:  # a takeover begins: the follower's pose is anchored to the
                still = self.last if self.last is not None else (pos, yaw)  # leader's before it moved
                self.anchor = (follower[0] - still[0], follower[1] - still[1])
            target, target_yaw = pos + self.anchor[0], yaw + self.anchor[1]
            action[:3] = np.clip((target - follower[0]) / step_m, -1.0, 1.0)
            action[5] = np.clip(_wrap(target_yaw - follower[1]) / step_rad, -1.0, 1.0)
        elif active and self.last is not None:  # no follower: the leader's velocity over one control period
            per_period = (1.0 / self.limits.control_hz) / max(now - self.last[2], 1e-3)
            action[:3] = np.clip((pos - self.last[0]) * per_period / step_m, -1.0, 1.0)
            action[5] = np.clip(_wrap(yaw - self.last[1]) * per_period / step_rad, -1.0, 1.0)
        if not active:
            self.anchor = None
        low, high = self.joint_limits[5]
        opening = (q[5] - low) / (high - low)
        action[6] = 1.0 if opening < 0.25 else -1.0 if opening > 0.5 else 0.0
        self.last = (pos, yaw, now)
        return TeleopInput(action.astype(np.float32), active)

    def close(self) -> None:
        self.bus.close()


def _wrap(angle: float) -> float:
    return float(np.angle(np.exp(1j * angle)))


def open_device(name: str, mapping: Mapping | None = None, **options):
    """A device by name: spacemouse, gamepad, keyboard, so101_leader (``options``: its
    ``port``, ``calibration``, ``latency_timer_ms``, ``follower``). Raises DeviceUnavailable."""
    if name == "spacemouse":
        return SpaceMouse(mapping)
    if name == "gamepad":
        return Gamepad(mapping)
    if name == "keyboard":
        return KeyboardDevice(mapping or Mapping(dead_zone=0.0))
    if name == "so101_leader":
        return So101Leader(options.get("port", ""), options.get("calibration", ""),
                           options.get("latency_timer_ms", 16.0), follower=options.get("follower"))
    raise InputError(f"unknown teleop device {name!r}; available: spacemouse, gamepad, keyboard, so101_leader")

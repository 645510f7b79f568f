"""numpy <-> ROS 2 message conversion, with the checks every node applies to what it receives.

A node never trusts a message: ``image_from_msg`` rejects an encoding or size it cannot use,
``twist_to_delta`` / ``pose_from_msg`` reject NaN and inf. Rejections raise ``MessageError``;
nodes count them and warn at a bounded rate (:class:`DropCounter`), they never crash on one.

Byte payloads (transitions, episodes, weights) travel as ``std_msgs/UInt8MultiArray`` holding
one ``robot_rl.runtime.wire`` frame: safetensors arrays + JSON, never pickle.
"""

from __future__ import annotations

import time

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header, UInt8MultiArray

from robot_rl.contract import STATE_SLICES, state_quat
from robot_rl.errors import InputError


class MessageError(ValueError):
    """A received message that cannot be used (wrong encoding or size, NaN, bad payload)."""


# ------------------------------------------------------------------------------------ time
def stamp_from_ns(ns: int) -> Time:
    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def ns_from_stamp(stamp: Time) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def header(stamp_ns: int, frame_id: str = "") -> Header:
    return Header(stamp=stamp_from_ns(stamp_ns), frame_id=frame_id)


# ---------------------------------------------------------------------------------- images
ENCODINGS = {"rgb8": False, "bgr8": True}  # encoding -> channels reversed


def image_to_msg(image: np.ndarray, stamp_ns: int, frame_id: str = "") -> Image:
    """uint8 [H, W, 3] RGB -> sensor_msgs/Image (rgb8)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image.ndim != 3 or image.shape[2] != 3:
        raise MessageError(f"expected an RGB image [H, W, 3], got shape {image.shape}")
    h, w, _ = image.shape
    msg = Image(header=header(stamp_ns, frame_id), height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3)
    msg.data = image.tobytes()
    return msg


def image_from_msg(msg: Image, expected_hw: tuple[int, int] | None = None) -> np.ndarray:
    """sensor_msgs/Image (rgb8 or bgr8) -> uint8 [H, W, 3] RGB; MessageError on anything else."""
    if msg.encoding not in ENCODINGS:
        raise MessageError(f"image encoding {msg.encoding!r} is not supported (use rgb8 or bgr8)")
    h, w = int(msg.height), int(msg.width)
    if expected_hw is not None and (h, w) != tuple(expected_hw):
        raise MessageError(f"image is {h}x{w}, expected {expected_hw[0]}x{expected_hw[1]}")
    if msg.step < w * 3 or len(msg.data) != msg.step * h:
        raise MessageError(f"image data has {len(msg.data)} bytes, expected step {msg.step} x height {h}")
    rows = np.frombuffer(msg.data, np.uint8).reshape(h, msg.step)[:, : w * 3]
    image = rows.reshape(h, w, 3)
    return np.ascontiguousarray(image[:, :, ::-1] if ENCODINGS[msg.encoding] else image)


def camera_info(stamp_ns: int, frame_id: str, height: int, width: int, fovy_deg: float | None = None,
                intrinsics: tuple[float, float, float, float] | None = None) -> CameraInfo:
    """A pinhole CameraInfo from (fx, fy, cx, cy) or a vertical field of view."""
    if intrinsics is None:
        if fovy_deg is None:
            raise InputError("camera_info needs intrinsics or fovy_deg")
        fy = height / (2 * np.tan(np.radians(fovy_deg) / 2))
        intrinsics = (fy, fy, (width - 1) / 2, (height - 1) / 2)
    fx, fy, cx, cy = (float(v) for v in intrinsics)
    return CameraInfo(header=header(stamp_ns, frame_id), height=height, width=width, distortion_model="plumb_bob",
                      d=[0.0] * 5, k=[fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0],
                      r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                      p=[fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0])


# --------------------------------------------------------------------------- arm state out
def pose_msg(state: np.ndarray, stamp_ns: int, frame_id: str = "base") -> PoseStamped:
    msg = PoseStamped(header=header(stamp_ns, frame_id))
    p, q = state[STATE_SLICES["tcp_pos"]], state[STATE_SLICES["tcp_quat"]]
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in p)
    msg.pose.orientation.w, msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z = (float(v) for v in q)
    return msg


def twist_msg(state: np.ndarray, stamp_ns: int, frame_id: str = "base") -> TwistStamped:
    msg = TwistStamped(header=header(stamp_ns, frame_id))
    v, w = state[STATE_SLICES["tcp_linvel"]], state[STATE_SLICES["tcp_angvel"]]
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(x) for x in w)
    return msg


def wrench_msg(state: np.ndarray, stamp_ns: int, frame_id: str = "base") -> WrenchStamped:
    msg = WrenchStamped(header=header(stamp_ns, frame_id))
    f, t = state[STATE_SLICES["ee_force"]], state[STATE_SLICES["ee_torque"]]
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = (float(x) for x in f)
    msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = (float(x) for x in t)
    return msg


def _finite(values, what: str) -> np.ndarray:
    arr = np.asarray(values, np.float64)
    if not np.all(np.isfinite(arr)):
        raise MessageError(f"{what} contains NaN or inf: {arr.tolist()}")
    return arr


def state_from_msgs(pose: PoseStamped, twist: TwistStamped, wrench: WrenchStamped, gripper_width: float) -> np.ndarray:
    """The contract's robot state vector from the arm driver's messages."""
    p, o = pose.pose.position, pose.pose.orientation
    quat = state_quat(_finite([o.w, o.x, o.y, o.z], "pose orientation"))
    lin, ang = twist.twist.linear, twist.twist.angular
    f, t = wrench.wrench.force, wrench.wrench.torque
    parts = [_finite([p.x, p.y, p.z], "pose position"), quat, _finite([lin.x, lin.y, lin.z], "twist"),
             _finite([ang.x, ang.y, ang.z], "twist"), _finite([gripper_width], "gripper width"),
             _finite([f.x, f.y, f.z], "wrench"), _finite([t.x, t.y, t.z], "wrench")]
    return np.concatenate(parts).astype(np.float32)


# ---------------------------------------------------------------------------- commands in
def delta_to_twist(action: np.ndarray, stamp_ns: int, max_translation_m: float, max_rotation_rad: float,
                   control_hz: float, frame_id: str = "base") -> TwistStamped:
    """The contract action's first 6 entries ([-1, 1] per control step) -> a TCP velocity command."""
    msg = TwistStamped(header=header(stamp_ns, frame_id))
    lin = np.asarray(action[:3], np.float64) * max_translation_m * control_hz
    ang = np.asarray(action[3:6], np.float64) * max_rotation_rad * control_hz
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(v) for v in lin)
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(v) for v in ang)
    return msg


def twist_to_delta(msg: TwistStamped, max_translation_m: float, max_rotation_rad: float, control_hz: float) -> np.ndarray:
    """A TCP velocity command -> the contract's 6 delta entries, unclipped (the arm clips)."""
    lin, ang = msg.twist.linear, msg.twist.angular
    v = _finite([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z], "velocity command")
    return np.concatenate([v[:3] / (max_translation_m * control_hz), v[3:] / (max_rotation_rad * control_hz)])


def pose_from_msg(msg: PoseStamped) -> tuple[np.ndarray, np.ndarray]:
    """(position [3], quaternion wxyz [4], normalised); MessageError on NaN or a zero quaternion."""
    p, o = msg.pose.position, msg.pose.orientation
    pos = _finite([p.x, p.y, p.z], "target pose position")
    quat = _finite([o.w, o.x, o.y, o.z], "target pose orientation")
    norm = np.linalg.norm(quat)
    if norm < 1e-6:
        raise MessageError("target pose orientation is a zero quaternion")
    return pos, quat / norm


# -------------------------------------------------------------------------------- payloads
def payload_msg(frame: bytes) -> UInt8MultiArray:
    msg = UInt8MultiArray()
    msg.data = frame
    return msg


def payload_bytes(msg: UInt8MultiArray) -> bytes:
    return bytes(msg.data)


# ---------------------------------------------------------------------------- bad input
class DropCounter:
    """Counts rejected messages per reason and logs at most one warning per reason per
    ``every_s`` seconds, with the count so far."""

    def __init__(self, warn, every_s: float = 5.0, clock=time.monotonic):
        self.warn, self.every_s, self.clock = warn, every_s, clock
        self.counts: dict[str, int] = {}
        self._last: dict[str, float] = {}

    def drop(self, reason: str, detail: str = "") -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        now = self.clock()
        if now - self._last.get(reason, -np.inf) >= self.every_s:
            self._last[reason] = now
            self.warn(f"dropped {reason} ({self.counts[reason]} so far){': ' + detail if detail else ''}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

"""The observation/action contract shared by the sim twin and the real-robot drivers.

Everything that talks to a robot (the learner's actor, wrappers, the recorder, the
ROS 2 drivers) agrees on these shapes, dtypes and meanings:

Action: float32[7] in [-1, 1]
    [0:3] end-effector delta translation in the base frame, scaled by
          ``ControlLimits.max_translation_m`` (per control step)
    [3:6] end-effector delta rotation (axis-angle, base frame), scaled by
          ``ControlLimits.max_rotation_rad``
    [6]   gripper: > +0.5 close, < -0.5 open, otherwise stay

Observation dict:
    "state":      float32[STATE_DIM], laid out as ``STATE_LAYOUT``
    "images":     {camera: uint8[H, W, 3]} for each camera (only when images are enabled)
    "privileged": {name: float32[...]} object poses, sim only

Transition: one control step of experience (``Transition``), as the actor sends it, the wire
carries it, a store replays it and the replay buffers keep it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from robot_rl.errors import InputError

ACTION_DIM = 7
CAMERAS = ("front", "wrist")
# Every camera the sim twin has; ``side`` is rendered only when asked for.
SIM_CAMERAS = ("front", "wrist", "side")

# (name, size) in the order they appear in the state vector.
STATE_LAYOUT: tuple[tuple[str, int], ...] = (
    ("tcp_pos", 3),  # metres, base frame
    ("tcp_quat", 4),  # w, x, y, z, base frame, on the home orientation's side (state_quat)
    ("tcp_linvel", 3),  # m/s
    ("tcp_angvel", 3),  # rad/s
    ("gripper_width", 1),  # metres between the finger pads
    ("ee_force", 3),  # N, external force on the end effector, base frame
    ("ee_torque", 3),  # Nm, external torque on the end effector, base frame
)
STATE_DIM = sum(size for _, size in STATE_LAYOUT)

# The TCP's home orientation, the gripper pointing down (geometry.HOME_ROTATION), as (w, x, y, z).
HOME_QUAT = np.array([0.0, 1.0, 0.0, 0.0])


def state_quat(quat_wxyz) -> np.ndarray:
    """The TCP quaternion as the state holds it: of q and -q (one rotation), the one on the home
    orientation's side (q . HOME_QUAT >= 0). The home quaternion has w = 0, so the usual w >= 0
    choice flips the sign of the whole quaternion on any tilt across the home pose, a jump of 2 in
    an observation of a pose that barely moved; this choice is continuous for every rotation within
    180 degrees of home (the safety box allows far less)."""
    q = np.asarray(quat_wxyz, np.float64)
    return -q if float(q @ HOME_QUAT) < 0 else q


def state_slices() -> dict[str, slice]:
    """Name -> slice into the state vector."""
    out, start = {}, 0
    for name, size in STATE_LAYOUT:
        out[name] = slice(start, start + size)
        start += size
    return out


STATE_SLICES = state_slices()


class ActionError(InputError):
    """An action that cannot be executed (wrong shape, NaN or inf)."""


class GripperCommand(enum.IntEnum):
    OPEN = -1
    STAY = 0
    CLOSE = 1


GRIPPER_THRESHOLD = 0.5


def gripper_command(value: float) -> GripperCommand:
    if value > GRIPPER_THRESHOLD:
        return GripperCommand.CLOSE
    if value < -GRIPPER_THRESHOLD:
        return GripperCommand.OPEN
    return GripperCommand.STAY


def validate_action(action) -> np.ndarray:
    """Return the action as float32[7] clipped to [-1, 1]; raise ActionError if unusable."""
    arr = np.asarray(action, dtype=np.float64)
    if arr.shape != (ACTION_DIM,):
        raise ActionError(
            f"action must have shape ({ACTION_DIM},) = [dx, dy, dz, droll, dpitch, dyaw, gripper], "
            f"got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        bad = [i for i in range(ACTION_DIM) if not np.isfinite(arr[i])]
        raise ActionError(f"action contains NaN or inf at index {bad}: {arr.tolist()}; refusing to move the arm")
    return np.clip(arr, -1.0, 1.0).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class ControlLimits:
    """How far one control step may move the end-effector target."""

    control_hz: float = 10.0
    max_translation_m: float = 0.03
    max_rotation_rad: float = 0.15


# The Franka's collision reflex: libfranka's default thresholds of set_collision_behavior on the
# external wrench (N along x y z, Nm about x y z, base frame). The real driver sets them on the
# arm (drivers/franka.py); the twin ends an episode where its end effector passes one of them
# (in a run that asks for it: robot-rl train --collision-reflex).
COLLISION_FORCE_THRESHOLDS = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)


@dataclasses.dataclass(frozen=True)
class SafetyBox:
    """Axis-aligned workspace box for the TCP target, plus a bound on its rotation away
    from the home orientation (per axis of the axis-angle deviation, radians)."""

    low: tuple[float, float, float]
    high: tuple[float, float, float]
    max_rotation_rad: tuple[float, float, float] = (0.5, 0.5, 1.0)

    def __post_init__(self):
        if any(lo >= hi for lo, hi in zip(self.low, self.high)):
            raise InputError(f"safety box low {self.low} must be below high {self.high} on every axis")

    def clip_position(self, pos: np.ndarray) -> np.ndarray:
        return np.clip(pos, self.low, self.high)

    def clip_rotation(self, rotvec: np.ndarray) -> np.ndarray:
        lim = np.asarray(self.max_rotation_rad)
        return np.clip(rotvec, -lim, lim)

    def contains(self, pos: np.ndarray, tol: float = 1e-9) -> bool:
        return bool(np.all(pos >= np.asarray(self.low) - tol) and np.all(pos <= np.asarray(self.high) + tol))


def resize_frame(image: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """An H x W x 3 uint8 frame at ``size`` (H, W; None: as it is), bilinear (antialiased when it
    shrinks): how a camera driver and a mapped env's cameras bring frames to the policy's size."""
    image = np.asarray(image)
    if size is not None and tuple(image.shape[:2]) != tuple(size):
        from PIL import Image

        image = np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.BILINEAR))
    return np.ascontiguousarray(image)


def action_space() -> gym.spaces.Box:
    return gym.spaces.Box(-1.0, 1.0, shape=(ACTION_DIM,), dtype=np.float32)


def observation_space(
    image_size: tuple[int, int] | None,
    cameras: tuple[str, ...] = CAMERAS,
    privileged: dict[str, int] | None = None,
) -> gym.spaces.Dict:
    """The observation space; ``image_size`` (H, W) or None for state-only."""
    spaces: dict[str, gym.spaces.Space] = {
        "state": gym.spaces.Box(-np.inf, np.inf, shape=(STATE_DIM,), dtype=np.float32)
    }
    if image_size is not None:
        h, w = image_size
        spaces["images"] = gym.spaces.Dict(
            {cam: gym.spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8) for cam in cameras}
        )
    if privileged:
        spaces["privileged"] = gym.spaces.Dict(
            {k: gym.spaces.Box(-np.inf, np.inf, shape=(n,), dtype=np.float32) for k, n in privileged.items()}
        )
    return gym.spaces.Dict(spaces)


# What an operator can say about the running episode (teleop buttons, the console, ``teleop/events``):
# success / failure end it with that outcome, reset ends it now, rerecord ends it and drops it from
# the recording, pause / resume stop and restart acting. The actor loop (actor.py) acts on them.
OPERATOR_EVENTS = ("success", "failure", "reset", "rerecord", "pause", "resume")
# What an actor's ``arm_holds()`` says when the arm stopped on its collision reflex (a Franka's, or the
# twin's): unlike the other holds (e-stop, operator gone, a standing fault) what was sent is what
# happened up to the stop, so the episode ends there as a failure and is learned from.
ARM_STOPPED_BY_REFLEX = "reflex"


class OperatorTakeover:
    """How a listener of ``teleop/intervening`` (the arm, the actor) reads it: a takeover ends
    with its episode. After ``episode_start()`` one counts again only once "not intervening" has
    arrived since (the teleop node's stand-down at the episode's end, teleop/intervention.py),
    so a takeover published for the last episode and delivered late (a loaded machine) neither
    drives the new one nor is learned as a correction of its first steps."""

    def __init__(self):
        self.on = False
        self._armed = True  # no episode has started since the last "not intervening"

    def set(self, intervening: bool) -> None:
        if not intervening:
            self._armed = True
        self.on = bool(intervening) and self._armed

    def episode_start(self) -> None:
        self.on = self._armed = False


class Transition(NamedTuple):
    """One control step: the observation the action was chosen on, the action executed (the
    human's when one drove), the reward it earned, the next observation, whether the episode
    ended there (``terminated``: a true end, no bootstrap; ``truncated``: cut off, bootstrapped)
    and whether the human drove. Observations are whatever dict the consumer stores (contract
    dicts from a store, the learner's flat dicts on the wire, encoded features in a replay)."""

    obs: dict
    action: np.ndarray
    reward: float
    next_obs: dict
    terminated: bool
    truncated: bool
    is_intervention: bool = False

"""Where the Franka Panda comes from: the URDF and meshes that ship with pybullet_data
(a maintained package), read in place. Nothing of the robot is copied into this repo."""

from __future__ import annotations

import functools
import os

from robot_rl.errors import UserFacingError

ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("panda_finger_joint1", "panda_finger_joint2")
ARM_EFFORT_LIMITS = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
HAND_LINK = "panda_hand"
FINGER_LINKS = ("panda_leftfinger", "panda_rightfinger")
# The TCP sits between the finger pads, this far along the hand's z axis.
TCP_OFFSET_IN_HAND = 0.105
# Finger pad boxes (our collision primitives), in the left finger's frame; the right
# finger's pad is mirrored in y. Pads cover the finger tips.
PAD_HALF_SIZE = (0.0095, 0.006, 0.009)
PAD_CENTER = (0.0, 0.006, 0.045)
# The hand's collision box (our primitive), in the hand frame.
HAND_BOX_HALF_SIZE = (0.03, 0.1, 0.04)
HAND_BOX_CENTER = (0.0, 0.0, 0.02)
# The work cell's fixed front camera (base frame), shared by both engines.
FRONT_CAMERA_POS = (1.3, 0.0, 0.65)
FRONT_CAMERA_TARGET = (0.45, 0.0, 0.1)
FRONT_CAMERA_FOVY = 50.0
WRIST_CAMERA_FOVY = 75.0
# A fixed side camera at PickCube's lift height (cube centre 2 cm + 10 cm), looking level
# across the workspace: a cube is lifted enough exactly when it shows above the image's
# middle row, whatever its distance from the camera. Far and wide enough to see the whole
# safety box (x 0.3-0.7, y +-0.25, up to 0.35 m), so no held or dropped cube leaves its view.
SIDE_CAMERA_POS = (0.5, -1.05, 0.12)
SIDE_CAMERA_TARGET = (0.5, 0.0, 0.12)
SIDE_CAMERA_FOVY = 40.0
# Wrist camera in the hand frame, looking at the finger tips.
WRIST_CAMERA_POS = (0.1, 0.0, 0.06)
WRIST_CAMERA_TARGET = (0.0, 0.0, 0.16)


class MissingRobotDescription(UserFacingError):
    """The Panda's robot description (pybullet_data's URDF and meshes) is not installed."""


@functools.cache
def panda_dir() -> str:
    try:
        import pybullet_data
    except ImportError as exc:  # pragma: no cover - pybullet is a core dependency
        raise MissingRobotDescription(
            "the Panda description comes from pybullet_data; install it with `pip install pybullet`"
        ) from exc
    path = os.path.join(pybullet_data.getDataPath(), "franka_panda")
    if not os.path.isfile(os.path.join(path, "panda.urdf")):
        raise MissingRobotDescription(f"no panda.urdf under {path}; reinstall pybullet")
    return path


def urdf_path() -> str:
    return os.path.join(panda_dir(), "panda.urdf")


def urdf_text_with_absolute_meshes() -> str:
    """The URDF with its ``package://`` mesh paths resolved, ready for MuJoCo's parser."""
    with open(urdf_path()) as f:
        text = f.read()
    return text.replace("package://", panda_dir() + "/")

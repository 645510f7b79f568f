"""A lab's own scripted picker as a ``--base-policy module:Class`` (issue 46): the twin's
scripted PickCube controller, steered by a classical-vision cube locator instead of the
simulator's ground truth.

At each episode's first observation the locator finds the red cube in the front camera's image
(colour threshold, blob centroid) and casts the centroid's ray onto the plane of the cube's
centre, through the camera's pose and field of view as the lab measured them: its calibration
has the camera's mount turned ``MOUNT_YAW_ERROR_DEG`` about the vertical, as a tape-measured
mount is, which puts the cube about 4 cm off sideways (chosen so the picker succeeds about half
the time: docs/CALIBRATION.md); along the camera's view a 64x64 image's pixel row spans about
3 cm of table, so depth is coarse too. And it does not estimate the cube's yaw: it
grasps square to the table's axes. So it often closes on an edge, or beside a cube turned by tens
of degrees: a weak, honest base that residual RL has to correct, from the same images.

    robot-rl train --task PickCube --obs pixels --cameras front wrist \\
        --base-policy examples/twin/vision_picker.py:VisionPicker ...

It reads the flat observation a run gives any base: ``state`` (the robot's state) and each
camera's uint8 ``[H, W, 3]`` image; it needs ``front``.
"""

from __future__ import annotations

import numpy as np

from robot_rl.sim import panda_description as panda
from robot_rl.sim.experts import PickCubeExpert

CUBE_HALF_M = 0.02
MOUNT_YAW_ERROR_DEG = 2.75


def camera_rays(height: int, width: int) -> np.ndarray:
    """World-frame unit rays through each pixel's centre of the front camera, ``[H, W, 3]``
    (MuJoCo's pinhole: the camera looks along its -z, y up, ``fovy`` the vertical field)."""
    pos, target = np.asarray(panda.FRONT_CAMERA_POS), np.asarray(panda.FRONT_CAMERA_TARGET)
    forward = (target - pos) / np.linalg.norm(target - pos)
    right = np.cross(forward, (0.0, 0.0, 1.0))
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    focal = (height / 2) / np.tan(np.radians(panda.FRONT_CAMERA_FOVY) / 2)
    u = (np.arange(width) + 0.5 - width / 2) / focal
    v = (np.arange(height) + 0.5 - height / 2) / focal
    rays = forward + u[None, :, None] * right - v[:, None, None] * up
    return rays / np.linalg.norm(rays, axis=-1, keepdims=True)


def locate_cube(image: np.ndarray) -> np.ndarray | None:
    """The cube's centre on the table (x, y, z) from the front image, or None when no red blob."""
    rgb = image.astype(np.float32)
    red = (rgb[..., 0] > 120) & (rgb[..., 0] > 1.8 * rgb[..., 1]) & (rgb[..., 0] > 1.8 * rgb[..., 2])
    if red.sum() < 2:
        return None
    rows, cols = np.nonzero(red)
    rays = camera_rays(*image.shape[:2])[rows, cols].mean(axis=0)
    turn = np.radians(MOUNT_YAW_ERROR_DEG)  # the calibration's error: the rays turned about z
    rays = np.array([np.cos(turn) * rays[0] - np.sin(turn) * rays[1], np.sin(turn) * rays[0] + np.cos(turn) * rays[1], rays[2]])
    origin = np.asarray(panda.FRONT_CAMERA_POS)
    scale = (CUBE_HALF_M - origin[2]) / rays[2]  # the ray meets the plane of the cube's centre
    return origin + scale * rays


class VisionPicker:
    """One instance per env (a ``module:Class`` base): the cube's place is found once per episode."""

    def __init__(self):
        self.expert = PickCubeExpert(noise=0.0)
        self.cube: np.ndarray | None = None

    def reset(self) -> None:
        self.expert.reset()
        self.cube = None

    def __call__(self, obs: dict) -> np.ndarray:
        if self.cube is None:
            found = locate_cube(np.asarray(obs["front"]))
            if found is None:  # nothing red in view: hold still, look again next step
                return np.array([0, 0, 0, 0, 0, 0, -1.0], np.float32)
            self.cube = np.concatenate([found, [1.0, 0.0, 0.0, 0.0]])  # square to the table: yaw 0
        return self.expert({"state": np.asarray(obs["state"], np.float32),
                            "privileged": {"cube": self.cube.astype(np.float32)}})

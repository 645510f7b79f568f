"""Camera backends, ROS-free. Each ``read`` returns a :class:`Frame`: an RGB uint8 image of the
configured size and the instant it was exposed, in this host's clock (nanoseconds).

    RealSenseCamera  pyrealsense2, sensor-level API (a real device found by serial number, or
                     any ``rs.device`` — e.g. librealsense's ``software_device`` in tests):
                     colour stream at a chosen resolution and rate, optional crop, resize.
                     Hardware timestamps are mapped to host time with the smallest observed
                     (arrival - exposure) offset, so they keep the device's spacing.
    SimCamera        the twin's cameras: its own copy of the MuJoCo scene, posed from the sim
                     arm's published scene state, rendered on request.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from robot_rl.contract import resize_frame
from robot_rl.errors import UserFacingError


class CameraError(UserFacingError):
    """A camera that cannot be opened or stopped delivering frames."""


@dataclass
class Frame:
    image: np.ndarray  # uint8 [H, W, 3] RGB
    stamp_ns: int  # exposure time, host clock (time.time_ns domain)
    number: int = 0


def parse_crop(crop: str | tuple | list | None) -> tuple[int, int, int, int] | None:
    """``"top,left,height,width"`` (pixels of the sensor image) -> tuple, or None."""
    if crop in (None, "", ()):
        return None
    values = [int(v) for v in (crop.split(",") if isinstance(crop, str) else crop)]
    if len(values) != 4 or values[2] <= 0 or values[3] <= 0 or min(values[:2]) < 0:
        raise CameraError(f"crop must be 'top,left,height,width' with a positive size, got {crop!r}")
    return tuple(values)


def crop_resize(image: np.ndarray, crop: tuple[int, int, int, int] | None, size: tuple[int, int] | None) -> np.ndarray:
    if crop is not None:
        top, left, h, w = crop
        if top + h > image.shape[0] or left + w > image.shape[1]:
            raise CameraError(f"crop {crop} falls outside the {image.shape[0]}x{image.shape[1]} sensor image")
        image = image[top : top + h, left : left + w]
    return resize_frame(image, size)


class RealSenseCamera:
    """The colour stream of one RealSense device."""

    def __init__(self, serial: str = "", width: int = 640, height: int = 480, fps: int = 30,
                 crop: str | tuple | None = None, size: tuple[int, int] | None = None, device=None):
        try:
            import pyrealsense2 as rs
        except ImportError as e:  # libusb missing, or the wheel is not installed
            raise CameraError(f"pyrealsense2 is not usable here ({e}); install it with "
                              "`pip install robot-rl[realsense]` and the Debian package libusb-1.0-0") from e
        self.rs = rs
        self.device = device if device is not None else self._find(serial)
        self.crop, self.size = parse_crop(crop), tuple(size) if size else None
        sensors = [s for s in self.device.query_sensors()
                   if any(p.stream_type() == rs.stream.color for p in s.get_stream_profiles())]
        if not sensors:
            raise CameraError(f"RealSense {self.serial} has no colour sensor")
        self.sensor = sensors[0]
        wanted = [p for p in self.sensor.get_stream_profiles() if p.stream_type() == rs.stream.color
                  and p.format() in (rs.format.rgb8, rs.format.bgr8) and p.fps() == fps]
        match = [p.as_video_stream_profile() for p in wanted
                 if (p.as_video_stream_profile().width(), p.as_video_stream_profile().height()) == (width, height)]
        if not match:
            offered = sorted({(p.as_video_stream_profile().width(), p.as_video_stream_profile().height(), p.fps())
                              for p in self.sensor.get_stream_profiles() if p.stream_type() == rs.stream.color})
            raise CameraError(f"RealSense {self.serial} has no {width}x{height} colour stream at {fps} fps; "
                              f"it offers (width, height, fps) {offered}")
        self.profile = match[0]
        self.intrinsics = self.profile.get_intrinsics()
        self.queue = rs.frame_queue(2)  # latest frames only: a slow reader sees fresh images
        self.sensor.open(self.profile)
        self.sensor.start(self.queue)
        self._offset_ns: float | None = None

    @property
    def serial(self) -> str:
        return self.device.get_info(self.rs.camera_info.serial_number)

    def _find(self, serial: str):
        devices = list(self.rs.context().query_devices())
        if not devices:
            raise CameraError("no RealSense camera is connected (check the USB cable and `rs-enumerate-devices`)")
        if not serial:
            return devices[0]
        for dev in devices:
            if dev.get_info(self.rs.camera_info.serial_number) == serial:
                return dev
        found = [d.get_info(self.rs.camera_info.serial_number) for d in devices]
        raise CameraError(f"no RealSense with serial {serial}; connected: {found}")

    def read(self, timeout_s: float = 1.0) -> Frame:
        try:
            frame = self.queue.wait_for_frame(int(timeout_s * 1000))
        except RuntimeError as e:
            raise CameraError(f"RealSense {self.serial} delivered no frame within {timeout_s:.1f} s") from e
        arrived = time.time_ns()
        video = frame.as_video_frame()
        image = np.asanyarray(video.get_data())
        if video.get_profile().format() == self.rs.format.bgr8:
            image = image[:, :, ::-1]
        return Frame(crop_resize(image, self.crop, self.size), self._host_time(video, arrived), video.get_frame_number())

    def _host_time(self, video, arrived_ns: int) -> int:
        device_ns = video.get_timestamp() * 1e6  # milliseconds in the frame's clock domain
        domain = video.get_frame_timestamp_domain()
        if domain in (self.rs.timestamp_domain.global_time, self.rs.timestamp_domain.system_time):
            return int(device_ns)  # already the host's wall clock
        offset = arrived_ns - device_ns  # transport delay + clock offset: the smallest is the best estimate
        self._offset_ns = offset if self._offset_ns is None else min(self._offset_ns, offset)
        return int(device_ns + self._offset_ns)

    def camera_info_intrinsics(self) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) after crop and resize."""
        i = self.intrinsics
        fx, fy, cx, cy, w, h = i.fx, i.fy, i.ppx, i.ppy, i.width, i.height
        if self.crop is not None:
            cy, cx, h, w = cy - self.crop[0], cx - self.crop[1], self.crop[2], self.crop[3]
        if self.size is not None:
            sy, sx = self.size[0] / h, self.size[1] / w
            fx, fy, cx, cy = fx * sx, fy * sy, cx * sx, cy * sy
        return fx, fy, cx, cy

    def close(self) -> None:
        try:
            self.sensor.stop()
            self.sensor.close()
        except RuntimeError:
            pass


class SimCamera:
    """One of the twin's cameras, rendering the scene state the sim arm publishes."""

    def __init__(self, name: str, task: str = "PickCube", size: tuple[int, int] = (128, 128)):
        from robot_rl.contract import SIM_CAMERAS
        from robot_rl.sim.env import make_backend
        from robot_rl.sim.tasks import get_task

        if name not in SIM_CAMERAS:
            raise CameraError(f"the twin has no camera {name!r}; it has {list(SIM_CAMERAS)}")
        # one render thread per camera process: cameras render in parallel processes, and Mesa's
        # software rasteriser would otherwise start a thread per core in each (measured: p50
        # frame-to-command 27 -> 23 ms with two 64x64 cameras on 2 cores)
        os.environ.setdefault("LP_NUM_THREADS", "1")
        self.name, self.size = name, (int(size[0]), int(size[1]))
        self.backend = make_backend("mujoco", get_task(task))
        self.scene_stamp_ns: int | None = None

    def set_scene(self, state: np.ndarray, stamp_ns: int) -> None:
        self.backend.set_scene_state(state)
        self.scene_stamp_ns = stamp_ns

    def read(self) -> Frame:
        """The current scene, stamped with the instant the scene state describes."""
        if self.scene_stamp_ns is None:
            raise CameraError(f"sim camera {self.name}: no scene state from the sim arm yet")
        return Frame(self.backend.render(self.name, *self.size), self.scene_stamp_ns)

    def fovy(self) -> float:
        from robot_rl.sim import panda_description as panda

        return {"front": panda.FRONT_CAMERA_FOVY, "wrist": panda.WRIST_CAMERA_FOVY, "side": panda.SIDE_CAMERA_FOVY}[self.name]

    def close(self) -> None:
        self.backend.close()

"""Camera backends, ROS-free. Each ``read`` returns a :class:`Frame`: an RGB uint8 image of the
configured size and the instant it was exposed, in this host's clock (nanoseconds).

    RealSenseCamera  pyrealsense2, sensor-level API (a real device found by serial number, or
                     any ``rs.device`` — e.g. librealsense's ``software_device`` in tests):
                     colour stream at a chosen resolution and rate, optional crop, resize.
                     Hardware timestamps are mapped to host time with the smallest observed
                     (arrival - exposure) offset, so they keep the device's spacing.
    OpenCVCamera     a USB webcam (V4L2: a device index or a /dev/video* path), a video file or
                     a stream URL, through OpenCV's ``cv2.VideoCapture``. Frames are stamped on
                     arrival (a UVC webcam gives no exposure stamp OpenCV exposes reliably), so
                     the stamp is later than the exposure by the sensor's readout and the USB
                     transfer (about one frame period) and carries the host's scheduling jitter,
                     where the RealSense's hardware stamps keep the device's spacing. A video
                     file plays at its own rate. Frames that never came (a gap of more than 1.5
                     periods) count as dropped, frames that came in a burst (a driver's queue
                     flushing: under a quarter period apart) as stale.
    SimCamera        the twin's cameras: its own copy of the MuJoCo scene, posed from the sim
                     arm's published scene state, rendered on request.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

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


class OpenCVCamera:
    """One ``cv2.VideoCapture`` source: ``"0"`` (a device index) or ``"/dev/video2"`` (V4L2), a
    video file, or a stream URL (``rtsp://``, ``http://``: FFmpeg). A device is asked for
    ``width`` x ``height`` at ``fps`` (MJPG, as webcams deliver their higher rates) and, with
    ``exposure`` (V4L2 units, typically 1-5000 x 100 us), manual exposure; what it will not give
    is refused in one line. ``loop``: a video file starts again at its end (else its end is the
    camera gone)."""

    LOST_AFTER = 3  # consecutive failed reads: the camera is gone
    OPEN_TIMEOUT_MS, READ_TIMEOUT_MS = 5000, 2000  # a stream's (FFmpeg)

    def __init__(self, source: str, width: int = 640, height: int = 480, fps: int = 30, exposure: float | None = None,
                 crop: str | tuple | None = None, size: tuple[int, int] | None = None, loop: bool = False):
        try:
            import cv2
        except ImportError as e:
            raise CameraError(f"OpenCV is not installed here ({e}); install it with "
                              "`pip install robot-rl[webcam]`") from e
        self.cv2, self.source = cv2, str(source)
        self.crop, self.size, self.loop = parse_crop(crop), tuple(size) if size else None, loop
        self.kind = self._kind(self.source)
        self.settings = (width, height, fps, exposure)
        self.capture = self._open()
        rate = self.capture.get(cv2.CAP_PROP_FPS)
        self.fps = float(rate) if rate and np.isfinite(rate) and rate > 0 else float(fps)
        self.period_ns = int(1e9 / self.fps)
        self.number = 0
        self.dropped = self.stale = 0
        self.closed = threading.Event()
        self._last_arrival: int | None = None
        self._due_ns: int | None = None  # a file's next frame time: it plays at its own rate

    @staticmethod
    def _kind(source: str) -> str:
        if source.isdigit() or source.startswith("/dev/video"):
            return "device"
        if "://" in source:
            return "stream"
        if not Path(source).is_file():
            raise CameraError(f"camera source {source!r} is not a device index, a /dev/video* path, a video file "
                              "that exists or a stream URL")
        return "file"

    def _open(self):
        cv2 = self.cv2
        if self.kind == "device":
            if not self.source.isdigit() and not os.path.exists(self.source):
                raise CameraError(f"no camera at {self.source} (`v4l2-ctl --list-devices` lists them)")
            target = int(self.source) if self.source.isdigit() else self.source
            capture = cv2.VideoCapture(target, cv2.CAP_V4L2)
        else:  # a stream that stalls is a failed read after READ_TIMEOUT_MS, not a hung node
            capture = cv2.VideoCapture(self.source, cv2.CAP_FFMPEG, [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, self.OPEN_TIMEOUT_MS,
                                                                     cv2.CAP_PROP_READ_TIMEOUT_MSEC, self.READ_TIMEOUT_MS])
        if not capture.isOpened():
            capture.release()
            raise CameraError(f"OpenCV could not open camera source {self.source!r} ({self.kind})")
        self.capture = capture
        if self.kind == "device":
            self._configure(*self.settings)
        return capture

    def _configure(self, width: int, height: int, fps: int, exposure: float | None) -> None:
        cv2, capture = self.cv2, self.capture
        capture.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*"MJPG"))
        capture.set(cv2.CAP_PROP_FRAME_WIDTH, width)
        capture.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        capture.set(cv2.CAP_PROP_FPS, fps)
        capture.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the newest frame, not a queue of old ones
        if exposure is not None:
            capture.set(cv2.CAP_PROP_AUTO_EXPOSURE, 1)  # V4L2: 1 = manual, 3 = aperture priority (auto)
            capture.set(cv2.CAP_PROP_EXPOSURE, float(exposure))
        got = (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        if got != (width, height):
            self.capture.release()
            raise CameraError(f"camera {self.source} gives {got[0]}x{got[1]} when asked for {width}x{height} "
                              "(`v4l2-ctl --list-formats-ext` lists its modes)")

    def read(self) -> Frame:
        """The next frame (a file's at its own rate), stamped on arrival; ``CameraError`` when the
        source has failed ``LOST_AFTER`` reads in a row (unplugged, the stream ended)."""
        if self.kind == "file" and self._due_ns is not None:
            self.closed.wait(max(0.0, (self._due_ns - time.monotonic_ns()) / 1e9))
        for _ in range(self.LOST_AFTER):
            if self.closed.is_set():
                raise CameraError(f"camera {self.source} is closed")
            ok, image = self.capture.read()
            if not ok and self.kind == "file" and self.loop:
                self.capture.set(self.cv2.CAP_PROP_POS_FRAMES, 0)
                ok, image = self.capture.read()
            if ok and image is not None:
                break
        else:
            raise CameraError(f"camera {self.source} stopped delivering frames ({self.LOST_AFTER} reads failed)")
        arrived, now = time.time_ns(), time.monotonic_ns()
        if self.kind == "file":
            self._due_ns = (self._due_ns or now) + self.period_ns
        self._count_gaps(arrived)
        self.number += 1
        return Frame(self._to_rgb(image), arrived, self.number)

    def _to_rgb(self, bgr: np.ndarray) -> np.ndarray:
        """Crop, resize (OpenCV's INTER_AREA to shrink: about 0.6x Pillow's time, ``bench ros``'s
        resize figures) and BGR -> RGB."""
        cv2 = self.cv2
        image = crop_resize(bgr, self.crop, None)
        if self.size is not None and image.shape[:2] != self.size:
            shrink = self.size[0] < image.shape[0] or self.size[1] < image.shape[1]
            image = cv2.resize(image, (self.size[1], self.size[0]), interpolation=cv2.INTER_AREA if shrink
                               else cv2.INTER_LINEAR)
        return np.ascontiguousarray(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))

    def _count_gaps(self, arrived_ns: int) -> None:
        if self._last_arrival is not None:
            gap = arrived_ns - self._last_arrival
            if gap > 1.5 * self.period_ns:
                self.dropped += int(round(gap / self.period_ns)) - 1
            elif gap < 0.25 * self.period_ns:
                self.stale += 1
        self._last_arrival = arrived_ns

    def reopen(self) -> None:
        """After the camera was lost: open the source again (``CameraError`` while it is still gone)."""
        self.capture.release()
        self._open()
        self._last_arrival = self._due_ns = None

    def close(self) -> None:
        self.closed.set()
        self.capture.release()


class SimCamera:
    """One of the twin's cameras, rendering the scene state the sim publishes (the sim arm, or the
    simulated SO-101's node for an SO-101 task)."""

    def __init__(self, name: str, task: str = "PickCube", size: tuple[int, int] = (128, 128)):
        from robot_rl.contract import SIM_CAMERAS
        from robot_rl.sim.env import make_backend
        from robot_rl.sim.tasks import get_task

        # one render thread per camera process: cameras render in parallel processes, and Mesa's
        # software rasteriser would otherwise start a thread per core in each (measured: p50
        # frame-to-command 27 -> 23 ms with two 64x64 cameras on 2 cores)
        os.environ.setdefault("LP_NUM_THREADS", "1")
        self.name, self.size = name, (int(size[0]), int(size[1]))
        sim_task = get_task(task)
        if sim_task.robot == "so101":
            from robot_rl.sim.so101_physics import So101Sim
            from robot_rl.sim.so101_env import CAMERAS

            cameras = CAMERAS
            self.backend = So101Sim(cube=True, cameras=True) if name in cameras else None
        else:
            cameras = SIM_CAMERAS
            self.backend = make_backend("mujoco", sim_task) if name in cameras else None
        if self.backend is None:
            raise CameraError(f"the twin of {task} has no camera {name!r}; it has {list(cameras)}")
        self.scene_stamp_ns: int | None = None

    def set_scene(self, state: np.ndarray, stamp_ns: int) -> None:
        self.backend.set_scene_state(state)
        self.scene_stamp_ns = stamp_ns

    def read(self) -> Frame:
        """The current scene, stamped with the instant the scene state describes."""
        if self.scene_stamp_ns is None:
            raise CameraError(f"sim camera {self.name}: no scene state from the sim yet")
        return Frame(self.backend.render(self.name, *self.size), self.scene_stamp_ns)

    def fovy(self) -> float:
        from robot_rl.sim import panda_description as panda

        if hasattr(self.backend, "camera_fovy"):
            return self.backend.camera_fovy(self.name)
        return {"front": panda.FRONT_CAMERA_FOVY, "wrist": panda.WRIST_CAMERA_FOVY, "side": panda.SIDE_CAMERA_FOVY}[self.name]

    def close(self) -> None:
        self.backend.close()

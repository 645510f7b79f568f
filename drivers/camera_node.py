"""``camera_node``: one camera as ``sensor_msgs/Image`` (rgb8) + ``CameraInfo``, stamped with the
exposure time.

Backend ``realsense``: a RealSense colour stream (serial, resolution, fps, crop, resize), read
on its own thread so a slow subscriber never stalls the device. Backend ``opencv``: a USB webcam,
a video file or a stream (``source``) through OpenCV, read the same way; a camera that vanishes
is one warning and ``{"state": "lost"}`` on the camera's status topic, the node stays up and
opens it again when it is back (every ``reopen_s``). Backend ``sim``: one of the
twin's cameras, rendering every scene state the sim arm publishes (at the control rate), so
frames show what the arm did, with the latency a rendering pipeline has.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Float64MultiArray, String

from robot_rl.config import setting
from robot_rl.node_config import CONTROL_PRIORITIES
from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.drivers.camera import CameraError, OpenCVCamera, RealSenseCamera, SimCamera
from robot_rl.drivers.node import apply_task_file, declare_config, run, status_json


@dataclass
class CameraNodeConfig:
    name: str = "front"  # topics cameras/<name>/image and camera_info
    backend: str = setting("sim", "sim (the twin's camera), realsense, or opencv (a webcam, video file or stream)",
                           choices=("sim", "realsense", "opencv"))
    task: str = "PickCube"  # sim: the scene to render
    height: int = 128  # published image size (after crop)
    width: int = 128
    serial: str = ""  # realsense: "" = the first camera found
    sensor_width: int = 640  # realsense stream
    sensor_height: int = 480
    fps: int = 30
    crop: str = ""  # realsense, opencv: "top,left,height,width" of the sensor image, before the resize
    source: str = ""  # opencv: a device index ("0"), /dev/video* path, video file or stream URL
    exposure: float = -1.0  # opencv device: manual exposure in V4L2 units (-1: the camera's automatic exposure)
    loop: bool = False  # opencv video file: start again at its end (else its end is the camera gone)
    fovy_deg: float = 50.0  # opencv: the vertical field of view CameraInfo reports (a webcam's own, from its data sheet)
    reopen_s: float = 1.0  # opencv: how often a lost camera is looked for
    task_file: str = ""  # a real cell's task file: this camera's entry there sets serial, crop, height, width
    priority: str = setting("realtime", "the camera's CPU priority (the control path): realtime (SCHED_FIFO where "
                                        "the system allows it, else a warning and normal) or normal",
                            choices=CONTROL_PRIORITIES)


def apply_camera_spec(cfg: CameraNodeConfig) -> CameraNodeConfig:
    """With a task file: this camera's entry (by ``name``) sets the published size, and the serial
    and crop where it gives them; an entry with a ``source`` is an OpenCV camera (backend
    ``opencv``); the task's name replaces ``task``. Without one: ``cfg`` as it is."""
    if not cfg.task_file:
        return cfg
    cfg, task = apply_task_file(cfg)
    spec = task.camera(cfg.name)
    if spec.source:
        cfg = dataclasses.replace(cfg, backend="opencv", source=spec.source)
    return dataclasses.replace(cfg, serial=spec.serial or cfg.serial,
                               crop=",".join(map(str, spec.crop)) if spec.crop else cfg.crop,
                               height=spec.resize[0], width=spec.resize[1])


class CameraNode(Node):
    """``camera``: an already opened camera backend to publish (tests pass a RealSense
    software device's); by default the node opens the one its parameters name."""

    CONTROL_PATH = True  # run as its own process, it takes its priority parameter (drivers/node.py)

    def __init__(self, camera=None, **node_kwargs):
        super().__init__("camera", **node_kwargs)
        self.cfg = cfg = apply_camera_spec(declare_config(self, CameraNodeConfig))
        self.size = (cfg.height, cfg.width)
        self.pub_image = self.create_publisher(Image, topics.camera_image(cfg.name), topics.qos_sensor())
        self.pub_info = self.create_publisher(CameraInfo, topics.camera_info(cfg.name), topics.qos_sensor())
        self.pub_status = self.create_publisher(String, f"cameras/{cfg.name}/status", topics.qos_latched())
        self.drops = msgs.DropCounter(self.get_logger().warning)
        self.frames = 0
        self.stop = threading.Event()
        if cfg.backend == "sim":
            self.camera = SimCamera(cfg.name, cfg.task, self.size)
            self.intrinsics = None
            self.create_subscription(Float64MultiArray, topics.SIM_SCENE, self.on_scene, topics.qos_sensor())
        elif cfg.backend == "realsense":
            self.camera = camera or RealSenseCamera(cfg.serial, cfg.sensor_width, cfg.sensor_height, cfg.fps,
                                                    cfg.crop, self.size)
            self.intrinsics = self.camera.camera_info_intrinsics()
            self.reader = threading.Thread(target=self.read_loop, daemon=True, name="realsense-reader")
            self.reader.start()
        elif cfg.backend == "opencv":
            if not cfg.source:
                raise CameraError("camera backend opencv needs source: a device index, /dev/video* path, video file "
                                  "or stream URL")
            self.camera = camera or OpenCVCamera(cfg.source, cfg.sensor_width, cfg.sensor_height, cfg.fps,
                                                 None if cfg.exposure < 0 else cfg.exposure, cfg.crop, self.size, cfg.loop)
            self.intrinsics = None
            self.reader = threading.Thread(target=self.opencv_loop, daemon=True, name="opencv-reader")
            self.reader.start()
        else:
            raise CameraError(f"unknown camera backend {cfg.backend!r}; use 'sim', 'realsense' or 'opencv'")
        self.get_logger().info(f"camera {cfg.name} ({cfg.backend}) publishing {cfg.height}x{cfg.width} rgb8")

    def on_scene(self, msg):
        data = np.asarray(msg.data, np.float64)
        if len(data) < 2 or not np.all(np.isfinite(data)):
            return self.drops.drop("scene state", "empty or not finite")
        try:
            self.camera.set_scene(data[1:], int(data[0] * 1e9))
        except ValueError as e:
            return self.drops.drop("scene state", str(e))
        self.publish(self.camera.read())

    def read_loop(self):
        while not self.stop.is_set():
            try:
                frame = self.camera.read(timeout_s=1.0)
            except CameraError as e:
                self.drops.drop("camera timeout", str(e))
                continue
            self.publish(frame)

    def opencv_loop(self):
        """Frames as they come; a camera that is gone: one warning and a ``lost`` status, then a
        look for it every ``reopen_s`` until it is back (or the node stops)."""
        lost = None
        while not self.stop.is_set():
            try:
                if lost is not None:
                    self.camera.reopen()
                    self.get_logger().info(f"camera {self.cfg.name}: {self.cfg.source} is back")
                    lost = None
                frame = self.camera.read()
            except CameraError as e:
                if self.stop.is_set():
                    return
                if lost is None:
                    lost = str(e)
                    self.get_logger().warning(f"camera {self.cfg.name}: {lost}; looking for it every "
                                              f"{self.cfg.reopen_s:g} s")
                    self.pub_status.publish(String(data=status_json(state="lost", error=lost, frames=self.frames,
                                                                    **self.opencv_counts())))
                self.stop.wait(self.cfg.reopen_s)
                continue
            self.publish(frame)

    def opencv_counts(self) -> dict:
        return {"dropped_frames": self.camera.dropped, "stale_frames": self.camera.stale}

    def publish(self, frame):
        name = self.cfg.name
        self.pub_image.publish(msgs.image_to_msg(frame.image, frame.stamp_ns, name))
        if self.intrinsics is not None:
            info = msgs.camera_info(frame.stamp_ns, name, *self.size, intrinsics=self.intrinsics)
        else:
            fovy = self.cfg.fovy_deg if self.cfg.backend == "opencv" else self.camera.fovy()
            info = msgs.camera_info(frame.stamp_ns, name, *self.size, fovy_deg=fovy)
        self.pub_info.publish(info)
        self.frames += 1
        if self.frames % 100 == 1:
            extra = self.opencv_counts() if self.cfg.backend == "opencv" else {}
            self.pub_status.publish(String(data=status_json(state="streaming", frames=self.frames,
                                                            dropped=self.drops.counts, **extra)))

    def close(self):
        self.stop.set()
        self.camera.close()


def main(args=None) -> None:
    run(CameraNode, args)


if __name__ == "__main__":
    main()

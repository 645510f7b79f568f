"""``camera_node``: one camera as ``sensor_msgs/Image`` (rgb8) + ``CameraInfo``, stamped with the
exposure time.

Backend ``realsense``: a RealSense colour stream (serial, resolution, fps, crop, resize), read
on its own thread so a slow subscriber never stalls the device. Backend ``sim``: one of the
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

from robot_rl.config import CONTROL_PRIORITIES, setting
from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.drivers.camera import CameraError, RealSenseCamera, SimCamera
from robot_rl.drivers.node import apply_task_file, declare_config, run, status_json


@dataclass
class CameraNodeConfig:
    name: str = "front"  # topics cameras/<name>/image and camera_info
    backend: str = "sim"  # "sim" or "realsense"
    task: str = "PickCube"  # sim: the scene to render
    height: int = 128  # published image size (after crop)
    width: int = 128
    serial: str = ""  # realsense: "" = the first camera found
    sensor_width: int = 640  # realsense stream
    sensor_height: int = 480
    fps: int = 30
    crop: str = ""  # realsense: "top,left,height,width" of the sensor image, before the resize
    task_file: str = ""  # a real cell's task file: this camera's entry there sets serial, crop, height, width
    priority: str = setting("realtime", "the camera's CPU priority (the control path): realtime (SCHED_FIFO where "
                                        "the system allows it, else a warning and normal) or normal",
                            choices=CONTROL_PRIORITIES)


def apply_camera_spec(cfg: CameraNodeConfig) -> CameraNodeConfig:
    """With a task file: this camera's entry (by ``name``) sets the published size, and the serial
    and crop where it gives them; the task's name replaces ``task``. Without one: ``cfg`` as it is."""
    if not cfg.task_file:
        return cfg
    cfg, task = apply_task_file(cfg)
    spec = task.camera(cfg.name)
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
        else:
            raise CameraError(f"unknown camera backend {cfg.backend!r}; use 'sim' or 'realsense'")
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

    def publish(self, frame):
        name = self.cfg.name
        self.pub_image.publish(msgs.image_to_msg(frame.image, frame.stamp_ns, name))
        if self.intrinsics is not None:
            info = msgs.camera_info(frame.stamp_ns, name, *self.size, intrinsics=self.intrinsics)
        else:
            info = msgs.camera_info(frame.stamp_ns, name, *self.size, fovy_deg=self.camera.fovy())
        self.pub_info.publish(info)
        self.frames += 1
        if self.frames % 100 == 1:
            self.pub_status.publish(String(data=status_json(frames=self.frames, dropped=self.drops.counts)))

    def close(self):
        self.stop.set()
        self.camera.close()


def main(args=None) -> None:
    run(CameraNode, args)


if __name__ == "__main__":
    main()

"""The OpenCV camera backend's figures (part of ``robot-rl bench ros``): ``camera_node
backend:=opencv`` as its own process, reading a generated 640x480 MJPG video file at 30 fps
(what a USB webcam delivers in MJPG), publishing 64x64 frames over DDS on loopback to this
process.

- opencv_fps: frames received per second over the run (the file's rate is 30);
- opencv_frame_to_receipt_ms p50/p99: a frame's stamp (its arrival from OpenCV, decoded) ->
  its receipt here: the node's resize, conversion and publish, and the DDS hop;
- opencv_dropped_frames / opencv_stale_frames: by the node's rule (a gap over 1.5 periods, a
  burst under a quarter period) on the received frames' stamps: the source's and the DDS hop's;
- resize_640x480_to_64x64_{pil,opencv}_ms: one frame's downscale by ``contract.resize_frame``
  (Pillow, antialiased bilinear) and by OpenCV's ``INTER_AREA``, the same frame, median of 200.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

FILE_FPS = 30
SENSOR = (480, 640)


def write_video(path: Path, seconds: float) -> str:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), FILE_FPS, (SENSOR[1], SENSOR[0]))
    rng = np.random.default_rng(0)
    background = rng.integers(0, 255, (*SENSOR, 3), dtype=np.uint8)
    for i in range(int(seconds * FILE_FPS)):
        frame = background.copy()
        x = (i * 7) % (SENSOR[1] - 80)
        frame[200:280, x:x + 80] = (0, 0, 220)  # a red block moving across, as a cube seen by a webcam
        writer.write(frame)
    writer.release()
    return str(path)


def resize_times() -> dict:
    import cv2

    from robot_rl.contract import resize_frame

    frame = np.random.default_rng(1).integers(0, 255, (*SENSOR, 3), dtype=np.uint8)
    figures = {}
    for name, resize in (("pil", lambda: resize_frame(frame, (64, 64))),
                         ("opencv", lambda: cv2.resize(frame, (64, 64), interpolation=cv2.INTER_AREA))):
        times = []
        for _ in range(200):
            start = time.perf_counter()
            resize()
            times.append((time.perf_counter() - start) * 1e3)
        figures[f"resize_640x480_to_64x64_{name}_ms"] = round(float(np.median(times)), 3)
    return figures


def run(seconds: float, domain: int, log_dir: Path, start, stop, log=print) -> dict:
    """``start``/``stop``: bench/ros.py's node process helpers."""
    try:
        import cv2  # noqa: F401
    except ImportError:
        log("bench ros: no OpenCV here (pip install robot-rl[webcam]): the opencv camera figures are null")
        return {"opencv_fps": None}
    import rclpy
    import rclpy.executors
    import rclpy.node
    from sensor_msgs.msg import Image

    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics

    video = write_video(log_dir / "webcam.avi", seconds + 4.0)  # discovery takes a few seconds of it
    proc = start("robot_rl.drivers.camera_node", {"name": "front", "backend": "opencv", "source": video, "height": 64,
                                                  "width": 64, "sensor_width": SENSOR[1], "sensor_height": SENSOR[0],
                                                  "fps": FILE_FPS}, domain, log_dir, "camera_opencv")
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.node.Node("bench_opencv_camera", context=context)
    received = []
    node.create_subscription(Image, topics.camera_image("front"),
                             lambda m: received.append((time.time_ns(), msgs.ns_from_stamp(m.header.stamp))),
                             topics.qos_sensor(100))
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + 30.0  # discovery
        while not received and time.monotonic() < deadline and proc.poll() is None:
            executor.spin_once(timeout_sec=0.05)
        first = len(received)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        window = received[first:]
    finally:
        stop([proc])
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
    if len(window) < 2:
        log(f"bench ros: the opencv camera node published {len(window)} frames (see {log_dir}/camera_opencv.log)")
        return {"opencv_fps": None}
    arrivals = np.array([a for a, _ in window])
    latency_ms = (arrivals - np.array([s for _, s in window])) / 1e6
    period_ns = 1e9 / FILE_FPS
    gaps = np.diff(np.array([s for _, s in window]))
    figures = {
        "opencv_fps": round((len(window) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9), 2),
        "opencv_file_fps": FILE_FPS,
        "opencv_frame_to_receipt_ms": [round(float(np.percentile(latency_ms, q)), 2) for q in (50, 99)],
        "opencv_dropped_frames": int(sum(round(g / period_ns) - 1 for g in gaps if g > 1.5 * period_ns)),
        "opencv_stale_frames": int(np.sum(gaps < 0.25 * period_ns)),
        "opencv_frames": len(window),
    }
    figures.update(resize_times())
    return figures


if __name__ == "__main__":
    print(resize_times(), file=sys.stderr)

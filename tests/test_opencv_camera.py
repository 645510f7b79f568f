"""The ``opencv`` camera backend (drivers/camera.py ``OpenCVCamera``, issue 47): a video file played
at its own rate, a generated MJPEG stream over HTTP on loopback (as an IP camera or a phone serves
one), a camera that vanishes and comes back, and each source it cannot open as one line."""

from __future__ import annotations

import http.server
import socketserver
import threading

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2", reason="OpenCV (pip install robot-rl[webcam])")

from robot_rl.drivers.camera import CameraError, OpenCVCamera  # noqa: E402

FPS = 25


def shade(i: int) -> int:
    return (i * 9) % 250


def ramp(i: int) -> int:
    """A slow shade for a long file: frame 0 to 149 from 0 to 238, never wrapping."""
    return int(i * 1.6)


def write_video(path, frames: int, fps: int = FPS, size=(48, 64), shade=shade) -> str:
    """An MJPG AVI whose frame i is one grey level, ``shade(i)``, with a white square marking its top left."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (size[1], size[0]))
    assert writer.isOpened()
    for i in range(frames):
        image = np.full((*size, 3), shade(i), np.uint8)
        image[:8, :8] = 255
        writer.write(image)
    writer.release()
    return str(path)


def grey(frame) -> int:
    return int(np.median(frame.image[16:, 16:, 0]))


def test_a_video_file_plays_at_its_own_rate_then_is_a_camera_gone(tmp_path):
    cam = OpenCVCamera(write_video(tmp_path / "cell.avi", 12), size=(24, 32))
    try:
        assert cam.kind == "file" and cam.fps == pytest.approx(FPS)
        frames = [cam.read() for _ in range(12)]
        assert [f.number for f in frames] == list(range(1, 13))
        assert all(f.image.shape == (24, 32, 3) for f in frames)
        assert all(abs(grey(f) - shade(i)) <= 3 for i, f in enumerate(frames))  # in order, none skipped
        assert (frames[0].image[:3, :3] > 240).all()  # RGB the right way up (OpenCV gives BGR)
        spacing = np.diff([f.stamp_ns for f in frames]) / 1e6
        assert spacing.mean() >= 0.9 * 1000 / FPS  # never faster than the file's rate
        with pytest.raises(CameraError, match=r"camera .*cell.avi stopped delivering frames \(3 reads failed\)"):
            cam.read()
    finally:
        cam.close()


def test_a_looping_video_file_starts_again_at_its_end(tmp_path):
    cam = OpenCVCamera(write_video(tmp_path / "cell.avi", 5), loop=True)
    try:
        greys = [grey(cam.read()) for _ in range(12)]
        assert all(abs(g - shade(i % 5)) <= 3 for i, g in enumerate(greys))
    finally:
        cam.close()


def test_gaps_count_as_dropped_frames_and_bursts_as_stale(tmp_path):
    cam = OpenCVCamera(write_video(tmp_path / "cell.avi", 3))
    try:
        period = cam.period_ns
        for arrival in (0, period, 4 * period, 4 * period + period // 10, 5 * period):
            cam._count_gaps(arrival)
        assert (cam.dropped, cam.stale) == (2, 1)
    finally:
        cam.close()


@pytest.mark.parametrize("source, says", [
    ("no_such_file.mp4", "camera source 'no_such_file.mp4' is not a device index, a /dev/video* path, a video file"),
    ("/dev/video99", "no camera at /dev/video99"),
    ("TEXT", "OpenCV could not open camera source"),
])
def test_a_source_opencv_cannot_open_is_one_line(tmp_path, source, says):
    if source == "TEXT":
        source = str(tmp_path / "notes.txt")
        (tmp_path / "notes.txt").write_text("not a video\n")
    with pytest.raises(CameraError) as err:
        OpenCVCamera(source)
    assert says in str(err.value) and "\n" not in str(err.value)


class MjpegStream:
    """A generated MJPEG stream over HTTP on 127.0.0.1, as an IP camera serves one: frame i is
    ``shade(i)``, ``frames`` of them at FPS, then the connection ends (the camera unplugged)."""

    def __init__(self, frames: int):
        stream = self
        self.frames, self.served = frames, threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                for i in range(stream.frames):
                    ok, jpg = cv2.imencode(".jpg", np.full((48, 64, 3), shade(i), np.uint8))
                    data = jpg.tobytes()
                    try:
                        self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n"
                                         % len(data) + data + b"\r\n")
                        self.wfile.flush()
                    except OSError:
                        return
                    stream.served.wait(1 / FPS)  # paced as a camera is; never set: a timer
                self.close_connection = True

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/stream.mjpg"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_generated_stream_is_read_in_order_and_its_end_is_the_camera_gone():
    stream = MjpegStream(frames=20)
    try:
        cam = OpenCVCamera(stream.url)
        try:
            assert cam.kind == "stream"
            greys = [grey(cam.read()) for _ in range(20)]
            assert greys == sorted(greys) and abs(greys[0] - shade(0)) <= 3 and abs(greys[-1] - shade(19)) <= 3
            with pytest.raises(CameraError, match="stopped delivering frames"):
                cam.read()
            cam.reopen()  # the server is still there: it serves the stream again from its start
            assert abs(grey(cam.read()) - shade(0)) <= 3
        finally:
            cam.close()
        stream.close()
        with pytest.raises(CameraError, match="OpenCV could not open camera source"):
            cam.reopen()
    finally:
        stream.close()


@pytest.mark.ros
def test_a_video_file_feeds_the_actor_over_ros_at_its_rate_and_its_end_is_reported(tmp_path):
    """arm_node (the twin) and camera_node ``backend:=opencv`` on a video file, as processes; the
    actor's env (RosArmEnv) takes its observations from them. The file's frames arrive in order
    at its rate; when it ends, the camera's status says ``lost`` in one warning and the node stays up."""
    import json
    import time

    rclpy = pytest.importorskip("rclpy", reason="ROS 2 wheels (pip install robot-rl[ros])")
    import rclpy.executors
    import rclpy.node
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics
    from robot_rl.drivers.ros_env import RosArmEnv
    from tests.helpers.ros import free_domain_id, node_process

    video = write_video(tmp_path / "cell.avi", 150, shade=ramp)  # 6 s at 25 fps
    domain = free_domain_id()
    with node_process("robot_rl.drivers.arm_node", {"seed": 1}, domain, tmp_path) as arm, \
            node_process("robot_rl.drivers.camera_node", {"name": "front", "backend": "opencv", "source": video,
                                                          "height": 32, "width": 32}, domain, tmp_path,
                         "camera_front") as cam:
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain)
        node = rclpy.node.Node("actor_under_test", context=context)
        frames, statuses, lost = [], [], threading.Event()

        def on_status(msg):
            statuses.append(json.loads(msg.data))
            if statuses[-1].get("state") == "lost":
                lost.set()

        node.create_subscription(Image, topics.camera_image("front"), frames.append, topics.qos_sensor(500))
        node.create_subscription(String, "cameras/front/status", on_status, topics.qos_latched())
        env = RosArmEnv(node, "PickCube", ("front",), (32, 32), sim=True, max_frame_lag_s=0.1, stale_timeout_s=30)
        executor = rclpy.executors.SingleThreadedExecutor(context=context)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        try:
            obs, _ = env.reset()
            seen = [grey_of(obs)]
            for _ in range(5):
                obs, *_ = env.step(np.zeros(7, np.float32))
                seen.append(grey_of(obs))
            shades = [ramp(i) for i in range(150)]
            assert all(min(abs(g - s) for s in shades) <= 3 for g in seen) and seen == sorted(seen), seen
            assert lost.wait(60), "no lost status after the file's end"  # a failsafe bound only
            stamps = np.array([msgs.ns_from_stamp(m.header.stamp) for m in frames])
            assert len(frames) >= 20 and np.diff(stamps).mean() >= 0.9e9 / FPS  # its rate, never faster
            assert "stopped delivering frames" in statuses[-1]["error"] and arm.poll() is None and cam.poll() is None
            log = (tmp_path / "camera_front.log").read_text()
            assert log.count("stopped delivering frames") == 1  # one warning, not one per retry
        finally:
            executor.shutdown()
            node.destroy_node()
            context.try_shutdown()
            spinner.join(5)


def grey_of(obs) -> int:
    return int(np.median(obs["images"]["front"][8:, 8:, 0]))

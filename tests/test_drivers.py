"""Camera and arm drivers: the plain logic without ROS, then the nodes over real ROS 2 (DDS on
loopback, a private domain), and the RealSense path through librealsense's software device."""

import json
import os
import sys
import threading
import time

import numpy as np
import pytest

from robot_rl.contract import STATE_SLICES, ControlLimits, SafetyBox
from robot_rl.drivers.arm import ArmSupervisor, SimArm
from robot_rl.drivers.camera import CameraError, SimCamera, crop_resize, parse_crop

rclpy = pytest.importorskip("rclpy", reason="ROS 2 wheels (pip install robot-rl[ros])")
import rclpy.executors  # noqa: E402
import rclpy.node  # noqa: E402
from geometry_msgs.msg import PoseStamped, TwistStamped  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Bool, Empty, Float32, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.drivers import messages as msgs  # noqa: E402
from robot_rl.drivers import topics  # noqa: E402
from tests.helpers.ros import Probe, free_domain_id, node_process  # noqa: E402
from tests.helpers.common import realtime_allowed, thread_policies  # noqa: E402

LIMITS = ControlLimits()
BOX = SafetyBox(low=(0.3, -0.25, 0.01), high=(0.7, 0.25, 0.35))


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def state_at(pos, quat=(0.0, 1.0, 0.0, 0.0)) -> np.ndarray:
    state = np.zeros(20, np.float32)
    state[STATE_SLICES["tcp_pos"]] = pos
    state[STATE_SLICES["tcp_quat"]] = quat
    return state


# ----------------------------------------------------------------------- supervisor (no ROS)
def test_watchdog_holds_after_two_silent_periods():
    clock = FakeClock()
    sup = ArmSupervisor(LIMITS, BOX, watchdog_periods=2, clock=clock)
    here = state_at([0.5, 0.0, 0.2])
    sup.command_velocity(np.array([1.0, 0, 0, 0, 0, 0]))
    clock.t = 0.15  # 1.5 periods: the command still counts
    assert sup.action(here)[0] == pytest.approx(1.0) and sup.mode == "velocity"
    clock.t = 0.21  # past 2 periods: hold where the silence began
    held = sup.action(here)
    assert sup.mode == "watchdog" and np.allclose(held[:6], 0, atol=1e-6) and sup.counts["watchdog_holds"] == 1
    # the arm drifted 1 cm: the hold pulls it back to where it was
    back = sup.action(state_at([0.51, 0.0, 0.2]))
    assert back[0] == pytest.approx(-0.01 / LIMITS.max_translation_m, rel=1e-4)
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))  # a new command resumes
    assert sup.action(here)[2] == pytest.approx(1.0) and sup.mode == "velocity"


def test_estop_latches_ignores_commands_until_released():
    clock = FakeClock()
    sup = ArmSupervisor(LIMITS, BOX, clock=clock)
    here = state_at([0.5, 0.0, 0.2])
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))
    sup.estop()
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))
    sup.command_gripper(1.0)
    assert sup.counts["ignored_estopped"] == 2
    for _ in range(3):
        clock.t += 0.1
        act = sup.action(here)
        assert sup.mode == "estop" and np.allclose(act[:6], 0, atol=1e-6) and act[6] == 0
    sup.release()
    act = sup.action(here)
    assert np.allclose(act[:6], 0, atol=1e-6)  # still holding: release is not a command
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))
    assert sup.action(here)[2] == pytest.approx(1.0)


def test_without_the_operators_heartbeat_the_arm_holds_and_ignores_commands():
    """require_operator: no heartbeat yet, or none for operator_timeout_s -> hold like an e-stop,
    commands (the policy's and a lost operator's) ignored and counted; once the heartbeat is
    back, hold until the next command."""
    clock = FakeClock()
    sup = ArmSupervisor(LIMITS, BOX, clock=clock, operator_timeout_s=0.5)
    here = state_at([0.5, 0.0, 0.2])
    assert not sup.operator_present
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))  # before the teleop node is up: ignored
    act = sup.action(here)
    assert sup.mode == "operator_lost" and np.allclose(act[:6], 0, atol=1e-6)
    assert sup.counts["ignored_operator_lost"] == 1
    sup.operator_heartbeat()
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))
    assert sup.action(here)[2] == pytest.approx(1.0) and sup.mode == "velocity"
    sup.command_teleop(np.array([0, 0, -1.0, 0, 0, 0, 0]))
    sup.set_intervening(True)
    assert sup.action(here)[2] == pytest.approx(-1.0) and sup.mode == "teleop"
    clock.t = 0.4  # 4 periods: the heartbeat is still fresh (the watchdog stopped the old commands)
    sup.operator_heartbeat()
    clock.t = 0.95  # 0.55 s without a heartbeat: the teleop node is gone
    sup.command_velocity(np.array([1.0, 0, 0, 0, 0, 0]))
    sup.command_teleop(np.array([1.0, 0, 0, 0, 0, 0, 1.0]))
    sup.command_gripper(1.0)
    for drift in (0.0, 0.01):  # holds where the loss began, whatever it was told
        act = sup.action(state_at([0.5 + drift, 0.0, 0.2]))
        assert sup.mode == "operator_lost" and act[0] == pytest.approx(-drift / LIMITS.max_translation_m, abs=1e-4)
        assert act[6] == 0 and not sup.teleop_live
    assert sup.counts["ignored_operator_lost"] == 4 and sup.counts["operator_losses"] == 1  # the start is no loss
    sup.operator_heartbeat()  # back
    act = sup.action(here)
    assert sup.operator_present and sup.mode == "watchdog" and np.allclose(act[:6], 0, atol=1e-6)
    sup.command_velocity(np.array([0, 1.0, 0, 0, 0, 0]))
    assert sup.action(here)[1] == pytest.approx(1.0) and sup.mode == "velocity"
    assert ArmSupervisor(LIMITS, BOX).operator_present  # not required: always present
    with pytest.raises(ValueError, match="operator_timeout_s"):
        ArmSupervisor(LIMITS, BOX, operator_timeout_s=0.0)


def test_a_takeover_ends_with_its_episode_at_the_arm_and_the_actor():
    """After a reset, the arm and the actor take a takeover only once the teleop node has said
    "not intervening" since: one it published for the last episode and that arrives late (a
    loaded machine: the CI run where a new episode's first 3 steps were the old takeover's)
    neither drives the arm nor is flagged as a correction."""
    from types import SimpleNamespace

    from robot_rl.drivers.actor_io import Teleop

    clock = FakeClock()
    sup = ArmSupervisor(LIMITS, BOX, clock=clock)
    here = state_at([0.5, 0.0, 0.2])
    up = np.array([0, 0, 1.0, 0, 0, 0, 0])
    sup.command_teleop(up)
    sup.set_intervening(True)  # before any reset: the operator's
    assert sup.action(here)[2] == pytest.approx(1.0) and sup.mode == "teleop"
    sup.reset()
    sup.command_teleop(up)  # the last episode's takeover, late
    sup.set_intervening(True)
    sup.command_velocity(np.array([0, 0, -1.0, 0, 0, 0]))
    assert sup.action(here)[2] == pytest.approx(-1.0) and sup.mode == "velocity"  # the policy's
    sup.set_intervening(False)  # the teleop node's stand-down
    sup.set_intervening(True)
    sup.command_teleop(up)
    assert sup.action(here)[2] == pytest.approx(1.0) and sup.mode == "teleop"  # a takeover of this episode

    teleop, msg = Teleop(max_age_s=10.0), lambda data: SimpleNamespace(data=data)
    teleop.on_action(msg([0.0, 0, 1.0, 0, 0, 0, 0]))
    teleop.on_intervening(msg(True))
    assert teleop({}) is not None
    teleop.reset()
    teleop.on_intervening(msg(True))
    teleop.on_action(msg([0.0, 0, 1.0, 0, 0, 0, 0]))
    assert teleop({}) is None  # late, from the last episode
    teleop.on_intervening(msg(False))
    assert teleop({}) is None
    teleop.on_intervening(msg(True))
    np.testing.assert_allclose(teleop({}), [0, 0, 1.0, 0, 0, 0, 0])


def test_velocity_limits_and_workspace_box_clip_commands():
    sup = ArmSupervisor(LIMITS, BOX, clock=FakeClock())
    sup.command_velocity(np.array([5.0, -3.0, 0, 0, 0, 0.5]))
    act = sup.action(state_at([0.5, 0.0, 0.2]))
    assert act[0] == 1.0 and act[1] == -1.0 and act[5] == pytest.approx(0.5) and sup.counts["clipped_velocity"] == 1
    # 1 cm below the box's ceiling: a full step up is cut to the ceiling
    sup.command_velocity(np.array([0, 0, 1.0, 0, 0, 0]))
    act = sup.action(state_at([0.5, 0.0, 0.34]))
    assert act[2] == pytest.approx(0.01 / LIMITS.max_translation_m, rel=1e-3) and sup.counts["clipped_workspace"] == 1


def test_pose_command_moves_at_most_the_velocity_limit():
    sup = ArmSupervisor(LIMITS, BOX, clock=FakeClock())
    sup.command_pose(np.array([0.6, 0.0, 0.2]), np.array([0.0, 1.0, 0.0, 0.0]))
    far = sup.action(state_at([0.4, 0.0, 0.2]))
    assert far[0] == 1.0 and np.allclose(far[1:6], 0, atol=1e-6)
    near = sup.action(state_at([0.59, 0.0, 0.2]))
    assert near[0] == pytest.approx(0.01 / LIMITS.max_translation_m, rel=1e-3)
    sup.command_pose(np.array([0.9, 0.0, 0.2]), np.array([0.0, 1.0, 0.0, 0.0]))  # outside the box
    assert sup.action(state_at([0.69, 0.0, 0.2]))[0] == pytest.approx(0.01 / LIMITS.max_translation_m, rel=1e-3)


# ------------------------------------------------------------------------- messages (no DDS)
def test_image_messages_round_trip_and_reject_bad_ones():
    img = np.random.default_rng(0).integers(0, 255, (12, 16, 3), dtype=np.uint8)
    msg = msgs.image_to_msg(img, 1_700_000_000_123_456_789, "front")
    assert msg.encoding == "rgb8" and msgs.ns_from_stamp(msg.header.stamp) == 1_700_000_000_123_456_789
    assert np.array_equal(msgs.image_from_msg(msg, (12, 16)), img)
    bgr = msgs.image_to_msg(img[:, :, ::-1], 0)
    bgr.encoding = "bgr8"
    assert np.array_equal(msgs.image_from_msg(bgr), img)
    with pytest.raises(msgs.MessageError, match="expected 64x64"):
        msgs.image_from_msg(msg, (64, 64))
    mono = msgs.image_to_msg(img, 0)
    mono.encoding = "mono16"
    with pytest.raises(msgs.MessageError, match="encoding 'mono16'"):
        msgs.image_from_msg(mono)
    short = msgs.image_to_msg(img, 0)
    short.data = bytes(10)
    with pytest.raises(msgs.MessageError, match="10 bytes"):
        msgs.image_from_msg(short)


def test_commands_with_nan_are_rejected():
    tw = msgs.delta_to_twist(np.array([1.0, -0.5, 0, 0, 0, 1.0]), 0, 0.03, 0.15, 10.0)
    assert np.allclose(msgs.twist_to_delta(tw, 0.03, 0.15, 10.0), [1.0, -0.5, 0, 0, 0, 1.0])
    tw.twist.linear.x = float("nan")
    with pytest.raises(msgs.MessageError, match="NaN"):
        msgs.twist_to_delta(tw, 0.03, 0.15, 10.0)
    pose = PoseStamped()
    pose.pose.orientation.w = 0.0
    with pytest.raises(msgs.MessageError, match="zero quaternion"):
        msgs.pose_from_msg(pose)
    pose.pose.orientation.w, pose.pose.position.z = 1.0, float("inf")
    with pytest.raises(msgs.MessageError, match="NaN or inf"):
        msgs.pose_from_msg(pose)


def test_drop_counter_warns_at_a_bounded_rate():
    clock, warnings = FakeClock(), []
    drops = msgs.DropCounter(warnings.append, every_s=5.0, clock=clock)
    for i in range(100):
        clock.t = i * 0.1  # 10 s of bad input at 10 Hz
        drops.drop("image", "wrong size")
    assert drops.counts == {"image": 100} and len(warnings) == 2 and "(51 so far)" in warnings[1]


# -------------------------------------------------------------------------- sim camera / arm
def test_sim_camera_renders_what_the_arm_simulates():
    arm = SimArm("PickCube", seed=3)
    arm.reset()
    for _ in range(5):
        arm.apply(np.array([0.5, 0.2, -0.5, 0, 0, 0.3, 0], np.float32))
    camera = SimCamera("wrist", "PickCube", (32, 32))
    camera.set_scene(arm.scene_state(), 123)
    frame = camera.read()
    expected = arm.env.backend.render("wrist", 32, 32)
    assert frame.stamp_ns == 123 and np.array_equal(frame.image, expected)
    with pytest.raises(ValueError, match="scene state has"):
        camera.set_scene(np.zeros(3), 0)
    with pytest.raises(CameraError, match="no camera 'top'"):
        SimCamera("top")
    camera.close()
    arm.close()


class PressThroughTheArm:
    """``press_the_peg_onto_the_block``'s env, played through the arm backend as the arm node plays it."""

    def __init__(self, arm: SimArm):
        self.arm, self.unwrapped = arm, arm.env.unwrapped

    def reset(self, seed=None):
        self.arm.reset()
        return self.arm._obs, {}

    def step(self, action):
        faults = self.arm.counts["faults"]
        self.arm.apply(action)
        stopped = self.arm.counts["faults"] > faults
        return self.arm._obs, 0.0, stopped, False, {"reflex": stopped}


def test_the_sim_arm_stops_on_the_collision_reflex_and_says_so_as_a_franka_does():
    """arm_node collision_reflex:=true: a press on the block is the last period the twin's arm
    executes; its status says so as FrankaArm's does, which the actor reads as one reflex (its
    episode ends there, a failure); the arm stands through the next period and then takes commands
    again; a reset starts afresh. Without the reflex the same press goes on."""
    from types import SimpleNamespace

    from robot_rl.contract import ARM_STOPPED_BY_REFLEX
    from robot_rl.drivers.actor_io import ArmMode
    from robot_rl.drivers.arm_node import backend_faulted
    from robot_rl.drivers.node import status_json
    from tests.helpers.common import press_the_peg_onto_the_block

    def arm_status(status: dict):  # what arm/status carries, as the arm node publishes it
        return SimpleNamespace(data=status_json(mode="velocity", backend_fault=backend_faulted(status), backend=status))

    arm = SimArm("PegInsertHard", collision_reflex=True)
    assert arm.status() == {"backend": "sim", "connected": True, "collision_reflex": True,
                            "counts": {"faults": 0, "recoveries": 0}, "last_fault": None}
    mode = ArmMode(SimpleNamespace(warning=pytest.fail))
    mode.on_status(arm_status(arm.status()))  # the actor's first status
    assert mode.holds() == ""
    steps = list(press_the_peg_onto_the_block(PressThroughTheArm(arm)))
    assert len(steps) < 10 and steps[-1][4]["reflex"] and not arm.success
    status = arm.status()
    assert status["connected"] is False and status["counts"] == {"faults": 1, "recoveries": 0}
    assert status["last_fault"]["kind"] == ARM_STOPPED_BY_REFLEX and "collision reflex" in status["last_fault"]["message"]
    mode.on_status(arm_status(status))
    assert mode.holds() == ARM_STOPPED_BY_REFLEX and mode.holds() == "backend_fault"  # said once
    tcp = arm.state()[STATE_SLICES["tcp_pos"]].copy()
    up = np.array([0, 0, 1, 0, 0, 0, 0], np.float32)
    arm.apply(up)  # the period after the reflex: the arm stands while it recovers
    assert np.array_equal(arm.state()[STATE_SLICES["tcp_pos"]], tcp)
    assert arm.status()["connected"] is True and arm.status()["counts"] == {"faults": 1, "recoveries": 1}
    arm.apply(up)
    assert arm.state()[STATE_SLICES["tcp_pos"]][2] > tcp[2] + 0.005  # its commands run again
    steps = list(press_the_peg_onto_the_block(PressThroughTheArm(arm)))  # the next episode's press
    assert steps[-1][4]["reflex"] and arm.status()["counts"]["faults"] == 2
    arm.reset()
    assert arm.status()["connected"] is True and arm.status()["counts"] == {"faults": 2, "recoveries": 2}
    arm.close()

    arm = SimArm("PegInsertHard")
    steps = list(press_the_peg_onto_the_block(PressThroughTheArm(arm)))
    assert len(steps) == 10 and arm.status()["counts"]["faults"] == 0 and arm.status()["connected"] is True
    assert arm.state()[STATE_SLICES["ee_force"]][2] > 30.0  # pressing hard, unstopped
    arm.close()


def test_the_collision_reflex_of_the_arm_node_is_the_sim_twins_alone():
    from robot_rl.drivers.arm_node import ArmNodeConfig, make_backend
    from robot_rl.errors import InputError

    for backend in ("franka", "so101"):
        with pytest.raises(InputError, match=f"collision_reflex:=true is the sim twin's; arm backend {backend} "):
            make_backend(ArmNodeConfig(backend=backend, collision_reflex=True), None)
    with pytest.raises(InputError, match="the sim arm backend is the Panda's twin"):
        make_backend(ArmNodeConfig(task="PickCubeSO101", collision_reflex=True), None)


def test_crop_and_resize():
    img = np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3)
    assert crop_resize(img, parse_crop("8,16,32,32"), None).shape == (32, 32, 3)
    assert np.array_equal(crop_resize(img, (8, 16, 32, 32), None), img[8:40, 16:48])
    assert crop_resize(img, None, (24, 24)).shape == (24, 24, 3)
    with pytest.raises(CameraError, match="outside"):
        crop_resize(img, (40, 0, 32, 32), None)
    with pytest.raises(CameraError, match="top,left,height,width"):
        parse_crop("1,2,3")


# ------------------------------------------------------------------- RealSense, no camera
def software_realsense(width=64, height=48, fps=30):
    rs = pytest.importorskip("pyrealsense2", reason="pyrealsense2 (pip install robot-rl[realsense])")
    dev = rs.software_device()
    dev.register_info(rs.camera_info.serial_number, "000111222")
    sensor = dev.add_sensor("RGB Camera")
    intr = rs.intrinsics()
    intr.width, intr.height, intr.fx, intr.fy, intr.ppx, intr.ppy = width, height, 60.0, 60.0, width / 2, height / 2
    intr.model, intr.coeffs = rs.distortion.none, [0.0] * 5
    vs = rs.video_stream()
    vs.type, vs.index, vs.uid, vs.width, vs.height, vs.fps, vs.bpp = rs.stream.color, 0, 0, width, height, fps, 3
    vs.fmt, vs.intrinsics = rs.format.rgb8, intr
    profile = sensor.add_video_stream(vs)

    def inject(image: np.ndarray, number: int, device_ms: float):
        frame = rs.software_video_frame()
        frame.pixels, frame.bpp, frame.stride = np.ascontiguousarray(image), 3, width * 3
        frame.timestamp, frame.domain, frame.frame_number = device_ms, rs.timestamp_domain.hardware_clock, number
        frame.profile = profile.as_video_stream_profile()
        sensor.on_video_frame(frame)

    return dev, inject


def test_realsense_camera_reads_injected_frames_with_device_spacing():
    from robot_rl.drivers.camera import RealSenseCamera

    dev, inject = software_realsense()
    with pytest.raises(CameraError, match="no 640x480 colour stream at 30 fps"):
        RealSenseCamera(width=640, height=480, fps=30, device=dev)
    cam = RealSenseCamera(width=64, height=48, fps=30, crop="0,8,48,48", size=(24, 24), device=dev)
    images = [np.full((48, 64, 3), 20 * i, np.uint8) for i in range(4)]
    stamps = []
    for i, img in enumerate(images):
        inject(img, i, 5000.0 + 33.0 * i)
        frame = cam.read(timeout_s=2.0)
        assert frame.number == i and frame.image.shape == (24, 24, 3) and frame.image[0, 0, 0] == 20 * i
        stamps.append(frame.stamp_ns)
        time.sleep(0.031)  # the device's frame period, less reading time
    # device spacing, shortened only when a frame arrives sooner than any before (a better offset)
    spacing = np.diff(stamps) / 1e6
    assert np.all(spacing <= 33.0 + 1e-3) and np.all(spacing >= 33.0 - 10.0)
    assert abs(stamps[-1] - time.time_ns()) < 1e9
    fx, fy, cx, cy = cam.camera_info_intrinsics()
    assert fx == pytest.approx(30.0) and cx == pytest.approx((32 - 8) / 2)
    cam.close()


@pytest.mark.ros
def test_realsense_frames_reach_a_ros_topic():
    from robot_rl.drivers.camera import RealSenseCamera
    from robot_rl.drivers.camera_node import CameraNode

    dev, inject = software_realsense()
    domain = free_domain_id()
    probe = Probe(domain)
    images = probe.subscribe(Image, topics.camera_image("wrist"), topics.qos_sensor(10))
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain,
               args=["--ros-args", "-p", "name:=wrist", "-p", "backend:=realsense", "-p", "height:=48",
                     "-p", "width:=64"])
    camera = RealSenseCamera(width=64, height=48, fps=30, device=dev)
    node = CameraNode(camera=camera, context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        probe.spin_until(lambda: node.pub_image.get_subscription_count() > 0
                         and probe.node.count_publishers(topics.camera_image("wrist")) > 0, 30, "discovery")
        sent = [np.random.default_rng(i).integers(0, 255, (48, 64, 3), dtype=np.uint8) for i in range(5)]
        for i, img in enumerate(sent):
            inject(img, i, 1000.0 + 33.3 * i)
            probe.spin_for(0.1)
        probe.spin_until(lambda: len(images) >= 5, 10, "5 images")
        got = [m for _, m in images[-5:]]
        assert all(m.encoding == "rgb8" and (m.height, m.width) == (48, 64) and m.header.frame_id == "wrist" for m in got)
        assert np.array_equal(msgs.image_from_msg(got[-1]), sent[-1])
        stamps = [msgs.ns_from_stamp(m.header.stamp) for m in got]
        assert all(b > a for a, b in zip(stamps, stamps[1:]))
    finally:
        executor.shutdown()
        node.close()
        node.destroy_node()
        context.try_shutdown()
        spinner.join(5)
        probe.close()


# -------------------------------------------------------------------- nodes over real DDS
@pytest.fixture
def sim_cell(tmp_path):
    domain = free_domain_id()
    with node_process("robot_rl.drivers.arm_node", {"seed": 1}, domain, tmp_path) as arm, \
            node_process("robot_rl.drivers.camera_node", {"name": "front", "height": 32, "width": 32}, domain,
                         tmp_path, "camera_front") as cam:
        probe = Probe(domain)
        try:
            yield probe, (arm, cam), tmp_path
        finally:
            probe.close()


def z_of(poses) -> float:
    return poses[-1][1].pose.position.z


def status_of(status) -> dict:
    return json.loads(status[-1][1].data) if status else {}


def zs_after(poses, mark: int) -> np.ndarray:
    return np.array([m.pose.position.z for _, m in poses[mark:]])


@pytest.mark.ros
def test_sim_arm_and_camera_nodes_over_ros(sim_cell):
    probe, (arm, cam), logs = sim_cell
    poses = probe.subscribe(PoseStamped, topics.TCP_POSE, topics.qos_sensor(50))
    images = probe.subscribe(Image, topics.camera_image("front"), topics.qos_sensor(50))
    status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
    probe.spin_until(lambda: len(poses) > 5 and len(images) > 5, 60, "arm state and camera frames")
    img = images[-1][1]
    assert (img.height, img.width, img.encoding) == (32, 32, "rgb8")
    # the control path at its default priority, realtime: each node's threads SCHED_FIFO, none at
    # normal priority (a renderer may put a background queue of its own at SCHED_BATCH), where this
    # user may; otherwise each node said why in one warning
    for proc, log in ((arm, "arm_node.log"), (cam, "camera_front.log")):
        if realtime_allowed():
            policies = thread_policies(proc.pid)
            assert os.SCHED_FIFO in policies and os.SCHED_OTHER not in policies, (log, policies)
        else:
            assert "may not use real-time scheduling" in (logs / log).read_text()
    # frames are stamped with the scene instant they show, which the arm published
    pose_stamps = {msgs.ns_from_stamp(m.header.stamp) for _, m in poses}
    assert abs(msgs.ns_from_stamp(img.header.stamp) - min(pose_stamps, key=lambda s: abs(s - msgs.ns_from_stamp(img.header.stamp)))) < 1e6

    velocity = probe.node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)
    up = msgs.delta_to_twist(np.array([0, 0, 1.0, 0, 0, 0]), 0, LIMITS.max_translation_m, LIMITS.max_rotation_rad, 10)
    z0 = z_of(poses)
    probe.spin_until(lambda: z_of(poses) > z0 + 0.05, 60, "the arm to rise 5 cm",
                     between=lambda: velocity.publish(up))
    # watchdog: silence -> the arm says it holds, and from then on the pose stays put
    probe.spin_until(lambda: status_of(status).get("mode") == "watchdog", 30, "watchdog status")
    mark = len(poses)
    probe.spin_until(lambda: len(poses) >= mark + 20, 30, "20 poses after the watchdog status")
    # one pose per arm tick: settling is counted in ticks, not seconds; on a loaded machine poses
    # published before the hold can still be on their way when the status arrives, so the test
    # reads the last 10 of the 20 as the held pose
    held = zs_after(poses, mark)
    assert np.ptp(held) < LIMITS.max_translation_m  # no further than the motion in flight...
    assert np.ptp(held[-10:]) < 1e-3 and status_of(status)["counts"]["watchdog_holds"] >= 1  # ...then put

    # e-stop latches: commands are ignored until released
    estop = probe.node.create_publisher(Bool, topics.ESTOP, topics.qos_latched())
    estop.publish(Bool(data=True))
    probe.spin_until(lambda: status_of(status)["estopped"], 30, "e-stop status")
    down = msgs.delta_to_twist(np.array([0, 0, -1.0, 0, 0, 0]), 0, LIMITS.max_translation_m, LIMITS.max_rotation_rad, 10)
    z_stop, mark = z_of(poses), len(poses)
    probe.spin_until(lambda: len(poses) >= mark + 10 and status_of(status)["counts"]["ignored_estopped"] > 0, 30,
                     "commands ignored while e-stopped", between=lambda: velocity.publish(down))
    assert np.all(np.abs(zs_after(poses, mark) - z_stop) < 2e-3)
    assert probe.call(Trigger, topics.RESET).success is False  # no reset while e-stopped
    estop.publish(Bool(data=False))  # not a release
    ticks = status_of(status)["ticks"]
    probe.spin_until(lambda: status_of(status)["ticks"] > ticks, 30, "the arm's next status")
    assert status_of(status)["estopped"] is True
    assert probe.call(Trigger, topics.RELEASE_ESTOP).success
    probe.spin_until(lambda: z_of(poses) < z_stop - 0.05, 60, "the arm to go down after release",
                     between=lambda: velocity.publish(down))
    assert probe.call(Trigger, topics.RESET).success


SLOW_RESET_ARM = """
import threading
from std_msgs.msg import Empty
from robot_rl.drivers import arm_node
from robot_rl.drivers.node import run

estopped = threading.Event()


class SlowResetArm(arm_node.ArmNode):
    \"\"\"A reset that lasts until the e-stop has been taken (a real arm's reset is seconds of motion).\"\"\"

    def on_estop(self, msg):
        super().on_estop(msg)
        estopped.set()

    def on_reset(self, request, response):
        if not hasattr(self, "started"):
            self.started = self.create_publisher(Empty, "test/reset_started", 10)
        self.started.publish(Empty())
        estopped.wait(60)  # only a failing run waits this out
        return super().on_reset(request, response)


run(SlowResetArm)
"""


@pytest.mark.ros
def test_the_arm_takes_the_e_stop_while_a_reset_is_still_running(tmp_path):
    """The e-stop must act during a reset's motion (seconds on a real arm): the arm node's own
    callbacks are busy with the reset, so the e-stop has a node and a thread of its own. Here
    the reset goes on only once the e-stop is in: it is refused (e-stopped) instead of hanging."""
    (tmp_path / "slow_reset_arm.py").write_text(SLOW_RESET_ARM)
    domain = free_domain_id()
    path = os.pathsep.join([str(tmp_path), *sys.path])  # the node imports the script, and all we import
    with node_process("slow_reset_arm", {"seed": 1}, domain, tmp_path, env={"PYTHONPATH": path}) as arm:
        probe = Probe(domain)
        try:
            status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
            started = probe.subscribe(Empty, "test/reset_started", 10)
            client = probe.node.create_client(Trigger, topics.RESET)
            probe.spin_until(lambda: status and client.service_is_ready(), 60, "the arm's status and reset service")
            reply = client.call_async(Trigger.Request())
            probe.spin_until(lambda: started, 60, "the reset under way")
            estop = probe.node.create_publisher(Bool, topics.ESTOP, topics.qos_latched())
            estop.publish(Bool(data=True))
            probe.spin_until(reply.done, 120, "the reset's reply")
            assert reply.result().success is False
            assert reply.result().message.startswith(topics.RESET_REFUSED_ESTOP), reply.result().message
            probe.spin_until(lambda: status_of(status)["estopped"], 30, "e-stop status")
            assert arm.poll() is None
        finally:
            probe.close()


@pytest.mark.ros
def test_malformed_commands_never_crash_the_arm(sim_cell):
    probe, (arm, cam), logs = sim_cell
    status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
    poses = probe.subscribe(PoseStamped, topics.TCP_POSE, topics.qos_sensor(50))
    probe.spin_until(lambda: len(poses) > 3, 60, "arm state")
    velocity = probe.node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)
    pose_pub = probe.node.create_publisher(PoseStamped, topics.POSE_COMMAND, 10)
    gripper = probe.node.create_publisher(Float32, topics.GRIPPER_COMMAND, 10)
    nan_twist = TwistStamped()
    nan_twist.twist.linear.x = float("nan")
    zero_quat = PoseStamped()
    zero_quat.pose.orientation.w = 0.0
    huge = msgs.delta_to_twist(np.array([50.0, 0, 0, 0, 0, 0]), 0, LIMITS.max_translation_m, LIMITS.max_rotation_rad, 10)
    for _ in range(5):
        velocity.publish(nan_twist)
        pose_pub.publish(zero_quat)
        gripper.publish(Float32(data=float("inf")))
        probe.spin_for(0.05)
    velocity.publish(huge)
    probe.spin_until(lambda: status and status_of(status)["dropped"].get("velocity command", 0) >= 5
                     and status_of(status)["counts"]["clipped_velocity"] >= 1, 30, "dropped and clipped counts")
    report = status_of(status)
    assert report["dropped"]["pose command"] >= 5 and report["dropped"]["gripper command"] >= 5
    assert arm.poll() is None and cam.poll() is None
    assert "dropped velocity command" in (logs / "arm_node.log").read_text()


@pytest.mark.ros
def test_the_operators_action_runs_first_and_the_arm_reports_it(sim_cell):
    """While teleop/intervening, the arm executes teleop/action whatever the policy commands,
    and says so on arm/applied_action; malformed teleop actions are dropped and counted."""
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    probe, (arm, _), _ = sim_cell
    status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
    applied = probe.subscribe(Float64MultiArray, topics.APPLIED_ACTION, topics.qos_sensor(50))
    poses = probe.subscribe(PoseStamped, topics.TCP_POSE, topics.qos_sensor(50))
    probe.spin_until(lambda: len(poses) > 3, 60, "arm state")
    velocity = probe.node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)
    teleop = probe.node.create_publisher(Float32MultiArray, topics.TELEOP_ACTION, topics.qos_sensor())
    intervening = probe.node.create_publisher(Bool, topics.TELEOP_INTERVENING, 10)
    down = msgs.delta_to_twist(np.array([0.0, 0, -0.5, 0, 0, 0]), 0, LIMITS.max_translation_m,
                               LIMITS.max_rotation_rad, 10)
    up = Float32MultiArray(data=[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])

    def operator_and_policy(intervene: bool) -> None:
        velocity.publish(down)
        if intervene:
            teleop.publish(up)
        intervening.publish(Bool(data=intervene))

    def drive(intervene: bool, condition, what: str) -> None:
        probe.spin_until(condition, 60, what, between=lambda: operator_and_policy(intervene))

    start_z, mark = z_of(poses), len(applied)
    # the policy says down, the operator says up: up it goes, and the arm says whose action it ran
    drive(True, lambda: z_of(poses) > start_z + 0.02 and sum(m.data[8] == 1.0 and m.data[3] > 0.9
                                                             for _, m in applied[mark:]) >= 3, "the operator's ticks")
    for _ in range(3):
        teleop.publish(Float32MultiArray(data=[float("nan")] * 7))
        teleop.publish(Float32MultiArray(data=[1.0, 2.0]))
        probe.spin_for(0.05)
    # hands off: from the first tick that ran the policy's command on, only the policy's
    mark = len(applied)
    drive(False, lambda: any(m.data[8] == 0.0 for _, m in applied[mark:]), "the policy's command again")
    first = mark + next(i for i, (_, m) in enumerate(applied[mark:]) if m.data[8] == 0.0)
    drive(False, lambda: sum(m.data[3] < 0 for _, m in applied[first:]) >= 5, "5 ticks of the policy's down")
    assert all(m.data[8] == 0.0 for _, m in applied[first:])
    probe.spin_until(lambda: json.loads(status[-1][1].data)["dropped"].get("teleop action", 0) >= 6, 10,
                     "dropped teleop actions")
    assert arm.poll() is None


@pytest.mark.ros
def test_malformed_frames_poses_and_episodes_are_dropped_and_counted(tmp_path):
    """The actor's observation assembly and the recorder take bad messages without crashing:
    each is dropped, counted, and warned about at a bounded rate."""
    from std_msgs.msg import Float64MultiArray, UInt8MultiArray

    from robot_rl.drivers.recorder_node import RecorderNode
    from robot_rl.drivers.ros_env import RosArmEnv
    from robot_rl.runtime.wire import encode

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=free_domain_id(),
               args=["--ros-args", "-p", f"path:={tmp_path / 'online.zarr'}", "-p", "cameras:=[front]",
                     "-p", "image_size:=[32,32]"])
    warnings = []
    try:
        node = rclpy.node.Node("actor_under_test", context=context)
        env = RosArmEnv(node, "PickCube", ("front",), (32, 32), sim=True, privileged=True, log=warnings.append)
        on_front = env._image_callback("front")
        good = msgs.image_to_msg(np.zeros((32, 32, 3), np.uint8), 5)
        wrong_size = msgs.image_to_msg(np.zeros((24, 32, 3), np.uint8), 5)
        mono = msgs.image_to_msg(np.zeros((32, 32, 3), np.uint8), 5)
        mono.encoding = "mono8"
        for bad in (wrong_size, mono):
            on_front(bad)
        assert "front" not in env.assembler.frames and env.drops.counts["camera front image"] == 2
        on_front(good)
        assert env.assembler.frames["front"][0] == 5
        env._on_objects(Float64MultiArray(data=[1.0] + [float("nan")] * 7))
        env._on_objects(Float64MultiArray(data=[1.0, 2.0]))
        assert env.drops.counts["object poses"] == 2 and env.assembler.privileged is None
        assert len(warnings) == 2 and "expected 32x32" in warnings[0]  # one per reason, rate-limited

        recorder = RecorderNode(context=context)
        recorder.on_episode(UInt8MultiArray(data=b"not a wire frame"))
        recorder.on_episode(UInt8MultiArray(data=encode("episode", {"action": np.zeros((3, 7), np.float32)}, None)))
        assert recorder.drops.counts["episode"] == 2 and len(recorder.store) == 0
        # a refused episode is handled all the same: its sender hears of it and stops waiting
        from robot_rl.drivers.actor_io import RecorderReceipts

        receipts, other = RecorderReceipts("/actor:12"), RecorderReceipts("/robot2/actor:13")
        publish = recorder.pub_status.publish
        recorder.pub_status.publish = lambda msg: (receipts.on_status(msg), other.on_status(msg), publish(msg))
        assert not receipts.wait_for(1, timeout_s=0)
        for seq in (0, 1):
            bad = encode("episode", {"action": np.zeros((3, 7), np.float32)}, {"sender": "/actor:12", "seq": seq})
            recorder.on_episode(UInt8MultiArray(data=bad))
        assert recorder.drops.counts["episode"] == 4 and recorder.handled == {"/actor:12": 1}
        assert receipts.handled == 1 and receipts.wait_for(2, timeout_s=0) and not receipts.wait_for(3, timeout_s=0)
        assert other.handled == -1 and other.wait_for(0, timeout_s=0)  # nothing sent: nothing to wait for
        assert not receipts.wait_for(3, timeout_s=600, cancelled=lambda: True)  # shutting down: no waiting
        receipts.on_status(String(data="not json"))
        receipts.on_status(String(data='{"handled": {"/actor:12": "many"}}'))
        assert receipts.handled == 1
        recorder.destroy_node()
        node.destroy_node()
    finally:
        context.try_shutdown()


def test_observation_assembler_rejects_stale_frames_with_a_reason():
    from robot_rl.drivers.ros_env import ObservationAssembler

    asm = ObservationAssembler({"front": (8, 8)}, None, max_frame_lag_ns=50_000_000, sim_success=False)
    pose, twist, wrench = PoseStamped(), TwistStamped(), msgs.WrenchStamped()
    pose.pose.orientation.w = 1.0
    t = 10_000_000_000
    with asm.lock:
        assert asm.observation(0)[1].startswith("no arm state yet")
    for kind, value in (("pose", pose), ("twist", twist), ("wrench", wrench), ("width", 0.04)):
        asm.put(kind, t, value)
    with asm.lock:
        assert asm.observation(0)[1] == "no frame from camera front yet"
    asm.put("front", t - 120_000_000, np.zeros((8, 8, 3), np.uint8))  # 120 ms before the arm state
    with asm.lock:
        obs, reason = asm.observation(0)
    assert obs is None and reason == "stale frame from camera front: 120 ms older than the arm state (limit 50 ms)"
    asm.put("front", t - 30_000_000, np.ones((8, 8, 3), np.uint8))
    with asm.lock:
        obs, _ = asm.observation(0)
        assert obs["images"]["front"][0, 0, 0] == 1 and obs["state"][13] == pytest.approx(0.04)
        assert asm.observation(t)[1] == "waiting for the arm's next control tick"  # nothing newer than t yet


class FakeTime:
    """Stands in for the ``time`` module of ros_env: wall-clock readings and sleeps on a clock
    the test controls (monotonic stays real: it only bounds waits)."""

    monotonic = staticmethod(time.monotonic)

    def __init__(self):
        self.ns = 1_700_000_000_000_000_000
        self.sleeps: list[float] = []

    def time_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.ns / 1e9

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ns += int(round(seconds * 1e9))


@pytest.mark.ros
def test_commands_leave_a_fixed_latency_after_their_arm_tick_and_late_ones_are_counted(monkeypatch):
    """With command_latency_s the actor holds each command until its observation's arm tick +
    the latency (a constant delay, a regular rate); a policy later than that sends at once and
    the miss is counted. The latency must fit in one control period."""
    from robot_rl.drivers import ros_env
    from robot_rl.drivers.ros_env import RosArmEnv

    clock = FakeTime()
    monkeypatch.setattr(ros_env, "time", clock)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=free_domain_id())
    try:
        node = rclpy.node.Node("actor_latency_under_test", context=context)
        with pytest.raises(ValueError, match="must lie in"):
            RosArmEnv(node, "PickCube", sim=False, command_latency_s=0.1)
        env = RosArmEnv(node, "PickCube", sim=False, command_latency_s=0.03)
        pose = PoseStamped()
        pose.pose.orientation.w = 1.0

        def next_tick(stamp_ns):  # the arm's state of the next tick, already there
            for kind, value in (("pose", pose), ("twist", TwistStamped()), ("wrench", msgs.WrenchStamped()),
                                ("width", 0.04)):
                env.assembler.put(kind, stamp_ns, value)

        tick = clock.ns
        env._last_stamp = env._obs_stamp = tick  # the observation the action is for
        next_tick(tick + 1)
        env.step(np.zeros(7, np.float32))
        assert clock.sleeps == [pytest.approx(0.03)]  # held until the tick + 30 ms, then sent
        assert env.command_times[-1] * 1e9 == pytest.approx(tick + 30_000_000, abs=1e3)
        assert env.command_latency_misses == 0

        late_tick = clock.ns - 50_000_000  # the policy took 50 ms: past the 30 ms mark
        env._last_stamp = env._obs_stamp = late_tick
        next_tick(late_tick + 1)
        before = clock.ns
        env.step(np.zeros(7, np.float32))
        assert len(clock.sleeps) == 1 and env.command_times[-1] * 1e9 == pytest.approx(before, abs=1e3)  # at once
        assert env.command_latency_misses == 1
        node.destroy_node()
    finally:
        context.try_shutdown()

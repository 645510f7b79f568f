"""The SO-101 (issue 47): the Feetech protocol (drivers/feetech.py), the simulated arm on a
pseudo-terminal (drivers/so101_sim.py) as Feetech's own SDK sees it, the calibration file, and
the backend (drivers/so101.py): the contract's motion, and each fault stopping the arm in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robot_rl.drivers import feetech as ft
from robot_rl.errors import InputError


# ------------------------------------------------------------------ the protocol
def test_packets_carry_their_checksum_and_corrupt_ones_are_skipped():
    ping = ft.instruction(3, ft.PING)
    assert ping == bytes([0xFF, 0xFF, 3, 2, 1, (~(3 + 2 + 1)) & 0xFF])
    read = ft.instruction(1, ft.READ, bytes([56, 2]))
    bad = bytearray(ft.instruction(2, ft.READ, bytes([56, 2])))
    bad[-1] ^= 0xFF
    reader = ft.PacketReader()
    stream = b"\x00" + read + bytes(bad) + ping
    for i in range(0, len(stream), 3):  # arriving in pieces, as a serial port delivers them
        reader.feed(stream[i:i + 3])
    packets = [p for p in reader.packets()]
    reader.feed(b"")
    packets += list(reader.packets())
    assert [(p.servo_id, p.code, p.params) for p in packets] == [(1, ft.READ, bytes([56, 2])), (3, ft.PING, b"")]
    assert reader.corrupt == 1


def test_registers_with_a_sign_bit_round_trip():
    for name, value in (("Present_Velocity", -1234), ("Present_Load", -512), ("Homing_Offset", -2000),
                        ("Goal_Position", 4095), ("Present_Position", 0)):
        assert ft.decode(name, ft.encode(name, value)) == value
    assert ft.encode("Present_Load", -1) == bytes([1, 4])  # bit 10: the direction
    assert ft.error_names(0x24) == ["overheat", "overload"]


# ------------------------------------------------------------------ calibration
def lerobot_calibration(**changes) -> dict:
    """An SO-101 calibration as LeRobot writes it (so101_follower.json)."""
    data = {name: {"id": i + 1, "drive_mode": 0, "homing_offset": 100 * i - 250, "range_min": 800 + 10 * i,
                   "range_max": 3300 - 10 * i} for i, name in enumerate(("shoulder_pan", "shoulder_lift", "elbow_flex",
                                                                          "wrist_flex", "wrist_roll", "gripper"))}
    data.update(changes)
    return data


def test_a_lerobot_calibration_file_reads_and_writes_back_the_same(tmp_path):
    from robot_rl.drivers.so101_bus import So101Calibration

    path = tmp_path / "so101_follower.json"
    path.write_text(json.dumps(lerobot_calibration()))
    calibration = So101Calibration.load(path)
    assert calibration.ids == [1, 2, 3, 4, 5, 6] and calibration.motors["elbow_flex"].homing_offset == -50
    out = tmp_path / "written.json"
    calibration.write(out)
    assert json.loads(out.read_text()) == lerobot_calibration()
    limits = np.array([[-1.9, 1.9], [-1.7, 1.7], [-1.7, 1.7], [-1.6, 1.6], [-2.8, 2.8], [-0.17, 1.75]])
    q = np.array([0.3, -0.2, 0.5, -0.1, 1.0, 0.4])
    back = calibration.to_radians(calibration.to_ticks(q, limits).astype(float), limits)
    assert np.abs(back - q).max() < 2 * np.pi / 4096 * 2


@pytest.mark.parametrize("change, says", [
    (lambda d: d.pop("wrist_roll"), "motors ['wrist_roll'] are missing (an SO-101 has"),
    (lambda d: d.update({"waist": d.pop("shoulder_pan")}), "motors ['waist'] are not an SO-101's"),
    (lambda d: d["gripper"].update(id=1), "motor ids [1, 2, 3, 4, 5, 1] are not distinct"),
    (lambda d: d["elbow_flex"].update(range_min=3000, range_max=1000), "elbow_flex: range_min 3000 .. range_max 1000"),
    (lambda d: d["elbow_flex"].pop("homing_offset"), "elbow_flex: needs integer id, drive_mode, homing_offset"),
])
def test_a_calibration_for_another_arm_or_with_missing_motors_is_one_line(tmp_path, change, says):
    from robot_rl.drivers.so101_bus import So101Calibration

    data = lerobot_calibration()
    change(data)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        So101Calibration.load(path)
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InputError, match="no such file"):
        So101Calibration.load(tmp_path / "none.json")


# ------------------------------------------------------------------ the simulated arm and the SDK
scs = pytest.importorskip("scservo_sdk", reason="Feetech's SDK (pip install robot-rl[so101])")


@pytest.fixture
def bus(tmp_path):
    """The simulated SO-101 in its own process, as a real arm is another device."""
    from robot_rl.drivers.so101_sim import SimulatedSo101Process

    with SimulatedSo101Process(tmp_path / "arm") as simulated:
        yield simulated


def sdk(port):
    from scservo_sdk import port_handler

    port_handler.LATENCY_TIMER = 100  # the simulated bus shares a loaded machine's cores (So101Bus sets it too)
    handler = scs.PortHandler(port)
    assert handler.openPort() and handler.setBaudRate(1_000_000)
    return handler, scs.PacketHandler(0)


def test_the_sdk_pings_reads_and_writes_the_simulated_servos(bus):
    port, packets = sdk(bus.port)
    try:
        for sid in range(1, 7):
            for _ in range(20):  # a simulated bus starved by a loaded machine answers late: ask again
                port.ser.reset_input_buffer()
                try:
                    model, result, error = packets.ping(port, sid)
                except (IndexError, ValueError):  # the SDK misparses a torn reply
                    model, result, error = 0, scs.COMM_RX_CORRUPT, 0
                if result == scs.COMM_SUCCESS:
                    break
            assert (model, result, error) == (ft.STS3215_MODEL, scs.COMM_SUCCESS, 0)
        port.ser.reset_input_buffer()
        assert packets.ping(port, 9)[1] == scs.COMM_RX_TIMEOUT  # no servo 9 on this bus
        # an arm never calibrated (homing offsets 0) reads its encoders' raw ticks
        reader = scs.GroupSyncRead(port, packets, 56, 2)
        for sid in range(1, 7):
            reader.addParam(sid)
        before = bus.raw_ticks(bus.joints()) % 4096  # the limp arm may be settling under gravity meanwhile
        assert any(reader.txRxPacket() == scs.COMM_SUCCESS for _ in range(3))  # a reply lost under load: again
        after = bus.raw_ticks(bus.joints()) % 4096
        ticks = np.array([ft.decode("Present_Position", bytes(reader.data_dict[s])) for s in range(1, 7)])
        assert np.all((ticks >= np.minimum(before, after) - 2) & (ticks <= np.maximum(before, after) + 2))
        # torque on and a goal 0.6 rad further for the elbow: the joint goes there. The limp arm is
        # held by hand first (it may still be sagging) and the goal taken from the pose it is held at
        elbow = 3
        held = bus.joints()
        bus.hold_by_hand(held)
        start = held[elbow - 1]
        goal = int(bus.raw_ticks(held)[elbow - 1] % 4096 + round(0.6 * ft.TICKS_PER_RAD))
        assert packets.write1ByteTxRx(port, elbow, 40, 1)[0] == scs.COMM_SUCCESS
        writer = scs.GroupSyncWrite(port, packets, 42, 2)
        writer.addParam(elbow, list(ft.encode("Goal_Position", goal)))
        assert writer.txPacket() == scs.COMM_SUCCESS
        bus.hold_by_hand(None)  # let go: the servo drives the joint to its goal
        assert wait_for(bus, lambda: abs(bus.joints()[elbow - 1] - start - 0.6) < 0.01), (start, bus.joints())
        model, result, error = packets.read1ByteTxRx(port, elbow, 40)
        assert (model, result) == (1, scs.COMM_SUCCESS)
    finally:
        port.closePort()


def wait_for(bus, condition, ticks: int = 1000) -> bool:
    """Poll ``condition`` while the simulated arm moves, each poll after the physics' next steps
    (at least 4 ms of simulated time: 1,000 polls give the arm 4 s however loaded the machine is)."""
    for _ in range(ticks):
        if condition():
            return True
        bus.tick()
    return condition()


# ------------------------------------------------------------------ the backend
HOME_QUAT = (0.0, 1.0, 0.0, 0.0)
START = (0.15, -0.05, 0.1)  # a corner of the 10 cm square in front of the arm


def so101_arm(bus, calibration=None, **settings):
    from robot_rl.contract import SafetyBox
    from robot_rl.drivers.so101 import So101Arm, So101Settings
    from robot_rl.drivers.so101_bus import So101Calibration

    box = SafetyBox(low=(0.1, -0.1, 0.01), high=(0.25, 0.1, 0.2), max_rotation_rad=(0.3, 0.3, 1.0))
    settings.setdefault("latency_timer_ms", 100.0)  # the simulated bus shares a loaded machine's cores
    return So101Arm(So101Settings(port=bus.port, **settings), calibration or So101Calibration.from_dict(bus.calibration()),
                    box,
                    lambda rng: (START, HOME_QUAT))


def settle(arm, reads: int = 100) -> np.ndarray:
    """The state once the TCP is at rest (each read waits on the bus's replies)."""
    from robot_rl.contract import STATE_SLICES

    for _ in range(reads):
        state = arm.state()
        if np.linalg.norm(state[STATE_SLICES["tcp_linvel"]]) < 0.002:
            break
    return state


def test_a_10_cm_square_at_full_action_ends_each_corner_within_3_mm(bus):
    """The contract's displacements, open loop: each side 3 full-action periods (3 cm each) and
    one of a third, then the arm at rest: every corner within 3 mm of where the actions add up to."""
    import threading

    from robot_rl.contract import STATE_SLICES

    arm = so101_arm(bus)
    period = threading.Event()
    try:
        state = arm.reset()
        start = state[STATE_SLICES["tcp_pos"]].astype(float)
        assert np.linalg.norm(start - START) < 0.003, start
        np.testing.assert_allclose(np.abs(state[STATE_SLICES["tcp_quat"]]), HOME_QUAT, atol=0.02)
        corner, errors = start.copy(), []
        for direction in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            for scale in (1.0, 1.0, 1.0, 1 / 3):
                action = np.zeros(7)
                action[:2] = np.array(direction) * scale
                arm.state()
                arm.apply(action)
                period.wait(0.1)  # the control period, as the arm node's timer paces it
            corner[:2] += np.array(direction) * 0.1
            reached = settle(arm)[STATE_SLICES["tcp_pos"]]
            errors.append(float(np.linalg.norm(reached - corner)))
        assert max(errors) < 0.003, errors
        assert arm.counts["ik_misses"] == 0 and arm.fault is None
    finally:
        arm.close()


def test_a_port_that_is_missing_or_busy_and_a_box_out_of_reach_are_one_line_before_the_arm_moves(bus, tmp_path):
    from robot_rl.contract import SafetyBox
    from robot_rl.drivers.so101 import So101Arm, So101Settings
    from robot_rl.drivers.so101_bus import So101Calibration, So101Error

    calibration = So101Calibration.from_dict(bus.calibration())
    box = SafetyBox(low=(0.1, -0.1, 0.01), high=(0.25, 0.1, 0.2))
    with pytest.raises(So101Error, match=r"serial port /dev/ttyACM9 does not exist \(is the arm's USB cable in"):
        So101Arm(So101Settings(port="/dev/ttyACM9"), calibration, box, lambda rng: (START, HOME_QUAT))
    arm = so101_arm(bus)
    try:
        with pytest.raises(So101Error, match=f"serial port {bus.port} is busy: another process holds it"):
            so101_arm(bus)
    finally:
        arm.close()
    far = SafetyBox(low=(0.1, -0.1, 0.01), high=(0.6, 0.1, 0.2))
    with pytest.raises(InputError, match=r"workspace box corner \[0.6, -0.1, 0.01\] is out of the SO-101's reach"):
        So101Arm(So101Settings(port=bus.port), calibration, far, lambda rng: (START, HOME_QUAT))


def test_a_servo_that_answers_late_is_pinged_until_the_connect_timeout(bus, monkeypatch):
    """A simulated arm still starting when its port appears (its servo silent a moment): the bus
    pings it on for ``answer_within_s`` and connects once it answers; without that time, one
    line naming the servo."""
    import threading

    from robot_rl.drivers import so101_bus
    from robot_rl.drivers.so101_bus import So101Bus, So101Error

    monkeypatch.setattr(so101_bus, "CONNECT_TRIES", 1)  # the time bound alone decides here
    bus.silence(1)
    with pytest.raises(So101Error, match=r"servo 1 \(shoulder_pan\) does not answer on"):
        So101Bus(bus.port, [1, 2, 3, 4, 5, 6], latency_timer_ms=100)
    answers = threading.Timer(0.5, bus.silence, (1, False))  # it starts answering while the bus pings
    answers.start()
    try:
        connected = So101Bus(bus.port, [1, 2, 3, 4, 5, 6], latency_timer_ms=100, answer_within_s=120)
        connected.close()
    finally:
        answers.cancel()


def test_waiting_for_the_servos_replies_blocks_in_the_kernel_instead_of_spinning(bus):
    """Feetech's SDK reads its port with a zero timeout, so a reply is waited for by spinning a
    core; the bus's reads block for the bytes. Waiting out a silent servo's whole packet timeout
    takes at most that timeout over ``READ_BLOCK_S`` reads (each empty one blocked that long); a
    busy-wait makes thousands."""
    from scservo_sdk import port_handler

    from robot_rl.drivers.so101_bus import READ_BLOCK_S, So101Bus

    connected = So101Bus(bus.port, [1, 2, 3, 4, 5, 6], latency_timer_ms=100)
    reads = []
    read_port = connected.port.readPort

    def counted(length):
        data = read_port(length)
        reads.append(len(data))
        return data

    connected.port.readPort = counted
    try:
        assert connected.packets.ping(connected.port, 3)[1] == connected.scs.COMM_SUCCESS and sum(reads) > 0
        bus.silence(3)
        reads.clear()
        result = connected.packets.ping(connected.port, 3)[1]
    finally:
        connected.close()
    assert result == connected.scs.COMM_RX_TIMEOUT
    timeout_ms = port_handler.LATENCY_TIMER * 2.0 + 2.0 + 1.0  # the SDK's packet timeout, its bytes' time within 1 ms
    assert sum(reads) == 0 and len(reads) <= timeout_ms / (READ_BLOCK_S * 1000) + 2, len(reads)


@pytest.mark.parametrize("fault, says", [
    (lambda bus: bus.silence(3), "servo 3 (elbow_flex) does not answer on"),
    (lambda bus: bus.corrupt(10_000), "Incorrect status packet"),
    (lambda bus: bus.overload(2), "servo 2 (shoulder_lift) reports overload"),
    (lambda bus: bus.overheat(5), "servo 5 (wrist_roll) reports overheat"),
    (lambda bus: bus.unplug(), "connection"),
])
def test_each_fault_stops_the_arm_with_one_line_and_the_node_goes_on(bus, fault, says):
    """A fault read from the bus: the arm sends no more goals (the servos hold theirs), one line in
    its status, no exception out of state() or apply(); a passing fault (a corrupt reply) is retried."""
    arm = so101_arm(bus)
    try:
        arm.reset()
        arm.apply(np.zeros(7))
        before = arm.counts["commands"]
        fault(bus)
        for _ in range(5):
            arm.state()
            arm.apply(np.r_[1.0, np.zeros(6)])
        status = arm.status()
        assert status["fault"] is not None, status
        line = f"{status['fault']['kind']}: {status['fault']['message']}"
        assert says in line and "\n" not in line, line
        assert arm.counts["commands"] == before  # no goal after the fault
        assert arm.counts["faults"] == 1  # said once, not once per period
    finally:
        arm.close()


def test_a_corrupt_reply_now_and_then_is_retried_not_a_fault(bus):
    arm = so101_arm(bus)
    try:
        arm.reset()
        bus.corrupt(1)
        arm.state()
        # retried, not a fault (on a loaded machine a late reply can cost one more try; never all of them)
        assert arm.fault is None and arm.counts["retries"] >= 1
        bus.silence(4)
        arm.state()
        assert arm.fault["kind"] == "servo"
        bus.silence(4, on=False)
        arm.state()
        assert arm.fault is None  # the servo answers again: the fault clears; the arm moves on its next command
    finally:
        arm.close()


# ------------------------------------------------------------------ the arm node over ROS 2
@pytest.mark.ros
def test_the_arm_node_drives_the_simulated_so101_and_a_fault_is_one_status_line(tmp_path):
    """arm_node backend:=so101 on the simulated arm (its own process, on a pty): the task file's
    start pose, a velocity command moving the TCP, the gripper closing; then a servo that stops
    answering: the arm holds, ``arm/status`` says which servo in one line, and the node stays up."""

    pytest.importorskip("rclpy")
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32, String

    from robot_rl.cell import example_task_files
    from robot_rl.contract import ControlLimits
    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics
    from tests.helpers.ros import Probe, free_domain_id, node_process

    from robot_rl.drivers.so101_sim import SimulatedSo101Process

    with SimulatedSo101Process(tmp_path / "arm") as sim:
        params = {"backend": "so101", "port": sim.port, "calibration": str(sim.calibration_path),
                  "latency_timer_ms": 100.0, "task_file": str(example_task_files()["PickCubeSO101"]), "priority": "normal"}
        domain = free_domain_id()
        with node_process("robot_rl.drivers.arm_node", params, domain, tmp_path) as arm:
            probe = Probe(domain)
            try:
                poses = probe.subscribe(PoseStamped, topics.TCP_POSE, topics.qos_sensor(50))
                grip = probe.subscribe(JointState, topics.GRIPPER_STATE, topics.qos_sensor(50))
                status = probe.subscribe(String, topics.ARM_STATUS, topics.qos_latched())
                report = lambda: json.loads(status[-1][1].data) if status else {}  # noqa: E731
                probe.spin_until(lambda: len(poses) > 3 and report(), 120, "the so101 arm's state and status")
                assert report()["backend"]["backend"] == "so101" and report()["backend"]["fault"] is None
                start = poses[-1][1].pose.position
                assert abs(start.x - 0.2) < 0.025 and abs(start.y) < 0.025 and abs(start.z - 0.1) < 0.005
                velocity = probe.node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)
                gripper = probe.node.create_publisher(Float32, topics.GRIPPER_COMMAND, 10)
                limits = ControlLimits()
                left = msgs.delta_to_twist(np.array([0, 0.8, 0, 0, 0, 0]), 0, limits.max_translation_m,
                                           limits.max_rotation_rad, 10)
                probe.spin_until(lambda: poses[-1][1].pose.position.y > start.y + 0.04, 60, "the TCP 4 cm left",
                                 between=lambda: (velocity.publish(left), gripper.publish(Float32(data=1.0))))
                width = grip[0][1].position[0]
                probe.spin_until(lambda: grip[-1][1].position[0] < width - 0.02, 60, "the gripper to close")
                sim.silence(3)
                probe.spin_until(lambda: (report().get("backend") or {}).get("fault"), 60, "the fault in arm/status",
                                 between=lambda: velocity.publish(left))
                fault = report()["backend"]["fault"]
                assert fault["kind"] == "servo" and fault["message"].startswith("servo 3 (elbow_flex) does not answer")
                assert report()["backend_fault"] is True  # what the actor reads to drop its episode
                log = (tmp_path / "arm_node.log").read_text()
                assert log.count("does not answer") == 1 and arm.poll() is None
            finally:
                probe.close()


@pytest.mark.ros
@pytest.mark.parametrize("change, says", [
    ({"port": "/dev/ttyACM9"}, "serial port /dev/ttyACM9 does not exist"),
    ({"calibration": "OTHER_ARM"}, "motors ['waist'] are not an SO-101's"),
    ({"task_file": ""}, "arm backend so101 needs an SO-101 task file (robot: so101)"),
    ({"port": ""}, "arm backend so101 needs port"),
    ({"backend": "sim", "task_file": "", "observe_after_command": "true"},
     "observe_after_command:=true is for a streaming (real) arm backend"),
])
def test_the_arm_node_refuses_a_bad_so101_setup_in_one_line_before_the_arm_moves(tmp_path, change, says):
    import subprocess
    import sys

    from robot_rl.cell import example_task_files
    from tests.helpers.ros import free_domain_id, ros_environment

    other = tmp_path / "koch.json"
    other.write_text(json.dumps(lerobot_calibration(waist=lerobot_calibration().pop("shoulder_pan"))))
    good = tmp_path / "so101.json"
    good.write_text(json.dumps(lerobot_calibration()))
    params = {"backend": "so101", "port": "/dev/ttyACM9", "calibration": str(good),
              "task_file": str(example_task_files()["PickCubeSO101"]), "priority": "normal", **change}
    if params["calibration"] == "OTHER_ARM":
        params["calibration"] = str(other)
    args = sum((["-p", f"{k}:={v}"] for k, v in params.items() if v != ""), [])
    out = subprocess.run([sys.executable, "-m", "robot_rl.drivers.arm_node", "--ros-args", *args],
                         env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("arm_node: error: ") and says in last and "Traceback" not in out.stderr, out.stderr[-1500:]


# ------------------------------------------------------------------ calibrating an arm
def test_calibrating_the_simulated_arm_finds_its_homing_offsets_and_ranges(bus, tmp_path):
    """``calibrate`` as a user runs it: the arm limp, held at the middle of its range, then swept
    through its limits by hand; the result reads the model's angles, as the arm's true calibration does."""
    import threading

    from robot_rl.drivers.so101_bus import So101Calibration, calibrate

    def hand(poses, reads):
        def move():
            for pose in poses:
                bus.hold_by_hand(pose, reads=reads)  # in the sweep: held until the calibration has read it twice
            done.set()
        done = threading.Event()
        threading.Thread(target=move, daemon=True).start()
        return done

    middle = np.zeros(6)
    middle[5] = np.mean(bus.limits[5])
    steps = [middle, *[np.where(np.arange(6) == i, bus.limits[:, k], middle) for i in range(6) for k in (0, 1)], middle]
    prompts = []

    def prompt(message):
        prompts.append(message)
        return hand([middle], 0) if len(prompts) == 1 else hand(steps, 2)

    calibration = calibrate(bus.port, prompt, latency_timer_ms=100.0)
    assert prompts[0].startswith("Move the arm to the middle") and prompts[1].startswith("Move every joint")
    truth = So101Calibration.from_dict(bus.calibration())
    for name, motor in calibration.motors.items():
        true = truth.motors[name]
        span, true_span = motor.range_max - motor.range_min, true.range_max - true.range_min
        assert abs(span - true_span) <= 3, (name, motor, true)
        if name != "gripper":  # the gripper's middle is half open, read as a fraction of its range: only its span
            assert abs(motor.homing_offset - true.homing_offset) <= 2, (name, motor, true)
            assert abs(motor.range_min - true.range_min) <= 3, (name, motor, true)
    path = tmp_path / "so101.json"
    calibration.write(path)
    bus.hold_by_hand(None)
    arm = so101_arm(bus, So101Calibration.load(path))  # its homing offsets written to the servos on connecting
    try:
        arm.reset()
        assert np.abs(arm.joint_state()[1] - bus.joints()).max() < 0.01
    finally:
        arm.close()


def test_a_sweep_that_leaves_a_joint_still_is_refused(bus):
    from robot_rl.drivers.so101_bus import So101Error, calibrate

    import threading

    def prompt(message):
        done = threading.Event()
        bus.hold_by_hand(np.r_[np.zeros(5), 0.8])
        bus.tick()
        done.set()
        return done

    with pytest.raises(So101Error, match=r"joints \['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', "
                                         r"'wrist_roll', 'gripper'\] hardly moved during the sweep"):
        calibrate(bus.port, prompt, latency_timer_ms=100.0)


def test_robot_rl_arm_calibrate_walks_a_user_through_and_writes_lerobots_file(tmp_path):
    """The command against the simulated arm in its own process: at each prompt the 'user' moves
    the arm (the simulator's hand command) and presses Enter; the file it writes drives the arm."""
    import subprocess
    import sys

    from robot_rl.drivers.so101_bus import So101Calibration

    from robot_rl.drivers.so101_sim import SimulatedSo101Process
    from robot_rl.sim.so101_description import LIMITS_HIGH, LIMITS_LOW

    out = tmp_path / "so101_follower.json"
    with SimulatedSo101Process(tmp_path / "arm") as sim:

        middle = np.r_[np.zeros(5), (LIMITS_LOW[5] + LIMITS_HIGH[5]) / 2]
        cli = subprocess.Popen([sys.executable, "-m", "robot_rl.commands.cli", "arm", "calibrate", "--backend", "so101",
                                "--port", sim.port, "--out", str(out), "--latency-timer-ms", "100"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert cli.stdout.readline().startswith("Move the arm to the middle of its range")
            sim.hold_by_hand(middle)
            cli.stdin.write("\n")
            cli.stdin.flush()
            assert cli.stdout.readline().startswith("Move every joint through its whole range")
            for i in range(6):
                for limit in (LIMITS_LOW, LIMITS_HIGH):
                    sim.hold_by_hand(np.where(np.arange(6) == i, limit, middle), reads=2)  # held while it reads it
            assert cli.poll() is None, cli.communicate(timeout=10)
            rest, err = cli.communicate("\n", timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
        assert cli.returncode == 0, err
        assert f"wrote {out}" in rest and "shoulder_pan" in rest
        calibration = So101Calibration.load(out)
        spans = np.array([m.range_max - m.range_min for m in calibration.motors.values()])
        np.testing.assert_allclose(spans, (LIMITS_HIGH - LIMITS_LOW) * 4096 / (2 * np.pi), atol=4)


@pytest.mark.parametrize("args, says", [
    (["--port", "/dev/ttyACM9", "--out", "OUT"], "serial port /dev/ttyACM9 does not exist"),
    (["--port", "/dev/ttyACM9", "--out", "/no/such/folder/c.json"], "--out /no/such/folder/c.json: no folder"),
])
def test_robot_rl_arm_calibrate_refuses_bad_input_in_one_line(tmp_path, capsys, args, says):
    from robot_rl.commands.cli import main

    args = [str(tmp_path / "c.json") if a == "OUT" else a for a in args]
    assert main(["arm", "calibrate", "--backend", "so101", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("robot-rl: error: ") and says in err and "\n" not in err


# ------------------------------------------------------------------ the leader arm
def test_the_leader_arm_drives_the_follower_through_the_same_kinematics(tmp_path):
    """Two simulated SO-101s: a leader moved by hand (its own bus, torque off) and a follower (the
    backend). Each control period the leader's device reading is the follower's action: the
    follower's TCP follows the leader's path, the gripper closes when the leader's does."""
    import threading

    from robot_rl.contract import STATE_SLICES
    from robot_rl.drivers.so101 import contract_yaw
    from robot_rl.drivers.so101_sim import SimulatedSo101Process
    from robot_rl.sim import so101_description as model
    from robot_rl.sim import so101_kinematics as kinematics
    from robot_rl.teleop.devices import open_device

    with SimulatedSo101Process(tmp_path / "leader") as leader_bus, \
            SimulatedSo101Process(tmp_path / "follower") as follower_bus:
        path = tmp_path / "leader.json"
        path.write_text(json.dumps(leader_bus.calibration()))
        pose = model.HOME.copy()
        leader_bus.hold_by_hand(pose)
        follower = so101_arm(follower_bus)
        def follower_pose():
            state = follower.state()
            return state[STATE_SLICES["tcp_pos"]].astype(float), contract_yaw(state[STATE_SLICES["tcp_quat"]])

        leader = open_device("so101_leader", port=leader_bus.port, calibration=str(path), latency_timer_ms=100.0,
                             follower=follower_pose)
        period = threading.Event()
        try:
            start = follower.reset()[STATE_SLICES["tcp_pos"]].astype(float)
            assert leader.read().active is False  # a leader held still: the policy drives
            leader_start = kinematics.forward_kinematics(pose)[0]
            solver = follower  # the leader's hand path: joint poses whose TCP moves 8 cm left, then 5 cm down
            targets = [leader_start + [0, 0.01 * k, 0] for k in range(1, 9)] + \
                      [leader_start + [0, 0.08, -0.01 * k] for k in range(1, 6)]
            closing = False
            for k, target in enumerate(targets):
                pose, _ = solver.solve(target, 0.0, pose)
                if k == len(targets) - 1:
                    pose[5], closing = model.LIMITS_LOW[5], True
                leader_bus.hold_by_hand(pose)
                period.wait(0.1)  # a control period: the arm node applies the newest reading at its tick
                reading = leader.read()
                assert reading.active
                follower.apply(reading.action)
            for _ in range(5):  # the leader held still at its last pose: the follower catches up
                period.wait(0.1)
                reading = leader.read()
                follower.apply(reading.action)
            assert reading.active and reading.action[6] == 1.0 and closing
            moved_leader = kinematics.forward_kinematics(pose)[0] - leader_start
            moved_follower = settle(follower)[STATE_SLICES["tcp_pos"]] - start
            assert np.linalg.norm(moved_follower - moved_leader) < 0.005, (moved_leader, moved_follower)
            assert follower.status()["gripper_target"] == "close"
        finally:
            leader.close()
            follower.close()


def test_a_leader_arm_without_its_port_or_calibration_is_one_line(tmp_path):
    from robot_rl.teleop.devices import DeviceUnavailable, open_device

    with pytest.raises(InputError, match="the so101_leader device needs leader_port"):
        open_device("so101_leader")
    path = tmp_path / "leader.json"
    path.write_text(json.dumps(lerobot_calibration()))
    with pytest.raises(DeviceUnavailable, match="the SO-101 leader arm: serial port /dev/ttyACM9 does not exist"):
        open_device("so101_leader", port="/dev/ttyACM9", calibration=str(path))


def test_the_actor_drops_what_it_does_while_the_arm_stands_faulted():
    """``ArmMode`` reads ``arm/status``: a backend's standing fault (an SO-101's, or a Franka
    reconnecting) holds the actor as an e-stop does, until a status says it cleared."""
    from types import SimpleNamespace

    from robot_rl.drivers.actor_io import ArmMode

    warnings = []
    mode = ArmMode(SimpleNamespace(warning=warnings.append))
    status = lambda **fields: SimpleNamespace(data=json.dumps({"mode": "velocity", **fields}))  # noqa: E731
    mode.on_status(status(backend_fault=False))
    assert mode.holds() == ""
    mode.on_status(status(backend_fault=True))
    assert mode.holds() == "backend_fault"
    mode.on_status(status(mode="estop", backend_fault=True))
    assert mode.holds() == "estop"
    mode.on_status(status(backend_fault=False))
    assert mode.holds() == "" and not warnings


@pytest.mark.ros
@pytest.mark.parametrize("node, params, says", [
    ("camera_node", {"name": "side"}, "cameras: no camera 'side'; it has ['front', 'wrist']"),
    ("actor_node", {"cameras": "[front,side]", "obs": "pixels"}, "cameras: no camera 'side'; it has ['front', 'wrist']"),
])
def test_a_task_file_whose_cameras_the_stack_lacks_is_one_line(tmp_path, node, params, says):
    """The SO-101 cell's task file names front and wrist: a node asked for another camera refuses in
    one line (exit 2) before anything moves."""
    import subprocess
    import sys

    from robot_rl.cell import example_task_files
    from tests.helpers.ros import free_domain_id, ros_environment

    params = {"task_file": str(example_task_files()["PickCubeSO101"]), "priority": "normal", **params}
    args = sum((["-p", f"{k}:={v}"] for k, v in params.items()), [])
    out = subprocess.run([sys.executable, "-m", f"robot_rl.drivers.{node}", "--ros-args", *args],
                         env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{node}: error: ") and says in last and "Traceback" not in out.stderr, out.stderr[-1500:]

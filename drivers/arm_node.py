"""``arm_node``: the arm behind ROS 2 topics, stepping at the control rate.

Backend ``sim``: the twin, stepped in real time (one control period of physics per timer tick,
its impedance controller inside), or with ``lockstep`` once per actor command (reproducible).
Backend ``franka``: a Franka through franky-control (``drivers/franka.py``) at ``robot_ip``; its
commands are streamed to the robot the moment both parts (velocity, gripper) are in, once (a tick
with no new command renews the last); the
e-stop stops the robot at once, even during a reset's motion; a fault (reflex, lost connection)
is logged, counted and reported on ``arm/status`` while the backend recovers. Backend ``so101``:
an SO-101 on its Feetech servo bus (``drivers/so101.py``) at ``port`` with its ``calibration``
file and an SO-101 task file; a fault (a servo silent, a bad reply, an overload or overheat, the
bus gone) stops it with one line on ``arm/status``. All serve the
same topics (see topics.py); the task (workspace box, home joints, start pose, control rate)
comes from ``task_file`` or the sim task ``task`` names.
Every command passes the :class:`ArmSupervisor` (velocity limits, workspace box, watchdog,
latched e-stop, the operator's teleop action first while they intervene); malformed commands
are dropped and counted, never fatal. Each tick also reports the action it executed and
whether the operator's it was (``arm/applied_action``), stamped like the state it led to.

``require_operator`` (the stacks with a human in the loop): while the teleop node's heartbeat
(``teleop/heartbeat``) is missing for ``operator_timeout_s`` - not started yet, died, hung - the
arm holds its pose like an e-stop, ignores commands and refuses ``arm/reset`` (its message starts
with "no operator"); ``arm/status`` says ``mode: operator_lost``. When the heartbeat is back it
takes commands again.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Empty, Float32, Float32MultiArray, Float64MultiArray, String
from std_srvs.srv import Trigger

from robot_rl.config import setting
from robot_rl.node_config import CONTROL_PRIORITIES
from robot_rl.contract import STATE_SLICES, ControlLimits
from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.drivers.arm import ArmSupervisor, SimArm
from robot_rl.drivers.franka import DEFAULT_FORCE_THRESHOLDS, DEFAULT_TORQUE_THRESHOLDS
from robot_rl.drivers.node import apply_task_file, declare_config, run, status_json
from robot_rl.errors import InputError


@dataclass
class ArmNodeConfig:
    backend: str = "sim"
    task: str = "PickCube"
    sim_engine: str = "mujoco"
    seed: int = 0
    control_hz: float = 10.0
    watchdog_periods: float = 2.0
    frame_id: str = "base"
    publish_scene: bool = True  # sim: the scene state the sim cameras render
    # sim: the twin stops as a Franka's collision reflex does and reports it as drivers/franka.py does (the
    # actor ends its episode there as a failure); a real Franka has its own (force_thresholds)
    collision_reflex: bool = False
    require_operator: bool = False  # hold while the teleop node's heartbeat is missing (see the module's doc)
    operator_timeout_s: float = 0.5
    # sim only: the twin advances one control period per actor command (velocity + gripper)
    # instead of on a timer, so a run is reproducible step for step (the arm waits for the actor)
    lockstep: bool = False
    # a streaming backend (a real arm): each command restarts the control timer, so the next state is
    # published one whole period after the command, as HIL-SERL's env steps (act, wait a period, observe):
    # the state then shows the command's motion, not 40-60 ms of it (a servo arm takes more than the
    # actor's leftover of a period to reach its goal). The loop runs at one period plus the actor's latency.
    observe_after_command: bool = False
    task_file: str = ""  # a real cell's task file: workspace box, home joints, start pose, control rate
    # franka: the robot (franky-control); see drivers/franka.py FrankaSettings
    robot_ip: str = ""  # the FCI address of the arm (e.g. 172.16.0.2)
    velocity_factor: float = 0.3  # fractions of the Franka's velocity / acceleration / jerk limits
    acceleration_factor: float = 0.3
    jerk_factor: float = 0.3
    torque_thresholds: tuple[float, ...] = DEFAULT_TORQUE_THRESHOLDS  # collision reflex, Nm per joint
    force_thresholds: tuple[float, ...] = DEFAULT_FORCE_THRESHOLDS  # collision reflex, N / Nm (x y z rx ry rz)
    home_joints: tuple[float, ...] = ()  # empty: the task's
    grasp_force: float = 20.0  # N
    gripper_speed: float = 0.1  # m/s
    realtime_kernel: bool = True  # false only for a simulator (franky-sim); a real arm needs a real-time kernel
    connect_timeout_s: float = 5.0  # franka: the connection's; so101: how long a silent servo is pinged on connecting
    # how much of the TCP's distance from its target (the commanded displacements added up) each
    # period's velocity also closes (0: velocity only; docs in drivers/franka.py FrankaSettings)
    tracking_gain: float = 0.7
    # so101: the arm's serial bus (drivers/so101.py So101Settings)
    port: str = ""  # the bus adapter's serial port (e.g. /dev/ttyACM0), or a simulated arm's pty
    calibration: str = ""  # the arm's LeRobot calibration file (robot-rl arm calibrate writes one)
    latency_timer_ms: float = 16.0  # how long Feetech's SDK waits for a reply (twice): the USB adapter's latency timer
    port_wait_s: float = 0.0  # so101: wait this long for the port and calibration file to appear (a simulated arm
    #                           starting beside the node: the so101_sim stack); 0: they must be there
    # a Trigger service called after each reset's motion, before the episode's first state: what resets the
    # scene (the so101_sim stack's simulated cell places a new cube; a cell with an automatic reset serves one)
    scene_reset: str = ""
    scene_reset_timeout_s: float = 30.0
    priority: str = setting("realtime", "the arm's CPU priority (the control path): realtime (SCHED_FIFO where the "
                                        "system allows it, else a warning and normal) or normal",
                            choices=CONTROL_PRIORITIES)


BACKENDS = ("sim", "franka", "so101")


def make_backend(cfg: ArmNodeConfig, task):
    limits = ControlLimits(control_hz=cfg.control_hz)
    if cfg.collision_reflex and cfg.backend != "sim":
        raise InputError(f"collision_reflex:=true is the sim twin's; arm backend {cfg.backend} stops as the arm "
                         "itself does (a Franka on its force_thresholds)")
    if cfg.backend == "sim":
        return SimArm(cfg.task, cfg.sim_engine, cfg.seed, limits, collision_reflex=cfg.collision_reflex)
    if cfg.backend == "franka":
        from robot_rl.drivers.franka import FrankaArm, FrankaSettings

        settings = FrankaSettings(cfg.robot_ip, cfg.velocity_factor, cfg.acceleration_factor, cfg.jerk_factor,
                                  tuple(cfg.torque_thresholds), tuple(cfg.force_thresholds), cfg.gripper_speed,
                                  cfg.grasp_force, cfg.realtime_kernel, cfg.connect_timeout_s,
                                  tracking_gain=cfg.tracking_gain)
        return FrankaArm(settings, task.workspace, tuple(cfg.home_joints) or task.home_joints, task.sample_start,
                         limits, task.uses_gripper, cfg.seed)
    if cfg.backend == "so101":
        from robot_rl.drivers.so101 import So101Arm, So101Settings
        from robot_rl.drivers.so101_bus import So101Calibration

        if task.robot != "so101":
            raise InputError("arm backend so101 needs an SO-101 task file (robot: so101), e.g. "
                             "robot_rl/tasks/pick_cube_so101.yaml (robot-rl task show PickCubeSO101)")
        if not cfg.port or not cfg.calibration:
            raise InputError("arm backend so101 needs port (the bus's serial port, e.g. /dev/ttyACM0) and calibration "
                             "(the arm's calibration file: robot-rl arm calibrate --backend so101 writes one)")
        wait_for_files((cfg.port, cfg.calibration), cfg.port_wait_s)
        settings = So101Settings(port=cfg.port, calibration=cfg.calibration, latency_timer_ms=cfg.latency_timer_ms,
                                 connect_timeout_s=cfg.connect_timeout_s)
        return So101Arm(settings, So101Calibration.load(cfg.calibration), task.workspace, task.sample_start, limits,
                        task.uses_gripper, cfg.seed)
    raise InputError(f"unknown arm backend {cfg.backend!r}; available: {', '.join(BACKENDS)} (real arms implement "
                     "drivers.arm.ArmBackend)")


def backend_faulted(backend: dict | None) -> bool:
    """Whether a backend's ``status()`` says it stands faulted (a reflex being recovered from, a
    servo silent, the connection lost): it sends nothing to the robot meanwhile, so the actor
    drops what it does (or, for a new collision reflex, ends its episode there: ``ArmMode``)."""
    return bool(backend) and (backend.get("fault") is not None or backend.get("connected") is False)


def wait_for_files(paths, timeout_s: float) -> None:
    """Until every path exists, at most ``timeout_s`` (a simulated arm's node writes them as it
    starts); what is still missing then is for the backend to report."""
    end = time.monotonic() + timeout_s
    pace = threading.Event()
    while time.monotonic() < end and not all(os.path.exists(p) for p in paths):
        pace.wait(0.1)


class ArmNode(Node):
    CONTROL_PATH = True  # run as its own process, it takes its priority parameter (drivers/node.py)

    def __init__(self):
        super().__init__("arm")
        self.cfg, task = apply_task_file(declare_config(self, ArmNodeConfig))
        cfg = self.cfg
        self.limits = ControlLimits(control_hz=cfg.control_hz)
        if cfg.lockstep and cfg.backend != "sim":
            raise InputError("lockstep:=true is for the sim twin only: a real arm keeps its own clock")
        if cfg.observe_after_command and cfg.backend == "sim":
            raise InputError("observe_after_command:=true is for a streaming (real) arm backend; the sim twin "
                             "observes after a whole period of physics already (lockstep or its timer)")
        if cfg.backend == "sim" and cfg.task_file:
            raise InputError("task_file is for a real arm (a cell with no simulator behind it); the sim backend runs "
                             "the sim task named by task")
        self.backend = make_backend(cfg, task)
        # a backend that streams commands (a real arm) executes one the moment it arrives
        self.streaming = cfg.backend != "sim"
        self.backend_faults = 0
        self.backend.reset()
        self.supervisor = ArmSupervisor(self.limits, self.backend.safety_box, cfg.watchdog_periods,
                                        operator_timeout_s=cfg.operator_timeout_s if cfg.require_operator else None)
        self.drops = msgs.DropCounter(self.get_logger().warning)
        q = topics.qos_sensor()
        self.pub_joints = self.create_publisher(JointState, topics.JOINT_STATES, q)
        self.pub_pose = self.create_publisher(PoseStamped, topics.TCP_POSE, q)
        self.pub_twist = self.create_publisher(TwistStamped, topics.TCP_TWIST, q)
        self.pub_wrench = self.create_publisher(msgs.WrenchStamped, topics.WRENCH, q)
        self.pub_gripper = self.create_publisher(JointState, topics.GRIPPER_STATE, q)
        self.pub_status = self.create_publisher(String, topics.ARM_STATUS, topics.qos_latched())
        self.pub_scene = self.create_publisher(Float64MultiArray, topics.SIM_SCENE, q) if cfg.backend == "sim" else None
        sim = cfg.backend == "sim"
        self.pub_success = self.create_publisher(Float64MultiArray, topics.SIM_SUCCESS, q) if sim else None
        self.pub_objects = self.create_publisher(Float64MultiArray, topics.SIM_OBJECTS, q) if sim else None
        self.create_subscription(TwistStamped, topics.VELOCITY_COMMAND, self.on_velocity, 10)
        self.create_subscription(PoseStamped, topics.POSE_COMMAND, self.on_pose, 10)
        self.create_subscription(Float32, topics.GRIPPER_COMMAND, self.on_gripper, 10)
        # the e-stop on a node of its own that its own thread spins (drivers/node.py run): it is
        # handled while a reset's motion (seconds on a real arm) or a tick is still running. Not one
        # node spun by rclpy's MultiThreadedExecutor: that starved this node's timer and
        # subscriptions for seconds at a time (ticks stalled, the operator's heartbeat seen lost).
        self.estop_node = Node(f"{self.get_name()}_estop", namespace=self.get_namespace(), context=self.context,
                               cli_args=["--ros-args", "-r", f"__node:={self.get_name()}_estop"])
        self.estop_node.create_subscription(Bool, topics.ESTOP, self.on_estop, topics.qos_latched())
        self.background_nodes = [self.estop_node]
        self.scene_client = None
        if cfg.scene_reset:  # called from on_reset: its reply is taken by a node its own thread spins
            self.scene_node = Node(f"{self.get_name()}_scene", namespace=self.get_namespace(), context=self.context,
                                   cli_args=["--ros-args", "-r", f"__node:={self.get_name()}_scene"])
            self.scene_client = self.scene_node.create_client(Trigger, cfg.scene_reset)
            self.background_nodes.append(self.scene_node)
        self.create_subscription(Float32MultiArray, topics.TELEOP_ACTION, self.on_teleop_action, topics.qos_sensor())
        self.create_subscription(Bool, topics.TELEOP_INTERVENING, lambda m: self.supervisor.set_intervening(m.data), 10)
        self.create_subscription(Empty, topics.TELEOP_HEARTBEAT, lambda m: self.supervisor.operator_heartbeat(),
                                 topics.qos_sensor())
        self.pub_applied = self.create_publisher(Float64MultiArray, topics.APPLIED_ACTION, q)
        self.applied: tuple[np.ndarray, bool] | None = None
        self.create_service(Trigger, topics.RESET, self.on_reset)
        self.create_service(Trigger, topics.RELEASE_ESTOP, self.on_release)
        self.ticks = 0
        self.last_mode = None
        self.commanded: set[str] = set()  # lockstep and streaming: the parts of the next command received so far
        self.executed_since_tick = False  # streaming: a command executed on arrival since the last tick
        self.executed_at = 0.0  # observe_after_command: when (monotonic) the last command was executed
        self.timer = None if cfg.lockstep else self.create_timer(1.0 / cfg.control_hz, self.tick)
        self.publish_state()
        self.get_logger().info(f"arm ({cfg.backend}, {cfg.task}) at {cfg.control_hz:g} Hz; watchdog "
                               f"{cfg.watchdog_periods:g} periods" + (f"; holds without the operator's heartbeat "
                                                                      f"({cfg.operator_timeout_s:g} s)"
                                                                      if cfg.require_operator else ""))

    # ---- commands ------------------------------------------------------------------
    def on_velocity(self, msg):
        try:
            delta = msgs.twist_to_delta(msg, self.limits.max_translation_m, self.limits.max_rotation_rad,
                                        self.limits.control_hz)
        except msgs.MessageError as e:
            return self.drops.drop("velocity command", str(e))
        self.supervisor.command_velocity(delta)
        self.command_part("velocity")

    def on_pose(self, msg):
        try:
            pos, quat = msgs.pose_from_msg(msg)
        except msgs.MessageError as e:
            return self.drops.drop("pose command", str(e))
        self.supervisor.command_pose(pos, quat)

    def on_gripper(self, msg):
        if not np.isfinite(msg.data):
            return self.drops.drop("gripper command", f"{msg.data}")
        self.supervisor.command_gripper(msg.data)
        self.command_part("gripper")

    def command_part(self, part: str) -> None:
        """Once both parts of a command (velocity, gripper) are in: lockstep, one control period;
        a streaming backend, the command executed at once - and the next tick executes nothing
        more, so that a displacement per period moves the arm once, whatever the phase between
        the actor's commands and the arm's ticks."""
        if not (self.cfg.lockstep or self.streaming):
            return
        self.commanded.add(part)
        if self.commanded >= {"velocity", "gripper"}:
            self.commanded.clear()
            if self.cfg.lockstep:
                self.tick()
            else:
                self.execute()
                self.executed_since_tick = True
                if self.cfg.observe_after_command and self.timer is not None:
                    self.executed_at = time.monotonic()
                    self.timer.reset()  # the next tick (state, watchdog) one period from now

    def on_teleop_action(self, msg):
        values = np.asarray(msg.data, np.float64)
        if values.shape != (7,) or not np.all(np.isfinite(values)):
            return self.drops.drop("teleop action", f"{len(values)} values" if values.shape != (7,) else "not finite")
        self.supervisor.command_teleop(values)

    def on_estop(self, msg):
        if msg.data and not self.supervisor.estopped:
            self.supervisor.estop()
            if hasattr(self.backend, "halt"):
                self.backend.halt()
            self.get_logger().error("E-STOP: holding position until arm/release_estop is called")
            self.publish_status()

    def on_release(self, request, response):
        if hasattr(self.backend, "release"):
            self.backend.release()
        self.supervisor.release()
        self.get_logger().warning("e-stop released")
        self.publish_status()
        response.success, response.message = True, "released"
        return response

    def on_reset(self, request, response):
        if self.supervisor.estopped:
            response.success, response.message = False, f"{topics.RESET_REFUSED_ESTOP}: release it first"
            return response
        if not self.supervisor.operator_present:
            response.success = False
            response.message = f"{topics.RESET_REFUSED_NO_OPERATOR}: the teleop node's heartbeat is missing"
            return response
        try:
            self.backend.reset()
            self.reset_scene()
        except Exception as e:  # noqa: BLE001 - a real arm's reset can fail (e-stop, fault): say so
            response.success = False
            response.message = f"reset failed: {e}" + (" (e-stopped)" if self.supervisor.estopped else "")
            self.get_logger().error(response.message)
            self.publish_status()
            return response
        self.supervisor.reset()
        self.commanded.clear()
        self.last_mode = self.supervisor.mode
        self.publish_status()  # before the state: an actor sees the new mode by its first observation
        stamp = self.publish_state()
        # the stamp tells the actor which state is the first of the new episode (RosArmEnv.reset)
        response.success = True
        response.message = f"episode {getattr(self.backend, 'episode', 0)}; {topics.RESET_STATE_STAMP} {stamp} ns"
        return response

    def reset_scene(self) -> None:
        """The scene's reset (``scene_reset``), once the arm is at its start: raises when it fails
        or does not answer within ``scene_reset_timeout_s``."""
        if self.scene_client is None:
            return
        timeout = self.cfg.scene_reset_timeout_s
        if not self.scene_client.wait_for_service(timeout_sec=timeout):
            raise RuntimeError(f"no scene reset service {self.cfg.scene_reset} within {timeout:g} s")
        future = self.scene_client.call_async(Trigger.Request())
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout):
            future.cancel()
            raise RuntimeError(f"the scene reset {self.cfg.scene_reset} did not answer within {timeout:g} s")
        result = future.result()
        if not result.success:
            raise RuntimeError(f"the scene reset {self.cfg.scene_reset} failed: {result.message}")

    # ---- control loop --------------------------------------------------------------
    def execute(self) -> None:
        """The supervisor's action for now, to the backend."""
        action = self.supervisor.action(self.backend.state())
        self.backend.apply(action)
        self.applied = (action, self.supervisor.mode == "teleop")

    def tick(self):
        if (self.cfg.observe_after_command and self.executed_since_tick
                and time.monotonic() - self.executed_at < 0.5 / self.cfg.control_hz):
            return  # a tick the executor had taken before the command reset the timer: the next comes a period on
        if not self.executed_since_tick:  # no command this period: the last again, a hold, or the operator's
            self.execute()
        self.executed_since_tick = False
        self.ticks += 1
        self.publish_state()
        faults = getattr(self.backend, "counts", {}).get("faults", 0)
        if faults != self.backend_faults:
            self.backend_faults = faults
            fault = self.backend.status()["last_fault"]
            self.get_logger().error(f"{self.cfg.backend} fault ({fault['kind']}): {fault['message']}; holding, "
                                    "recovering")
            self.publish_status()
        if self.supervisor.mode != self.last_mode or self.ticks % int(self.cfg.control_hz) == 0:
            if self.supervisor.mode == "watchdog" and self.last_mode not in ("watchdog", "operator_lost"):
                self.get_logger().warning("no command for "
                                          f"{self.cfg.watchdog_periods:g} control periods: holding position")
            if self.supervisor.mode == "operator_lost" and self.last_mode != "operator_lost":
                self.get_logger().error("no heartbeat from the operator's teleop node: holding position and "
                                        "ignoring commands until it is back")
            elif self.last_mode == "operator_lost" and self.supervisor.mode != "operator_lost":
                self.get_logger().warning("the operator's teleop node is back: taking commands again")
            self.last_mode = self.supervisor.mode
            self.publish_status()

    def publish_state(self) -> int:
        """The arm's state (and in sim what only the twin knows), all stamped now; returns the stamp."""
        now = time.time_ns()
        if self.pub_scene is not None:  # first: the sim cameras start rendering this instant at once
            scene = self.backend.scene_state()
            self.pub_scene.publish(Float64MultiArray(data=[now / 1e9, *scene.tolist()]))
            self.pub_success.publish(Float64MultiArray(data=[now / 1e9, float(self.backend.success)]))
            privileged = self.backend.privileged()
            poses = [float(v) for k in sorted(privileged) for v in privileged[k]]
            self.pub_objects.publish(Float64MultiArray(data=[now / 1e9, *poses]))
        if self.applied is not None:
            action, by_operator = self.applied
            self.pub_applied.publish(Float64MultiArray(data=[now / 1e9, *action.tolist(), float(by_operator)]))
            self.applied = None
        state = self.backend.state()
        frame = self.cfg.frame_id
        names, q, qd = self.backend.joint_state()
        js = JointState(header=msgs.header(now, frame), name=names, position=q.tolist(), velocity=qd.tolist())
        self.pub_joints.publish(js)
        self.pub_pose.publish(msgs.pose_msg(state, now, frame))
        self.pub_twist.publish(msgs.twist_msg(state, now, frame))
        self.pub_wrench.publish(msgs.wrench_msg(state, now, frame))
        width = float(state[STATE_SLICES["gripper_width"]][0])
        self.pub_gripper.publish(JointState(header=msgs.header(now, frame), name=["width"], position=[width]))
        return now

    def publish_status(self):
        s = self.supervisor
        backend = self.backend.status() if hasattr(self.backend, "status") else None
        fault = backend_faulted(backend)
        self.pub_status.publish(String(data=status_json(mode=s.mode, estopped=s.estopped, ticks=self.ticks,
                                                        operator_required=self.cfg.require_operator,
                                                        operator_present=s.operator_present,
                                                        counts=s.counts, dropped=self.drops.counts,
                                                        backend_fault=fault, backend=backend)))

    def close(self):
        self.backend.close()
        for node in self.background_nodes:
            node.destroy_node()


def main(args=None) -> None:
    run(ArmNode, args)


if __name__ == "__main__":
    main()

"""``teleop_node``: the human in the loop over ROS 2.

Reads the operator's devices (``devices``: spacemouse, gamepad, so101_leader, the SO-101 leader
arm on ``leader_port`` with ``leader_calibration``, anchored to the arm's ``arm/tcp_pose``; an absent one is reported once
and the session goes on without it), the operator console's keyboard and buttons (``console``),
and in sim optionally a simulated human (``simulated_human`` > 0: its eagerness). Publishes at
``rate_hz`` and at once on every console input:

- ``teleop/intervening`` (Bool) and, while intervening, ``teleop/action`` (the contract action):
  the arm executes the operator's action first (drivers/arm.py), the actor stores and flags it.
  A takeover ends with the actor's episode (``actor/step``'s ``episode_over``): "not
  intervening" goes out at once, and a device still on the controls takes over again once it
  has let go (teleop/intervention.py); the arm and the actor take no takeover after a reset
  until that "not intervening" has reached them;
- ``teleop/events`` (String): success, failure, reset, rerecord, pause, resume;
- ``teleop/heartbeat`` (Empty) every tick: the operator's path is alive. An arm node with
  ``require_operator`` holds while it is missing (the node died or hangs).

The console (teleop/console.py) shows the cameras it subscribes to (``cameras``), the actor's
step and status, and charts; it binds ``console_host`` (127.0.0.1 by default). Its token comes
from the environment (``ROBOT_RL_CONSOLE_TOKEN``; required off loopback), else a random one per
start; it is never a ROS parameter and never logged: the address with the token is printed on
this node's standard output only (the operator's terminal), the log says where it serves.
A configuration error (console bound off loopback without a token, port taken, bad mapping)
ends the node with one line and exit status 2.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import Bool, Empty, Float32MultiArray, String

from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.drivers.node import declare_config, run
from robot_rl.errors import UserFacingError
from robot_rl.teleop.devices import DeviceUnavailable, KeyboardDevice, Mapping, TeleopInput, open_device
from robot_rl.teleop.intervention import InterventionSwitch


@dataclass
class TeleopNodeConfig:
    devices: tuple[str, ...] = ("spacemouse",)  # spacemouse, gamepad, so101_leader ([] for none)
    leader_port: str = ""  # so101_leader: the leader arm's serial port (e.g. /dev/ttyACM1)
    leader_calibration: str = ""  # so101_leader: its calibration file (robot-rl arm calibrate)
    leader_latency_timer_ms: float = 16.0
    mode: str = "hold"  # hold: intervening while on the controls; toggle: the intervene button toggles
    rate_hz: float = 50.0
    dead_zone: float = 0.1
    translation_scale: float = 1.0
    rotation_scale: float = 0.5
    yaw_deg: float = 0.0  # the devices' frame turned onto the robot's base frame
    simulated_human: float = 0.0  # sim: > 0 adds a simulated human of this eagerness
    task: str = "PickCube"  # what the simulated human knows how to do
    takeover_steps: int = 15
    max_takeovers: int = 3
    human_noise: float = 0.05  # the simulated human's own imprecision (its expert's noise; 0: none)
    seed: int = 0  # the simulated human's noise
    console: bool = True
    console_host: str = "127.0.0.1"
    console_port: int = 8080  # the token is not a parameter: ROBOT_RL_CONSOLE_TOKEN (see the module's doc)
    cameras: tuple[str, ...] = ("front", "wrist")  # shown in the console
    jpeg_quality: int = 85


class SimulatedHumanInput:
    """The simulated human as a device: it watches the arm and object topics (sim) and, each
    arm tick, decides whether to drive."""

    name = "simulated"

    def __init__(self, node: Node, cfg: TeleopNodeConfig):
        from robot_rl.drivers.ros_env import ObservationAssembler, subscribe_arm_state
        from robot_rl.sim.tasks import get_task
        from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

        self.human = SimulatedHuman(cfg.task, SimulatedHumanConfig(eagerness=cfg.simulated_human,
                                                                   takeover_steps=cfg.takeover_steps,
                                                                   max_takeovers=cfg.max_takeovers,
                                                                   noise=cfg.human_noise), seed=cfg.seed)
        sizes = get_task(cfg.task).privileged_sizes()
        self.assembler = ObservationAssembler({}, sizes, 0, sim_success=False)
        self.last_stamp = 0
        self.watching = False  # from the actor's first step on: no policy acting, nothing to correct
        self.latest = TeleopInput(np.zeros(7, np.float32), False)
        self.lock = threading.Lock()
        subscribe_arm_state(node, self.assembler, msgs.DropCounter(node.get_logger().warning), after=self._decide)

    def _decide(self) -> None:
        """Once per arm tick, when its state and object poses are both in."""
        if not self.watching:
            return
        with self.assembler.lock:
            obs, _ = self.assembler.observation(self.last_stamp)
            if obs is None:
                return
            self.last_stamp = obs.pop("stamp_ns")
        with self.lock:
            if not self.watching:  # the episode ended meanwhile
                return
            action = self.human(obs)
            self.latest = TeleopInput(action if action is not None else np.zeros(7, np.float32), action is not None)

    def new_episode(self) -> None:
        with self.lock:
            self.human.reset()
            self.watching = True
            self.latest = TeleopInput(np.zeros(7, np.float32), False)

    def episode_over(self) -> None:
        """The actor's episode ended: nothing to correct until its next one starts. Watching on
        through the arm's reset would judge the new episode's first state against the old
        episode's progress ("progress fell") and take over at its first step, with an action
        decided on the reset's states (measured: the first takeover at step 0 in nearly every
        so101_sim episode, each such step a false correction in the demo buffer)."""
        with self.lock:
            self.watching = False
            self.latest = TeleopInput(np.zeros(7, np.float32), False)

    def read(self) -> TeleopInput:
        with self.lock:
            return self.latest

    def close(self) -> None:
        pass


class TeleopNode(Node):
    def __init__(self, **node_kwargs):
        super().__init__("teleop", **node_kwargs)
        self.cfg = cfg = declare_config(self, TeleopNodeConfig)
        mapping = Mapping(cfg.dead_zone, cfg.translation_scale, cfg.rotation_scale, cfg.yaw_deg)
        mapping.validate()
        if cfg.console:
            from robot_rl.teleop.console import console_token

            token = console_token(cfg.console_host)  # before any device is opened: a bad setting ends it at once
        if cfg.simulated_human > 0:  # so does a task the simulated human has no scripted expert for
            from robot_rl.sim.experts import check_expert

            check_expert(cfg.task, "the simulated human (simulated_human > 0)")
        self.switch = InterventionSwitch(cfg.mode)
        self.inputs: list = []
        follower = self._follower_pose() if "so101_leader" in cfg.devices else None
        for name in cfg.devices:
            try:
                self.inputs.append(open_device(name, mapping, port=cfg.leader_port, calibration=cfg.leader_calibration,
                                               latency_timer_ms=cfg.leader_latency_timer_ms, follower=follower))
                self.get_logger().info(f"teleop device {name} ready")
            except DeviceUnavailable as e:
                self.get_logger().error(f"{name}: {e}; going on without it")
        if cfg.simulated_human > 0:
            self.inputs.append(SimulatedHumanInput(self, cfg))
        self.keyboard = KeyboardDevice()
        self.lock = threading.Lock()
        self.pub_intervening = self.create_publisher(Bool, topics.TELEOP_INTERVENING, 10)
        self.pub_action = self.create_publisher(Float32MultiArray, topics.TELEOP_ACTION, topics.qos_sensor())
        self.pub_events = self.create_publisher(String, topics.TELEOP_EVENTS, 10)
        self.pub_heartbeat = self.create_publisher(Empty, topics.TELEOP_HEARTBEAT, topics.qos_sensor())
        self.decision = self.switch.decide([])
        # what the console shows
        self.frames: dict[str, tuple[int, np.ndarray]] = {}
        self.jpegs: dict[str, tuple[int, bytes]] = {}
        self.step: dict = {}
        self.status: dict = {}
        self.history: deque = deque(maxlen=500)
        self.last_linked = 0.0
        self.episode = None  # the actor's current episode, from its steps
        q = topics.qos_sensor()
        for cam in cfg.cameras:
            self.create_subscription(Image, topics.camera_image(cam), self._frame_callback(cam), q)
        self.create_subscription(String, topics.ACTOR_STEP, self._on_step, 10)
        self.create_subscription(String, topics.ACTOR_STATUS, self._on_status, topics.qos_latched())
        self.timer = self.create_timer(1.0 / cfg.rate_hz, self.tick)
        self.server = None
        if cfg.console:
            from robot_rl.teleop.console import ConsoleServer

            self.server = ConsoleServer(self, cfg.console_host, cfg.console_port, token)
            url = self.server.start()
            self.get_logger().info(f"operator console serving on {self.server.address} (its address with the token "
                                   "is on this node's standard output)")
            print(f"operator console: {url}", flush=True)  # the operator's terminal, not /rosout

    # ---- inputs -> topics --------------------------------------------------------------
    def _follower_pose(self):
        """The arm's newest TCP position and yaw (from ``arm/tcp_pose``), for a leader arm that
        anchors the follower to itself; None before the first pose."""
        from geometry_msgs.msg import PoseStamped

        from robot_rl.drivers.so101 import contract_yaw

        latest: list = []

        def on_pose(msg):
            p, o = msg.pose.position, msg.pose.orientation
            latest[:] = [(np.array([p.x, p.y, p.z]), contract_yaw([o.w, o.x, o.y, o.z]))]

        self.create_subscription(PoseStamped, topics.TCP_POSE, on_pose, topics.qos_sensor())
        return lambda: latest[0] if latest else None

    def tick(self) -> None:
        self.publish_decision()
        self.pub_heartbeat.publish(Empty())

    def publish_decision(self) -> None:
        with self.lock:
            readings = [("console", self.keyboard.read())]
            for device in list(self.inputs):
                try:
                    readings.append((device.name, device.read()))
                except DeviceUnavailable as e:
                    self.get_logger().error(f"{device.name}: {e}; going on without it")
                    self.inputs.remove(device)
            for _, reading in readings:
                for event in reading.events:
                    self.send_event(event)
            self.decision = decision = self.switch.decide(readings)
        if decision.intervening:
            self.pub_action.publish(Float32MultiArray(data=decision.action.astype(np.float32).tolist()))
        self.pub_intervening.publish(Bool(data=decision.intervening))

    def send_event(self, event: str) -> None:
        self.pub_events.publish(String(data=event))
        self.get_logger().info(f"operator: {event}")

    # ---- the console's backend -----------------------------------------------------------
    def press(self, event: str) -> None:
        self.send_event(event)

    def intervene(self, how: str) -> None:
        with self.lock:
            if how == "toggle":
                self.switch.toggle()
            else:
                self.switch.held_by_console = how == "hold"
        self.publish_decision()

    def set_keys(self, keys: list[str]) -> None:
        with self.lock:
            self.keyboard.set_keys(keys)
        self.publish_decision()

    def state(self) -> dict:
        status, step = self.status, self.step
        return {"task": self.cfg.task, "linked": time.monotonic() - self.last_linked < 2.0,
                "intervening": self.decision.intervening, "intervention_source": self.decision.source,
                "toggled": self.switch.toggled, "paused": bool(status.get("paused", False)),
                "step": step, "episodes": status.get("episodes"), "successes": status.get("successes"),
                "interventions": status.get("interventions"), "cameras": sorted(self.frames),
                "devices": [d.name for d in self.inputs], "history": list(self.history)}

    def camera_jpeg(self, name: str) -> bytes | None:
        from PIL import Image as PILImage

        frame = self.frames.get(name)
        if frame is None:
            return None
        stamp, image = frame
        cached = self.jpegs.get(name)
        if cached is None or cached[0] != stamp:
            buffer = io.BytesIO()
            PILImage.fromarray(image).save(buffer, "JPEG", quality=self.cfg.jpeg_quality)
            cached = self.jpegs[name] = (stamp, buffer.getvalue())
        return cached[1]

    def _frame_callback(self, cam: str):
        def on_frame(msg):
            try:
                self.frames[cam] = (msgs.ns_from_stamp(msg.header.stamp), msgs.image_from_msg(msg))
            except msgs.MessageError:
                pass
        return on_frame

    def _on_step(self, msg) -> None:
        self.step = step = json.loads(msg.data)
        self.last_linked = time.monotonic()
        humans = [device for device in self.inputs if isinstance(device, SimulatedHumanInput)]
        if step.get("episode_over"):  # every takeover ends with the episode; the simulated human stands by
            self.episode = None           # through the reset
            with self.lock:
                self.switch.episode_over()
            for device in humans:
                device.episode_over()
            self.publish_decision()  # "not intervening" at once, not at the next tick
        elif step.get("episode") != self.episode or step.get("step") == 1:  # an episode started (a dropped one's
            self.episode = step.get("episode")                              # number comes again): watch anew
            for device in humans:
                device.new_episode()

    def _on_status(self, msg) -> None:
        status = json.loads(msg.data)
        if status.get("episodes", 0) != self.status.get("episodes", 0) and status.get("last_episode"):
            episode = status["last_episode"]
            self.history.append({k: episode.get(k) for k in ("success", "return", "intervention_rate",
                                                               "interventions", "episode_steps")})
        self.status = status
        self.last_linked = time.monotonic()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        for device in self.inputs:
            device.close()


def main(args=None) -> None:
    try:
        run(TeleopNode, args)
    except (UserFacingError, ValueError) as e:  # the node's configuration: one line, no traceback
        print(f"teleop_node: error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

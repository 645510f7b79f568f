"""The robot behind ROS 2 topics as a gymnasium env of our contract: the actor, its wrappers and
the recorder use it exactly as they use the sim twin.

``step(action)`` publishes the action as the arm's velocity and gripper commands, then waits for
the arm's next control tick and for camera frames of that instant (a frame older than the arm
state by more than ``max_frame_lag_s`` is stale: it is rejected with a log line and the env
waits for a fresh one, up to ``stale_timeout_s``, after which it raises). With
``command_latency_s`` > 0 a command leaves at a fixed delay after the arm tick its observation
belongs to (or at once, counted as a miss, when the policy is later than that): the robot then
sees a constant observation-to-action delay and a regular command rate, whatever the render
and inference times of the step; 0 sends each command the moment it is ready. ``reset()`` calls the
arm's reset service. In sim the arm also publishes the ground-truth success (reward 1 and the
episode end, as the twin does) and the object poses (for state-observation policies).

The node's callbacks run on a background executor thread; ``ObservationAssembler`` (plain
Python, below) keeps the newest message of each kind and decides when an observation is whole.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque

import gymnasium as gym
import numpy as np

from robot_rl import contract
from robot_rl.contract import ControlLimits, validate_action
from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.errors import InputError, UserFacingError

TOLERANCE_NS = 1_000_000  # stamps carried as float seconds (sim scene, success) round to < 1 us


class StaleObservation(UserFacingError):
    """No fresh observation: a driver stopped publishing or publishes too late."""


class ObservationAssembler:
    """Newest arm state parts and camera frames, with their stamps; ``observation(after_ns)``
    returns a whole observation whose arm state is newer than ``after_ns`` and whose frames
    are no older than the state by more than ``max_frame_lag_ns``, or None and the reason."""

    STATE_PARTS = ("pose", "twist", "wrench", "width")

    def __init__(self, cameras: dict[str, tuple[int, int]], privileged_sizes: dict[str, int] | None,
                 max_frame_lag_ns: int, sim_success: bool):
        self.cameras, self.privileged_sizes = dict(cameras), privileged_sizes
        self.max_frame_lag_ns, self.sim_success = max_frame_lag_ns, sim_success
        self.lock = threading.Condition()
        self.parts: dict[str, tuple[int, object]] = {}
        self.frames: dict[str, tuple[int, np.ndarray]] = {}
        self.privileged: tuple[int, dict] | None = None
        self.success: tuple[int, bool] | None = None
        self.applied: tuple[int, tuple] | None = None  # the arm's executed action of a tick (not waited for)

    def put(self, kind: str, stamp_ns: int, value) -> None:
        with self.lock:
            if kind in self.STATE_PARTS:
                self.parts[kind] = (stamp_ns, value)
            elif kind == "privileged":
                self.privileged = (stamp_ns, value)
            elif kind == "success":
                self.success = (stamp_ns, value)
            elif kind == "applied":
                self.applied = (stamp_ns, value)
            else:
                self.frames[kind] = (stamp_ns, value)
            self.lock.notify_all()

    def observation(self, after_ns: int) -> tuple[dict | None, str]:
        """Caller holds ``lock``."""
        if len(self.parts) < len(self.STATE_PARTS):
            return None, f"no arm state yet (have {sorted(self.parts)})"
        stamps = {k: s for k, (s, _) in self.parts.items()}
        stamp = min(stamps.values())
        if stamp <= after_ns or max(stamps.values()) - stamp > TOLERANCE_NS:
            return None, "waiting for the arm's next control tick"
        obs: dict = {"state": msgs.state_from_msgs(*(self.parts[k][1] for k in self.STATE_PARTS)), "stamp_ns": stamp}
        if self.cameras:
            obs["images"] = {}
            for cam in self.cameras:
                if cam not in self.frames:
                    return None, f"no frame from camera {cam} yet"
                frame_stamp, image = self.frames[cam]
                lag = stamp - frame_stamp
                if lag > self.max_frame_lag_ns + TOLERANCE_NS:
                    return None, (f"stale frame from camera {cam}: {lag / 1e6:.0f} ms older than the arm state "
                                  f"(limit {self.max_frame_lag_ns / 1e6:.0f} ms)")
                obs["images"][cam] = image
            obs["frame_stamp_ns"] = min(self.frames[c][0] for c in self.cameras)
        if self.privileged_sizes:
            if self.privileged is None or abs(self.privileged[0] - stamp) > TOLERANCE_NS:
                return None, "waiting for the sim's object poses of this tick"
            obs["privileged"] = self.privileged[1]
        if self.sim_success:
            if self.success is None or abs(self.success[0] - stamp) > TOLERANCE_NS:
                return None, "waiting for the sim's success flag of this tick"
            obs["success"] = self.success[1]
        if self.applied is not None and abs(self.applied[0] - stamp) <= TOLERANCE_NS:
            obs["applied"] = self.applied[1]
        return obs, ""


def subscribe_arm_state(node, assembler: ObservationAssembler, drops: msgs.DropCounter, after=None):
    """The arm's state topics, and the sim's object poses when the assembler wants them, into
    ``assembler``; ``after()`` runs after each message taken. Returns the gripper and object
    callbacks (for tests that feed them directly)."""
    from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    def put(kind, stamp_ns, value):
        assembler.put(kind, stamp_ns, value)
        if after is not None:
            after()

    def taking(kind):
        return lambda m: put(kind, msgs.ns_from_stamp(m.header.stamp), m)

    def on_gripper(msg):
        if len(msg.position) != 1 or not np.isfinite(msg.position[0]):
            return drops.drop("gripper state", f"position {list(msg.position)}")
        put("width", msgs.ns_from_stamp(msg.header.stamp), float(msg.position[0]))

    def on_objects(msg):
        sizes = assembler.privileged_sizes
        values = np.asarray(msg.data, np.float32)
        if len(values) != 1 + sum(sizes.values()) or not np.all(np.isfinite(values)):
            return drops.drop("object poses", f"{len(values)} values")
        out, i = {}, 1
        for name in sorted(sizes):
            out[name] = values[i : i + sizes[name]]
            i += sizes[name]
        put("privileged", int(round(msg.data[0] * 1e9)), out)

    q = topics.qos_sensor()
    node.create_subscription(PoseStamped, topics.TCP_POSE, taking("pose"), q)
    node.create_subscription(TwistStamped, topics.TCP_TWIST, taking("twist"), q)
    node.create_subscription(WrenchStamped, topics.WRENCH, taking("wrench"), q)
    node.create_subscription(JointState, topics.GRIPPER_STATE, on_gripper, q)
    if assembler.privileged_sizes:
        node.create_subscription(Float64MultiArray, topics.SIM_OBJECTS, on_objects, q)
    return on_gripper, on_objects


def reset_state_stamp(message: str) -> int:
    """The stamp of the first state of the new episode, from ``arm/reset``'s reply; an arm driver
    that does not name it: now (less the float-seconds tolerance)."""
    found = re.search(rf"{topics.RESET_STATE_STAMP} (\d+) ns", message)
    return int(found.group(1)) if found else time.time_ns() - TOLERANCE_NS


class RosArmEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, node, task="PickCube", cameras: tuple[str, ...] = (), image_size=(128, 128),
                 sim: bool = True, privileged: bool = False, limits: ControlLimits = ControlLimits(),
                 max_episode_steps: int | None = None, max_frame_lag_s: float | None = None,
                 stale_timeout_s: float = 5.0, command_latency_s: float = 0.0, log=None):
        from geometry_msgs.msg import TwistStamped
        from sensor_msgs.msg import Image
        from std_msgs.msg import Float32, Float64MultiArray
        from std_srvs.srv import Trigger

        from robot_rl.sim.tasks import get_task

        self.node, self.limits = node, limits
        # a sim task's name or a task object (robot_rl.cell.CellTask: a real cell's task file)
        self.task = get_task(task) if isinstance(task, str) else task
        self.cameras = tuple(cameras)
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        self.period_s = 1.0 / limits.control_hz
        lag = max_frame_lag_s if max_frame_lag_s is not None else 0.5 * self.period_s
        self.stale_timeout_s = stale_timeout_s
        if not 0.0 <= command_latency_s < self.period_s:
            raise InputError(f"command latency {command_latency_s * 1e3:g} ms must lie in [0, one control period "
                             f"= {self.period_s * 1e3:g} ms)")
        self.command_latency_ns = int(command_latency_s * 1e9)
        self.command_latency_misses = 0
        self.log = log or node.get_logger().warning
        priv = self.task.privileged_sizes() if privileged else None
        self.action_space = contract.action_space()
        self.observation_space = contract.observation_space(self.image_size if self.cameras else None, self.cameras, priv)
        self.assembler = ObservationAssembler({c: self.image_size for c in self.cameras}, priv, int(lag * 1e9), sim)
        self.drops = msgs.DropCounter(self.log)
        q = topics.qos_sensor()
        self._on_gripper, self._on_objects = subscribe_arm_state(node, self.assembler, self.drops)
        for cam in self.cameras:
            node.create_subscription(Image, topics.camera_image(cam), self._image_callback(cam), q)
        node.create_subscription(Float64MultiArray, topics.APPLIED_ACTION, self._on_applied, q)
        if sim:
            node.create_subscription(Float64MultiArray, topics.SIM_SUCCESS, self._on_success, q)
        self.pub_velocity = node.create_publisher(TwistStamped, topics.VELOCITY_COMMAND, 10)
        self.pub_gripper = node.create_publisher(Float32, topics.GRIPPER_COMMAND, 10)
        self.reset_client = node.create_client(Trigger, topics.RESET)
        self.trigger, self._float32 = Trigger, Float32
        self._last_stamp = 0
        self._steps = 0
        # the last 10k control steps (bounded: an actor runs for hours)
        self.latencies_ms: deque[float] = deque(maxlen=10_000)  # oldest input's stamp -> command published
        self.ready_latencies_ms: deque[float] = deque(maxlen=10_000)  # observation complete -> action ready
        self._ready_ns = 0
        self.command_times: deque[float] = deque(maxlen=10_000)

    # ---- callbacks (executor thread) ----------------------------------------------------
    def _image_callback(self, cam: str):
        def on_image(msg):
            try:
                image = msgs.image_from_msg(msg, self.image_size)
            except msgs.MessageError as e:
                return self.drops.drop(f"camera {cam} image", str(e))
            self.assembler.put(cam, msgs.ns_from_stamp(msg.header.stamp), image)
        return on_image

    def _on_success(self, msg):
        if len(msg.data) == 2:
            self.assembler.put("success", int(round(msg.data[0] * 1e9)), bool(msg.data[1] > 0.5))

    def _on_applied(self, msg):
        values = np.asarray(msg.data, np.float64)
        if values.shape != (9,) or not np.all(np.isfinite(values)):
            return self.drops.drop("applied action", f"{len(values)} values")
        self.assembler.put("applied", int(round(values[0] * 1e9)), (values[1:8].astype(np.float32), bool(values[8] > 0.5)))

    # ---- gymnasium ----------------------------------------------------------------------
    def _wait_observation(self) -> dict:
        start = time.monotonic()
        warned = None
        with self.assembler.lock:
            while True:
                obs, reason = self.assembler.observation(self._last_stamp)
                if obs is not None:
                    break
                waited = time.monotonic() - start
                if waited > self.stale_timeout_s:
                    raise StaleObservation(f"no fresh observation for {waited:.1f} s: {reason}. Are the arm and camera "
                                           "nodes running and publishing?")
                if waited > 2 * self.period_s and reason != warned and "stale" in reason:
                    self.log(f"rejecting {reason}")
                    warned = reason
                self.assembler.lock.wait(0.02)
        self._ready_ns = time.time_ns()
        self._last_stamp = obs.pop("stamp_ns")
        self._obs_stamp = obs.pop("frame_stamp_ns", self._last_stamp)
        return obs

    def observe(self) -> dict:
        """The next observation, without acting (e.g. after a pause)."""
        obs = self._wait_observation()
        obs.pop("success", None)
        obs.pop("applied", None)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        while not self.reset_client.wait_for_service(timeout_sec=1.0):
            self.log("waiting for the arm's reset service")
        waiting_for_operator = False
        while True:
            future = self.reset_client.call_async(self.trigger.Request())
            end = time.monotonic() + 10.0
            while not future.done():
                if time.monotonic() > end:
                    raise StaleObservation("the arm did not answer its reset service within 10 s")
                time.sleep(0.005)
            result = future.result()
            if result.success:
                break
            if not result.message.startswith(topics.RESET_REFUSED_WAIT):
                raise StaleObservation(f"the arm refused to reset: {result.message}")
            if not waiting_for_operator:  # no episode starts without the operator or under e-stop: wait
                self.log(f"the arm holds ({result.message}): waiting for the operator before the next episode")
                waiting_for_operator = True
            if not self.node.context.ok():
                raise StaleObservation("shut down while waiting for the operator")
            time.sleep(0.1)
        self._last_stamp = reset_state_stamp(result.message) - 1  # the reset's state or a newer one
        self._steps = 0
        obs = self._wait_observation()
        obs.pop("success", None)
        obs.pop("applied", None)
        return obs, {"success": False}

    def step(self, action):
        act = validate_action(action)
        self.ready_latencies_ms.append((time.time_ns() - self._ready_ns) / 1e6)
        if self.command_latency_ns:
            wait_ns = self._last_stamp + self.command_latency_ns - time.time_ns()
            if wait_ns > 0:
                time.sleep(wait_ns / 1e9)
            else:
                self.command_latency_misses += 1
        now = time.time_ns()
        twist = msgs.delta_to_twist(act, now, self.limits.max_translation_m, self.limits.max_rotation_rad,
                                    self.limits.control_hz)
        self.pub_velocity.publish(twist)
        self.pub_gripper.publish(self._float32(data=float(act[6])))
        published = time.time_ns()
        self.latencies_ms.append((published - self._obs_stamp) / 1e6)
        self.command_times.append(published / 1e9)
        obs = self._wait_observation()
        self._steps += 1
        success = bool(obs.pop("success", False))
        truncated = self._steps >= self.max_episode_steps and not success
        info = {"success": success}
        applied = obs.pop("applied", None)
        if applied is not None:  # what the arm executed this period, and whether it was the operator's
            info["applied_action"], info["applied_by_operator"] = applied
        return obs, float(success), success, truncated, info

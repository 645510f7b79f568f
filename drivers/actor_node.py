"""``actor_node``: the policy acting on the robot at the control rate.

Observations come from the arm and camera topics (``RosArmEnv``: stale frames are rejected with
a log line); the reward is the sim's ground truth or a success classifier (``reward_classifier``);
the teleop layer may take over (``teleop/intervening`` + ``teleop/action``: the human's action is
executed, flagged, and goes to both of the learner's buffers) and sends events on ``teleop/events``:
``success`` / ``failure`` end the episode with that outcome (over the classifier's or the sim's
reward), ``reset`` ends it now, ``rerecord`` ends it and drops it from the recording, ``pause``
/ ``resume`` stop and restart acting (the arm's watchdog holds the pose meanwhile). Per step the
actor publishes ``actor/step`` (step, reward, classifier confidence, intervening) and per
episode its intervention count and share on ``actor/status``. Every transition goes to the learner, every finished episode to the
recorder; new weights are swapped in between control steps. Nothing here waits for the learner:
with the learner gone the actor keeps its rate with the last weights it has.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import rclpy
import torch
from rclpy.node import Node
from std_msgs.msg import Bool, Float32MultiArray, String, UInt8MultiArray

from robot_rl.agents.sac import SACAgent
from robot_rl.contract import OPERATOR_EVENTS, ControlLimits
from robot_rl.data.recorder import EpisodeRecorder, store_fields
from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.drivers.node import declare_config, run_loop, status_json
from robot_rl.drivers.ros_env import RosArmEnv
from robot_rl.drivers.ros_transport import actor_endpoint
from robot_rl.envs import FlatObservation
from robot_rl.runtime.learner import transition_arrays
from robot_rl.runtime.wire import encode
from robot_rl.config import POLICIES, ActorNodeConfig, agent_config_for, write_config_json




class EpisodeSink:
    """Where ``EpisodeRecorder`` commits: here a ROS topic instead of a store."""

    def __init__(self, publisher, fields: dict):
        self.publisher, self.fields = publisher, fields
        self.sent = 0

    def add_episode(self, episode: dict) -> int:
        self.publisher.publish(msgs.payload_msg(encode("episode", episode, None)))
        self.sent += 1
        return self.sent - 1


class EpisodeTally:
    """One episode's return, length and interventions (a takeover = a run of human steps)."""

    def __init__(self):
        self.ret, self.steps, self.interventions, self.intervention_steps = 0.0, 0, 0, 0
        self._was_human = False

    def add(self, reward: float, human: bool) -> None:
        self.ret += float(reward)
        self.steps += 1
        self.intervention_steps += human
        self.interventions += human and not self._was_human
        self._was_human = human

    def summary(self) -> dict:
        return {"episode_steps": self.steps, "return": self.ret, "interventions": self.interventions,
                "intervention_steps": self.intervention_steps,
                "intervention_rate": self.intervention_steps / max(self.steps, 1)}


class Teleop:
    """The newest human action and whether the human holds the controls."""

    def __init__(self, max_age_s: float):
        self.max_age_s = max_age_s
        self.intervening = False
        self.action: np.ndarray | None = None
        self.stamp = 0.0

    def on_intervening(self, msg) -> None:
        self.intervening = bool(msg.data)

    def on_action(self, msg) -> None:
        values = np.asarray(msg.data, np.float64)
        if values.shape == (7,) and np.all(np.isfinite(values)):
            self.action, self.stamp = np.clip(values, -1, 1).astype(np.float32), time.monotonic()

    def override(self) -> np.ndarray | None:
        if self.intervening and self.action is not None and time.monotonic() - self.stamp <= self.max_age_s:
            return self.action
        return None


class ActorNode(Node):
    def __init__(self, **node_kwargs):
        super().__init__("actor", **node_kwargs)
        self.cfg = cfg = declare_config(self, ActorNodeConfig)
        if cfg.run_dir:
            write_config_json(f"{cfg.run_dir}/actor_config.json", cfg)
        torch.set_num_threads(1)
        torch.manual_seed(cfg.seed)
        limits = ControlLimits(control_hz=cfg.control_hz)
        classifier = calibration = None
        if cfg.policy not in POLICIES or cfg.keep not in ("all", "successes"):
            raise ValueError(f"policy must be one of {POLICIES} and keep 'all' or 'successes'; got {cfg.policy!r}, "
                             f"{cfg.keep!r}")
        if cfg.policy == "expert" and not cfg.sim:
            raise ValueError("policy 'expert' is the sim's scripted expert: it needs sim:=true (object poses)")
        # every camera is subscribed and recorded; a state policy does not see them
        cameras, image_size = tuple(cfg.cameras), tuple(cfg.image_size)
        if cfg.reward_classifier:
            from robot_rl.reward.classifier import load_classifier

            classifier, calibration = load_classifier(cfg.reward_classifier)
        self.ros_env = RosArmEnv(self, cfg.task, cameras, image_size, sim=cfg.sim, privileged=cfg.sim, limits=limits,
                                 max_episode_steps=cfg.max_episode_steps or None,
                                 command_latency_s=cfg.command_latency_ms / 1e3)
        env = self.ros_env
        if classifier is not None:
            from robot_rl.reward.wrapper import ClassifierReward

            env = ClassifierReward(env, classifier, calibration)
        from robot_rl.reward.wrapper import OperatorOutcome

        self.env = env = OperatorOutcome(env)
        self.flat = FlatObservation(env, cfg.obs)
        self.policy = SACAgent(agent_config_for(cfg, self.flat))  # built as the learner's, from the same fields
        self.expert = None
        if cfg.policy == "expert":
            from robot_rl.sim.experts import make_expert

            self.expert = make_expert(cfg.task, noise=0.1, seed=cfg.seed)
        self.endpoint = actor_endpoint(self)
        self.teleop = Teleop(max_age_s=2.0 / cfg.control_hz)
        self.create_subscription(Bool, topics.TELEOP_INTERVENING, self.teleop.on_intervening, 10)
        self.create_subscription(Float32MultiArray, topics.TELEOP_ACTION, self.teleop.on_action, topics.qos_sensor())
        self.create_subscription(String, topics.TELEOP_EVENTS, self.on_event, 10)
        self.arm_mode = ""  # the arm driver's mode (arm/status): while it holds, actions are not executed
        self.create_subscription(String, topics.ARM_STATUS, self.on_arm_status, topics.qos_latched())
        self.pub_status = self.create_publisher(String, topics.ACTOR_STATUS, topics.qos_latched())
        self.pub_step = self.create_publisher(String, topics.ACTOR_STEP, 10)
        self.events: list[str] = []
        self.events_lock = threading.Lock()
        self.paused = False
        fields, _ = store_fields(env.observation_space, env.action_space.shape[0])
        self.sink = EpisodeSink(self.create_publisher(UInt8MultiArray, topics.EPISODES, topics.qos_data(100)), fields)
        self.recorder = EpisodeRecorder(self.sink)
        self.weights_version = 0
        self.stats = {"steps": 0, "episodes": 0, "successes": 0, "interventions": 0, "intervention_steps": 0,
                      "recorded": 0, "rerecorded": 0, "dropped_arm_held": 0}
        self.episodes: list[dict] = []

    def on_event(self, msg) -> None:
        event = msg.data.strip().lower()
        if event not in OPERATOR_EVENTS:
            self.get_logger().warning(f"ignoring unknown teleop event {msg.data!r}; "
                                      f"known: {', '.join(OPERATOR_EVENTS)}")
            return
        with self.events_lock:
            self.events.append(event)

    def on_arm_status(self, msg) -> None:
        try:
            self.arm_mode = str(json.loads(msg.data).get("mode", ""))
        except (ValueError, AttributeError):
            self.get_logger().warning(f"ignoring a malformed arm status {msg.data[:80]!r}")

    def arm_holds(self) -> bool:
        """The arm ignores commands (e-stop, or its operator is gone): what the actor sends is
        not what happens, so nothing of it may be learned from or recorded."""
        return self.arm_mode in ("estop", "operator_lost")

    def take_events(self) -> list[str]:
        with self.events_lock:
            events, self.events = self.events, []
        return events

    def poll_learner(self, timeout: float = 0.0) -> None:
        for msg in self.endpoint.receive(timeout):
            if msg.kind == "weights" and msg.meta.get("version", 0) != self.weights_version:
                self.policy.load_policy_state_dict({k: torch.from_numpy(v) for k, v in msg.arrays.items()})
                self.weights_version = msg.meta.get("version", 0)
            elif msg.kind == "error":
                self.get_logger().error(f"learner: {msg.meta.get('message')}")

    def wait_for_weights(self, stop: threading.Event) -> None:
        start = time.monotonic()
        while self.weights_version == 0 and not stop.is_set() and rclpy.ok(context=self.context):
            self.poll_learner(0.5)
            if self.weights_version == 0 and int(time.monotonic() - start) % 10 == 9:
                self.get_logger().info("waiting for the learner's first weights (is learner_node running?)")
                time.sleep(1.0)

    def act(self, raw: dict, obs: dict) -> np.ndarray:
        if self.cfg.policy == "learner":
            self.poll_learner()
            return self.policy.act(obs)
        if self.cfg.policy == "expert":
            return self.expert(raw)
        return np.zeros(7, np.float32)  # teleop: no human action -> hold still

    def publish_status(self) -> None:
        latencies = list(self.ros_env.latencies_ms)[-100:]
        self.pub_status.publish(String(data=status_json(
            **self.stats, weights_version=self.weights_version, dropped_transitions=self.endpoint.dropped,
            frame_to_command_ms_p50=float(np.percentile(latencies, 50)) if latencies else None,
            command_latency_misses=self.ros_env.command_latency_misses, paused=self.paused,
            last_episode=self.episodes[-1] if self.episodes else None)))

    def loop(self, stop: threading.Event) -> None:
        cfg = self.cfg
        if cfg.policy == "learner":
            self.wait_for_weights(stop)
            self.get_logger().info(f"acting with weights v{self.weights_version}")
        raw, _ = self.env.reset(seed=cfg.seed)
        if self.expert is not None:
            self.expert.reset()
        solved = False  # sim ground truth, at any step of the episode
        if cfg.record:
            self.recorder.start(raw)
        episode = EpisodeTally()
        end_request = None  # "reset" / "rerecord": the operator ends the episode at the next step
        while not stop.is_set() and rclpy.ok(context=self.context):
            if cfg.env_steps and self.stats["steps"] >= cfg.env_steps:
                break
            if cfg.episodes and self.stats["recorded"] >= cfg.episodes:
                break
            for event in self.take_events():
                if event in ("success", "failure"):
                    self.env.override(event == "success")
                elif event in ("reset", "rerecord"):
                    end_request = event
                elif event == "pause" and not self.paused:
                    self.paused = True
                    self.get_logger().info("paused by the operator: holding still until 'resume'")
                    self.publish_status()
                elif event == "resume" and self.paused:
                    self.paused = False
                    raw = self.ros_env.observe()  # the scene as it is now, not as it was at the pause
                    self.publish_status()
            if self.paused:  # nothing is commanded: the arm's watchdog holds the pose
                time.sleep(0.02)
                continue
            obs = self.flat.observation(raw)
            human = self.teleop.override()
            action = human if human is not None else self.act(raw, obs)
            next_raw, reward, terminated, truncated, info = self.env.step(action)
            if self.arm_holds():  # the episode is void: dropped, and the next one waits for the arm
                self.get_logger().error(f"the arm holds ({self.arm_mode}): dropping this episode "
                                        f"({episode.steps} steps); the next starts when the arm takes commands")
                self.stats["dropped_arm_held"] += 1
                if cfg.record:
                    self.recorder.discard()
                episode = EpisodeTally()
                end_request, solved = None, False
                self.publish_status()
                raw, _ = self.env.reset()  # refused (and waited on) until the operator is back
                if self.expert is not None:
                    self.expert.reset()
                if cfg.record:
                    self.recorder.start(raw)
                continue
            by_human = human is not None
            if info.get("applied_by_operator"):  # the arm ran the operator's input: that is what is stored
                action, by_human = info["applied_action"], True
            if end_request and not terminated:
                truncated = True
            if cfg.policy == "learner":
                self.endpoint.send("transition", transition_arrays(obs, action, reward, self.flat.observation(next_raw),
                                                                   terminated, truncated, by_human))
            if cfg.record:
                self.recorder.step(action, next_raw, reward, terminated, truncated, success=bool(info["success"]),
                                   is_intervention=by_human)
            self.stats["steps"] += 1
            episode.add(reward, by_human)
            self.pub_step.publish(String(data=status_json(
                episode=self.stats["episodes"], step=episode.steps, reward=float(reward), episode_return=episode.ret,
                confidence=info.get("classifier_p"), intervening=by_human, success=bool(info["success"]))))
            solved = solved or bool(info.get("ground_truth_success", info["success"]))
            raw = next_raw
            if terminated or truncated:
                self.stats["episodes"] += 1
                self.stats["successes"] += bool(info["success"])
                self.stats["interventions"] += episode.interventions
                self.stats["intervention_steps"] += episode.intervention_steps
                self.episodes.append({"steps": self.stats["steps"], "success": bool(info["success"]),
                                      "ground_truth_solved": solved if self.cfg.sim else None,
                                      "reward_source": info.get("reward_source", "ground_truth"),
                                      "ended_by": end_request, **episode.summary()})
                solved = False
                if end_request == "rerecord":
                    if cfg.record:
                        self.recorder.discard()
                    self.stats["rerecorded"] += 1
                elif cfg.record and (cfg.keep == "all" or info["success"]):
                    self.recorder.finish()
                    self.stats["recorded"] += 1
                elif cfg.record:
                    self.recorder.discard()
                end_request = None
                episode = EpisodeTally()
                self.publish_status()
                raw, _ = self.env.reset()
                if self.expert is not None:
                    self.expert.reset()
                if cfg.record:
                    self.recorder.start(raw)
        self.publish_status()

    def close(self) -> None:
        """Also after SIGTERM / Ctrl-C, whatever the loop was doing (run_loop calls this)."""
        self.write_summary()

    def write_summary(self) -> None:
        """``<run_dir>/actor_summary.json``: what this actor did, for ``robot-rl report``."""
        if not self.cfg.run_dir:
            return
        from pathlib import Path

        latencies = self.ros_env.latencies_ms
        summary = {"task": self.cfg.task, "obs": self.cfg.obs, "policy": self.cfg.policy,
                   "reward": "classifier" if self.cfg.reward_classifier else "ground_truth",
                   "reward_classifier": self.cfg.reward_classifier or None, "demo_store": self.cfg.demo_store or None,
                   **self.stats, "weights_version": self.weights_version,
                   "frame_to_command_ms_p50": float(np.percentile(latencies, 50)) if latencies else None,
                   "frame_to_command_ms_p99": float(np.percentile(latencies, 99)) if latencies else None,
                   "command_latency_ms": self.cfg.command_latency_ms,
                   "command_latency_misses": self.ros_env.command_latency_misses,
                   "episode_log": self.episodes}
        path = Path(self.cfg.run_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / "actor_summary.json").write_text(json.dumps(summary, indent=1))


def main(args=None) -> None:
    run_loop(ActorNode, args)


if __name__ == "__main__":
    main()

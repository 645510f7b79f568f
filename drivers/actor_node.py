"""``actor_node``: the policy acting on the robot at the control rate, over ROS 2.

Wiring only: the loop itself (acting, human takeover, operator events, transitions, episode
records, weight swaps) is ``robot_rl.actor.ActorLoop``, the same as in ``robot-rl train``. Here
observations come from the arm and camera topics (``RosArmEnv``), the human from
``teleop/intervening`` + ``teleop/action``, operator events from ``teleop/events``, weights
from the learner's topics; transitions go to ``learner/transitions`` and finished episodes to
the recorder. Per step the node publishes ``actor/step`` (step, reward, classifier confidence,
intervening), per episode ``actor/status``. Nothing waits for the learner: with the learner
gone the actor keeps its rate with the last weights it has.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import rclpy
import torch
from rclpy.node import Node
from std_msgs.msg import Bool, Float32MultiArray, String, UInt8MultiArray

from robot_rl.actor import ActorLoop, LearnerClient, ScriptedMotions, ScriptedPolicy, hold_still
from robot_rl.agents.sac import SACAgent
from robot_rl.agent_setup import agent_config_for
from robot_rl.node_config import ActorNodeConfig
from robot_rl.config_values import write_config_json
from robot_rl.contract import ControlLimits
from robot_rl.data.recorder import EpisodeRecorder, store_fields
from robot_rl.drivers import topics
from robot_rl.drivers.actor_io import ArmMode, EpisodeSink, OperatorEvents, RecorderReceipts, Teleop
from robot_rl.drivers.node import apply_task_file, declare_config, run_loop, status_json
from robot_rl.drivers.ros_env import RosArmEnv
from robot_rl.drivers.ros_transport import actor_endpoint
from robot_rl.envs import FlatObservation
from robot_rl.errors import InputError


class ActorNode(Node):
    CONTROL_PATH = True  # run as its own process, it takes its priority parameter (drivers/node.py)

    def __init__(self, **node_kwargs):
        super().__init__("actor", **node_kwargs)
        # a task file sets the task, rate, image size and (unless given) the classifier
        cfg, task = apply_task_file(declare_config(self, ActorNodeConfig))
        self.cfg = cfg
        if cfg.run_dir:
            write_config_json(f"{cfg.run_dir}/actor_config.json", cfg)
        if cfg.policy == "expert" and not cfg.sim:
            raise InputError("policy 'expert' is the sim's scripted expert: it needs sim:=true (object poses)")
        torch.set_num_threads(1)
        torch.manual_seed(cfg.seed)
        # every camera is subscribed and recorded; a state policy does not see them
        self.ros_env = env = RosArmEnv(self, task, tuple(cfg.cameras), tuple(cfg.image_size), sim=cfg.sim,
                                       privileged=cfg.sim, limits=ControlLimits(control_hz=cfg.control_hz),
                                       max_episode_steps=cfg.max_episode_steps or None,
                                       command_latency_s=cfg.command_latency_ms / 1e3)
        if cfg.reward_classifier:
            from robot_rl.reward.classifier import load_classifier
            from robot_rl.reward.wrapper import ClassifierReward

            env = ClassifierReward(env, *load_classifier(cfg.reward_classifier))
        if cfg.base_policy:  # the lab's own policy, frozen; the learner's policy is its residual (no probe: a robot)
            from robot_rl.base_policy import make_base_env

            env = make_base_env(env, cfg.obs, tuple(cfg.cameras), cfg.base_policy, cfg.base_python, cfg.base_every,
                                cfg.base_mode, probe_seed=None, base_map=cfg.base_map)
        if (cfg.policy == "checkpoint") != bool(cfg.checkpoint):
            raise InputError("policy 'checkpoint' and the checkpoint parameter go together (the run folder or "
                             f"checkpoint whose policy acts); got policy {cfg.policy!r}, checkpoint {cfg.checkpoint!r}")
        if cfg.policy == "checkpoint":  # frozen weights, the mean action: how a trained policy does on its own
            flat = FlatObservation(env, cfg.obs)
            observe = flat.observation
            self.policy = frozen_policy(cfg.checkpoint, flat)
        elif cfg.policy == "learner" or cfg.sim:
            flat = FlatObservation(env, cfg.obs)
            observe = flat.observation
            self.policy = SACAgent(agent_config_for(cfg, flat))  # built as the learner's, from the same fields
        else:  # a scripted or human policy on a cell without the sim's object poses: no network to build
            observe, self.policy = (lambda raw: {"state": raw["state"]}), None
        self.endpoint = actor_endpoint(self)
        self.learner = LearnerClient(self.endpoint, self.policy,
                                     on_error=lambda m: self.get_logger().error(f"learner: {m}"))
        act = {"learner": lambda raw, obs: self.policy.act(obs), "expert": None, "teleop": hold_still,
               "motions": ScriptedMotions(),
               "checkpoint": lambda raw, obs: self.policy.act(obs, deterministic=True)}[cfg.policy]
        self.teleop = Teleop(max_age_s=2.0 / cfg.control_hz)
        self.events, self.arm = OperatorEvents(self.get_logger()), ArmMode(self.get_logger())
        recorder = self.sink = None
        if cfg.record:
            fields, _ = store_fields(env.observation_space, env.action_space.shape[0])
            publisher = self.create_publisher(UInt8MultiArray, topics.EPISODES, topics.qos_data(100))
            sender = f"{self.get_fully_qualified_name()}:{os.getpid()}"  # this process, not an earlier one
            self.sink, self.receipts = EpisodeSink(publisher, fields, sender), RecorderReceipts(sender)
            self.create_subscription(String, topics.RECORDER_STATUS, self.receipts.on_status, topics.qos_latched())
            recorder = EpisodeRecorder(self.sink)
        self.actor = ActorLoop(env, observe, act or ScriptedPolicy(cfg.task, cfg.seed), human=self.teleop,
                               learner=self.learner if cfg.policy == "learner" else None, recorder=recorder,
                               keep=cfg.keep, arm_holds=self.arm.holds, observe_now=self.ros_env.observe,
                               ground_truth=cfg.sim, log=self.get_logger().warning)
        self.create_subscription(Bool, topics.TELEOP_INTERVENING, self.teleop.on_intervening, 10)
        self.create_subscription(Float32MultiArray, topics.TELEOP_ACTION, self.teleop.on_action, topics.qos_sensor())
        self.create_subscription(String, topics.TELEOP_EVENTS, self.events.on_event, 10)
        self.create_subscription(String, topics.ARM_STATUS, self.arm.on_status, topics.qos_latched())
        self.pub_status = self.create_publisher(String, topics.ACTOR_STATUS, topics.qos_latched())
        self.pub_step = self.create_publisher(String, topics.ACTOR_STEP, 10)

    def counts(self, latencies) -> dict:
        return {**self.actor.stats.as_dict(), "weights_version": self.learner.weights_version,
                **self.learner.lag_figures(), "dropped_transitions": self.endpoint.dropped,
                "frame_to_command_ms_p50": float(np.percentile(latencies, 50)) if latencies else None,
                "command_latency_misses": self.ros_env.command_latency_misses}

    def publish_status(self) -> None:
        episodes = self.actor.episodes
        self.pub_status.publish(String(data=status_json(
            **self.counts(list(self.ros_env.latencies_ms)[-100:]), paused=self.actor.paused,
            last_episode=episodes[-1] if episodes else None)))

    def loop(self, stop: threading.Event) -> None:
        cfg, actor = self.cfg, self.actor
        if cfg.policy == "learner":
            self.learner.wait_for_first_weights(lambda: not stop.is_set() and rclpy.ok(context=self.context),
                                                self.get_logger().info)
            self.get_logger().info(f"acting with weights v{self.learner.weights_version}")
        actor.start(seed=cfg.seed)
        while not stop.is_set() and rclpy.ok(context=self.context):
            if (cfg.env_steps and actor.stats.steps >= cfg.env_steps) or (
                    cfg.episodes and actor.stats.recorded >= cfg.episodes):
                break
            for event in self.events.take():
                was_paused = actor.paused
                actor.handle(event)
                if actor.paused != was_paused:
                    self.publish_status()
            result = actor.step()
            if result is None:  # paused: nothing is commanded, the arm's watchdog holds the pose
                self.events.wait(0.1)
            elif result.dropped or result.episode is not None:
                self.publish_status()
            if result is not None:  # a dropped episode is over too: a simulated human stands by through the reset
                self.pub_step.publish(String(data=status_json(
                    episode=actor.stats.episodes - (result.episode is not None), step=result.episode_step,
                    reward=result.reward, episode_return=result.episode_return,
                    confidence=result.info.get("classifier_p"), intervening=result.by_human,
                    success=result.success, episode_over=result.dropped or result.episode is not None,
                    dropped=result.dropped)))
        self.wait_for_recorder(stop)  # if it stopped on its own, the supervisor stops the recorder next
        self.publish_status()

    def wait_for_recorder(self, stop: threading.Event, timeout_s: float = 30.0) -> None:
        """Until the recorder has handled every episode sent; no longer than ``timeout_s`` (a
        recorder that is gone, which is then said), and not at all once the node is told to stop."""
        def stopping() -> bool:
            return stop.is_set() or not rclpy.ok(context=self.context)

        if stopping() or self.sink is None or self.sink.sent == 0 or self.sink.publisher.get_subscription_count() == 0:
            return  # nothing sent, nobody to confirm it, or shutting down
        if not self.receipts.wait_for(self.sink.sent, timeout_s, cancelled=stopping):
            self.get_logger().warning(f"the recorder confirmed {self.receipts.handled + 1} of the {self.sink.sent} "
                                      f"episodes sent; the others may be lost")

    def close(self) -> None:
        """``<run_dir>/actor_summary.json``: what this actor did, for ``robot-rl report``; also after
        SIGTERM / Ctrl-C, whatever the loop was doing (run_loop calls this)."""
        if not self.cfg.run_dir:
            return
        cfg, latencies = self.cfg, list(self.ros_env.latencies_ms)
        summary = {"task": cfg.task, "obs": cfg.obs, "policy": cfg.policy, "checkpoint": cfg.checkpoint or None,
                   "reward": "classifier" if cfg.reward_classifier else "ground_truth",
                   "reward_classifier": cfg.reward_classifier or None, "demo_store": cfg.demo_store or None,
                   **self.counts(latencies), "command_latency_ms": cfg.command_latency_ms,
                   "frame_to_command_ms_p99": float(np.percentile(latencies, 99)) if latencies else None,
                   "episode_log": self.actor.episodes}
        path = Path(self.cfg.run_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / "actor_summary.json").write_text(json.dumps(summary, indent=1))


def frozen_policy(source: str, flat: FlatObservation) -> SACAgent:
    """The policy of a run folder's newest verified checkpoint (or of the checkpoint ``source``),
    on the CPU, without its optimizers; a checkpoint that does not read this cell's observations
    is refused in one line naming it."""
    from robot_rl.runtime.checkpoint import check_compatible, check_recorded_network, load_agent, resolve_checkpoint

    ckpt = resolve_checkpoint(Path(source))
    agent = load_agent(ckpt / "agent.safetensors", with_optimizers=False, device="cpu")
    check_recorded_network(agent.config, ckpt)
    check_compatible(agent.config, flat, ckpt)
    return agent


def main(args=None) -> None:
    run_loop(ActorNode, args)


if __name__ == "__main__":
    main()

"""``learner_node``: SAC/RLPD updates from the actors' transitions; weights out, latched.

On start the replay is rebuilt from what is durable: the demonstrations store and every episode
the recorder has committed to the online store; the agent resumes from the newest checkpoint in
the run folder that verifies (``resume``; what a save killed midway left is ignored and removed).
So a learner killed and restarted mid-run loses no completed episode, and the actors keep acting
with the last weights they have meanwhile. Checkpoints (agent only; the replay lives in the
stores) are written every ``checkpoint_every_s``. The node's whole resolved config is written to
``<run_dir>/learner_config.json`` and kept in each checkpoint (``train_config``).
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from pathlib import Path

import rclpy
import torch
from rclpy.node import Node

from robot_rl.drivers.node import apply_task_file, declare_config, run_loop
from robot_rl.drivers.ros_transport import learner_endpoint
from robot_rl.envs import obs_spec, spec_env
from robot_rl.runtime.checkpoint import (check_compatible, clean_leftovers, latest_checkpoint, list_checkpoints,
                                         load_agent, read_agent_config, write_checkpoint)
from robot_rl.runtime.learner import Learner, build_learner
from robot_rl.runtime.priority import lower_priority
from robot_rl.agent_setup import agent_config_for
from robot_rl.node_config import LearnerNodeConfig
from robot_rl.config_values import write_config_json


def load_online_store(path: str, env, task: str, replay) -> dict:
    """Every committed episode of the recorder's store into the online replay (interventions
    also into the demo buffer, as when they arrive live)."""
    from robot_rl.data.demos import check_store_fits_env
    from robot_rl.data.recorder import transitions
    from robot_rl.data.store import EpisodeStore

    store = EpisodeStore.open(path)
    check_store_fits_env(store, env, task)
    steps = 0
    for i in range(len(store)):
        for transition in transitions(store, i):
            replay.add(env.transition(transition))
            steps += 1
    return {"episodes": len(store), "steps": steps}


class LearnerNode(Node):
    def __init__(self, **node_kwargs):
        super().__init__("learner", **node_kwargs)
        # a task file sets the task and the image size
        cfg, task = apply_task_file(declare_config(self, LearnerNodeConfig))
        self.cfg = cfg
        torch.set_num_threads(cfg.torch_threads)
        lower_priority(cfg.priority)  # below the arm, the cameras and the actor: they keep their slots
        torch.manual_seed(cfg.seed)
        self.env = spec_env(task, cfg.obs, tuple(cfg.cameras), tuple(cfg.image_size), base_action=bool(cfg.base_policy))
        self.run_dir = Path(cfg.run_dir)
        write_config_json(self.run_dir / "learner_config.json", cfg)
        self.endpoint = learner_endpoint(self)
        self.learner: Learner = build_learner(cfg, agent_config_for(cfg, self.env),
                                              obs_spec(self.env.observation_space), self.endpoint, self.run_dir)
        for leftover in clean_leftovers(self.run_dir):
            self.get_logger().warning(f"removed {leftover}, left by a checkpoint save that was interrupted")
        ckpt = latest_checkpoint(self.run_dir, log=self.get_logger().warning) if cfg.resume else None
        if ckpt is not None:
            check_compatible(read_agent_config(ckpt), self.env, ckpt)
            self.learner.resume_from(load_agent(ckpt / "agent.safetensors", device=self.learner.agent.config.device))
            self.get_logger().info(f"resumed the agent from {ckpt}")
        log = self.get_logger().info
        if cfg.demo_store:
            from robot_rl.data.demos import load_demos

            info = load_demos(cfg.demo_store, self.env, cfg.task, self.learner.replay.add_demo, cfg.demo_map)
            log(f"{info['episodes']} demonstrations ({info['steps']} steps) from {cfg.demo_store}")
        if cfg.online_store and Path(cfg.online_store).exists():
            info = load_online_store(cfg.online_store, self.env, cfg.task, self.learner.replay)
            self.learner.reloaded_online(info["steps"])
            log(f"{info['episodes']} recorded episodes ({info['steps']} steps) from {cfg.online_store}")
        self.checkpoints = 0
        self.last_checkpoint = time.monotonic()

    def checkpoint(self, announce: bool = True) -> Path:
        name = time.strftime("%Y%m%d-%H%M%S-") + f"{self.learner.agent.num_updates:09d}"
        state = {"updates": self.learner.agent.num_updates, "online": self.learner.online_received,
                 "train_config": dataclasses.asdict(self.cfg)}
        path = write_checkpoint(self.run_dir, name, self.learner.agent, None, state)
        for old in list_checkpoints(self.run_dir)[: -self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        self.learner.last_checkpoint = str(path)
        self.last_checkpoint = time.monotonic()
        if announce:
            self.endpoint.send("checkpoint_saved", meta={"path": str(path)})
        self.get_logger().info(f"checkpoint {path}")
        return path

    def close(self) -> None:
        self.checkpoint(announce=rclpy.ok(context=self.context))  # also on SIGTERM / Ctrl-C

    def loop(self, stop: threading.Event) -> None:
        """Pre-train (unless resumed), publish weights, then ``Learner.run``: each transition's
        updates as it comes, a checkpoint every ``checkpoint_every_s``."""
        self.learner.begin()
        self.get_logger().info(f"weights v{self.learner.weights_version} published; waiting for transitions")
        self.learner.run(keep_running=lambda: not stop.is_set() and rclpy.ok(context=self.context),
                         every_pass=self._checkpoint_when_due, kinds=("transition",))

    def _checkpoint_when_due(self) -> None:
        if time.monotonic() - self.last_checkpoint > self.cfg.checkpoint_every_s:
            self.checkpoint()


def main(args=None) -> None:
    run_loop(LearnerNode, args)


if __name__ == "__main__":
    main()

"""The ROS 2 nodes' configs: the actor and learner nodes take the trainer's settings (the bases
of ``robot_rl.config``) plus their own; each field is one ROS parameter
(``robot_rl.drivers.node.declare_config``). The drivers' own nodes (arm, cameras, recorder,
teleop) keep theirs beside their code."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.config import (BasePolicyConfig, CellConfig, ContactConfig, LearningConfig, PolicyConfig, RewardConfig,
                             setting)

POLICIES = ("learner", "expert", "teleop", "motions", "checkpoint")


@dataclass
class TaskFileConfig:
    """A real cell's task (the nodes; robot_rl.drivers.node.apply_task_file reads it)."""

    task_file: str = setting("", "a real cell's task file (robot_rl/cell.py; examples in robot_rl/tasks/): its name, "
                                 "rate, cameras and classifier replace task, control_hz, image_size and an empty "
                                 "reward_classifier; empty: the sim task named by task")


CONTROL_PRIORITIES = ("realtime", "normal")  # the arm, camera and actor nodes' (robot_rl/runtime/priority.py)
LEARNER_PRIORITIES = ("idle", "low", "normal")  # the learner node's


@dataclass
class ActorNodeConfig(BasePolicyConfig, TaskFileConfig, RewardConfig, PolicyConfig, CellConfig):
    """``actor_node``: the policy acting on the robot at the control rate."""

    sim: bool = setting(True, "the arm is the twin: ground-truth success and object poses are published")
    control_hz: float = setting(10.0, "policy rate")
    # a constant delay and a regular command rate, whatever a step's render and inference took
    # (bench ros: pixel policy loop jitter p99 7 -> 3 ms)
    command_latency_ms: float = setting(15.0, "commands leave this long after their observation's arm tick "
                                              "(0: the moment they are ready)")
    max_episode_steps: int = setting(0, "episode length limit (0: the task's)")
    env_steps: int = setting(0, "stop after this many steps (0: run until shut down)")
    record: bool = setting(True, "finished episodes -> recorder/episodes")
    keep: str = setting("all", "episodes to record: all, successes", choices=("all", "successes"))
    episodes: int = setting(0, "stop after this many recorded episodes (0: no limit)")
    policy: str = setting("learner", "learner (weights from learner_node), expert (the sim's scripted expert), teleop, "
                          "motions (a scene-free square with the gripper closing and opening: checks a cell's arm), "
                          "checkpoint (a trained policy alone, frozen and deterministic: a grade through the cell)",
                          choices=POLICIES)
    checkpoint: str = setting("", "policy checkpoint: the run folder or checkpoint whose policy acts")
    run_dir: str = setting("", "where to write actor_config.json and, when the run ends, actor_summary.json "
                               "(robot-rl report reads it)")
    device: str = setting("cpu", "the torch device of the policy's acting copy: cpu (a robot PC acts on its CPU "
                                 "while the learner node uses a GPU), auto, cuda, cuda:N or mps")
    priority: str = setting("realtime", "the actor's CPU priority (the control path): realtime (SCHED_FIFO where "
                                        "the system allows it, else a warning and normal) or normal",
                            choices=CONTROL_PRIORITIES)


@dataclass
class LearnerNodeConfig(BasePolicyConfig, TaskFileConfig, LearningConfig, PolicyConfig, ContactConfig,
                        CellConfig):
    """``learner_node``: SAC/RLPD updates from the actors' transitions."""

    run_dir: str = setting("runs/ros-train", "checkpoints and learner_config.json")
    online_store: str = setting("", "the recorder node's store: reloaded into the replay on start")
    resume: bool = setting(True, "continue from the newest checkpoint in run_dir")
    checkpoint_every_s: float = setting(60.0, "seconds between checkpoints (and one on shutdown)")
    keep_checkpoints: int = setting(3, "checkpoints kept in run_dir")
    torch_threads: int = setting(1, "torch CPU threads")
    priority: str = setting("idle", "the learner's CPU priority beside the control path on a one-PC cell: idle "
                                    "(SCHED_IDLE: only the time the arm, cameras and actor leave), low (niceness 10) "
                                    "or normal (robot-rl bench ros measures each)", choices=LEARNER_PRIORITIES)

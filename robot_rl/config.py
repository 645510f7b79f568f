"""Every configuration of robot_rl, in one place: training (``TrainConfig``), and the ROS nodes'
(``ActorNodeConfig``, ``LearnerNodeConfig``). The command line, the ROS parameters and the YAML
files are generated from these dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from robot_rl.agents.sac import SACConfig
from robot_rl.envs import obs_spec


@dataclass
class TrainConfig:
    task: str = "PickCube"
    backend: str = "mujoco"
    obs: str = "state"  # "state" (robot state + object poses) or "pixels" (cameras + robot state)
    image_size: tuple[int, int] = (64, 64)
    cameras: tuple[str, ...] = ("front", "wrist")
    demos: int = 10  # scripted demonstrations to record in memory first (ignored with demo_store)
    demo_store: str | None = None  # an episode store (robot-rl record / teleop) to take the demos from
    demo_noise: float = 0.1
    reward_classifier: str | None = None  # a success classifier folder: reward from camera frames, not ground truth
    # > 0: a simulated human (teleop/simulated_human.py) watches and takes over when the policy
    # stalls or heads for failure; its actions are executed, flagged and learned from
    human_eagerness: float = 0.0
    human_takeover_steps: int = 15
    human_max_takeovers: int = 3  # per episode
    # > 0: also this many behaviour-cloning steps of the policy's base (residual) or mean on the
    # demo buffer per human step received (DAgger-style). Off: on PickCube (10 demos) it made
    # the simulated human's help a hindrance (not at 90% by 15k steps; 5k without this)
    intervention_bc_steps: int = 0
    env_steps: int = 20_000
    seed: int = 0
    # learner pacing
    utd: float = 2.0  # gradient updates per online transition
    batch_size: int = 256
    demo_fraction: float = 0.5
    n_step: int = 1
    critic_actor_ratio: int = 1
    pretrain_steps: int = 1000  # behaviour cloning steps on the demos before RL
    critic_warmup_steps: int = 1000  # critic-only updates on the demos before RL
    random_steps: int = 1000  # uniform random actions first, only when there are no demos
    actor_delay: int = 0  # online env steps before the actor starts updating (critic-only until then)
    learning_starts: int = 0
    replay_capacity: int = 200_000
    demo_capacity: int = 50_000
    weights_every: int = 50  # updates between weight broadcasts
    # runtime
    learner: str = "process"  # "process" or "inline"
    sync: bool = True
    max_lead: int = 10
    # evaluation and output
    eval_every: int = 2000
    eval_episodes: int = 20
    stop_at_success: float | None = None  # end the run at the first evaluation at or above this success rate
    final_eval_episodes: int = 50
    checkpoint_every: int = 2000  # env steps between checkpoints ...
    checkpoint_every_s: float = 300.0  # ... or seconds, whichever comes first (and always on SIGTERM/SIGINT)
    run_dir: str | None = None
    progress: bool = True
    residual: bool = True  # with demos: residual RL on a frozen BC base (see agents/sac.py)
    residual_scale: float = 0.5
    residual_penalty: float = 0.1  # holds the policy near the base unless Q clearly says otherwise
    agent: dict = field(default_factory=dict)  # SACConfig overrides

    @property
    def has_demos(self) -> bool:
        return self.demo_store is not None or self.demos > 0

    def validate(self) -> None:
        if self.learner not in ("process", "inline"):
            raise ValueError(f"learner must be 'process' or 'inline', got {self.learner!r}")
        for name in ("env_steps", "batch_size", "eval_every", "eval_episodes", "final_eval_episodes",
                     "checkpoint_every", "weights_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.checkpoint_every_s > 0:
            raise ValueError(f"checkpoint_every_s must be > 0 seconds, got {self.checkpoint_every_s}")
        if self.stop_at_success is not None and not 0.0 <= self.stop_at_success <= 1.0:
            raise ValueError(f"stop_at_success is a success rate in [0, 1], got {self.stop_at_success}")
        if min(self.image_size) < 1:
            raise ValueError(f"image_size must be positive, got {self.image_size}")
        if self.demo_store is not None and not Path(self.demo_store).exists():
            raise FileNotFoundError(f"demo store {self.demo_store}: no such path")
        if self.reward_classifier is not None and not Path(self.reward_classifier).exists():
            raise FileNotFoundError(f"reward classifier {self.reward_classifier}: no such path")
        if not 0.0 <= self.human_eagerness <= 1.0:
            raise ValueError(f"human_eagerness must lie in [0, 1] (0: no human), got {self.human_eagerness}")
        if self.demos < 0 or self.utd <= 0:
            raise ValueError("demos must be >= 0 and utd > 0")
        agent = SACConfig.from_dict(self.agent)  # unknown keys fail here, before anything starts
        if not 1 <= agent.num_target_critics <= agent.num_critics:
            raise ValueError(f"num_critics must be >= num_target_critics >= 1, got num_critics={agent.num_critics}, "
                             f"num_target_critics={agent.num_target_critics} (e.g. --num-critics 2 or more)")


def agent_config_for(cfg: TrainConfig, env) -> SACConfig:
    spec = obs_spec(env.observation_space)
    base = dict(state_dim=spec["state"][0][0], cameras=tuple(env.cameras), image_size=tuple(cfg.image_size),
                grasp_critic=env.unwrapped.task.uses_gripper,
                residual_scale=cfg.residual_scale if cfg.residual and cfg.has_demos else 0.0,
                residual_penalty=cfg.residual_penalty if cfg.residual and cfg.has_demos else 0.0)
    return SACConfig.from_dict({**base, **cfg.agent})


@dataclass
class ActorNodeConfig:
    task: str = "PickCube"
    obs: str = "state"  # "state" (sim only: object poses) or "pixels"
    cameras: tuple[str, ...] = ("front", "wrist")  # subscribed when obs is pixels (or for the classifier)
    image_size: tuple[int, ...] = (64, 64)
    sim: bool = True  # the arm is the twin: ground-truth success and object poses are published
    reward_classifier: str = ""  # a classifier folder: reward from camera frames, not ground truth
    control_hz: float = 10.0
    # commands leave this long after their observation's arm tick (0: the moment they are
    # ready): a constant delay and a regular command rate, whatever a step's render and
    # inference took (bench ros: pixel policy loop jitter p99 7 -> 3 ms)
    command_latency_ms: float = 15.0
    max_episode_steps: int = 0  # 0: the task's limit
    env_steps: int = 0  # stop after this many steps (0: run until shut down)
    record: bool = True  # finished episodes -> recorder/episodes
    keep: str = "all"  # episodes to record: all, successes
    episodes: int = 0  # stop after this many recorded episodes (0: no limit)
    policy: str = "learner"  # learner (weights from learner_node), expert (the sim's scripted expert), teleop
    run_dir: str = ""  # where to write actor_summary.json when the run ends (robot-rl report reads it)
    seed: int = 0
    demo_store: str = ""  # the learner's demonstrations, if any: then the policy acts residually on a BC base


POLICIES = ("learner", "expert", "teleop")


@dataclass
class LearnerNodeConfig:
    task: str = "PickCube"
    obs: str = "state"
    cameras: tuple[str, ...] = ("front", "wrist")
    image_size: tuple[int, ...] = (64, 64)
    run_dir: str = "runs/ros-train"
    demo_store: str = ""  # demonstrations (robot-rl record / teleop)
    online_store: str = ""  # the recorder node's store: reloaded into the replay on start
    resume: bool = True  # continue from the newest checkpoint in run_dir
    seed: int = 0
    utd: float = 2.0
    batch_size: int = 256
    pretrain_steps: int = 1000
    critic_warmup_steps: int = 1000
    weights_every: int = 50
    checkpoint_every_s: float = 60.0
    keep_checkpoints: int = 3
    torch_threads: int = 1

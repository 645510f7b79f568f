"""Every configuration of robot_rl, in one place: training (``TrainConfig``), the other commands
(``RecordConfig``, ``EvalConfig``, ``EncoderPretrainConfig``) and the ROS nodes'
(``ActorNodeConfig``, ``LearnerNodeConfig``).

A field and its default are written once: the three share base dataclasses (``CellConfig``:
what the policy observes; ``PolicyConfig``: what shapes its networks; ``LearningConfig``: how
the learner learns) and add only their own fields. Each field carries its help text
(``setting``). From these dataclasses come the commands' options
(``robot_rl.config_cli``), the ROS parameters (``robot_rl.drivers.node.declare_config``) and the
checks of YAML / JSON configs (``config_values.check_values``): unknown keys and wrong types are one
``ConfigError`` line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from robot_rl.agents.settings import AgentSettings
from robot_rl.config_values import check_values
from robot_rl.errors import InputError, MissingFileError


def setting(default, help: str, **extra):
    """A config field: its default and its help (the CLI's --help and the ROS parameter's
    description). ``extra`` says more for the generated options and checks: ``choices``,
    ``metavar``, ``flags`` (more option strings, e.g. ``("--steps",)``), ``parse`` (text ->
    {field: value}, for an option that sets more than its field), ``positional`` (the words after the
    options, a tuple field), ``kept_on_resume`` (a resumed
    run keeps the field: ``kept_on_resume``). A dataclass default (the
    ``agent``'s settings) is a fresh copy for each config."""
    metadata = {"help": help, **extra}
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: dataclasses.replace(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def kept_on_resume(cls) -> tuple[str, ...]:
    """The fields of config ``cls`` that a resumed run keeps (``setting(..., kept_on_resume=True)``):
    they shape the networks, the replay or the data it was trained on."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("kept_on_resume"))


def demos_or_store(text: str) -> dict:
    """``--demos N`` (scripted demonstrations recorded first) or ``--demos STORE`` (an episode store)."""
    return {"demos": int(text), "demo_store": None} if text.isdigit() else {"demos": 0, "demo_store": text}


# ------------------------------------------------------------------ shared parts
@dataclass
class CellConfig:
    """What the policy observes (the trainer, the actor node and the learner node alike)."""

    task: str = setting("PickCube", "the task (robot-rl sim tasks lists them)", kept_on_resume=True)
    obs: str = setting("state", "state: robot state + the sim's object poses (sim only); pixels: cameras + robot state",
                       choices=("state", "pixels"), kept_on_resume=True)
    cameras: tuple[str, ...] = setting(("front", "wrist"), "the cameras (the policy's with obs pixels)", metavar="NAME", kept_on_resume=True)
    image_size: tuple[int, int] = setting((64, 64), "camera frames: height width (one number: square)", metavar="N", kept_on_resume=True)
    seed: int = setting(0, "random seed")


ARM_MAX_FORCE = 60.0  # N per axis: the twin's impedance controller's own bound (sim/controller.py ImpedanceGains)


@dataclass
class ContactConfig:
    """How the twin's arm meets contact in a run: a Franka's collision reflex and the impedance
    controller's force bound (the trainer's twin; the learner node records them, so that
    ``robot-rl eval`` grades the run on the same twin)."""

    collision_reflex: bool = setting(False, "the twin stops as a Franka's collision reflex does: an episode whose "
                                            "end-effector contact force passes libfranka's thresholds (20 N a "
                                            "translational axis) ends there as a failure (sim/env.py; over ROS the "
                                            "sim_train stack's collision_reflex:=true)", kept_on_resume=True)
    arm_max_force: float = setting(ARM_MAX_FORCE, "the Panda twin's impedance controller asks for at most this force, "
                                                  "N per axis (about 20: a Franka under SERL's reference clipping, a "
                                                  "compliance that keeps a press under the collision reflex)",
                                   metavar="N", kept_on_resume=True)

    def validate_contact(self, env: str | None) -> None:
        """The contact settings are the Panda twin's: one line for a bound that is no force, or for
        either beside a Gymnasium env (``env``) of one's own."""
        if self.collision_reflex and env is not None:
            raise InputError(f"--collision-reflex is the Panda twin's; --env {env} ends its own episodes")
        if not self.arm_max_force > 0:
            raise InputError(f"--arm-max-force must be > 0 (N per axis), got {self.arm_max_force:g}")
        if self.arm_max_force != ARM_MAX_FORCE and env is not None:
            raise InputError(f"--arm-max-force is the Panda twin's controller's; --env {env} moves its own arm")


@dataclass
class PolicyConfig:
    """What shapes the policy's networks: the actor's copy is built as the learner's."""

    demo_store: str | None = setting(None, "an episode store (robot-rl record / teleop) of demonstrations, or a "
                                           "LeRobotDataset v3.0 folder; with demos the policy acts residually on a "
                                           "behaviour-cloned base",
                                     metavar="STORE", kept_on_resume=True)
    demo_map: str | None = setting(None, "with a LeRobotDataset folder as the demos: the YAML map of its features "
                                         "(robot-rl data import; not needed for one robot-rl data export wrote)",
                                   metavar="FILE.yaml")
    residual: bool = setting(True, "with demos: residual RL on a frozen behaviour-cloned base (see agents/sac.py)", kept_on_resume=True)
    residual_scale: float = setting(0.5, "with demos and residual: bound of the learned correction to the base", kept_on_resume=True)
    residual_penalty: float = setting(0.1, "with demos and residual: holds the policy near the base unless Q "
                                           "clearly says otherwise", kept_on_resume=True)
    frozen_encoder: str | None = setting(None, "with obs pixels: an encoder folder (robot-rl encoder pretrain); its "
                                               "frozen backbone's features of each frame are computed once and "
                                               "cached in the replay, and only a small head trains (fast on a CPU)",
                                         metavar="DIR")
    agent: AgentSettings = setting(AgentSettings(), "SAC settings (AgentSettings in agents/settings.py), KEY=VALUE, "
                                                    "repeatable; e.g. critic_actor_ratio=2", metavar="KEY=VALUE", kept_on_resume=True)

    def __post_init__(self):
        if isinstance(self.agent, dict):  # as a YAML file, a run's config.json or Python code gives it
            self.agent = AgentSettings(**check_values(AgentSettings, self.agent, "agent"))

    @property
    def has_demos(self) -> bool:
        return bool(self.demo_store)


@dataclass
class LearningConfig:
    """How the learner learns (the trainer's learner and the learner node alike)."""

    utd: float = setting(2.0, "gradient updates per online transition (update-to-data ratio)")
    batch_size: int = setting(256, "transitions per gradient update")
    demo_fraction: float = setting(0.5, "share of each batch drawn from the demo buffer", kept_on_resume=True)
    n_step: int = setting(1, "n-step returns")
    pretrain_steps: int = setting(1000, "behaviour-cloning steps on the demos before RL")
    critic_warmup_steps: int = setting(1000, "critic-only updates on the demos before RL")
    random_steps: int = setting(1000, "without demos: uniform random actions first; learning starts after them")
    actor_delay: int = setting(0, "online transitions before the actor starts updating (critic-only until then)")
    learning_starts: int = setting(0, "online transitions before learning starts (0: after random_steps without "
                                      "demos, at once with them)")
    intervention_bc_steps: int = setting(0, "> 0: also this many behaviour-cloning steps of the policy's base on the "
                                            "demo buffer per human step received (DAgger-style; the main job uses 1: "
                                            "on pixels with the classifier's reward it reached 90 % sooner, see "
                                            "docs/CALIBRATION.md)")
    takeover_penalty: float = setting(0.0, "> 0: the policy's transition before a human takes over ends the policy's "
                                           "stretch (no bootstrap past it) with this penalty on its reward (RLIF), so "
                                           "the human's success after is not credited to what the policy did")
    replay_capacity: int = setting(200_000, "online replay buffer size (transitions)", kept_on_resume=True)
    demo_capacity: int = setting(50_000, "demo buffer size (transitions; human interventions go here too)", kept_on_resume=True)
    weights_every: int = setting(50, "updates between weight broadcasts to the actors")
    device: str = setting("auto", "the learner's torch device: auto (CUDA when present, else MPS, else the CPU), "
                                  "cpu, cuda, cuda:N or mps")

    def random_action_steps(self, has_demos: bool) -> int:
        """Online steps taken with uniform random actions first: ``random_steps`` without demos."""
        return 0 if has_demos else self.random_steps

    def first_update_at(self, has_demos: bool) -> int:
        """Online transitions before the first update: the one learning-start rule, which the
        learner and the sim trainer's pacing share (one seed gives one run only while they
        agree). ``learning_starts`` when set, else after the random actions (the state
        normaliser is fitted on them)."""
        return self.learning_starts or self.random_action_steps(has_demos)


@dataclass
class RewardConfig:
    """Where the reward comes from (the trainer and the actor node)."""

    reward_classifier: str | None = setting(None, "a success classifier folder (robot-rl classifier train): reward "
                                                  "and episode end from camera frames, not the sim's ground truth",
                                            metavar="DIR")


@dataclass
class EnvConfig:
    """A Gymnasium env of your own instead of the sim twin (robot_rl/foreign/, docs/your-env.md)."""

    env: str | None = setting(None, "a Gymnasium env id to use instead of the sim twin (package:Id imports the "
                                    "package first; namespace/Id imports the namespace's package)", metavar="ID", kept_on_resume=True)
    env_kwargs: tuple[str, ...] = setting((), "gym.make keywords, KEY=VALUE (values read as YAML: true, 0.5)",
                                          metavar="KEY=VALUE", kept_on_resume=True)
    env_map: str | None = setting(None, "a YAML map of the env's observation keys (state, cameras), its action "
                                        "dimensions (motion, scale, the gripper) and its success (default: every "
                                        "Box key is state, every H x W x 3 uint8 key a camera, every dimension "
                                        "motion)", metavar="FILE.yaml", kept_on_resume=True)
    env_python: str | None = setting(None, "run the env in a worker process of this Python interpreter (one with "
                                           "gymnasium, numpy and the env's package: e.g. .venv-gym-hil/bin/python "
                                           "from scripts/setup_gym_hil.sh)", metavar="PYTHON")
    env_expert: str | None = setting(None, "a scripted policy, module:function or file.py:function, observation -> "
                                           "the env's action (or (observation, env)), run in the env's interpreter: "
                                           "it records --demos N", metavar="MODULE:FUNCTION")

    def validate_env(self) -> None:
        if self.env is None:
            extra = [f for f in ("env_map", "env_python", "env_expert") if getattr(self, f)] + \
                (["env_kwargs"] if self.env_kwargs else [])
            if extra:
                raise InputError(f"--{extra[0].replace('_', '-')} is for a Gymnasium env: give --env ID too")
            return
        if self.env_map is not None and not Path(self.env_map).is_file():
            raise MissingFileError(f"env map {self.env_map}: no such file")


@dataclass
class BasePolicyConfig:
    """A frozen base policy of the lab's own that the policy practises on top of (residual RL, issue 46:
    ``robot_rl/base_policy.py``)."""

    base_policy: str | None = setting(None, "a frozen base policy to act residually on: a run folder of ours, or "
                                            "module:function (file.py:function; observation -> action or a chunk of "
                                            "K actions); the policy learns a bounded correction on every action "
                                            "dimension, seeing the base's action", metavar="SOURCE",
                                      kept_on_resume=True)
    base_python: str | None = setting(None, "run the base's module:function in a worker process of this Python "
                                            "interpreter (e.g. a LeRobot venv's; arrays and JSON over pipes)",
                                      metavar="PYTHON")
    base_every: int | None = setting(None, "query the base every this many control steps (at most its chunk's "
                                           "length K; default K)", metavar="STEPS", kept_on_resume=True)
    base_mode: str = setting("receding", "how a chunked base's actions are played: the newest chunk (receding) or "
                                         "ACT's temporal ensemble of every chunk covering the step (ensemble)",
                             choices=("receding", "ensemble"), kept_on_resume=True)
    base_map: str | None = setting(None, "a LeRobot policy's YAML map: cameras (the run's camera: the policy's image "
                                         "key), state (the run's state indices it reads), action (per action "
                                         "dimension, the policy's index); default: robot-rl's LeRobot export names",
                                   metavar="FILE.yaml", kept_on_resume=True)

    def validate_base(self) -> None:
        if self.base_policy is None:
            extra = [f for f in ("base_python", "base_every", "base_map") if getattr(self, f) is not None]
            if extra:
                raise InputError(f"--{extra[0].replace('_', '-')} is for a base policy: give --base-policy SOURCE too")
            return
        if self.base_every is not None and self.base_every < 1:
            raise InputError(f"--base-every must be at least 1, got {self.base_every}")
        if self.base_python is not None and not Path(self.base_python).is_file():
            raise MissingFileError(f"--base-python {self.base_python}: no such file")
        if self.base_map is not None and not Path(self.base_map).is_file():
            raise MissingFileError(f"--base-map {self.base_map}: no such file")


def task_name(cfg) -> str:
    """What a run, store or summary names its task: the Gymnasium env's id, else the twin's task."""
    return cfg.env if getattr(cfg, "env", None) else cfg.task


HUMAN_WATCHES = ("auto", "progress", "clock")  # what the simulated human on a Gymnasium env judges


# ------------------------------------------------------------------ robot-rl train
@dataclass
class TrainConfig(BasePolicyConfig, EnvConfig, RewardConfig, LearningConfig, PolicyConfig, ContactConfig,
                  CellConfig):
    """``robot-rl train``: the sim twin, the actor loop and its learner."""

    backend: str = setting("mujoco", "the simulator", kept_on_resume=True)
    demos: int = setting(10, "scripted demonstrations to record first (ignored with demo_store); --demos also takes "
                             "an episode store", metavar="N|STORE", parse=demos_or_store, kept_on_resume=True)
    demo_noise: float = setting(0.1, "action noise of the scripted demonstrations", kept_on_resume=True)
    reflex_penalty: float = setting(0.0, "with --collision-reflex: a step the reflex stopped is rewarded minus this "
                                         "(0: a failure like any other, reward 0)", metavar="P", kept_on_resume=True)
    human_eagerness: float = setting(0.0, "> 0: a simulated human (scripted expert) watches and takes over when the "
                                          "policy stalls or heads for failure; eagerness in (0, 1]: how soon",
                                     flags=("--simulated-human",), metavar="EAGERNESS")
    human_guards: bool = setting(False, "with --simulated-human: the human also steps in before a move the task's "
                                        "expert judges unsafe (PegInsertHard: the peg down on the block off the "
                                        "hole's axis, which a Franka's collision reflex stops), as an operator does")
    human_takeover_steps: int = setting(15, "steps the simulated human drives per takeover")
    human_max_takeovers: int = setting(3, "simulated human takeovers per episode at most")
    human_watches: str = setting("auto", "with --env: what the simulated human judges, the scripted policy's "
                                         "progress(obs) (progress, as on the twin) or an episode running long "
                                         "(clock); auto: progress where the scripted policy has it",
                                 choices=HUMAN_WATCHES)
    goal_relabel: float | None = setting(None, "share of each batch given a goal its episode reached later, its reward "
                                              "recomputed (hindsight relabelling, HER's future strategy; "
                                              "replay/relabel.py), for an --env whose map declares goal:; default: "
                                              "0.8 there (from states, with --n-step 1 and the env's own reward), "
                                              "else 0; 0: off",
                                         metavar="SHARE")
    env_steps: int = setting(20_000, "environment steps in all", flags=("--steps",))
    learner: str = setting("process", "the learner in its own process or driven inline between control steps",
                           choices=("process", "inline"))
    sync: bool = setting(True, "sim pacing: the actor waits when it is more than max_lead steps ahead of the "
                               "update-to-data ratio (a real robot never waits)")
    max_lead: int = setting(10, "with sync: env steps the actor may run ahead of the learner")
    eval_every: int = setting(2000, "env steps between evaluations (ground truth, deterministic policy)")
    eval_episodes: int = setting(50, "episodes per evaluation")
    stop_at_success: float | None = setting(None, "end the run at the first evaluation at or above this success rate",
                                            metavar="RATE")
    final_eval_episodes: int = setting(50, "episodes of the last evaluation")
    checkpoint_every: int = setting(2000, "env steps between checkpoints ...", metavar="STEPS")
    checkpoint_every_s: float = setting(300.0, "... or seconds, whichever comes first (and always on SIGTERM / "
                                               "Ctrl-C)", metavar="SECONDS")
    run_dir: str | None = setting(None, "run folder (default runs/train-<task>-<obs>-<time>)", metavar="DIR")
    env_timeout_s: float = setting(60.0, "with --env: a reset or step of the env that takes longer ends the run (a "
                                         "checkpoint is kept); 0: no limit", metavar="SECONDS")
    record_episodes: bool = setting(False, "record every training episode into <run>/online.zarr: cameras, state, "
                                           "the actions executed, reward and each step's is_intervention flag")
    progress: bool = setting(True, "a progress line while training")

    @property
    def has_demos(self) -> bool:
        return bool(self.demo_store) or self.demos > 0

    def validate(self) -> None:
        self.validate_env()
        self.validate_base()
        self.validate_contact(self.env)
        if self.reflex_penalty < 0:
            raise InputError(f"--reflex-penalty is what a reflex costs, >= 0; got {self.reflex_penalty:g}")
        if self.reflex_penalty and not self.collision_reflex:
            raise InputError("--reflex-penalty prices the twin's collision reflex: give --collision-reflex too")
        if self.human_guards and not self.human_eagerness > 0:
            raise InputError("--human-guards is the simulated human's: give --simulated-human EAGERNESS too")
        if self.env is not None:
            if self.human_guards:
                raise InputError(f"--human-guards judges the twin's scenes; --env {self.env}'s scripted policy "
                                 "judges none")
            if self.human_eagerness > 0 and not self.env_expert:
                raise InputError(f"--simulated-human on --env {self.env} drives with the env's scripted policy: give "
                                 "--env-expert MODULE:FUNCTION")
            if self.demos > 0 and not self.demo_store and not self.env_expert:
                raise InputError(f"--demos {self.demos} records scripted demonstrations: --env {self.env} needs "
                                 "--env-expert MODULE:FUNCTION for them (or --demos STORE, or --demos 0)")
        elif self.human_watches == "clock":
            raise InputError("--human-watches clock is for a Gymnasium env (--env); the twin's simulated human "
                             "judges its task's progress")
        if self.learner not in ("process", "inline"):
            raise InputError(f"learner must be 'process' or 'inline', got {self.learner!r}")
        for name in ("env_steps", "batch_size", "eval_every", "eval_episodes", "final_eval_episodes",
                     "checkpoint_every", "weights_every", "n_step"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.checkpoint_every_s > 0:
            raise InputError(f"checkpoint_every_s must be > 0 seconds, got {self.checkpoint_every_s}")
        if not (math.isfinite(self.env_timeout_s) and self.env_timeout_s >= 0):
            raise InputError(f"env_timeout_s (--env-timeout-s) must be a number of seconds >= 0 (0: no limit), "
                             f"got {self.env_timeout_s}")
        if self.stop_at_success is not None and not 0.0 <= self.stop_at_success <= 1.0:
            raise InputError(f"stop_at_success is a success rate in [0, 1], got {self.stop_at_success}")
        if not 0.0 <= self.demo_fraction <= 1.0:
            raise InputError(f"demo_fraction is a share of the batch in [0, 1], got {self.demo_fraction}")
        if not (math.isfinite(self.takeover_penalty) and self.takeover_penalty >= 0):
            raise InputError(f"takeover_penalty must be a finite number >= 0 (0: off), got {self.takeover_penalty}")
        if self.goal_relabel is not None:  # asked for: each reason it cannot be is one line
            if not (math.isfinite(self.goal_relabel) and 0.0 <= self.goal_relabel <= 1.0):
                raise InputError(f"goal_relabel (--goal-relabel) is a share of the batch in [0, 1] (0: off), "
                                 f"got {self.goal_relabel}")
            if self.goal_relabel > 0 and not self.env:
                raise InputError("--goal-relabel is for a goal-conditioned Gymnasium env (--env) whose map declares "
                                 "goal: (docs/your-env.md); the twin's tasks have no goal in their state")
            if self.goal_relabel > 0 and self.reward_classifier is not None:
                raise InputError("--goal-relabel recomputes the env's own reward for a new goal (the map's goal: "
                                 "reward); a success classifier's reward cannot be recomputed: use one or the other")
            if self.goal_relabel > 0 and self.n_step != 1:
                raise InputError(f"--goal-relabel works on one-step transitions: use it with --n-step 1, got "
                                 f"{self.n_step}")
        if min(self.image_size) < 1:
            raise InputError(f"image_size must be positive, got {self.image_size}")
        if self.demo_store is not None and not Path(self.demo_store).exists():
            raise MissingFileError(f"demo store {self.demo_store}: no such path")
        if self.demo_map is not None and not Path(self.demo_map).is_file():
            raise MissingFileError(f"demo map {self.demo_map}: no such file")
        if self.reward_classifier is not None and not Path(self.reward_classifier).exists():
            raise MissingFileError(f"reward classifier {self.reward_classifier}: no such path")
        if not 0.0 <= self.human_eagerness <= 1.0:
            raise InputError(f"human_eagerness (--simulated-human) must lie in [0, 1] (0: no human), "
                             f"got {self.human_eagerness}")
        if self.demos < 0 or self.utd <= 0:
            raise InputError("demos must be >= 0 and utd > 0")
        agent = self.agent
        if not 1 <= agent.num_target_critics <= agent.num_critics:
            raise InputError(f"num_critics must be >= num_target_critics >= 1, got num_critics={agent.num_critics}, "
                             f"num_target_critics={agent.num_target_critics} (e.g. --num-critics 2 or more)")
        if agent.sde_every < 0:
            raise InputError(f"sde_every (gSDE: env steps each exploration matrix is held) must be >= 0 (0: off), "
                             f"got {agent.sde_every}")
        if agent.critic_actor_ratio < 1:
            raise InputError(f"critic_actor_ratio (critic updates per actor update) must be >= 1, "
                             f"got {agent.critic_actor_ratio}")
        if not (math.isfinite(agent.conservative_weight) and agent.conservative_weight >= 0):
            raise InputError(f"conservative_weight (CQL's term in the critic loss) must be a finite number >= 0 "
                             f"(0: off), got {agent.conservative_weight}")
        if not (math.isfinite(agent.end_pose_weight) and agent.end_pose_weight >= 0):
            raise InputError(f"end_pose_weight (the encoder's end-pose loss) must be a finite number >= 0 (0: off), "
                             f"got {agent.end_pose_weight}")
        if agent.end_pose_weight > 0 and self.env is not None:
            raise InputError(f"end_pose_weight reads the TCP's pose from the twin's robot state; --env {self.env}'s "
                             "state is its map's")
        if agent.pretrained_path is not None and not Path(agent.pretrained_path).is_file():
            raise MissingFileError(f"--pretrained {agent.pretrained_path}: no such file (weights are only read "
                                    "from a local file)")


# ------------------------------------------------------------------ the other commands
KEEP = ("all", "successes", "failures")  # which takes a recording stores
DEVICE_HELP = "auto (CUDA when present, else MPS, else the CPU), cpu, cuda, cuda:N or mps"


@dataclass
class RecordConfig(EnvConfig, ContactConfig):
    """``robot-rl record``: the scripted expert's (or a checkpoint's) episodes into a store, on
    the twin as a run trains on it (its collision reflex and force bound; with ``--policy`` and
    neither given, the run's own)."""

    task: str = setting("PickCube", "the sim task (robot-rl sim tasks lists them)")
    backend: str = setting("mujoco", "the simulator")
    episodes: int = setting(10, "episodes to store (the kept takes)")
    noise: float = setting(0.1, "expert action noise (higher: more failed takes)")
    policy: str | None = setting(None, "record a trained policy's rollouts (run folder or checkpoint) instead of the "
                                       "scripted expert", metavar="CHECKPOINT")
    device: str = setting("auto", f"with --policy: the torch device the policy acts on: {DEVICE_HELP}")
    keep: str = setting("all", "the takes to store (also --successful-only, --failed-only)", choices=KEEP)
    images: bool = setting(False, "record the cameras too")
    image_size: tuple[int, int] = setting((128, 128), "camera frames: height width (one number: square)", metavar="N")
    cameras: tuple[str, ...] = setting(("front", "wrist"), "with --images: which of the twin's cameras (front, wrist, "
                                                           "side)", metavar="NAME")
    image_codec: str = setting("lossless", "how frames are stored", choices=("lossless", "jpeg"))
    hold_after_success: int = setting(0, "steps of a still arm recorded after success (more success frames for the "
                                         "classifier)")
    hold_after_failure: int = setting(0, "steps of arm motion recorded after a failed take (negatives from all over "
                                         "the workspace)")
    hold_motion: float = setting(0.0, "random arm motion while holding (action std): frames on both sides of the "
                                      "success boundary")
    hold_rise: float = setting(0.0, "mean upward action while holding (carries the object up through the workspace)")
    hold_release: float = setting(0.0, "share of successful takes whose hold lets go of the object (falling objects "
                                       "above the line are successes too)", metavar="SHARE")
    continue_after_success: int = setting(0, "the actor goes on acting this many steps after success (rollouts not "
                                             "cut at success)", metavar="STEPS")
    seed: int = setting(0, "random seed (episode i resets with seed + i)")
    spread_layouts: int = setting(0, "on the twin: take the scenes spread over the task's variation, as a lab places "
                                     "its objects for demonstrations: of the resets seed .. seed + N - 1, each next "
                                     "the farthest from those taken (0: seed, seed + 1, ...)", metavar="N")
    teleop: str | None = setting(None, "with --env: a teleop device drives the env (spacemouse, gamepad): its "
                                       "translation, then rotation, fill the map's motion dimensions in order, its "
                                       "gripper button the gripper; paced at the env's rate", metavar="DEVICE")

    def validate(self) -> None:
        self.validate_env()
        self.validate_contact(self.env)
        if self.env is not None:
            if self.policy is None and not self.env_expert and not self.teleop:
                raise InputError(f"record --env {self.env} needs an actor: --env-expert MODULE:FUNCTION (a scripted "
                                 "policy), --policy CHECKPOINT or --teleop DEVICE")
            held = [f for f in ("hold_after_success", "hold_after_failure", "continue_after_success")
                    if getattr(self, f)]
            if held:
                raise InputError(f"--{held[0].replace('_', '-')} drives the twin's arm; with --env the episode is "
                                 "the env's own")
        elif self.teleop:
            raise InputError("--teleop drives a Gymnasium env (--env ID); on the twin use robot-rl session")
        if self.episodes < 1:
            raise InputError("episodes must be >= 1")
        if self.spread_layouts and (self.env is not None or self.spread_layouts < self.episodes):
            raise InputError(f"--spread-layouts N picks the twin's scenes from N resets, at least --episodes "
                             f"({self.episodes}) and without --env; got {self.spread_layouts}"
                             + (f" with --env {self.env}" if self.env is not None else ""))
        if (self.hold_after_success or self.hold_after_failure) and self.continue_after_success:
            raise InputError("choose hold_after_success (a still or randomly moving arm) or continue_after_success "
                             "(the actor goes on), not both")
        if not 0.0 <= self.hold_release <= 1.0:
            raise InputError(f"hold_release is a share of takes in [0, 1], got {self.hold_release}")
        if self.keep not in KEEP:
            raise InputError(f"keep must be one of {KEEP}, got {self.keep!r}")


@dataclass
class EvalConfig(EnvConfig):
    """``robot-rl eval``: a checkpoint's policy on the sim twin, by ground truth."""

    episodes: int = setting(50, "episodes")
    task: str | None = setting(None, "default: the task it was trained on")
    backend: str | None = setting(None, "default: the backend it was trained on")
    seed: int = setting(3_000_000, "episode i resets with seed + i (default: a range no training run uses)")
    human_eagerness: float = setting(0.0, "the simulated human watches, as in training (eagerness in (0, 1]): the "
                                          "result adds its takeovers by reason, the share of steps it drove and the "
                                          "episode lengths", flags=("--simulated-human",), metavar="EAGERNESS")
    stochastic: bool = setting(False, "sample the policy's actions, as the actor does while training (default: its "
                                      "deterministic action)")
    device: str = setting("auto", f"the torch device the policy acts on: {DEVICE_HELP}")

    def validate(self) -> None:
        if self.env_map is not None and not Path(self.env_map).is_file():
            raise MissingFileError(f"env map {self.env_map}: no such file")
        if self.episodes < 1:
            raise InputError("--episodes must be at least 1")
        if not 0.0 <= self.human_eagerness <= 1.0:
            raise InputError(f"--simulated-human is an eagerness in (0, 1] (0: no human), got {self.human_eagerness}")


@dataclass
class EncoderPretrainConfig:
    """``robot-rl encoder pretrain``: candidate frozen backbones, each measured, the best written."""

    cameras: tuple[str, ...] = setting(("front", "wrist"), "the cameras it encodes", metavar="NAME")
    objectives: tuple[str, ...] = setting(("bc",), "candidates to train: bc, bc_goal, autoencoder (default bc: the probe's "
                                                   "ranking did not predict the policy's success, bc was among the "
                                                   "best; docs/CALIBRATION.md)", flags=("--objective",),
                                          metavar="NAME")
    classifier: str | None = setting(None, "also a candidate: this success classifier's conv trunks", metavar="DIR")
    pretrained: str | None = setting(None, "also a candidate: your ResNet-18 weights (torchvision names, a local "
                                           "file; nothing is downloaded)", metavar="FILE")
    steps: int = setting(2000, "training steps of each trained candidate")
    probe_steps: int = setting(1000, "steps of the measuring head on frozen features")
    held_out: float = setting(0.2, "share of successful episodes kept for the measure")
    seed: int = setting(0, "random seed")

    def validate(self) -> None:
        if self.steps < 1 or self.probe_steps < 1:
            raise InputError("--steps and --probe-steps must be >= 1")
        if not 0.0 < self.held_out < 1.0:
            raise InputError(f"--held-out is a share of the successful episodes in (0, 1), got {self.held_out}")


STACKS = ("sim", "ros")  # how the main job trains: in one process tree on the twin, or through the ROS 2 stack


DEMO_LAYOUTS = ("seeds", "spread")  # the main job's demonstrations: consecutive resets, or spread over the task


@dataclass
class MainJobConfig:
    """``robot-rl main``: the main job on the sim twin, every stage of a lab's pipeline
    (``robot_rl/commands/main_job.py``). Saved in the run folder's ``main_job.json``, so that
    ``--resume`` goes on with the same choices."""

    task: str | None = setting(None, "the sim task (robot-rl sim tasks lists them; default PegInsertHard, a task the "
                                     "clone of 20 demonstrations gets 0.14-0.78 of, PickCube with --stack ros)")
    obs: str | None = setting(None, "pixels: front + wrist cameras and the arm's state, as a real cell; state: the "
                                    "sim's object poses (sim only; default pixels, state with --stack ros)",
                              choices=("state", "pixels"))
    stack: str = setting("sim", "sim: the trainer on the twin; ros: through the ROS 2 stack (one round; a simulated "
                                "human on the SO-101's stack only)", choices=STACKS)
    human: float | None = setting(None, "the simulated human's eagerness in [0, 1] (0: none; default 0.5, 0 with "
                                        "--stack ros)", metavar="EAGERNESS")
    steps: int | None = setting(None, "env steps of training (default: the task's main_job_steps; round 1 trains "
                                      "3/4 of them)")
    image_size: int = setting(64, "the cameras' square frames, in pixels: the demonstrations', the classifier's and "
                                  "the policy's (the ROS 2 stack's cameras: 64)", metavar="N")
    demos: int = setting(20, "demonstrations recorded by the scripted expert")
    demo_layouts: str | None = setting(None, "the demonstrations' scenes: seeds: consecutive resets; spread: spread "
                                                "over the task's variation, as a lab places its objects (robot-rl record "
                                                "--spread-layouts, of 10 resets per demonstration); default the task's "
                                                "(PegInsertHard: spread, the others: seeds)", choices=DEMO_LAYOUTS)
    takes: int = setting(20, "the classifier's successful takes, and as many failed ones")
    classifier_steps: int = setting(2000, "the success classifier's training steps")
    encoder_steps: int = setting(1000, "the frozen image encoder's pretraining steps (--obs pixels)")
    rollout_episodes: int = setting(20, "episodes of the policy's own rollouts the classifier is checked on")
    eval_episodes: int = setting(20, "episodes of each evaluation during training")
    eval_every: int = setting(4000, "env steps between the evaluations during training (and one at the end of "
                                    "each round); the training is the same at any value", metavar="STEPS")
    final_eval_episodes: int = setting(50, "episodes of the final grade by ground truth")
    run_dir: str | None = setting(None, "the run folder (default runs/main-<task>-<time>)", metavar="DIR")
    train_args: tuple[str, ...] = setting((), "options for robot-rl train (or, with --stack ros, stack arguments "
                                              "NAME:=VALUE), after --", positional=True, metavar="TRAIN_ARG")

    @property
    def task_name(self) -> str:
        """The task: as given, else PegInsertHard on the twin (where RL has work to do: its clone
        from pixels succeeds 0.26-0.54, the policy 0.90-1.00 after 20,000 env steps,
        docs/CALIBRATION.md) and PickCube through ROS (the stack's measured state recipe)."""
        return self.task or ("PickCube" if self.stack == "ros" else "PegInsertHard")

    @property
    def eagerness(self) -> float:
        """The simulated human's eagerness: as given, else 0.5 on the twin and 0 through ROS."""
        return self.human if self.human is not None else (0.0 if self.stack == "ros" else 0.5)

    @property
    def observation(self) -> str:
        """What the policy observes: as given, else pixels on the twin and state through ROS."""
        return self.obs or ("state" if self.stack == "ros" else "pixels")

    def validate(self) -> None:
        for name in ("demos", "takes", "classifier_steps", "encoder_steps", "rollout_episodes", "eval_episodes",
                     "eval_every", "final_eval_episodes"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {getattr(self, name)}")
        if not 32 <= self.image_size <= 256:
            raise InputError(f"--image-size must be a whole number of pixels in [32, 256], got {self.image_size}")
        if self.stack == "ros" and self.image_size != 64:
            raise InputError(f"--image-size {self.image_size}: the ROS 2 stack's cameras (--stack ros) give 64x64 "
                             "frames; leave it unset")
        if self.steps is not None and self.steps < (1 if self.stack == "ros" else 2):
            raise InputError(f"--steps {self.steps} is too few: round 1 trains 3/4 of them (--steps >= 2)"
                             if self.stack == "sim" else f"--steps must be >= 1, got {self.steps}")
        if not 0.0 <= self.eagerness <= 1.0:
            raise InputError(f"--human {self.human} must be a number in [0, 1] (the simulated human's eagerness; "
                             "0: none)")
        if self.demo_layouts not in (None, *DEMO_LAYOUTS):
            raise InputError(f"--demo-layouts must be one of {', '.join(DEMO_LAYOUTS)}, got {self.demo_layouts!r}")
        if self.stack == "ros" and self.observation != "state":
            raise InputError("--obs pixels: the ROS 2 stack (--stack ros) trains the state policy (its actor reads the "
                             "sim's object poses); leave --obs unset or give state")

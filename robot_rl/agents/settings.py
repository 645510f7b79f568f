"""The SAC agent's settings: ``AgentSettings``, what a user chooses, and ``SACConfig``, all the
agent is built from. Plain dataclasses with no torch behind them, so that ``robot_rl.config``
(which every module reads) and the command line can hold and check them without building
anything. ``robot_rl.agents.sac`` builds the agent from a ``SACConfig``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from robot_rl.errors import InputError


def network(default):
    """A field that shapes the agent's networks: a checkpoint loads only into an agent whose every
    such field is the same (``robot_rl.runtime.checkpoint.network_of``)."""
    return field(default=default, metadata={"shapes_networks": True})


def network_fields(cls) -> tuple[str, ...]:
    """The fields of ``cls`` (``SACConfig``) that shape the networks (declared with ``network()``)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("shapes_networks"))


# The exploration of a run with a human in the loop, as HIL-SERL's actor explores (the main job,
# `bench hil` and the CI pixel test; robot-rl main passes it as --agent flags): the grasp
# head greedy on its critic (demonstrations and takeovers explore the gripper; a random open
# drops a lifted object) and the motion's target entropy -|A| for the twin's 6 motion dimensions
# (SAC's own heuristic). Both halved the human's late share of the steps (docs/CALIBRATION.md).
# And the critics' targets clipped at 1, the most a success reward that ends the episode returns:
# without it PickCubeSO101's seed 1 diverged (Q up to 12) and fell to 0.36 through its stack, with
# it 0.82 (docs/CALIBRATION.md); on PegInsertHard's default recipe it measured no better (0.74 /
# 0.76 / 0.86 against 0.90+ / 0.86 / 0.80 at 4k), so it is this recipe's, not every run's.
HUMAN_IN_THE_LOOP_EXPLORATION = {"grasp_epsilon": 0.0, "target_entropy": -6.0, "max_return": 1.0}


@dataclass
class AgentSettings:
    """The SAC settings a user chooses (``robot-rl train --agent KEY=VALUE``, a config file's
    ``agent:`` mapping, the nodes' ``agent`` parameter): ``TrainConfig.agent``. What the run fixes
    by itself (the env's shapes, the device, the residual and frozen-encoder options) is
    ``SACConfig``'s alone: ``DERIVED`` says where each comes from."""

    # observation
    image_encoder: str = network("drq")  # "drq", "resnet18" or "frozen" (a head over cached features: --frozen-encoder)
    image_features: int = network(64)
    state_features: int = network(0)  # 0: normalised state straight into the heads
    pretrained_path: str | None = None
    freeze_backbone: bool = False
    augment_pad: int = 4
    feature_augment_pad: int = 1  # random shift of cached feature maps, in feature cells
    # networks
    hidden: tuple[int, ...] = network((256, 256))
    num_critics: int = network(2)
    num_target_critics: int = 2  # REDQ: min over a random subset of this size
    # optimisation
    discount: float = 0.97
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    temperature_lr: float = 3e-4
    tau: float = 0.005
    init_temperature: float = 0.01
    target_entropy: float | None = None  # None -> -|A_motion| / 2
    init_std: float | None = None  # the actor's exploration std (pre-tanh) at the start in every state; None: as initialised
    # gSDE: > 0, the rollout's noise a linear function of the actor's last hidden layer, its matrix
    # drawn anew every this many env steps (networks.StateDependentNoiseActor); 0: fresh noise every step
    sde_every: int = network(0)
    backup_entropy: bool = False
    max_return: float | None = None  # the critics' TD targets clipped to it (HER's clip): 1 for our success reward
    critic_actor_ratio: int = 1  # critic updates per actor update
    conservative_weight: float = 0.0  # > 0: CQL's term in the critic loss (sac.py conservative_penalty)
    end_pose_weight: float = network(0.0)  # > 0: an end-pose head (sac.py end_pose_loss) trains the encoder too
    autocast_bf16: bool = False  # forward passes under bf16 autocast (losses in float32)
    # imitation levers
    bc_weight: float = 0.0  # weight of the BC term on demo rows (relative to a normalised Q term)
    q_filter: bool = True
    # grasp critic
    grasp_penalty: float = 0.02
    grasp_margin: float = 0.05  # DQfD margin on demonstrated gripper commands (0: off)
    gripper_width_index: int = 13  # where the gripper opening sits in obs["state"]
    gripper_open_threshold: float = 0.07
    grasp_epsilon: float = 0.1  # exploration for the discrete gripper head


# SACConfig's fields beyond AgentSettings, and where a run takes each from (an ``agent`` setting
# naming one is told so: robot_rl.config.check_values)
DERIVED = {"state_dim": "the env's observation", "cameras": "--cameras", "image_size": "--image-size",
           "action_dim": "the env's action space", "grasp_critic": "the task (whether it uses the gripper)",
           "residual_scale": "--residual-scale", "residual_penalty": "--residual-penalty",
           "base_action_dim": "--base-policy (the base's action width)",
           "frozen_encoder": "--frozen-encoder", "frozen_encoder_path": "--frozen-encoder",
           "device": "--device (the ROS parameter device)"}


@dataclass
class SACConfig(AgentSettings):
    """Everything the agent is built from: the user's ``AgentSettings`` and what the run derives
    (``robot_rl.agent_setup.agent_config_for``); a checkpoint records it whole. The fields declared
    with ``network()`` shape the networks (``network_fields``)."""

    state_dim: int = network(27)
    cameras: tuple[str, ...] = network(())
    image_size: tuple[int, int] = network((64, 64))
    frozen_encoder: dict | None = None  # with image_encoder "frozen": the encoder's description (its meta, sha)
    frozen_encoder_path: str | None = None  # ... and the folder its weights load from (None: from a checkpoint)
    action_dim: int = network(7)
    grasp_critic: bool = network(True)
    residual_scale: float = 0.0  # > 0: learn a bounded residual on a frozen BC base policy
    residual_penalty: float = 0.0  # weight of |deterministic action - base action|^2 (relative to a normalised Q)
    base_action_dim: int = 0  # > 0: an external base policy's action is the last this many numbers of obs["state"]
    device: str = "cpu"

    @property
    def motion_dim(self) -> int:
        return self.action_dim - 1 if self.grasp_critic else self.action_dim

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> "SACConfig":
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(data) - set(known)
        if unknown:
            raise InputError(f"unknown agent config keys {sorted(unknown)}")
        fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**fixed)

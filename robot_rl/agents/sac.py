"""Soft Actor-Critic with the RLPD recipe, readable top to bottom.

``SACAgent.update`` is the whole update on one screen: encode each view once, then a gradient
step on each of ``critic_loss``, ``grasp_loss``, ``actor_loss`` and ``temperature_loss`` in that
order (each takes tensors and returns its loss and metrics), then the target networks.

    critic    : an ensemble of LayerNorm MLPs (one batched module), target = min over a random
                subset of the target ensemble (REDQ), optional entropy in the backup, n-step
                returns come from the replay as (reward, bootstrap); targets clipped to
                ``max_return`` (1 on our contract's success reward, which ends the episode).
    actor     : tanh-Gaussian over the motion dimensions, maximises the mean ensemble Q minus
                alpha * log pi; plus an imitation term on the demo half of the batch
                (``bc_weight``), optionally Q-filtered (only where the demo action beats the
                policy's own action according to the critic).
    residual  : with ``residual_scale`` > 0 the motion is clip(base(s) + scale * actor(s)): ``base`` is
                either an external base policy's action (``base_action_dim`` > 0: the lab's own
                policy, ``robot_rl/base_policy.py``, whose action the observation's state ends
                with, so actor and critic see it: ResFiT's form) or a deterministic policy cloned
                from the demos and then frozen. The SAC actor
                learns a bounded correction (residual RL on a BC policy). The critic's early,
                poorly informed action gradients can then only nudge a working policy
                instead of erasing it (what textbook RLPD + BC does on PickCube, see
                docs/CALIBRATION.md). ``residual_penalty`` adds |deterministic action - base|^2 to
                the (normalised) actor loss, so the policy leaves the base only where Q
                clearly pays for it (PegInsert dropped 1.00 -> 0.05 without it). With cameras the
                base has its own image encoder (``base_encoder``), trained with it by cloning and
                frozen with it: the critic's encoder moves on, the base's inputs do not. A base
                that nothing trains after cloning acts the same at a stored observation every
                time, so the learner's replay keeps its action with it (``BASE_ACTION``,
                ``stored_base_actions``) instead of each update computing it again.
    alpha     : automatic temperature, target entropy -|A|/2.
    grasp     : a discrete Q-head over {close, stay, open} for the gripper with a double-DQN
                target and a small penalty for commands that toggle the gripper.
    end pose  : with ``end_pose_weight`` > 0 a head on the encoder's features predicts where the
                sampled transition's episode ended (the TCP's offset and yaw, from the replay's
                ``end_pose``), on the rows whose episode was a paid success; its loss joins the
                critic's, so the features the actor reads keep where the goal is (what the take's
                end says of it: the hole under the peg), which a sparse reward's TD error does not ask.
    encoder   : shared; trained by the critic loss (and the end pose's) only, read detached by actor and grasp head.
                With a frozen backbone (``image_encoder="frozen"``, ``frozen.py``) the replay holds
                each frame's cached feature map and the encoder is only the head over it; the
                agent computes the features itself when it acts on camera images.
    demos     : 50/50 batches come from the replay (``MixedReplay``); ``pretrain`` fits the
                actor (BC) and warms up the critics on demonstrations before online RL.

Batches are dicts of numpy arrays or host tensors as produced by ``robot_rl.replay``:
obs / next_obs (dicts of "state" float32 and camera uint8 images), action [B, 7], reward,
bootstrap (= discount^m, 0 at termination), is_demo. Images cross to the device as uint8 and
are augmented (random shift) and scaled (/255, inside the encoder) there.

Speed on a GPU: Adam is fused on CUDA; ``update`` returns its metrics as 0-d tensors on the
device and never waits for the device itself (no ``.item()``, no boolean-mask indexing), so the
caller reads them when it wants to (``metrics_to_floats``), e.g. every N updates.
``autocast_bf16`` runs the forward passes under bf16 autocast; losses stay float32.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.agents.encoders import random_shift
from robot_rl.agents.frozen import FrozenEncoder, FrozenEncoderError, check_encoder_fits, features_of
from robot_rl.agents.networks import (CriticEnsemble, GraspCritic, ObservationEncoder, StateDependentNoiseActor,
                                      TanhGaussianActor, mlp)
from robot_rl.agents.settings import HUMAN_IN_THE_LOOP_EXPLORATION, SACConfig  # noqa: F401 (re-exported)
from robot_rl.errors import InputError
from robot_rl.replay.buffer import END_POSE, END_POSE_MASK

# Gripper command <-> grasp-critic index, and the value written into action[6].
GRASP_VALUES = np.array([1.0, 0.0, -1.0], dtype=np.float32)  # close, stay, open
BASE_ACTION = "base_action"  # a stored observation's key: the frozen cloned base's motion action there


def gripper_index(gripper_action: torch.Tensor) -> torch.Tensor:
    """Continuous gripper action -> {0: close, 1: stay, 2: open} (the env's thresholds)."""
    stay_or_open = torch.where(gripper_action < -0.5, 2, 1)
    return torch.where(gripper_action > 0.5, 0, stay_or_open).long()


def metrics_to_floats(metrics: dict) -> dict[str, float]:
    """An update's metrics (0-d tensors, possibly on a GPU) as Python floats, with one device
    synchronisation for all of them."""
    names = [k for k, v in metrics.items() if torch.is_tensor(v)]
    values = torch.stack([metrics[k].detach().float() for k in names]).tolist() if names else []
    out = {k: float(v) for k, v in metrics.items() if not torch.is_tensor(v)}
    out.update(zip(names, values))
    return {k: out[k] for k in metrics}


@contextlib.contextmanager
def weights_without_grad(module: nn.Module):
    """Within: ``module``'s own weights get no gradient (the actor's loss reads Q through the action
    only; the critic's weight gradients it would add are never used, and backward skips them)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def _step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


class Batch(NamedTuple):
    """A replay batch on the agent's device (images uint8 and shifted, or cached features)."""

    obs: dict[str, torch.Tensor]
    next_obs: dict[str, torch.Tensor]
    action: torch.Tensor  # [B, action_dim]
    reward: torch.Tensor  # [B]
    bootstrap: torch.Tensor  # [B]: discount^m, 0 at termination
    demo_rows: torch.Tensor | None  # the demo rows' indices (None: no demo row)
    end_pose: torch.Tensor | None = None  # [B, 4]: where each row's episode ended (replay END_POSE)
    end_pose_mask: torch.Tensor | None = None  # [B]: 1 where that end was a paid success


def make_adam(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam, fused into a few kernels on CUDA (one launch per step instead of one per tensor)."""
    return torch.optim.Adam(params, lr=lr, fused=True) if device.type == "cuda" else torch.optim.Adam(params, lr=lr)


class SACAgent(nn.Module):
    def __init__(self, config: SACConfig):
        super().__init__()
        self.config = c = config
        if c.num_target_critics > c.num_critics:
            raise InputError("num_target_critics must be <= num_critics")
        self.frozen = self._frozen_encoder() if c.image_encoder == "frozen" else None
        self.encoder = ObservationEncoder(
            c.state_dim, c.cameras, c.image_size, c.image_encoder, c.image_features,
            c.state_features, c.pretrained_path, c.freeze_backbone,
            feature_shape=self.frozen.feature_shape if self.frozen is not None else None,
        )
        feat = self.encoder.out_dim
        # gSDE (sde_every > 0): the rollout's noise a function of the state, held for sde_every steps
        self.actor = (StateDependentNoiseActor if c.sde_every > 0 else TanhGaussianActor)(feat, c.motion_dim, c.hidden)
        self.residual = c.residual_scale > 0
        if c.base_action_dim and (not self.residual or c.base_action_dim < c.motion_dim):
            raise InputError(f"an external base policy needs residual_scale > 0 and an action of at least the "
                             f"{c.motion_dim} motion dimensions, got {c.residual_scale} and {c.base_action_dim}")
        cloned = self.residual and not c.base_action_dim
        self.base = mlp(feat, c.hidden, c.motion_dim) if cloned else None  # the cloned base
        # with cameras the cloned base reads its own encoder, which cloning trains and then freezes
        self.base_encoder = copy.deepcopy(self.encoder) if self.base is not None and c.cameras else None
        if self.residual:  # the residual starts near zero: the base policy acts alone
            with torch.no_grad():
                self.actor.net[-1].weight[: c.motion_dim].mul_(0.01)
                self.actor.net[-1].bias[: c.motion_dim].zero_()
        if c.init_std is not None:
            self.actor.start_std(c.init_std)
        self.critic = CriticEnsemble(c.num_critics, feat, c.motion_dim, c.hidden)
        self.end_pose_head = mlp(feat, c.hidden, 4) if c.end_pose_weight > 0 else None
        self.grasp = GraspCritic(feat, c.hidden) if c.grasp_critic else None
        self.log_alpha = nn.Parameter(torch.tensor(float(np.log(c.init_temperature))))
        self.target_encoder = copy.deepcopy(self.encoder).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_grasp = copy.deepcopy(self.grasp).requires_grad_(False) if self.grasp is not None else None
        self.target_entropy = c.target_entropy if c.target_entropy is not None else -c.motion_dim / 2.0
        self.device = torch.device(c.device)
        self.to(self.device)  # before the optimizers: fused Adam wants its parameters where they live
        adam = lambda params, lr: make_adam(params, lr, self.device)  # noqa: E731
        critic_params = list(self.critic.parameters()) + [p for p in self.encoder.parameters() if p.requires_grad]
        critic_params += list(self.end_pose_head.parameters()) if self.end_pose_head is not None else []
        self.critic_opt = adam(critic_params, c.critic_lr)
        self.actor_opt = adam(self.actor.parameters(), c.actor_lr)
        base_params = [] if self.base is None else list(self.base.parameters()) + (
            [p for p in self.base_encoder.parameters() if p.requires_grad] if self.base_encoder is not None else [])
        self.base_opt = adam(base_params, c.actor_lr) if self.base is not None else None
        self.alpha_opt = adam([self.log_alpha], c.temperature_lr)
        self.grasp_opt = adam(self.grasp.parameters(), c.critic_lr) if self.grasp is not None else None
        self.num_updates = 0
        self.seed_acting(int(torch.randint(0, 2**31 - 1, (1,))))

    def seed_acting(self, seed: int) -> None:
        """The exploration noise of ``act`` (Gaussian motion noise, the grasp's epsilon) comes from
        generators of its own, so an actor's actions do not depend on what else draws from torch's
        global generator in its process (a learner driven inline, a classifier)."""
        self._act_noise = torch.Generator(device=self.device).manual_seed(seed)
        self._act_rng = np.random.default_rng(seed)
        self._explore_steps = 0  # gSDE: the exploring actions taken, to redraw its matrix every sde_every

    def _frozen_encoder(self) -> FrozenEncoder:
        """The frozen backbone: loaded from its folder, or built empty for a checkpoint's weights."""
        c = self.config
        if not c.frozen_encoder:
            raise InputError("image_encoder 'frozen' needs frozen_encoder (an encoder folder's description)")
        source = c.frozen_encoder_path or "of the checkpoint"
        check_encoder_fits(c.frozen_encoder, c.cameras, c.image_size, source)
        if c.frozen_encoder_path is None:
            return FrozenEncoder(c.frozen_encoder)
        encoder = FrozenEncoder.load(c.frozen_encoder_path)
        if encoder.sha != c.frozen_encoder["sha"]:
            raise FrozenEncoderError(f"frozen encoder {c.frozen_encoder_path} is {encoder.describe()}, not the "
                                     f"encoder this agent was made for (sha {c.frozen_encoder['sha'][:12]})")
        return encoder

    @property
    def frozen_sha(self) -> str | None:
        """The sha of the frozen backbone whose cached features the agent reads (None: it reads images)."""
        return self.frozen.sha if self.frozen is not None else None

    def replay_spec(self, obs_spec: dict) -> dict:
        """The replay's spec for the flat observations ``obs_spec``: each camera's cached float16
        features instead of its images when the backbone is frozen."""
        if self.frozen is None:
            return dict(obs_spec)
        return {k: ((self.frozen.feature_shape, np.dtype(np.float16)) if k in self.config.cameras else v)
                for k, v in obs_spec.items()}

    def cache_features(self, obs: dict) -> dict:
        """One flat observation (no batch axis) with its camera images replaced by the frozen
        backbone's features (float16 numpy), as the replay stores it. Without a frozen backbone,
        or when the features are there already, ``obs`` as it is."""
        cams = self.config.cameras
        if self.frozen is None or not cams or np.asarray(obs[cams[0]]).dtype != np.uint8:
            return obs
        batched = features_of(self.frozen, {cam: np.asarray(obs[cam])[None] for cam in cams}, cams, self.device)
        return {**obs, **{cam: batched[cam][0] for cam in cams}}

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    # ---- data --------------------------------------------------------------------------
    def _to_device(self, x, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Host array/tensor -> device tensor, as is (images stay uint8). Asynchronous from
        pinned host memory (what the replay's ``BatchStaging`` gives on CUDA); a no-op on CPU."""
        return torch.as_tensor(x).to(self.device, dtype=dtype, non_blocking=True)

    def _obs(self, obs: dict, augment: bool) -> dict[str, torch.Tensor]:
        out = {"state": self._to_device(obs["state"], torch.float32)}
        # uint8 images (the encoder scales them) or cached float16 feature maps, shifted on the device
        pad = self.config.feature_augment_pad if self.frozen is not None else self.config.augment_pad
        for cam in self.config.cameras:
            x = self._to_device(obs[cam])
            out[cam] = random_shift(x, pad) if augment and pad else x
        if BASE_ACTION in obs:  # the base's action the replay keeps with the observation
            out[BASE_ACTION] = self._to_device(obs[BASE_ACTION], torch.float32)
        return out

    def _batch(self, batch: dict) -> Batch:
        n = len(batch["reward"])
        demo_rows = np.flatnonzero(np.asarray(batch.get("is_demo", np.zeros(n, bool)), bool))  # on the host: no sync
        return Batch(obs=self._obs(batch["obs"], augment=True), next_obs=self._obs(batch["next_obs"], augment=True),
                     action=self._to_device(batch["action"], torch.float32),
                     reward=self._to_device(batch["reward"], torch.float32),
                     bootstrap=self._to_device(batch["bootstrap"], torch.float32),
                     demo_rows=self._to_device(demo_rows) if demo_rows.size else None,
                     **({"end_pose": self._to_device(batch[END_POSE], torch.float32),
                         "end_pose_mask": self._to_device(batch[END_POSE_MASK], torch.float32)}
                        if END_POSE in batch else {}))

    def _autocast(self):
        """bf16 autocast for forward passes when ``autocast_bf16`` is set, else a no-op."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.autocast_bf16)

    def fit_normalizer(self, states: np.ndarray) -> None:
        s = torch.as_tensor(states, dtype=torch.float32, device=self.device)
        self.encoder.normalizer.fit(s)
        self.target_encoder.normalizer.fit(s)
        if self.base_encoder is not None:
            self.base_encoder.normalizer.fit(s)

    def base_motion(self, obs: dict[str, torch.Tensor], features: torch.Tensor) -> torch.Tensor:
        """The frozen base's motion action at ``obs`` (no gradient): an external base's, which the
        raw state ends with; a cloned base's as the replay stored it (``BASE_ACTION``), else from
        its own encoder (with cameras) or from ``features``."""
        c = self.config
        if c.base_action_dim:
            return obs["state"][:, c.state_dim - c.base_action_dim:][:, : c.motion_dim].float()
        if BASE_ACTION in obs:
            return obs[BASE_ACTION]
        with torch.no_grad():
            return torch.tanh(self.base(self.base_encoder(obs) if self.base_encoder is not None else features))

    @property
    def base_is_fixed_per_observation(self) -> bool:
        """Whether a cloned base, once cloning is over, gives one action per stored observation: it
        reads its own frozen encoder (cameras), and no augmentation shifts what that encoder reads in
        an update. The learner then keeps the action with the stored observation, unless it goes on
        training the base (``intervention_bc_steps``)."""
        pad = self.config.feature_augment_pad if self.frozen is not None else self.config.augment_pad
        return self.base_encoder is not None and pad == 0

    def base_action_spec(self) -> dict:
        """The replay key for ``stored_base_actions``."""
        return {BASE_ACTION: ((self.config.motion_dim,), np.dtype(np.float32))}

    @torch.no_grad()
    def stored_base_actions(self, obs: dict) -> np.ndarray:
        """The cloned base's motion actions (float32 [N, motion_dim]) at a batch of observations as
        the replay stores them (state, and cached features or images), what ``base_motion`` reads."""
        obs_t = self._obs({k: v for k, v in obs.items() if k != BASE_ACTION}, augment=False)
        return self.base_motion(obs_t, None).float().cpu().numpy()

    # ---- acting ------------------------------------------------------------------------
    def policy(self, features: torch.Tensor, base_motion: torch.Tensor | None = None,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Motion action: (sample, log_prob, deterministic), each ``on_base()``'s when residual."""
        action, log_prob, mean = self.actor.sample(features, generator)
        if self.residual and base_motion is None:
            with torch.no_grad():
                base_motion = torch.tanh(self.base(features))
        return self.on_base(action, base_motion), log_prob, self.on_base(mean, base_motion)

    def on_base(self, action: torch.Tensor, base_motion: torch.Tensor | None) -> torch.Tensor:
        """The motion the arm takes for the actor's ``action``: itself, or when residual
        clip(base_motion + residual_scale * action), ``base_motion`` the frozen base's."""
        if not self.residual:
            return action
        return (base_motion + self.config.residual_scale * action).clamp(-1, 1)

    def exploring_action(self, features: torch.Tensor, base_motion: torch.Tensor | None) -> torch.Tensor:
        """The motion action a training rollout takes: ``policy()``'s sample, or with gSDE the
        actor's held exploration matrix applied to this state, the matrix drawn anew every
        ``sde_every`` actions (from the acting generator)."""
        if self.config.sde_every <= 0:
            return self.policy(features, base_motion, self._act_noise)[0]
        if self._explore_steps % self.config.sde_every == 0:
            self.actor.resample_noise(self._act_noise)
        self._explore_steps += 1
        return self.on_base(self.actor.explore(features).to(features.dtype), base_motion)

    def mean_action(self, features: torch.Tensor, base_motion: torch.Tensor | None) -> torch.Tensor:
        """The deterministic motion action, ``policy()``'s third output, without drawing noise."""
        return self.on_base(torch.tanh(self.actor(features)[0]), base_motion)

    @torch.no_grad()
    def act(self, obs: dict, deterministic: bool = False) -> np.ndarray:
        """One observation (flat dict, no batch axis) -> float32[action_dim] in [-1, 1]."""
        batched = {k: np.asarray(v)[None] for k, v in self.cache_features(obs).items()}
        obs_t = self._obs(batched, augment=False)
        features = self.encoder(obs_t)
        base = self.base_motion(obs_t, features) if self.residual else None
        if deterministic:  # no noise drawn: evaluating never moves the exploration's stream
            motion = self.mean_action(features, base)
        else:
            motion = self.exploring_action(features, base)
        out = np.zeros(self.config.action_dim, dtype=np.float32)
        out[: self.config.motion_dim] = motion[0].cpu().numpy()
        if self.grasp is not None:
            if not deterministic and self._act_rng.random() < self.config.grasp_epsilon:
                idx = int(self._act_rng.integers(3))
            else:
                idx = int(self.grasp(features).argmax(-1)[0])
            out[-1] = GRASP_VALUES[idx]
        return out

    # ---- the update --------------------------------------------------------------------
    def update(self, batch: dict, update_actor: bool = True) -> dict[str, torch.Tensor]:
        """One update, read top to bottom: encode each view once, then a gradient step on the
        critic, the grasp head, and (``update_actor``) the actor and the temperature, in that
        order, each from its own loss function; then the target networks. Only the critic's loss
        trains the encoder: the grasp head and the actor read its features detached. Returns the
        metrics as 0-d tensors on the device (``metrics_to_floats`` reads them)."""
        c = self.config
        b = self._batch(batch)
        with torch.no_grad(), self._autocast():
            next_feat = self.encoder(b.next_obs)
            next_target_feat = self.target_encoder(b.next_obs)
            next_base = self.base_motion(b.next_obs, next_feat) if self.residual else None
        with self._autocast():
            feat = self.encoder(b.obs)

        base = None  # the base's motion action at obs: CQL's term samples the policy there
        if c.conservative_weight > 0 and self.residual:
            with torch.no_grad(), self._autocast():
                base = self.base_motion(b.obs, feat.detach())
        loss, metrics = self.critic_loss(feat, b.action[:, : c.motion_dim], b.reward, b.bootstrap, next_feat,
                                         next_target_feat, next_base, base)
        if self.end_pose_head is not None:
            end_pose_loss = self.end_pose_loss(feat, b.end_pose, b.end_pose_mask)
            loss = loss + c.end_pose_weight * end_pose_loss
            metrics["end_pose_loss"] = end_pose_loss.detach()
        _step(self.critic_opt, loss)
        feat = feat.detach()
        if self.grasp is not None:
            loss, grasp_metrics = self.grasp_loss(feat, b.obs["state"], b.action[:, -1], b.reward, b.bootstrap,
                                                  next_feat, next_target_feat, b.demo_rows)
            _step(self.grasp_opt, loss)
            metrics.update(grasp_metrics)
        if update_actor:
            if base is None and self.residual:
                with self._autocast():
                    base = self.base_motion(b.obs, feat)
            loss, log_prob, actor_metrics = self.actor_loss(feat, base, b.action[:, : c.motion_dim], b.demo_rows)
            _step(self.actor_opt, loss)
            _step(self.alpha_opt, self.temperature_loss(log_prob))
            metrics.update(actor_metrics, alpha=self.alpha.detach())
        self.update_targets()
        self.num_updates += 1
        return metrics

    def critic_loss(self, feat: torch.Tensor, motion: torch.Tensor, reward: torch.Tensor, bootstrap: torch.Tensor,
                    next_feat: torch.Tensor, next_target_feat: torch.Tensor, next_base: torch.Tensor | None,
                    base: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """Each critic regresses on r + bootstrap * min over a random subset of the target critics
        (REDQ) at the policy's next action (minus alpha * log pi with ``backup_entropy``), clipped
        to ``max_return``, the most an episode can return (HER's clip: with a success reward of 1
        that ends the episode, a target above 1 is the critics' own overestimate fed back); plus,
        with ``conservative_weight``, CQL's term (``next_base``, ``base``: the base's motion actions at next_obs and obs, when residual)."""
        c = self.config
        with torch.no_grad(), self._autocast():
            next_action, next_log_prob, _ = self.policy(next_feat, next_base)
            subset = torch.randperm(c.num_critics)[: c.num_target_critics]
            target_q = self.target_critic(next_target_feat, next_action, members=subset).min(0).values.float()
            if c.backup_entropy:
                target_q = target_q - self.alpha * next_log_prob.float()
            y = reward + bootstrap * target_q
            if c.max_return is not None:  # no return above it exists: a target above it is the critic's error
                y = y.clamp_max(c.max_return)
        with self._autocast():
            q = self.critic(feat, motion).float()  # [n, B]
        loss = ((q - y) ** 2).mean(1).sum()
        metrics = {"critic_loss": loss.detach(), "q_mean": q.detach().mean()}
        if c.conservative_weight > 0:
            penalty = self.conservative_penalty(feat, base, q)
            loss = loss + c.conservative_weight * penalty
            metrics["conservative_penalty"] = penalty.detach()
        return loss, metrics

    def end_pose_loss(self, feat: torch.Tensor, end_pose: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
        """Squared error of the end-pose head over the rows whose episode was a paid success (summed
        over the 4 numbers, averaged over those rows; 0 in a batch without one)."""
        if end_pose is None:
            raise InputError("end_pose_weight > 0 needs batches with each episode's end pose: the replay's "
                             "end_pose (MixedReplay.end_pose = True)")
        with self._autocast():
            predicted = self.end_pose_head(feat).float()
        error = ((predicted - end_pose) ** 2).sum(-1)
        return (error * mask).sum() / mask.sum().clamp_min(1.0)

    def conservative_penalty(self, feat: torch.Tensor, base: torch.Tensor | None, q_data: torch.Tensor,
                             samples: int = 4) -> torch.Tensor:
        """CQL's term (Kumar et al. 2020): per critic, the soft maximum of Q over actions the data
        did not take (``samples`` uniform and ``samples`` of the policy's, per state) minus Q at
        the batch's own actions. It lowers Q off the data, so the actor's first steps follow
        what the demonstrations and rollouts show rather than the critic's guesses where they
        show nothing (Cal-QL's concern: the offline-to-online dip). ``q_data``: [n, B]."""
        batch, dim = feat.shape[0], self.config.motion_dim
        repeated = feat.repeat_interleave(samples, 0)
        with torch.no_grad(), self._autocast():
            policy_actions, _, _ = self.policy(feat.detach().repeat_interleave(samples, 0),
                                               base.repeat_interleave(samples, 0) if base is not None else None)
        uniform = torch.rand(batch * samples, dim, device=feat.device) * 2 - 1
        with self._autocast():
            q_off = self.critic(repeated.repeat(2, 1), torch.cat([uniform, policy_actions])).float()
        q_off = q_off.view(q_off.shape[0], 2, batch, samples).permute(0, 2, 1, 3).reshape(q_off.shape[0], batch, -1)
        soft_max = torch.logsumexp(q_off, -1) - math.log(2 * samples)
        return (soft_max - q_data).mean(1).sum()

    def grasp_reward(self, state: torch.Tensor, command: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        """Task reward minus a penalty for gripper commands (``gripper_index``'s) that toggle the
        gripper's state."""
        c = self.config
        is_open = state[:, c.gripper_width_index] > c.gripper_open_threshold
        toggles = ((command == 0) & is_open) | ((command == 2) & ~is_open)
        return reward - c.grasp_penalty * toggles.float()

    def grasp_loss(self, feat: torch.Tensor, state: torch.Tensor, gripper: torch.Tensor, reward: torch.Tensor,
                   bootstrap: torch.Tensor, next_feat: torch.Tensor, next_target_feat: torch.Tensor,
                   demo_rows: torch.Tensor | None) -> tuple[torch.Tensor, dict]:
        """The discrete gripper head: a double-DQN target (the online head picks the next command,
        the target head rates it; clipped to ``max_return`` as the critics'), plus DQfD's
        large-margin loss on demo rows: the demonstrated command must beat every other by
        ``grasp_margin``, so the greedy choice is defined where only demos exist."""
        command = gripper_index(gripper)
        with torch.no_grad(), self._autocast():
            best_next = self.grasp(next_feat).argmax(-1, keepdim=True)
            next_q = self.target_grasp(next_target_feat).float().gather(1, best_next).squeeze(1)
            y = self.grasp_reward(state, command, reward) + bootstrap * next_q
            if self.config.max_return is not None:
                y = y.clamp_max(self.config.max_return)
        with self._autocast():
            q_all = self.grasp(feat).float()
        q = q_all.gather(1, command[:, None]).squeeze(1)
        loss = F.mse_loss(q, y)
        if self.config.grasp_margin > 0 and demo_rows is not None:
            margin = self.config.grasp_margin * (1.0 - F.one_hot(command[demo_rows], 3).float())
            loss = loss + ((q_all[demo_rows] + margin).max(-1).values - q[demo_rows]).mean()
        return loss, {"grasp_loss": loss.detach()}

    def actor_loss(self, feat: torch.Tensor, base: torch.Tensor | None, motion: torch.Tensor,
                   demo_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """SAC's actor term, mean(alpha * log pi - Q(s, pi(s))) with Q read through the action
        alone, plus the imitation terms, in one formula:

            loss = sac / q_scale + bc_weight * bc + residual_penalty * deviation

        bc: squared error of the deterministic action to the demonstrated one on the demo rows
        (Q-filtered: only where the critic rates the demo action at least as high); deviation:
        |deterministic action - the cloned base's|^2 (residual policies). q_scale = mean |Q|
        (TD3+BC's balance) whenever an imitation term is on (``bc_weight`` > 0, or a residual
        penalty with a base), else 1; a term whose rows are missing from the batch is 0, so the
        weighting never changes from batch to batch. Returns (loss, log pi, metrics)."""
        c = self.config
        with self._autocast():
            action, log_prob, mean = self.policy(feat, base)
            with weights_without_grad(self.critic):
                q = self.critic(feat, action).float().mean(0)
        log_prob, mean = log_prob.float(), mean.float()
        zero = torch.zeros((), device=self.device)
        bc = zero
        if c.bc_weight > 0 and demo_rows is not None:
            demo_action = motion[demo_rows]
            error = ((mean[demo_rows] - demo_action) ** 2).sum(-1)
            if c.q_filter:
                with torch.no_grad(), self._autocast():
                    q_demo = self.critic(feat[demo_rows], demo_action).float().mean(0)
                    q_pi = self.critic(feat[demo_rows], mean[demo_rows].detach()).float().mean(0)
                error = error * (q_demo >= q_pi).float()
            bc = error.mean()
        deviation = zero
        residual_penalty = c.residual_penalty if self.residual else 0.0
        if residual_penalty > 0:
            deviation = ((mean - base.float()) ** 2).sum(-1).mean()
        imitation = c.bc_weight > 0 or residual_penalty > 0
        q_scale = q.abs().mean().detach().clamp_min(1e-3) if imitation else 1
        loss = (self.alpha.detach() * log_prob - q).mean() / q_scale + c.bc_weight * bc + residual_penalty * deviation
        return loss, log_prob, {"actor_loss": loss.detach(), "bc_loss": bc.detach(),
                                "residual_deviation": deviation.detach(), "entropy": -log_prob.detach().mean()}

    def temperature_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """alpha rises while the policy's entropy is below the target, falls while above."""
        return -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

    @torch.no_grad()
    def update_targets(self) -> None:
        tau = self.config.tau
        pairs = [(self.critic, self.target_critic), (self.encoder, self.target_encoder)]
        if self.grasp is not None:
            pairs.append((self.grasp, self.target_grasp))
        for online, target in pairs:
            for p, tp in zip(online.parameters(), target.parameters()):
                tp.lerp_(p, tau)

    # ---- imitation pre-training --------------------------------------------------------
    def pretrain_actor(self, batch: dict) -> torch.Tensor:
        """Behaviour cloning step on a demo batch (MSE of the deterministic motion action).
        Trains the cloned base policy when residual, else the actor's mean (an external base
        is left as it is: 0). Returns the loss, a 0-d tensor on the device."""
        c = self.config
        if c.base_action_dim:  # an external base is trained already: nothing to clone
            return torch.zeros((), device=self.device)
        b = self._batch(batch)
        with self._autocast():
            if self.base is not None:  # the base's own encoder (with cameras) learns with it
                feat = self.base_encoder(b.obs) if self.base_encoder is not None else self.encoder(b.obs).detach()
                mean, opt = torch.tanh(self.base(feat)), self.base_opt
            else:
                mean, opt = self.actor.sample(self.encoder(b.obs).detach())[2], self.actor_opt
        loss = ((mean.float() - b.action[:, : c.motion_dim]) ** 2).sum(-1).mean()
        _step(opt, loss)
        return loss.detach()

    # ---- weights -----------------------------------------------------------------------
    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """What an actor needs to act: encoder, actor and grasp head."""
        return {k: v for k, v in self.state_dict().items() if k.split(".")[0] in ("encoder", "actor", "base", "base_encoder", "grasp")}

    def load_policy_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = set(self.policy_state_dict()) - set(state)
        if missing:
            raise InputError(f"policy weights lack {sorted(missing)[:5]}")
        self.load_state_dict(state, strict=False)

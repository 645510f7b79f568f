"""Small explicit networks for SAC: LayerNorm MLPs, a batched critic ensemble, the
tanh-Gaussian actor (and its gSDE variant), the discrete grasp critic and the observation encoder.

The critic ensemble is ONE module whose weights carry a leading ensemble axis, so all
critics run in a single batched matmul (``torch.baddbmm``) instead of a Python loop (the
loop survives only as the baseline of ``robot-rl bench learner``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.agents.encoders import MultiCameraEncoder
from robot_rl.errors import InputError

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, layer_norm: bool = True) -> nn.Sequential:
    """Linear -> LayerNorm -> ReLU blocks, then a linear head."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width)] + ([nn.LayerNorm(width)] if layer_norm else []) + [nn.ReLU()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class EnsembleLinear(nn.Module):
    """``n`` independent linear layers applied as one batched matmul: [n, B, in] -> [n, B, out]."""

    def __init__(self, n: int, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(n, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # same init as nn.Linear
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        if members is None:
            return torch.baddbmm(self.bias, x, self.weight)
        return torch.baddbmm(self.bias[members], x, self.weight[members])


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the feature axis with a separate affine per ensemble member."""

    def __init__(self, n: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n, 1, dim))

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        w, b = (self.weight, self.bias) if members is None else (self.weight[members], self.bias[members])
        return torch.addcmul(b, F.layer_norm(x, x.shape[-1:]), w)


class CriticEnsemble(nn.Module):
    """Q(s, a) for ``n`` critics at once. forward(features [B, F], action [B, A]) -> [n, B]."""

    def __init__(self, n: int, feature_dim: int, action_dim: int, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        self.n = n
        layers: list[nn.Module] = []
        in_dim = feature_dim + action_dim
        for width in hidden:
            layers += [EnsembleLinear(n, in_dim, width), EnsembleLayerNorm(n, width), nn.ReLU()]
            in_dim = width
        layers.append(EnsembleLinear(n, in_dim, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor, action: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        """Q of every member, or only of ``members`` (indices) -> [len(members), B]."""
        x = torch.cat([features, action], dim=-1)
        n = self.n if members is None else len(members)
        x = x.unsqueeze(0).expand(n, -1, -1)
        for layer in self.net:
            x = layer(x, members) if isinstance(layer, (EnsembleLinear, EnsembleLayerNorm)) else layer(x)
        return x.squeeze(-1)


class TanhGaussianActor(nn.Module):
    """pi(a | s): a Gaussian squashed by tanh into [-1, 1]^A."""

    def __init__(self, feature_dim: int, action_dim: int, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        self.net = mlp(feature_dim, hidden, 2 * action_dim)

    def start_std(self, std: float) -> None:
        """Start with exploration std ``std`` (pre-tanh) in every state: the log-std head's weights
        near zero and its bias at the value that gives ``std``; learning moves it from there."""
        if not math.exp(LOG_STD_MIN) < std < math.exp(LOG_STD_MAX):
            raise InputError(f"init_std must lie in ({math.exp(LOG_STD_MIN):.4g}, {math.exp(LOG_STD_MAX):.4g}), got {std}")
        head, half = self.net[-1], self.net[-1].out_features // 2
        unit = 2.0 * (math.log(std) - LOG_STD_MIN) / (LOG_STD_MAX - LOG_STD_MIN) - 1.0  # tanh of the raw output
        with torch.no_grad():
            head.weight[half:].mul_(0.01)
            head.bias[half:].fill_(math.atanh(unit))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(features).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        return mean, log_std

    def sample(self, features: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reparameterised sample: (action, log_prob, deterministic action); the noise from
        ``generator`` (default torch's global one)."""
        mean, log_std = self(features)
        std = log_std.exp()
        u = mean + std * torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        action = torch.tanh(u)
        # log N(u; mean, std) minus the tanh change of variables, summed over action dims
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return action, log_prob, torch.tanh(mean)


class StateDependentNoiseActor(TanhGaussianActor):
    """pi(a | s) with gSDE's exploration (Raffin, Kober and Stulp 2022, generalised State-Dependent
    Exploration): the noise is a linear function of the actor's last hidden layer z(s),
    ``eps = z(s) @ theta`` with ``theta ~ N(0, sigma^2)`` (one sigma per hidden unit and action,
    learned), so for one draw of ``theta`` the same state gets the same noise and nearby states
    nearby noise: the arm explores in smooth, consistent motions instead of jittering. Over
    ``theta``, ``eps`` is Gaussian with std ``sqrt(z^2 @ sigma^2)`` per action: the update's
    reparameterised sample and log-prob (``sample``, inherited) use that, and an actor's rollout
    (``explore``) holds one ``theta`` for several steps (``resample_noise``). ``z`` is detached in
    the std, as gSDE's default: the entropy term does not shape the features."""

    def __init__(self, feature_dim: int, action_dim: int, hidden: tuple[int, ...] = (256, 256)):
        nn.Module.__init__(self)
        self.net = mlp(feature_dim, hidden, action_dim)  # the mean; the noise's scale is log_sigma
        self.log_sigma = nn.Parameter(torch.zeros(hidden[-1], action_dim))
        self.start_std(0.5)
        self.theta: torch.Tensor | None = None  # the rollout's exploration matrix (not saved)

    def start_std(self, std: float) -> None:
        """sigma such that a typical state's std is ``std`` (pre-tanh): a LayerNorm-ReLU layer's
        units have E[z^2] about 1/2, so |z|^2 is about half the layer's width."""
        if not math.exp(LOG_STD_MIN) < std < math.exp(LOG_STD_MAX):
            raise InputError(f"init_std must lie in ({math.exp(LOG_STD_MIN):.4g}, {math.exp(LOG_STD_MAX):.4g}), got {std}")
        with torch.no_grad():
            self.log_sigma.fill_(math.log(std) - 0.5 * math.log(self.log_sigma.shape[0] / 2.0))

    def latent(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(z(s), the mean): the last hidden layer and the head over it."""
        z = self.net[:-1](features)
        return z, self.net[-1](z)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z, mean = self.latent(features)
        variance = (z.detach() ** 2) @ torch.exp(2.0 * self.log_sigma).to(z.dtype)
        log_std = (0.5 * torch.log(variance.float() + 1e-12)).clamp(LOG_STD_MIN, LOG_STD_MAX).to(mean.dtype)
        return mean, log_std

    def resample_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw the rollout's exploration matrix theta ~ N(0, sigma^2) anew."""
        sigma = self.log_sigma.detach().exp()
        noise = torch.randn(sigma.shape, generator=generator, device=sigma.device, dtype=sigma.dtype)
        self.theta = sigma * noise

    def explore(self, features: torch.Tensor) -> torch.Tensor:
        """The rollout's action, tanh(mean + z(s) @ theta), with the held theta (``resample_noise``)."""
        if self.theta is None:
            raise RuntimeError("explore() before resample_noise(): no exploration matrix drawn")
        z, mean = self.latent(features)
        return torch.tanh(mean.float() + z.float() @ self.theta)


class GraspCritic(nn.Module):
    """Discrete Q over the gripper commands {close, stay, open} (index 0, 1, 2)."""

    def __init__(self, feature_dim: int, hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        self.net = mlp(feature_dim, hidden, 3)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


class StateNormalizer(nn.Module):
    """Fixed per-dimension standardisation fitted once on the first data (demos)."""

    def __init__(self, dim: int, min_std: float = 0.01):
        super().__init__()
        self.min_std = min_std
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def fit(self, states: torch.Tensor) -> None:
        self.mean.copy_(states.mean(0))
        self.std.copy_(states.std(0).clamp_min(self.min_std) if len(states) > 1 else torch.ones_like(self.std))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return ((state - self.mean) / self.std).clamp(-10.0, 10.0)


class ObservationEncoder(nn.Module):
    """Flat observation dict -> feature vector.

    ``state`` is standardised and, when ``state_features`` > 0, passed through a small
    Linear -> LayerNorm -> tanh MLP; each camera has its own image encoder (see
    ``encoders.py``). The critic trains this module; the actor reads it detached.
    """

    def __init__(
        self,
        state_dim: int,
        cameras: tuple[str, ...] = (),
        image_size: tuple[int, int] = (64, 64),
        image_encoder: str = "drq",
        image_features: int = 64,
        state_features: int = 0,
        pretrained_path: str | None = None,
        freeze_backbone: bool = False,
        feature_shape: tuple[int, int, int] | None = None,
    ):
        super().__init__()
        self.normalizer = StateNormalizer(state_dim)
        self.state_net = (
            nn.Sequential(nn.Linear(state_dim, state_features), nn.LayerNorm(state_features), nn.Tanh())
            if state_features > 0
            else nn.Identity()
        )
        state_out = state_features if state_features > 0 else state_dim
        self.cameras = tuple(cameras)
        self.images = (
            MultiCameraEncoder(
                list(cameras), image_size, kind=image_encoder, out_dim=image_features,
                pretrained_path=pretrained_path, freeze=freeze_backbone, feature_shape=feature_shape,
            )
            if cameras
            else None
        )
        self.out_dim = state_out + (self.images.out_dim if self.images is not None else 0)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        state = self.state_net(self.normalizer(obs["state"]))
        if self.images is None:
            return state
        return torch.cat([self.images({cam: obs[cam] for cam in self.cameras}), state], dim=-1)

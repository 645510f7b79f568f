"""A lab's own learned policy as a ``--base-policy module:Class`` (issue 46): a small
convolutional network in plain PyTorch, nothing of robot_rl in it, that predicts the next
``CHUNK`` actions from the front and wrist cameras and the robot's state (a chunked policy, as
ACT's), trained by behaviour cloning on the lab's demonstrations; its weights and its state's
normalisation in one safetensors file.

    python examples/twin/lab_policy.py DEMOS.zarr WEIGHTS.safetensors [--steps N] [--seed S]
    LAB_POLICY_WEIGHTS=WEIGHTS.safetensors robot-rl train --task PickCube --obs pixels \\
        --cameras front wrist --base-policy examples/twin/lab_policy.py:LabPolicy ...

Training reads a demo store ``robot-rl record --images --cameras front wrist`` wrote (the only
robot_rl in this file, and only there). The policy reads the flat observation a run gives any
base: ``state`` and each camera's uint8 ``[H, W, 3]`` image. Its weights come from the
``LAB_POLICY_WEIGHTS`` environment variable, as a lab's deployment config would name them.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

CAMERAS = ("front", "wrist")
CHUNK = 5  # actions predicted per query: half a second at the twin's 10 Hz


class ChunkedConvPolicy(nn.Module):
    """Two 64x64 cameras stacked as 6 channels and the normalised state -> ``CHUNK`` actions in [-1, 1]."""

    def __init__(self, state_dim: int, action_dim: int, chunk: int = CHUNK):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.conv = nn.Sequential(
            nn.Conv2d(3 * len(CAMERAS), 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(64 * 4 * 4 + state_dim, 256), nn.ReLU(),
                                  nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, chunk * action_dim))
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``images`` uint8 ``[B, 6, 64, 64]``, ``state`` ``[B, S]`` -> ``[B, CHUNK, A]``."""
        features = self.conv(images.float() / 255.0 - 0.5)
        state = (state - self.state_mean) / self.state_std
        out = self.head(torch.cat([features, state], dim=-1))
        return torch.tanh(out).view(-1, self.chunk, self.action_dim)


def stack_cameras(frames: dict) -> np.ndarray:
    """Each camera's ``[..., H, W, 3]`` -> ``[..., 6, H, W]`` uint8."""
    stacked = np.concatenate([np.asarray(frames[camera]) for camera in CAMERAS], axis=-1)
    return np.moveaxis(stacked, -1, -3)


class LabPolicy:
    """The deployed policy: one query, one chunk of ``CHUNK`` actions (float32 ``[K, A]``)."""

    def __init__(self, weights: str | None = None):
        weights = weights or os.environ.get("LAB_POLICY_WEIGHTS")
        if not weights:
            raise RuntimeError("set LAB_POLICY_WEIGHTS to the policy's safetensors file "
                               "(python examples/twin/lab_policy.py DEMOS.zarr WEIGHTS.safetensors)")
        tensors = load_file(weights)
        action_dim, chunk = (int(v) for v in tensors.pop("shape_action_chunk").tolist())
        self.net = ChunkedConvPolicy(tensors["state_mean"].shape[0], action_dim, chunk)
        self.net.load_state_dict(tensors)
        self.net.eval()

    def __call__(self, obs: dict) -> np.ndarray:
        images = torch.from_numpy(np.ascontiguousarray(stack_cameras(obs)))[None]
        state = torch.as_tensor(np.asarray(obs["state"], np.float32))[None]
        with torch.no_grad():
            return self.net(images, state)[0].numpy().astype(np.float32)


def random_shift(images: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """DrQ's augmentation: each image shifted by up to ``pad`` pixels (edges repeated)."""
    n, _, h, w = images.shape
    padded = F.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    dx, dy = np.random.randint(0, 2 * pad + 1, n), np.random.randint(0, 2 * pad + 1, n)
    return torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])


def chunk_targets(actions: np.ndarray, chunk: int) -> np.ndarray:
    """Each step's next ``chunk`` actions ``[T, K, A]``; past the episode's end its last action."""
    padded = np.concatenate([actions, np.repeat(actions[-1:], chunk - 1, axis=0)])
    return np.stack([padded[t:t + chunk] for t in range(len(actions))])


def load_demos(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A robot-rl demo store -> images ``[N, 6, H, W]``, states ``[N, S]``, chunked actions ``[N, K, A]``."""
    from robot_rl.data.store import EpisodeStore

    images, states, targets = [], [], []
    for episode in EpisodeStore.open(path):
        steps = episode["has_action"]
        images.append(stack_cameras({c: episode[c][steps] for c in CAMERAS}))
        states.append(episode["state"][steps])
        targets.append(chunk_targets(episode["action"][steps], CHUNK))
    return np.concatenate(images), np.concatenate(states), np.concatenate(targets)


def train(demos: str, weights: str, steps: int = 2000, batch: int = 64, seed: int = 0) -> None:
    """Behaviour cloning: the mean squared error of each step's next ``CHUNK`` actions."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    images, states, targets = load_demos(demos)
    net = ChunkedConvPolicy(states.shape[1], targets.shape[2])
    net.state_mean.copy_(torch.from_numpy(states.mean(0)))
    net.state_std.copy_(torch.from_numpy(states.std(0) + 1e-3))
    images, states, targets = torch.from_numpy(images), torch.from_numpy(states), torch.from_numpy(targets)
    optimiser = torch.optim.Adam(net.parameters(), lr=3e-4)
    for step in range(1, steps + 1):
        rows = torch.randint(0, len(images), (batch,))
        loss = F.mse_loss(net(random_shift(images[rows]), states[rows]), targets[rows])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 500 == 0 or step == steps:
            print(f"step {step}/{steps}: loss {loss.item():.4f}", flush=True)
    tensors = {name: value.contiguous() for name, value in net.state_dict().items()}
    tensors["shape_action_chunk"] = torch.tensor([targets.shape[2], CHUNK])
    save_file(tensors, weights)
    print(f"{len(images)} frames of {demos} -> {weights}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="train the lab's chunked policy by behaviour cloning")
    parser.add_argument("demos", help="a robot-rl demo store with front and wrist images")
    parser.add_argument("weights", help="the safetensors file to write")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train(args.demos, args.weights, args.steps, seed=args.seed)

"""LeRobot's SAC update timed on the shapes of ``robot-rl bench learner`` (issue 45).

Run as a script by the Python of a LeRobot venv (``ROBOT_RL_LEROBOT_PYTHON``; LeRobot needs
Python >= 3.12 and torch < 2.12, so it never lives in robot_rl's environment):

    $ROBOT_RL_LEROBOT_PYTHON robot_rl/bench/lerobot_sac_worker.py --budget 10 --threads 1

It imports only the standard library, numpy, torch and lerobot: nothing of robot_rl. It prints
one JSON line of figures on stdout (``{"error": ...}`` and exit status 3 when it cannot measure,
e.g. without lerobot or without CUDA in LeRobot's torch): per configuration ``updates_per_s_*``,
``prepare_share_*`` (the part of that time spent on the shift and the preprocessor),
``parameters_*`` (policy + critic ensemble, targets excluded, shared modules once) and the
encoder's size, plus the torch, lerobot and Python versions and the torch threads.

What is timed is one step of LeRobot's own learner loop (``lerobot/rl/learner.py``:
``RLTrainer.training_step()``) minus the replay's index gather: the next batch is a pre-sampled
one (as the replay stores it: float32 images in [0, 1], the action with the gripper's discrete
index last) that gets the DrQ random shift its ``ReplayBuffer.sample`` applies (eagerly; the
buffer wraps it in ``torch.compile``, which took 60 s to compile on a 2-core CPU and then ran
at the eager speed, 0.28 s per pixel batch), then the policy preprocessor (normalisation), then
``SACAlgorithm.update``: critic loss + clipped Adam step, discrete (gripper) critic loss + step,
actor loss + step, temperature loss + step, soft target update. utd_ratio 1 (one batch per update).
``--warmup`` untimed updates first (pixels: half, at least one, as ``bench learner`` does), then
updates until ``--budget`` seconds and ``--min-calls`` updates have passed.

Configurations (batch 256; ``bench learner``'s): ``state_e2``: state 30 dims; ``pixels_e2``: two
64x64 cameras (front, wrist) and state 20. Both: action 6 continuous + the gripper as LeRobot
models it (``num_discrete_actions=3``, a discrete critic), 2 critics, MLPs (256, 256), LeRobot's
defaults otherwise (its state encoder Linear -> LayerNorm -> tanh to latent_dim 256, SiLU
activations; on pixels its default conv encoder shared by the cameras, trainable here as ours is:
``freeze_vision_encoder=False``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

BATCH_SIZE = 256
MOTION_DIM = 6  # continuous action dims; the gripper is LeRobot's discrete action (the last column)
GRIPPER_CHOICES = 3  # close, stay, open
HIDDEN = [256, 256]
CONFIGS = {
    "state_e2": {"state_dim": 30, "cameras": (), "image_size": None},
    "pixels_e2": {"state_dim": 20, "cameras": ("front", "wrist"), "image_size": (64, 64)},
}
IMAGE_MEAN, IMAGE_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # LeRobot's default image stats


def fail(message: str) -> None:
    print(json.dumps({"error": message}), flush=True)
    sys.exit(3)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timed updates per configuration")
    p.add_argument("--warmup", type=int, default=5, help="untimed updates first (pixels: half, at least 1)")
    p.add_argument("--min-calls", type=int, default=3, help="at least this many timed updates")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {sorted(CONFIGS)}")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    try:
        import lerobot  # noqa: F401
        import numpy as np
        import torch
        from lerobot.configs.types import FeatureType, PolicyFeature
        from lerobot.policies.gaussian_actor.configuration_gaussian_actor import (CriticNetworkConfig,
                                                                                   GaussianActorConfig)
        from lerobot.policies.gaussian_actor.modeling_gaussian_actor import GaussianActorPolicy
        from lerobot.processor import make_default_pre_post_processors
        from lerobot.rl.algorithms.sac import SACAlgorithm, SACAlgorithmConfig
        from lerobot.rl.buffer import random_shift
        from lerobot.rl.data_sources.data_mixer import DataMixer
        from lerobot.rl.trainer import RLTrainer
    except ImportError as exc:
        fail(f"{sys.executable} cannot import LeRobot 0.6's SAC ({type(exc).__name__}: {exc}); "
             "ROBOT_RL_LEROBOT_PYTHON must be the Python of a venv with lerobot[dataset]==0.6.1")

    unknown = set(args.configs.split(",")) - set(CONFIGS)
    if unknown:
        fail(f"unknown configurations {sorted(unknown)}; known: {sorted(CONFIGS)}")
    device = torch.device(args.device)
    if device.type not in ("cpu", "cuda"):
        fail(f"device {args.device}: LeRobot's SAC is measured on cpu or cuda only")
    if device.type == "cuda" and not torch.cuda.is_available():
        fail(f"device {args.device}: LeRobot's torch {torch.__version__} has no CUDA here")
    torch.set_num_threads(args.threads)

    class PreSampled(DataMixer):
        """The learner's data mixer, minus the replay's index gather: pre-sampled batches, cycled,
        each given the DrQ random shift ``ReplayBuffer.sample`` applies (all images at once)."""

        def __init__(self, batches: list[dict], image_keys: list[str]):
            self.batches, self.image_keys, self.i = batches, image_keys, 0

        def sample(self, batch_size: int) -> dict:
            raw = self.batches[self.i % len(self.batches)]
            self.i += 1
            state, next_state = dict(raw["state"]), dict(raw["next_state"])
            if self.image_keys:  # per key its states then its next states, as the buffer concatenates them
                n = batch_size
                shifted = random_shift(torch.cat([x for k in self.image_keys for x in (state[k], next_state[k])]),
                                       pad=4)
                for i, k in enumerate(self.image_keys):
                    state[k] = shifted[2 * i * n:(2 * i + 1) * n]
                    next_state[k] = shifted[(2 * i + 1) * n:(2 * i + 2) * n]
            return {**raw, "state": state, "next_state": next_state}

    def build(name: str):
        spec = CONFIGS[name]
        features = {"observation.state": PolicyFeature(FeatureType.STATE, (spec["state_dim"],))}
        stats = {"observation.state": {"min": torch.full((spec["state_dim"],), -3.0),
                                       "max": torch.full((spec["state_dim"],), 3.0)},
                 "action": {"min": -torch.ones(MOTION_DIM), "max": torch.ones(MOTION_DIM)}}
        for cam in spec["cameras"]:
            key = f"observation.images.{cam}"
            features[key] = PolicyFeature(FeatureType.VISUAL, (3, *spec["image_size"]))
            stats[key] = {"mean": torch.tensor(IMAGE_MEAN).view(3, 1, 1), "std": torch.tensor(IMAGE_STD).view(3, 1, 1)}
        policy_cfg = GaussianActorConfig(
            input_features=features, output_features={"action": PolicyFeature(FeatureType.ACTION, (MOTION_DIM,))},
            device=str(device), num_discrete_actions=GRIPPER_CHOICES, freeze_vision_encoder=False,
            discrete_critic_network_kwargs=CriticNetworkConfig(hidden_dims=list(HIDDEN)))
        policy_cfg.actor_network_kwargs.hidden_dims = list(HIDDEN)
        algo_cfg = SACAlgorithmConfig.from_policy_config(policy_cfg)
        algo_cfg.num_critics = 2
        algo_cfg.critic_network_kwargs = CriticNetworkConfig(hidden_dims=list(HIDDEN))
        torch.manual_seed(args.seed)
        policy = GaussianActorPolicy(policy_cfg)
        policy.train()
        algorithm = SACAlgorithm(policy=policy, config=algo_cfg)
        preprocessor, _ = make_default_pre_post_processors(policy_cfg, dataset_stats=stats)
        image_keys = [f"observation.images.{cam}" for cam in spec["cameras"]]
        rng = np.random.default_rng(args.seed)

        def observation() -> dict:
            obs = {"observation.state": torch.as_tensor(rng.standard_normal((BATCH_SIZE, spec["state_dim"]),
                                                                            np.float32))}
            for key in image_keys:
                pixels = rng.integers(0, 256, (BATCH_SIZE, 3, *spec["image_size"]), np.uint8)
                obs[key] = torch.as_tensor(pixels).float().div_(255)  # the replay stores float32 in [0, 1]
            return {k: v.to(device) for k, v in obs.items()}

        def flags(rng, p: float):
            return torch.as_tensor((rng.random(BATCH_SIZE) < p).astype(np.float32), device=device)

        batches = []
        for _ in range(4):
            action = np.concatenate([rng.uniform(-1, 1, (BATCH_SIZE, MOTION_DIM)),
                                     rng.integers(0, GRIPPER_CHOICES, (BATCH_SIZE, 1))], 1).astype(np.float32)
            batches.append({"state": observation(), "next_state": observation(),
                            "action": torch.as_tensor(action, device=device),
                            "reward": flags(rng, 0.05), "done": flags(rng, 0.05),
                            "truncated": torch.zeros(BATCH_SIZE, device=device)})
        trainer = RLTrainer(algorithm=algorithm, data_mixer=PreSampled(batches, image_keys), batch_size=BATCH_SIZE,
                            preprocessor=preprocessor)
        return trainer, algorithm, policy

    def parameters(modules) -> tuple[int, int]:
        unique = {id(p): p for m in modules for p in m.parameters()}
        return sum(p.numel() for p in unique.values()), sum(p.numel() for p in unique.values() if p.requires_grad)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    figures: dict = {"torch": torch.__version__, "lerobot": _version(), "python": sys.version.split()[0],
                     "torch_threads": torch.get_num_threads(), "device": str(device), "batch_size": BATCH_SIZE,
                     "budget_s": args.budget, "warmup": args.warmup}
    for name in args.configs.split(","):
        trainer, algorithm, policy = build(name)
        warmup = args.warmup if not CONFIGS[name]["cameras"] else max(1, args.warmup // 2)  # as bench learner
        for _ in range(warmup):
            trainer.training_step()  # also builds the trainer's iterator (mixer -> preprocessor)
        sync()
        # RLTrainer.training_step() is algorithm.update(iterator), which takes one batch at utd_ratio 1:
        # the same two calls, timed apart
        calls, prepare, t0 = 0, 0.0, time.perf_counter()
        while True:
            t = time.perf_counter()
            batch = next(trainer._iterator)
            sync()
            prepare += time.perf_counter() - t
            algorithm.update(iter((batch,)))
            calls += 1
            if calls >= args.min_calls and time.perf_counter() - t0 >= args.budget:
                break
        sync()
        elapsed = time.perf_counter() - t0
        total, trainable = parameters([policy, algorithm.critic_ensemble])
        encoder = policy.encoder_critic
        figures[f"updates_per_s_{name}"] = round(calls / elapsed, 3)
        figures[f"updates_{name}"] = calls
        figures[f"prepare_share_{name}"] = round(prepare / elapsed, 3)
        figures[f"parameters_{name}"] = total
        figures[f"trainable_parameters_{name}"] = trainable
        figures[f"encoder_parameters_{name}"] = sum(p.numel() for p in encoder.parameters())
        figures[f"encoder_out_dim_{name}"] = encoder.output_dim
        if encoder.has_images:
            figures[f"image_encoder_parameters_{name}"] = sum(p.numel() for p in encoder.image_encoder.parameters())
        del trainer, algorithm, policy, batch
    print(json.dumps(figures), flush=True)


def _version() -> str:
    from importlib.metadata import version

    return version("lerobot")


if __name__ == "__main__":
    main(sys.argv[1:])

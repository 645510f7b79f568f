"""``robot-rl eval``: run a checkpoint's deterministic policy on the sim twin."""

from __future__ import annotations

import json
from pathlib import Path

from robot_rl.envs import make_env
from robot_rl.rollout import evaluate
from robot_rl.runtime.checkpoint import (check_compatible, check_recorded_network, load_agent, read_state,
                                         resolve_checkpoint)
from robot_rl.runtime.device import resolve_device


def evaluate_checkpoint(path: str, episodes: int = 50, task: str | None = None, backend: str | None = None,
                        seed: int = 3_000_000, device: str = "auto", log=None) -> dict:
    """The checkpoint's deterministic policy on ``device`` (auto, cpu, cuda, cuda:N, mps), whatever
    device it was trained on; ``log``: progress lines."""
    if episodes < 1:
        raise ValueError("--episodes must be at least 1")
    device = resolve_device(device)
    ckpt = resolve_checkpoint(Path(path))
    trained = read_state(ckpt).get("train_config", {})
    agent = load_agent(ckpt / "agent.safetensors", with_optimizers=False, device=device)
    check_recorded_network(agent.config, ckpt)  # an agent file swapped in from another run is refused
    task = task or trained.get("task", "PickCube")
    env = make_env(task, backend or trained.get("backend", "mujoco"), trained.get("obs", "state"),
                   tuple(trained.get("image_size", (64, 64))), tuple(trained.get("cameras", ("front", "wrist"))))
    try:
        check_compatible(agent.config, env, ckpt)
        result = evaluate(lambda o: agent.act(o, deterministic=True), env, episodes, seed=seed, log=log)
    finally:
        env.close()
    return {"checkpoint": str(ckpt), "task": task, "device": device, **result}


if __name__ == "__main__":  # pragma: no cover
    import sys

    print(json.dumps(evaluate_checkpoint(sys.argv[1])))

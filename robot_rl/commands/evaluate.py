"""``robot-rl eval``: run a checkpoint's policy on the sim twin: its deterministic policy alone
(the success rate), or with the simulated human watching (how often the operator would still
step in, and why: what a run's late human share is made of). A run trained on a base policy
(``--base-policy``) is graded with its base, and its base alone on the same episodes
(``base_alone``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from robot_rl.config import EvalConfig
from robot_rl.errors import InputError
from robot_rl.rollout import evaluate
from robot_rl.runtime.checkpoint import (check_compatible, check_recorded_network, load_agent, read_state,
                                         resolve_checkpoint)
from robot_rl.runtime.device import resolve_device


def evaluate_checkpoint(path: str, log=None, **settings) -> dict:
    """The checkpoint's policy, ``settings`` the fields of ``EvalConfig`` (robot_rl/config.py, their
    defaults): on ``device`` (auto, cpu, cuda, cuda:N, mps), whatever device it was trained on;
    ``log``: progress lines. Deterministic unless ``stochastic`` (as the actor samples while
    training). ``human_eagerness`` > 0: the simulated human watches, as in training, and the
    result adds its takeovers (by reason), the share of steps it drove and the episode lengths."""
    c = EvalConfig(**settings)
    c.validate()
    episodes, task, seed, stochastic, human_eagerness = c.episodes, c.task, c.seed, c.stochastic, c.human_eagerness
    device = resolve_device(c.device)
    ckpt = resolve_checkpoint(Path(path))
    trained = read_state(ckpt).get("train_config", {})
    agent = load_agent(ckpt / "agent.safetensors", with_optimizers=False, device=device)
    check_recorded_network(agent.config, ckpt)  # an agent file swapped in from another run is refused
    foreign = env_settings(c, trained)
    if foreign.env:
        if human_eagerness > 0:
            raise InputError(f"--simulated-human needs the twin's scripted expert; --env {foreign.env} has none")
        task = foreign.env
        env = make_run_env(foreign, trained)
    else:
        task = task or trained.get("task", "PickCube")
        env = make_twin_env(task, c.backend or trained.get("backend", "mujoco"), trained)
    try:
        check_compatible(agent.config, env, ckpt)
        agent.seed_acting(seed)
        policy = lambda o: agent.act(o, deterministic=not stochastic)  # noqa: E731
        if human_eagerness > 0:
            result = evaluate_with_human(policy, env, task, human_eagerness, episodes, seed, log)
        else:
            result = evaluate(policy, env, episodes, seed=seed, log=log)
            if env.base_action_dim:  # the base alone on the same episodes: what the residual adds
                width = env.base_action_dim
                result["base_alone"] = evaluate(lambda o: o["state"][-width:], env, episodes, seed=seed, log=log)
                result["base_policy"] = {"source": trained.get("base_policy"), **env.env.latency()}
    finally:
        env.close()
    return {"checkpoint": str(ckpt), "task": task, "device": device, "policy": "stochastic" if stochastic else
            "deterministic", **result}


def base_settings(trained: dict):
    """The run's base policy settings (``BasePolicyConfig``'s fields) as its train config recorded them."""
    import types

    from robot_rl.config import BasePolicyConfig

    fields = {f.name: trained.get(f.name, f.default) for f in dataclasses.fields(BasePolicyConfig)}
    return types.SimpleNamespace(**fields, obs=trained.get("obs", "state"),
                                 cameras=tuple(trained.get("cameras", ("front", "wrist"))),
                                 env_timeout_s=trained.get("env_timeout_s", 0))


def make_twin_env(task: str, backend: str, trained: dict):
    """The twin as the run's policy observes it (with its collision reflex and its arm's force bound if the
    run had them), with the run's base policy (if it had one) beside it."""
    from robot_rl.base_policy import with_base_policy
    from robot_rl.envs import FlatObservation, make_cell_env, twin_contact

    obs, cameras = trained.get("obs", "state"), tuple(trained.get("cameras", ("front", "wrist")))
    cell = with_base_policy(base_settings(trained),
                            make_cell_env(task, backend, obs, tuple(trained.get("image_size", (64, 64))), cameras,
                                          **twin_contact(trained)))
    try:
        return FlatObservation(cell, obs, cameras)
    except BaseException:
        cell.close()
        raise


def env_settings(c, trained: dict):
    """The Gymnasium env a command runs (``EnvConfig``'s fields): those given, else the run's own
    (its train config), so a run on ``--env`` evaluates on it; ``env`` None: the twin."""
    import types

    from robot_rl.config import EnvConfig

    fields = [f.name for f in dataclasses.fields(EnvConfig)]
    given = {f: getattr(c, f) for f in fields if getattr(c, f) not in (None, ())}
    chosen = {**({} if c.env else {f: trained.get(f) for f in fields}), **given}  # another env: its settings alone
    return types.SimpleNamespace(**{**dict.fromkeys(fields), **chosen, "env_kwargs": tuple(chosen.get("env_kwargs") or ())})


def make_run_env(foreign, trained: dict):
    """The run's Gymnasium env (through its map) as its policy observes it."""
    from robot_rl.envs import FlatObservation
    from robot_rl.foreign.env import make_foreign_env

    obs, cameras = trained.get("obs", "state"), tuple(trained.get("cameras", ("front", "wrist")))
    from robot_rl.base_policy import with_base_policy

    cell = make_foreign_env(foreign, cameras if obs == "pixels" else (), tuple(trained.get("image_size", (64, 64))))
    cell = with_base_policy(base_settings(trained), cell)
    try:
        return FlatObservation(cell, obs, cameras)
    except BaseException:
        cell.close()
        raise


def evaluate_with_human(policy, env, task: str, eagerness: float, episodes: int, seed: int, log=None) -> dict:
    """Episodes of ``policy`` with the simulated human (teleop/simulated_human.py) watching the
    raw scene and taking over as it does in training; success by ground truth."""
    import collections

    from robot_rl.actor import EpisodeTally
    from robot_rl.runtime.progress import ProgressLines
    from robot_rl.teleop.simulated_human import SimulatedHuman, SimulatedHumanConfig

    human = SimulatedHuman(task, SimulatedHumanConfig(eagerness=eagerness), seed=seed)
    cell = env.env  # the raw scene (privileged poses included), what the human judges by
    reasons: collections.Counter = collections.Counter()
    tallies, successes = [], []  # a takeover is a run of human steps, as training counts it (EpisodeTally)
    progress = ProgressLines("evaluation with the simulated human", episodes, unit="episodes", log=log) if log else None
    for i in range(episodes):
        raw, _ = cell.reset(seed=seed + i)
        human.reset()
        tally = EpisodeTally()
        while True:
            action = human(raw)
            if action is not None and human.driven == 1:  # the first step of a takeover
                reasons["stall" if human.reason.startswith("no progress") else "fall"] += 1
            raw, reward, terminated, truncated, info = cell.step(
                action if action is not None else policy(env.observation(raw)))
            tally.add(reward, action is not None)
            if terminated or truncated:
                break
        tallies.append(tally)
        successes.append(bool(info["success"]))
        if progress is not None:
            progress.update(i + 1, human=f"{sum(t.intervention_steps for t in tallies) / sum(t.steps for t in tallies):.3f}")
    lengths = np.array([t.steps for t in tallies])
    human_steps = sum(t.intervention_steps for t in tallies)
    return {"success_rate": float(np.mean(successes)), "episodes": episodes, "seed_range": [seed, seed + episodes - 1],
            "human_eagerness": eagerness, "human_steps": int(human_steps),
            "human_share": round(human_steps / int(lengths.sum()), 4),
            "takeovers": sum(t.interventions for t in tallies), "takeovers_by_reason": dict(reasons),
            "episodes_with_a_takeover": sum(t.interventions > 0 for t in tallies),
            "episode_length_mean": float(lengths.mean()), "episode_length_median": float(np.median(lengths))}

if __name__ == "__main__":  # pragma: no cover
    import sys

    print(json.dumps(evaluate_checkpoint(sys.argv[1])))

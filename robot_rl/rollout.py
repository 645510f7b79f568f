"""Rolling out policies: scripted demonstrations into a buffer, and evaluation episodes."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from robot_rl.contract import Transition
from robot_rl.envs import FlatObservation, check_observation
from robot_rl.runtime.progress import ProgressLines


def collect_demos(env, observe: Callable[[dict], dict], task: str, episodes: int, add: Callable, seed: int = 10_000,
                  noise: float = 0.1, successful_only: bool = True, max_tries: int | None = None,
                  expert=None) -> dict:
    """Run the scripted expert (the stand-in for a human demonstrator) on ``env`` (contract
    observations: the expert reads the sim's object poses) and hand every transition, observed
    through ``observe``, to ``add(transition)`` (a ``Transition``).
    Failed attempts are discarded when ``successful_only`` (a human keeps the good takes).
    Returns the counts, and each kept episode's steps and success (``episode_steps``, ``episode_success``).
    ``expert``: another demonstrator (raw observation -> action, with ``reset``: a Gymnasium
    env's scripted policy) instead of the twin's expert for ``task``."""
    if expert is None:
        from robot_rl.sim.experts import make_expert

        expert = make_expert(task, noise=noise, seed=seed)
    kept, tries, episode_steps, episode_success = 0, 0, [], []
    max_tries = max_tries or 3 * episodes + 10
    while kept < episodes and tries < max_tries:
        raw, _ = env.reset(seed=seed + tries)
        check_observation(raw, f"the env at the reset of demonstration try {tries + 1} (seed {seed + tries})")
        expert.reset()
        tries += 1
        episode = []
        while True:
            action = expert(raw)
            next_raw, reward, terminated, truncated, info = env.step(action)
            check_observation(next_raw, f"the env after step {len(episode) + 1} of demonstration try {tries}")
            episode.append(Transition(observe(raw), action, reward, observe(next_raw), terminated, truncated))
            raw = next_raw
            if terminated or truncated:
                break
        if successful_only and not info["success"]:
            continue
        for transition in episode:
            add(transition)
        kept += 1
        episode_steps.append(len(episode))
        episode_success.append(bool(info["success"]))
    if kept < episodes:
        from robot_rl.errors import TrainingError

        raise TrainingError(f"the scripted demonstrator succeeded in only {kept} of {tries} tries")
    return {"episodes": kept, "tries": tries, "steps": sum(episode_steps), "episode_steps": episode_steps,
            "episode_success": episode_success}


def steps_to_success(steps: Sequence[int], successes: Sequence[bool]) -> dict:
    """Cycle time over episodes (one step count and one success flag each): the mean steps of the
    successful episodes only (``steps_to_success``, None when none succeeded), their median
    (``steps_to_success_median``: the typical episode, where the mean also carries the few long
    searches) and how many succeeded."""
    done = [n for n, success in zip(steps, successes, strict=True) if success]
    return {"steps_to_success": round(float(np.mean(done)), 2) if done else None,
            "steps_to_success_median": round(float(np.median(done)), 2) if done else None,
            "successful_episodes": len(done)}


def evaluate(policy: Callable[[dict], np.ndarray], env: FlatObservation, episodes: int, seed: int = 1_000_000,
             log: Callable[[str], None] | None = None) -> dict:
    """Deterministic evaluation: success rate, mean episode length and the cycle time
    (``steps_to_success``: the mean length of the successful episodes only) over ``episodes``
    episodes, reset with seeds ``seed`` .. ``seed + episodes - 1`` (``seed_range``, first and last),
    and ``reflex_stops``: the episodes the twin's collision reflex ended (failures, ``info["reflex"]``).
    ``log``: progress lines (episodes, rate, ETA, success so far) for a long evaluation."""
    successes, lengths, reflex_stops = [], [], 0
    progress = ProgressLines("evaluation", episodes, unit="episodes", log=log) if log else None
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        check_observation(obs, f"the env at the reset of evaluation episode {i + 1} (seed {seed + i})")
        steps = 0
        while True:
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            steps += 1
            check_observation(obs, f"the env after step {steps} of evaluation episode {i + 1} (seed {seed + i})")
            if terminated or truncated:
                break
        successes.append(bool(info["success"]))
        lengths.append(steps)
        reflex_stops += bool(info.get("reflex", False))
        if progress is not None:
            progress.update(i + 1, success=f"{np.mean(successes):.2f}")
    return {"success_rate": float(np.mean(successes)), "episode_length": float(np.mean(lengths)), "episodes": episodes,
            **steps_to_success(lengths, successes), "seed_range": [seed, seed + episodes - 1],
            "reflex_stops": reflex_stops}

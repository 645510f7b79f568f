"""``robot-rl bench sim``: env steps per second per backend and task (state-only and with
both cameras), the scripted expert's success rate, and the peer twin gym_hil measured in
the same run when its environment is available."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from robot_rl.sim import make
from robot_rl.sim.experts import make_expert, run_episode

GYM_HIL_ENV_ID = "gym_hil/PandaPickCubeBase-v0"
# gym_hil pins mujoco < 3.9, so it cannot live in our environment (mujoco 4); it is measured
# in its own venv (scripts/setup_gym_hil.sh), found here or through ROBOT_RL_GYM_HIL_PYTHON.
GYM_HIL_VENV = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".venv-gym-hil", "bin", "python"))
GYM_HIL_SCRIPT = """
import os, sys, time
import gymnasium as gym, gym_hil  # noqa: F401
env = gym.make("{env_id}")
env.reset(seed=0)
env.action_space.seed(0)
n = {steps}
t = time.perf_counter()
for _ in range(n):
    _, _, terminated, truncated, _ = env.step(env.action_space.sample())
    if terminated or truncated:
        env.reset()
print(n / (time.perf_counter() - t), flush=True)
os._exit(0)  # skip gym_hil's renderer teardown, which can fail headless
"""


def steps_per_second(task: str, backend: str, images: bool, steps: int) -> float:
    env = make(task, backend=backend, images=images)
    env.reset(seed=0)
    env.action_space.seed(0)
    env.step(env.action_space.sample())  # warm up (renderer creation, caches)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    rate = steps / (time.perf_counter() - t0)
    env.close()
    return rate


def expert_success(task: str, backend: str, episodes: int) -> float:
    env = make(task, backend=backend)
    expert = make_expert(task, noise=0.0, seed=0)
    successes = [run_episode(env, expert, seed=1000 + i)["success"] for i in range(episodes)]
    env.close()
    return float(np.mean(successes))


def gym_hil_steps_per_second(steps: int) -> tuple[float | None, str]:
    python = os.environ.get("ROBOT_RL_GYM_HIL_PYTHON", GYM_HIL_VENV)
    if not os.path.exists(python):
        try:
            import gym_hil  # noqa: F401
        except ImportError:
            return None, (
                "gym_hil not measured: it requires mujoco<3.9 and cannot be installed beside our mujoco 4; "
                "run scripts/setup_gym_hil.sh to give it its own venv (.venv-gym-hil) and the bench measures it there"
            )
        python = sys.executable
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    try:
        out = subprocess.run(
            [python, "-c", GYM_HIL_SCRIPT.format(env_id=GYM_HIL_ENV_ID, steps=steps)],
            capture_output=True, text=True, timeout=600, env=env,
        )
        rate = float(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return None, f"gym_hil measurement failed: {exc!r}"
    return rate, f"gym_hil {GYM_HIL_ENV_ID} measured state-only in its own venv ({python}), same machine, same run"


HOP_ENV = "Pendulum-v1"  # a state env of gymnasium's own: its step takes microseconds, so the hop shows


def worker_hop(steps: int, rounds: int = 3) -> dict:
    """What ``--env-python`` costs per step: the same mapped state env (``HOP_ENV``, the same
    actions) stepped in this process and in a worker process of this interpreter, alternately
    ``rounds`` times; the median of each, and their difference, the hop."""
    from robot_rl.foreign.client import open_env
    from robot_rl.foreign.env import MappedEnv
    from robot_rl.foreign.mapping import EnvMap

    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 1)).astype(np.float32)
    envs = {where: MappedEnv(open_env(HOP_ENV, {}, python), EnvMap(), HOP_ENV)
            for where, python in (("in_process", None), ("worker", sys.executable))}
    times: dict = {where: [] for where in envs}
    try:
        for _ in range(rounds):
            for where, env in envs.items():
                env.reset(seed=0)
                env.step(actions[0])  # warm
                t0 = time.perf_counter()
                for action in actions:
                    _, _, terminated, truncated, _ = env.step(action)
                    if terminated or truncated:
                        env.reset(seed=0)
                times[where].append((time.perf_counter() - t0) / steps * 1e3)
    finally:
        for env in envs.values():
            env.close()
    local, remote = float(np.median(times["in_process"])), float(np.median(times["worker"]))
    return {"worker_hop_env": HOP_ENV, "in_process_ms_per_step": round(local, 4),
            "worker_ms_per_step": round(remote, 4), "worker_hop_ms_per_step": round(remote - local, 4)}


def run(quick: bool = False, log=print) -> dict:
    state_steps = 300 if quick else 2000
    pixel_steps = 40 if quick else 200
    episodes = 20 if quick else 100
    figures: dict = {}
    notes: list[str] = []
    for backend, task in [("mujoco", "PickCube"), ("mujoco", "PegInsert"), ("pybullet", "PickCube"), ("pybullet", "PegInsert")]:
        key = f"{backend}_{task.lower()}"
        figures[f"{key}_state_steps_per_s"] = round(steps_per_second(task, backend, False, state_steps), 1)
        figures[f"{key}_pixels_steps_per_s"] = round(steps_per_second(task, backend, True, pixel_steps), 1)
        log(f"{key}: {figures[f'{key}_state_steps_per_s']} steps/s state, {figures[f'{key}_pixels_steps_per_s']} with 2 cameras")
    for backend, task in [("mujoco", "PickCube"), ("mujoco", "PegInsert"), ("pybullet", "PickCube"), ("pybullet", "PegInsert")]:
        key = f"{backend}_{task.lower()}_expert_success"
        figures[key] = expert_success(task, backend, episodes)
        log(f"{key}: {figures[key]:.2f} over {episodes} episodes")
    figures["expert_episodes"] = episodes
    hop = worker_hop(500 if quick else 5000)
    figures.update(hop)
    log(f"--env-python worker hop: {hop['worker_hop_ms_per_step']:.3f} ms per step ({HOP_ENV}: "
        f"{hop['in_process_ms_per_step']:.3f} ms in process, {hop['worker_ms_per_step']:.3f} ms in a worker)")
    notes.append("worker hop: the same mapped state env stepped in process and in a worker process of this "
                 "interpreter (robot_rl/foreign: raw array frames over its stdin/stdout), medians of 3 alternating "
                 "rounds; the hop is their difference")
    rate, note = gym_hil_steps_per_second(state_steps // 2)
    figures["gym_hil_pickcube_state_steps_per_s"] = None if rate is None else round(rate, 1)
    notes.append(note)
    if rate:
        figures["mujoco_pickcube_vs_gym_hil_state_ratio"] = round(figures["mujoco_pickcube_state_steps_per_s"] / rate, 2)
    notes.append("steps/s use uniform random actions in one process; physics is single-threaded (one core), "
                 "the CPU renderer behind the pixels figures (EGL/llvmpipe) may use more threads")
    figures["notes"] = notes
    return figures

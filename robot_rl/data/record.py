"""``robot-rl record``: scripted-expert episodes from the sim twin into an episode store.

The expert stands in for a human demonstrator; its noise knob produces the imperfect and
failed takes a real session has (``keep_failures`` keeps them, labelled by ``success``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data.recorder import EpisodeRecorder, store_fields
from robot_rl.data.store import EpisodeStore


def record_expert(out: str | Path, task: str, episodes: int, backend: str = "mujoco", noise: float = 0.1,
                  seed: int = 0, images: bool = False, image_size: tuple[int, int] = (128, 128),
                  cameras: tuple[str, ...] = ("front", "wrist"), keep_failures: bool = True,
                  image_codec: str = "lossless", hold_after_success: int = 0, on_episode=None) -> dict:
    """Record ``episodes`` episodes (kept ones) into a new store at ``out``; returns a summary.

    ``hold_after_success`` keeps recording that many steps of a still arm after the task is
    solved, each frame labelled by ground truth: success classifiers need more than the one
    success frame an episode ends on (an operator would hold the success pose the same way).
    Those frames come after the terminal transition, so demo loading ignores them."""
    from robot_rl.sim import make
    from robot_rl.sim.experts import make_expert

    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    env = make(task, backend, images=images, image_size=tuple(image_size), cameras=tuple(cameras))
    try:
        fields, cams = store_fields(env.observation_space, env.action_space.shape[0])
        store = EpisodeStore.create(out, fields, task=task, robot="panda", control_hz=env.limits.control_hz, cameras=cams,
                                    images=image_codec, backend=backend, source="scripted_expert", expert_noise=noise,
                                    hold_after_success=hold_after_success)
        period = 1.0 / env.limits.control_hz
        t = [0.0]
        recorder = EpisodeRecorder(store, clock=lambda: t[0])  # sim time, not wall time
        expert = make_expert(task, noise=noise, seed=seed)
        kept = tries = successes = 0
        while kept < episodes and tries < 10 * episodes:
            obs, _ = env.reset(seed=seed + tries)
            expert.reset()
            tries += 1
            t[0] = 0.0
            recorder.start(obs)
            while True:
                action = expert(obs)
                obs, reward, terminated, truncated, info = env.step(action)
                t[0] += period
                recorder.step(action, obs, reward, terminated, truncated, success=info["success"])
                if terminated or truncated:
                    break
            for _ in range(hold_after_success if info["success"] else 0):
                still = np.zeros(env.action_space.shape, np.float32)  # no motion, gripper as it is
                obs, reward, terminated, truncated, hold_info = env.step(still)
                t[0] += period
                recorder.step(still, obs, reward, terminated, truncated, success=hold_info["success"])
            if info["success"] or keep_failures:
                index = recorder.finish()
                kept += 1
                successes += bool(info["success"])
                if on_episode:
                    on_episode(index, bool(info["success"]))
            else:
                recorder.discard()
    finally:
        env.close()
    return {"path": str(out), "episodes": kept, "tries": tries, "successes": successes,
            "frames": int(store.n_frames), "success_rate": successes / max(kept, 1)}


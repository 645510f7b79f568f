"""The SO-101 twin (sim/so101_env.py, issue 47): PickCube sized for the SO-101 with the contract's
observations and actions, moved by the same IK as the real arm's backend, and a scripted expert
that picks the cube nearly every time (for demonstrations and the simulated human)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.contract import STATE_DIM, STATE_SLICES
from robot_rl.sim.experts import PickCubeSO101Expert
from robot_rl.sim.so101_env import So101CellEnv


def test_observations_and_actions_follow_the_contract():
    env = So101CellEnv(images=True, image_size=(32, 32))
    try:
        obs, info = env.reset(seed=0)
        assert obs["state"].shape == (STATE_DIM,) and obs["state"].dtype == np.float32
        assert set(obs["images"]) == {"front", "wrist"} and obs["images"]["front"].shape == (32, 32, 3)
        assert obs["privileged"]["cube"].shape == (7,) and env.observation_space.contains(obs)
        np.testing.assert_allclose(np.abs(obs["state"][STATE_SLICES["tcp_quat"]]), [0, 1, 0, 0], atol=0.05)
        start = obs["state"][STATE_SLICES["tcp_pos"]].copy()
        obs, reward, terminated, truncated, info = env.step(np.array([0, 1.0, 0, 0, 0, 0, 0], np.float32))
        moved = obs["state"][STATE_SLICES["tcp_pos"]] - start
        assert 0.02 < moved[1] < 0.036 and abs(moved[0]) < 0.005 and abs(moved[2]) < 0.005  # about 3 cm left
        assert reward == 0.0 and not terminated and not truncated
        with pytest.raises(Exception, match="action"):
            env.step(np.zeros(5, np.float32))
    finally:
        env.close()


def test_the_scripted_expert_picks_the_cube_nearly_every_time():
    env = So101CellEnv()
    expert = PickCubeSO101Expert()  # noiseless
    successes, lengths = 0, []
    try:
        for seed in range(20):
            obs, _ = env.reset(seed=seed)
            expert.reset()
            for step in range(env.max_episode_steps):
                obs, reward, terminated, truncated, info = env.step(expert(obs))
                if terminated or truncated:
                    break
            successes += bool(info["success"])
            lengths.append(step + 1)
    finally:
        env.close()
    assert successes >= 19, (successes, lengths)


def test_the_twin_is_a_registered_gymnasium_env():
    import gymnasium as gym

    import robot_rl.sim  # noqa: F401 - registers the ids

    env = gym.make("robot_rl/PickCubeSO101-v0")
    try:
        obs, _ = env.reset(seed=0)
        assert obs["state"].shape == (STATE_DIM,)
    finally:
        env.close()


def test_a_noisy_expert_fails_more_and_its_progress_reads_the_scene():
    """For the simulated human and the classifier's failed takes: noise makes the expert miss, and
    progress goes from about 0 at the start to 1 once the cube is up."""
    env = So101CellEnv()
    try:
        obs, _ = env.reset(seed=5)
        expert = PickCubeSO101Expert()
        assert expert.progress(obs) < 0.5
        for _ in range(env.max_episode_steps):
            obs, _, terminated, _, info = env.step(expert(obs))
            if terminated:
                break
        assert info["success"] and expert.progress(obs) > 0.9
        noisy, failures = PickCubeSO101Expert(noise=1.0, seed=0), 0
        for seed in range(5):
            obs, _ = env.reset(seed=seed)
            noisy.reset()
            for _ in range(30):
                obs, _, terminated, _, info = env.step(noisy(obs))
                if terminated:
                    break
            failures += not info["success"]
        assert failures >= 4
    finally:
        env.close()


def test_pickcubeso101_is_a_sim_task_of_its_own_that_the_panda_twin_refuses():
    from robot_rl.envs import make_env
    from robot_rl.errors import InputError
    from robot_rl.sim import make
    from robot_rl.sim.env import PandaCellEnv, UnknownBackendError
    from robot_rl.sim.experts import make_expert

    env = make_env("PickCubeSO101", obs="state")  # what robot-rl train builds: the learner's flat observation
    try:
        obs, _ = env.reset(seed=0)
        assert obs["state"].shape == (STATE_DIM + 7 + 3,)  # the robot, the cube's pose, the cube from the TCP
        assert isinstance(make_expert("PickCubeSO101"), PickCubeSO101Expert)
    finally:
        env.close()
    with pytest.raises(InputError, match="task PickCubeSO101 is the so101's, not the Panda's"):
        PandaCellEnv("PickCubeSO101")
    with pytest.raises(UnknownBackendError, match="runs on mujoco only"):
        make("PickCubeSO101", backend="pybullet")

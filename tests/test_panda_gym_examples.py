"""The panda-gym examples a lab copies (examples/panda_gym/): the scripted policies that record
the demonstrations and drive the simulated human of `robot-rl train --env`, and the maps."""

from pathlib import Path

import numpy as np
import pytest

from robot_rl.foreign.client import LocalEnv
from robot_rl.foreign.env import MappedEnv
from robot_rl.foreign.mapping import read_env_map
from robot_rl.foreign.worker import load_function

pytest.importorskip("panda_gym")  # the dev extra installs it; a lab's own venv may not

EXAMPLES = Path(__file__).parents[1] / "examples" / "panda_gym"
PUSH = ("panda_gym:PandaPush-v3", "push.yaml", "scripted_push.py:policy")
PICK_AND_PLACE = ("panda_gym:PandaPickAndPlace-v3", "pick_and_place.yaml", "scripted_pick_and_place.py:policy")


def expert_episodes(env_id: str, expert: str, episodes: int) -> tuple[int, float]:
    """The scripted policy alone on the raw env: successes, mean steps."""
    import gymnasium as gym

    policy = load_function(str(EXAMPLES / expert))  # as --env-expert loads it
    env = gym.make(env_id.split(":")[1])
    successes, steps = 0, []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        policy.reset()
        for t in range(env.spec.max_episode_steps):
            obs, _, terminated, truncated, info = env.step(policy(obs))
            if terminated or truncated:
                break
        successes += bool(info["is_success"])
        steps.append(t + 1)
    env.close()
    return successes, float(np.mean(steps))


@pytest.mark.parametrize("env_id, _map, expert", [PUSH, PICK_AND_PLACE], ids=["push", "pick_and_place"])
def test_the_scripted_policies_succeed_nearly_always(env_id, _map, expert):
    """Demonstrations and the simulated human come from them: 200 of 200 each when measured
    (docs/CALIBRATION.md); here 50 episodes, at most one failure."""
    import panda_gym  # noqa: F401  (registers the envs)

    successes, steps = expert_episodes(env_id, expert, 50)
    assert successes >= 49, f"{expert}: {successes} of 50"
    assert steps < 30  # well inside the 50-step limit: a correction has room


def test_the_pick_and_place_map_drives_the_fingers_with_the_grasp_head():
    env_id, map_file, _ = PICK_AND_PLACE
    env = MappedEnv(LocalEnv(env_id, {}), read_env_map(EXAMPLES / map_file), env_id)
    m = env.map
    assert env.action_space.shape == (4,) and env.task.uses_gripper
    assert m.to_env_action(np.array([0.0, 0.0, 0.0, 1.0]))[3] == -1.0  # close: the fingers' width shrinks
    assert m.to_env_action(np.array([0.0, 0.0, 0.0, -1.0]))[3] == 1.0  # open
    obs, _ = env.reset(seed=3)
    state = obs["state"]
    assert state.shape == (19 + 3 + 3 + 3 + 1,)  # observation, goal, cube - hand, goal - cube, open
    assert state[-1] == 0.0  # panda-gym starts with the fingers closed
    for _ in range(3):
        obs, *_ = env.step(np.array([0.0, 0.0, 0.0, -1.0], np.float32))  # open
    assert obs["state"][-1] == 1.0 and obs["state"][6] > 0.05
    assert np.allclose(obs["state"][22:25], obs["state"][7:10] - obs["state"][0:3], atol=1e-6)
    env.close()


@pytest.mark.parametrize("env_id, map_file, _expert", [PUSH, PICK_AND_PLACE], ids=["push", "pick_and_place"])
def test_the_maps_goal_is_panda_gyms_achieved_and_desired_goal(env_id, map_file, _expert):
    """For --goal-relabel: the map's achieved goal is the env's achieved_goal, a state relabelled
    with a goal is the state the env would show with it, and the map's success and reward rule
    is the env's own (compute_reward)."""
    import gymnasium as gym
    import panda_gym  # noqa: F401

    env = MappedEnv(LocalEnv(env_id, {}), read_env_map(EXAMPLES / map_file), env_id)
    goal = env.map.goal
    raw_env = gym.make(env_id.split(":")[1])
    rng = np.random.default_rng(0)
    for seed in range(5):
        raw, _ = raw_env.reset(seed=seed)
        for _ in range(8):
            raw, *_ = raw_env.step(raw_env.action_space.sample())
        state = env.map.state_of(raw)
        np.testing.assert_allclose(goal.achieved_of(state), raw["achieved_goal"], atol=1e-6)
        new_goal = (raw["achieved_goal"] + rng.uniform(-0.06, 0.06, 3)).astype(np.float32)
        np.testing.assert_allclose(goal.with_goal(state[None], new_goal[None])[0],
                                   env.map.state_of({**raw, "desired_goal": new_goal}), atol=1e-6)
        reward = raw_env.unwrapped.compute_reward(raw["achieved_goal"], new_goal, {})
        success = goal.success(raw["achieved_goal"], new_goal)
        assert reward == (goal.reward_success if success else goal.reward_failure)
    raw_env.close()
    env.close()

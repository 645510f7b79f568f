"""Hindsight goal relabelling (``replay/relabel.py``, ``robot-rl train --goal-relabel``): the goal
a transition is given comes from later in its own episode, every number derived from the goal
follows it, the reward and the end are the goal's; an env map's ``goal:`` says where they lie."""

import json
from pathlib import Path

import numpy as np
import pytest

from robot_rl.contract import Transition
from robot_rl.errors import InputError
from robot_rl.foreign.client import LocalEnv
from robot_rl.foreign.env import MappedEnv
from robot_rl.foreign.mapping import EnvMapError, read_env_map
from robot_rl.replay import BatchStaging, MixedReplay, ReplayBuffer
from robot_rl.replay.relabel import GoalLayout
from tests.helpers.common import one_line_error

HELPERS = Path(__file__).parent / "helpers"
REACH = "foreign_envs:robot_rl_test/Reach-v0"
GOAL = "goal: {desired: goal, achieved: 'agent[0:2]', within: 0.1, reward: {success: 1.0, failure: 0.0}}\n"
REACH_MAP = "state: [agent, goal]\ndifferences: [[goal, 'agent[0:2]']]\n"

# a toy state: [position (3, what reaches the goal), goal (3), goal - position (3)]
LAYOUT = GoalLayout(desired=(3, 4, 5), achieved=(0, 1, 2), relative=(((6, 7, 8), (0, 1, 2), 1),), within=0.05)
SPEC = {"state": ((9,), np.float32)}
GOAL_POS = np.array([5.0, 5.0, 5.0])


@pytest.fixture(autouse=True)
def env_module_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))


def toy_state(position, goal=GOAL_POS) -> dict:
    position = np.asarray(position, np.float64)
    return {"state": np.concatenate([position, goal, goal - position]).astype(np.float32)}


def toy_buffer(episodes=3, length=10, open_last=False, seed=0) -> ReplayBuffer:
    """Episode ``e`` moves along y one unit a step from (e, 0, 0); it never reaches its goal."""
    buf = ReplayBuffer(200, SPEC, 2, seed=seed)
    for e in range(episodes):
        for t in range(length):
            last = t == length - 1 and not (open_last and e == episodes - 1)
            buf.add(Transition(toy_state([e, t, 0]), np.zeros(2), -1.0, toy_state([e, t + 1, 0]), False, last, False))
    return buf


def check_relabelled(batch: dict, relabelled: np.ndarray) -> None:
    s, n = np.asarray(batch["obs"]["state"]), np.asarray(batch["next_obs"]["state"])
    reward, bootstrap = np.asarray(batch["reward"]), np.asarray(batch["bootstrap"])
    # the goal is one the episode reached: its own x, a y at or after the next step's, on the floor
    assert np.all(s[relabelled, 3] == s[relabelled, 0]) and np.all(s[relabelled, 4] >= n[relabelled, 1])
    assert np.all(s[relabelled, 5] == 0)
    # the same goal in both states, and the derived numbers follow it
    assert np.array_equal(s[:, 3:6], n[:, 3:6])
    np.testing.assert_allclose(s[:, 6:9], s[:, 3:6] - s[:, 0:3])
    np.testing.assert_allclose(n[:, 6:9], n[:, 3:6] - n[:, 0:3])
    # reward and end are the goal's: success (0, terminal) exactly where the next state is at the goal
    success = np.linalg.norm(n[:, 0:3] - n[:, 3:6], axis=1) < LAYOUT.within
    assert np.array_equal(reward == 0.0, success) and np.array_equal(bootstrap == 0.0, success)
    assert np.all(reward[~success] == -1.0) and np.allclose(bootstrap[~success], 0.97)
    assert not success[~relabelled].any()  # the original goal is never reached


def test_hindsight_goals_come_from_later_in_the_same_episode():
    buf = toy_buffer()
    buf.set_goal_layout(LAYOUT)
    batch = buf.sample(3000, hindsight=1.0)
    check_relabelled(batch, np.ones(3000, bool))
    success = np.asarray(batch["bootstrap"]) == 0
    # "future": the goal after a transition drawn uniformly from this one to the episode's last, so
    # a transition k steps from the end succeeds with chance 1/k: over 10 steps, mean 0.293
    assert 0.25 < success.mean() < 0.34


def test_a_share_of_the_batch_is_relabelled_and_the_rest_keeps_its_goal():
    buf = toy_buffer()
    buf.set_goal_layout(LAYOUT)
    batch = buf.sample(4000, hindsight=0.5)
    relabelled = np.asarray(batch["obs"]["state"])[:, 3] != GOAL_POS[0]
    assert 0.45 < relabelled.mean() < 0.55
    check_relabelled(batch, relabelled)
    assert np.all(np.asarray(batch["obs"]["state"])[~relabelled, 3:6] == GOAL_POS)


def test_an_open_episode_takes_goals_only_from_what_it_has_reached_so_far():
    buf = toy_buffer(episodes=1, length=6, open_last=True)
    buf.set_goal_layout(LAYOUT)
    batch = buf.sample(500, hindsight=1.0)
    assert np.asarray(batch["obs"]["state"])[:, 4].max() == 6  # the last next state reached: y = 6
    check_relabelled(batch, np.ones(500, bool))


def test_the_staged_batch_of_a_mixed_replay_is_relabelled_in_both_buffers():
    online, demo = toy_buffer(seed=1), toy_buffer(seed=2)
    replay = MixedReplay(online, demo, 0.5)
    replay.set_goal_relabel(LAYOUT, 1.0)
    staging = BatchStaging(SPEC, 2, 256)
    batch = replay.sample(256, staging=staging)
    check_relabelled({k: (v if not isinstance(v, dict) else {kk: vv.numpy() for kk, vv in v.items()})
                      for k, v in batch.items()}, np.ones(256, bool))
    assert batch["is_demo"].sum() == 128


def test_without_hindsight_sampling_is_what_it_was():
    """The layout alone changes nothing: a run without --goal-relabel samples as before."""
    plain, with_layout = toy_buffer(seed=5), toy_buffer(seed=5)
    with_layout.set_goal_layout(LAYOUT)
    a, b = plain.sample(64), with_layout.sample(64, hindsight=0.0)
    assert all(np.array_equal(a[k], b[k]) for k in ("action", "reward", "bootstrap"))
    assert np.array_equal(a["obs"]["state"], b["obs"]["state"])


def test_hindsight_errors():
    buf = toy_buffer()
    with pytest.raises(InputError, match="needs a goal layout"):
        buf.sample(8, hindsight=0.5)
    buf.set_goal_layout(LAYOUT)
    with pytest.raises(InputError, match="one-step transitions, got n_step 3"):
        buf.sample(8, n_step=3, hindsight=0.5)
    with pytest.raises(InputError, match="lacks"):
        buf.set_goal_layout(GoalLayout(desired=(0,), achieved=(1,), key="proprio"))
    replay = MixedReplay(toy_buffer(), toy_buffer(), 0.5)
    with pytest.raises(InputError, match="within \\[0, 1\\], got 1.5"):
        replay.set_goal_relabel(LAYOUT, 1.5)
    with pytest.raises(InputError, match="needs a goal layout"):
        replay.set_goal_relabel(None, 0.5)
    with pytest.raises(InputError, match="same, non-zero size"):
        GoalLayout(desired=(0, 1), achieved=(2,))
    with pytest.raises(InputError, match="within must be a distance > 0"):
        GoalLayout(desired=(0,), achieved=(1,), within=0.0)


def test_the_layout_and_the_share_reach_the_learners_process():
    """The learner process starts from JSON (``LearnerSetup``): the layout and the share survive it."""
    from robot_rl.agents.sac import SACConfig
    from robot_rl.config import TrainConfig
    from robot_rl.runtime.learner import LearnerSetup

    setup = LearnerSetup(TrainConfig(), SACConfig(state_dim=9, action_dim=2), SPEC, "run", None, LAYOUT, 0.8)
    back = LearnerSetup.from_json(setup.to_json())
    assert back.goal == LAYOUT and back.goal_relabel == 0.8


# ------------------------------------------------------------------ the env map's goal
def reach_env(tmp_path, text: str) -> MappedEnv:
    path = tmp_path / "reach.yaml"
    path.write_text(text)
    return MappedEnv(LocalEnv(REACH, {}), read_env_map(path), REACH)


def test_a_maps_goal_becomes_state_indices_and_relabels_as_the_env_would_observe(tmp_path):
    env = reach_env(tmp_path, REACH_MAP + GOAL)
    goal = env.map.goal
    # state: agent (0-2), goal (3-4), goal - agent[0:2] (5-6)
    assert goal.desired == (3, 4) and goal.achieved == (0, 1) and goal.relative == (((5, 6), (0, 1), 1),)
    assert (goal.within, goal.reward_success, goal.reward_failure) == (0.1, 1.0, 0.0)
    env.reset(seed=0)
    raw = env.inner.step(np.array([0.3, -0.2, 0.0, 0.0]))[0]
    new_goal = np.array([0.25, -0.4], np.float32)
    expected = env.map.state_of({**raw, "goal": new_goal})  # what the env would show with that goal
    np.testing.assert_allclose(goal.with_goal(env.map.state_of(raw)[None], new_goal[None])[0], expected)
    env.close()


def test_a_map_without_a_goal_has_none(tmp_path):
    env = reach_env(tmp_path, REACH_MAP)
    assert env.map.goal is None
    env.close()


@pytest.mark.parametrize("goal, needle", [
    ("goal: [goal]", "goal is {desired, achieved, within, reward: {success, failure}}"),
    ("goal: {desired: goal, achieved: agent, within: 0.1}", "goal is {desired, achieved, within"),
    ("goal: {desired: goal, achieved: agent, within: 0.1, reward: {success: 1}}", "goal is {desired"),
    ("goal: {desired: goal, achieved: agent, within: -1, reward: {success: 1, failure: 0}}",
     "goal.within is a distance > 0, got -1"),
    ("goal: {desired: goal, achieved: agent, within: far, reward: {success: 1, failure: 0}}", "could not convert"),
])
def test_goal_file_errors(tmp_path, goal, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(goal + "\n")
    with pytest.raises(EnvMapError) as err:
        read_env_map(path)
    assert needle in str(err.value) and str(path) in str(err.value)


# ------------------------------------------------------------------ robot-rl train
@pytest.mark.parametrize("args, map_text, needles", [
    (["--task", "PickCube", "--goal-relabel", "0.5"], None, ("--goal-relabel is for a goal-conditioned Gymnasium env",)),
    (["--env", REACH, "--goal-relabel", "0.5"], REACH_MAP, ("--goal-relabel 0.5: the env map", "declares no goal:")),
    (["--env", REACH, "--goal-relabel", "0.5", "--n-step", "3"], REACH_MAP + GOAL, ("--n-step 1, got 3",)),
    (["--env", REACH, "--goal-relabel", "2"], REACH_MAP + GOAL, ("--goal-relabel) is a share of the batch in [0, 1]",)),
    (["--env", REACH, "--goal-relabel", "0.5", "--reward-classifier", "."], REACH_MAP + GOAL,
     ("a success classifier's reward cannot be recomputed",)),
])
def test_train_bad_goal_relabel_input_is_one_line_exit_2(tmp_path, capsys, args, map_text, needles):
    from robot_rl.commands.cli import main

    if map_text is not None:
        (tmp_path / "m.yaml").write_text(map_text)
        args = [*args, "--env-map", str(tmp_path / "m.yaml")]
    assert main(["train", "--demos", "0", *args, "--steps", "10", "--run-dir", str(tmp_path / "run")]) == 2
    one_line_error(capsys.readouterr().err, *needles)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("map_text, extra, share", [
    (REACH_MAP + GOAL, {}, 0.8),  # the default: where the map declares a goal
    (REACH_MAP + GOAL, {"goal_relabel": 0.5}, 0.5),
    (REACH_MAP + GOAL, {"goal_relabel": 0.0}, 0.0),  # off
    (REACH_MAP + GOAL, {"n_step": 3}, 0.0),  # n-step returns: the default leaves it off
    (REACH_MAP + GOAL, {"obs": "pixels", "cameras": ("top",)}, 0.0),  # frames would still show the old goal
    (REACH_MAP, {}, 0.0),  # no goal: none
])
def test_hindsight_is_on_by_default_where_the_map_declares_a_goal(tmp_path, map_text, extra, share):
    from robot_rl.commands.learning_aids import hindsight_goals
    from robot_rl.config import TrainConfig

    env = reach_env(tmp_path, map_text)
    layout, got = hindsight_goals(TrainConfig(env=REACH, demos=0, **extra), env)
    assert got == share and (layout is None) == (share == 0) and (share == 0 or layout == env.map.goal)
    env.close()


@pytest.mark.integration
def test_a_short_run_relabels_goals_end_to_end(tmp_path):
    """The layout and the share travel from the map to the learner's replay (inline and in its own
    process); the summary says the share."""
    from robot_rl.commands.cli import main

    (tmp_path / "m.yaml").write_text(REACH_MAP + GOAL)
    for learner, flag in (("inline", ["--goal-relabel", "0.5"]), ("process", [])):
        run = tmp_path / learner
        assert main(["train", "--env", REACH, "--env-map", str(tmp_path / "m.yaml"), "--demos", "0", *flag,
                     "--random-steps", "40", "--steps", "80", "--batch-size", "16", "--eval-every", "80",
                     "--eval-episodes", "2", "--final-eval-episodes", "2", "--learner", learner,
                     "--run-dir", str(run), "--no-progress"]) == 0
        summary = json.loads((run / "summary.json").read_text())
        assert summary["env_steps"] == 80 and summary["updates"] > 0
        assert summary["goal_relabel"] == (0.5 if flag else 0.8)

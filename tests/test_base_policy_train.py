"""Training on top of a frozen base policy (``robot-rl train --base-policy``, issue 46): the run,
its evaluation (the base alone against base + residual), its resume, a base worker dying mid-run,
each bad base as one line and exit status 2 before any work, and a learning test where the
residual lifts a deliberately weak scripted base."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from robot_rl.base_policy import make_base_env
from robot_rl.commands.cli import main
from robot_rl.commands.train import train
from robot_rl.config import TrainConfig
from robot_rl.envs import FlatObservation, make_cell_env
from robot_rl.errors import TrainingError

WEAK = "tests.helpers.base_policies:MiscalibratedPicker"
TINY = dict(task="PickCube", eval_episodes=2, final_eval_episodes=2, pretrain_steps=20, critic_warmup_steps=20,
            batch_size=32, agent={"hidden": [32, 32]}, learner="inline", progress=False, random_steps=20)


def test_the_base_s_action_ends_the_state_and_demos_are_labelled_as_a_run_queries_it():
    cell = make_base_env(make_cell_env("PickCube"), "state", (), "tests.helpers.base_policies:chunked", every=2)
    env = FlatObservation(cell, "state", ())
    try:
        plain = FlatObservation(make_cell_env("PickCube"), "state", ())
        width = env.base_action_dim
        assert width == 7 and env.observation_space["state"].shape[0] == plain.observation_space["state"].shape[0] + 7
        raws, actions = [], []
        raw, _ = cell.reset(seed=3)
        raws.append(raw)
        for _ in range(5):
            raw, *_ = cell.step(np.zeros(7, np.float32))
            raws.append(raw)
        actions = [r["base_action"] for r in raws]
        state = env.observation(raws[2])["state"]
        np.testing.assert_array_equal(state[-width:], actions[2])
        np.testing.assert_array_equal(state[:-width], plain.observation(raws[2])["state"])
        # a recorded episode of the same observations gets the same base actions, queried as the run did
        from robot_rl.contract import Transition

        strip = lambda r: {k: v for k, v in r.items() if k != "base_action"}  # noqa: E731
        episode = [Transition(strip(a), np.zeros(7), 0.0, strip(b), False, False) for a, b in zip(raws, raws[1:])]
        labelled = list(cell.label(episode))
        for i, transition in enumerate(labelled):
            np.testing.assert_array_equal(transition.obs["base_action"], actions[i])
            np.testing.assert_array_equal(transition.next_obs["base_action"], actions[i + 1])
    finally:
        env.close()


def test_a_run_on_a_base_policy_trains_evaluates_against_the_base_alone_and_resumes(tmp_path, capsys):
    run = tmp_path / "run"
    summary = train(TrainConfig(demos=1, env_steps=60, eval_every=60, checkpoint_every=30, run_dir=str(run),
                                base_policy=WEAK, **TINY), log=lambda m: None)
    base = summary["base_policy"]
    assert base["source"] == WEAK and base["base_horizon"] == 1 and base["base_every"] == 1
    assert base["base_steps"] >= 60 and base["base_query_ms_p50"] > 0 and base["base_step_ms_p99"] >= base["base_step_ms_p50"]
    assert base["residual_act_ms_p99"] >= base["residual_act_ms_p50"] > 0
    assert summary["updates"] > 0
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run), "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 2 and result["base_alone"]["episodes"] == 2
    assert result["base_alone"]["seed_range"] == result["seed_range"] and result["base_policy"]["source"] == WEAK
    # a resumed run keeps its base, and goes on with it
    assert main(["train", "--resume", str(run), "--base-policy", "tests.helpers.base_policies:chunked"]) == 2
    assert "was trained with base_policy=" in capsys.readouterr().err
    again = train(resume=str(run), overrides={"env_steps": 90}, log=lambda m: None)
    assert again["env_steps"] == 90 and again["base_policy"]["source"] == WEAK


def test_a_base_worker_that_dies_mid_run_is_one_line_and_the_run_resumes(tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = TrainConfig(demos=0, env_steps=150, eval_every=150,
                      checkpoint_every=40, run_dir=str(run), base_policy="tests.helpers.base_policies:dies_after",
                      base_python=sys.executable, **{**TINY, "eval_episodes": 1, "final_eval_episodes": 1})
    monkeypatch.setenv("ROBOT_RL_TEST_BASE_DIES_AFTER", "110")  # after step 80 (the evaluation: 102 at most)
    lines = []
    with pytest.raises(TrainingError) as err:
        train(cfg, log=lines.append)
    message = str(err.value)
    assert "\n" not in message and "base policy tests.helpers.base_policies:dies_after: its worker process" in message
    assert "died during query (exit code 3)" in message and "illegal memory access" in message
    assert any("continue it with robot-rl train --resume" in line for line in lines), lines
    monkeypatch.delenv("ROBOT_RL_TEST_BASE_DIES_AFTER")
    summary = train(resume=str(run), log=lambda m: None)
    assert summary["env_steps"] == 150 and len(summary["rounds"]) == 2


@pytest.mark.parametrize("args, says", [
    (["--base-policy", "tests.helpers.base_policies:too_narrow"], "the base policy's actions are 5 wide; the env's are 7"),
    (["--base-policy", "tests.helpers.base_policies:chunked", "--base-every", "9"],
     "--base-every 9 is above the base policy's horizon: its chunks hold 4 actions"),
    (["--base-policy", "tests.helpers.base_policies:chunked", "--base-python", "/no/such/python"],
     "--base-python /no/such/python: no such file"),
    (["--base-every", "2"], "--base-every is for a base policy: give --base-policy SOURCE too"),
    (["--base-map", "tests/conftest.py"], "--base-map is for a base policy: give --base-policy SOURCE too"),
    (["--base-policy", "tests.helpers.base_policies:nowhere"], "AttributeError"),
])
def test_a_base_that_does_not_fit_the_run_is_one_line_and_exit_2_before_any_work(tmp_path, capsys, args, says):
    run = tmp_path / "run"
    assert main(["train", "--task", "PickCube", "--demos", "0", "--steps", "10", "--run-dir", str(run), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not run.exists()


def test_a_run_folder_whose_observations_differ_is_refused_as_a_base(tmp_path, capsys):
    pixels = tmp_path / "pixels"
    train(TrainConfig(demos=1, env_steps=10, eval_every=10, run_dir=str(pixels), obs="pixels", cameras=("front",),
                      image_size=(32, 32), **TINY), log=lambda m: None)
    assert main(["train", "--task", "PickCube", "--demos", "0", "--steps", "10", "--run-dir", str(tmp_path / "run"),
                 "--base-policy", str(pixels)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--base-policy {pixels}: checkpoint" in err and "expects observations" in err and len(err.splitlines()) == 1


@pytest.mark.learning
@pytest.mark.timeout(1200)  # a bound against a hang: 4 min alone on 2 cores, longer on a loaded machine
def test_the_residual_lifts_a_weak_scripted_base(tmp_path):
    """PickCube from states on a base that sees the cube 3 cm off (``MiscalibratedPicker``: 17 % at
    step 0 over 30 episodes): with 10 demonstrations, 4,000 env steps of residual RL must lift it
    by at least 0.4 to at least 0.65 (measured: 0.87; 0.77 without the residual penalty, 0.83 with
    the simulated human; docs/training.md)."""
    summary = train(TrainConfig(task="PickCube", demos=10, env_steps=4000, eval_every=4000, eval_episodes=30,
                                final_eval_episodes=30, learner="inline", progress=False, run_dir=str(tmp_path / "run"),
                                base_policy=WEAK), log=lambda m: None)
    start = summary["evals"][0]
    assert start["env_steps"] == 0 and start["success_rate"] <= 0.35, summary["evals"]
    assert summary["final_success_rate"] >= 0.65 and summary["final_success_rate"] >= start["success_rate"] + 0.4, \
        summary["evals"]


def test_a_learner_node_on_a_base_policy_shapes_the_actors_residual_policy():
    """The learner node has no cell: its view of one (``spec_env``) carries the base's action, so the
    networks it trains are the actor node's, which runs the base (both take ``base_policy``)."""
    from robot_rl.agent_setup import agent_config_for
    from robot_rl.node_config import ActorNodeConfig, LearnerNodeConfig
    from robot_rl.envs import spec_env

    learner = LearnerNodeConfig(task="PickCube", base_policy=WEAK)
    view = spec_env("PickCube", "state", base_action=True)
    plain = spec_env("PickCube", "state")
    agent = agent_config_for(learner, view)
    assert agent.base_action_dim == 7 and agent.state_dim == plain.observation_space["state"].shape[0] + 7
    assert not agent.grasp_critic and agent.residual_scale == learner.residual_scale > 0
    cell = make_base_env(make_cell_env("PickCube"), "state", (), WEAK)
    try:
        actor = agent_config_for(ActorNodeConfig(task="PickCube", base_policy=WEAK), FlatObservation(cell, "state"))
    finally:
        cell.close()
    assert actor == agent

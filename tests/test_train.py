"""The actor/learner runtime end to end on the sim twin: learning, checkpoints, resume, errors."""

import json
import math
import re

import numpy as np
import pytest

from robot_rl.commands.cli import main
from robot_rl.config import ARM_MAX_FORCE
from robot_rl.runtime.checkpoint import CheckpointError
from robot_rl.runtime.learner import NonFiniteLoss
from robot_rl.commands.train import TrainConfig, train

TINY = dict(eval_episodes=3, final_eval_episodes=3, pretrain_steps=50, critic_warmup_steps=20, progress=False,
            batch_size=64, agent={"hidden": [64, 64]})


# what 4,000 online steps lift PegInsertHard's clone to, over 50 episodes each (one seed gives one run
# on one kind of CPU; another CPU's kernels round differently, like another seed): the Xeon of earlier
# CI runs, seed 0: 0.38 -> >= 0.90; the 2-core AMD EPYC (AVX2), seeds 0 / 1 / 2: 0.38 -> 0.80,
# 0.38 -> 0.70, 0.48 -> 0.70. The bounds below hold with room for a CPU or seed not yet seen; steps to
# success at 4,000 steps are no test (final / clone: 0.64-1.00 on the EPYC): the main job's figure.
HARD_CLONE_AT_MOST = 0.6  # "at most about half" (the recipe's clones over 50 episodes: 0.26-0.54)
HARD_LIFT_AT_LEAST = 0.15  # past the clone by at least 7 episodes of 50 (measured: +0.22 to +0.52)
HARD_FINAL_AT_LEAST = 0.55  # (measured: 0.70 to 0.90)


@pytest.mark.learning
@pytest.mark.timeout(1200)  # a bound against a hang: 5 min alone on 2 cores, longer on a loaded machine
def test_rl_lifts_a_hard_task_well_past_its_clone(tmp_path, capsys):
    """PegInsertHard, where 20 demonstrations clone into a policy that succeeds about half the time
    or less (docs/CALIBRATION.md): 4,000 online steps must lift it well past the clone, both graded
    over 50 episodes. The learner is driven inline so the run is deterministic on one machine (the
    process path: next test)."""
    cfg = TrainConfig(task="PegInsertHard", demos=20, env_steps=4000, eval_every=4000, eval_episodes=50,
                      final_eval_episodes=50, learner="inline", run_dir=str(tmp_path / "run"), progress=False)
    summary = train(cfg, log=lambda m: None)
    assert summary["evals"][0]["env_steps"] == 0 and summary["final_eval_episodes"] == 50
    cloned = summary["evals"][0]["success_rate"]  # the BC base alone, before any online step
    final = summary["final_success_rate"]
    assert cloned <= HARD_CLONE_AT_MOST, summary["evals"]  # imitation alone gets about half of this task or less
    assert final >= HARD_FINAL_AT_LEAST and final >= cloned + HARD_LIFT_AT_LEAST, summary["evals"]
    cycle = summary["cycle_time"]  # steps to success over the successful episodes only, each counted
    assert cycle["successful_episodes"] == {"final": round(50 * final), "clone": round(50 * cloned), "demos": 20}, cycle
    assert 0 < cycle["demo_steps_to_success"] < cycle["clone_steps_to_success"], cycle  # the scripted expert is quickest
    assert summary["updates"] >= 2 * 4000  # the learner kept the update-to-data ratio
    run = tmp_path / "run"
    for name in ("config.json", "summary.json", "learning_curve.png"):
        assert (run / name).is_file()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    # the eval command, from the checkpoint alone, on 20 episodes the training never evaluated
    # (eval's seeds start at 3_000_000, the trainer's at 2_000_000): the same policy, a rate like the
    # final one (20 episodes of a 0.7 policy fall 0.3 short of it about once in a thousand runs)
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run), "--episodes", "20"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 20 and result["success_rate"] >= final - 0.3, (result, final)


@pytest.mark.integration
def test_learner_process_keeps_the_update_ratio_and_checkpoints(tmp_path):
    run = tmp_path / "run"
    s = train(TrainConfig(task="PickCube", demos=2, env_steps=80, eval_every=80, learner="process", run_dir=str(run),
                          **TINY), log=lambda m: None)
    assert s["env_steps"] == 80 and s["dropped_transitions"] == 0
    assert 0 <= s["learner_lag_steps_p50"] <= s["learner_lag_steps_max"] < 80  # the policies' staleness, per swap
    assert s["updates"] == 20 + 2 * 80  # critic warm-up, then UTD 2 (sim pacing)
    assert (run / "checkpoints" / "step_000000080" / "agent.safetensors").is_file()


@pytest.mark.integration
def test_checkpoint_resume_continues_counters_and_buffers(tmp_path):
    run = tmp_path / "run"
    first = train(TrainConfig(task="PickCube", demos=2, env_steps=120, eval_every=60, checkpoint_every=60,
                              learner="inline", run_dir=str(run), **TINY), log=lambda m: None)
    assert first["env_steps"] == 120
    from robot_rl.runtime.checkpoint import load_replay, read_state, resolve_checkpoint

    ckpt = resolve_checkpoint(run)
    assert ckpt.name == "step_000000120"
    assert len(load_replay(ckpt).online) == 120
    second = train(TrainConfig(task="PickCube", demos=2, env_steps=200, eval_every=60, checkpoint_every=60,
                               learner="inline", **TINY), resume=str(run), log=lambda m: None)
    assert second["env_steps"] == 200
    assert second["updates"] > first["updates"]
    state = read_state(resolve_checkpoint(run))
    assert state["env_steps"] == 200 and len(load_replay(resolve_checkpoint(run)).online) == 200
    assert [e["env_steps"] for e in state["evals"]][:3] == [0, 60, 120]  # history kept across the resume


def test_resume_refuses_a_different_task_and_a_corrupt_checkpoint(tmp_path):
    run = tmp_path / "run"
    train(TrainConfig(task="PickCube", demos=1, env_steps=40, eval_every=40, learner="inline", run_dir=str(run),
                      **TINY), log=lambda m: None)
    with pytest.raises(CheckpointError, match="task"):
        train(TrainConfig(task="PegInsert", demos=1, env_steps=80, learner="inline", **TINY), resume=str(run))
    ckpt = run / "checkpoints" / "step_000000040"
    weights = ckpt / "agent.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 3])
    with pytest.raises(CheckpointError, match="corrupt"):
        train(TrainConfig(task="PickCube", demos=1, env_steps=80, learner="inline", **TINY), resume=str(run))
    assert (ckpt / "state.json").is_file() and (ckpt / "replay" / "online.npz").is_file()  # nothing deleted
    with pytest.raises(CheckpointError, match="no checkpoint"):
        train(TrainConfig(learner="inline", **TINY), resume=str(tmp_path / "nowhere"))


def test_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    from robot_rl.agents.sac import SACAgent

    run = tmp_path / "run"
    calls = {"n": 0}
    original = SACAgent.update

    def flaky_update(self, batch, update_actor=True):
        calls["n"] += 1
        metrics = original(self, batch, update_actor)
        if calls["n"] > 20 + 2 * 60 + 10:  # warm-up + the first 60 steps are fine
            metrics["critic_loss"] = math.nan
        return metrics

    monkeypatch.setattr(SACAgent, "update", flaky_update)
    with pytest.raises(NonFiniteLoss, match="non-finite critic_loss.*step_000000060"):
        train(TrainConfig(task="PickCube", demos=1, env_steps=200, eval_every=60, checkpoint_every=60,
                          learner="inline", run_dir=str(run), **TINY), log=lambda m: None)
    assert (run / "checkpoints" / "latest").read_text() == "step_000000060"
    assert json.loads((run / "checkpoints" / "step_000000060" / "state.json").read_text())["env_steps"] == 60


def test_eval_cli_rejects_a_checkpoint_from_another_observation_space(tmp_path, capsys):
    run = tmp_path / "run"
    train(TrainConfig(task="PickCube", demos=1, env_steps=30, eval_every=30, learner="inline", run_dir=str(run),
                      **TINY), log=lambda m: None)
    assert main(["eval", "--checkpoint", str(run), "--task", "PegInsert", "--episodes", "1"]) == 2
    assert "expects observations" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_eval_with_the_simulated_human_counts_its_takeovers_and_the_share_it_drove(tmp_path, capsys, monkeypatch):
    """``robot-rl eval --simulated-human``: the operator watches the checkpoint's policy as in
    training; a policy that does nothing stalls, so the operator takes over (for stalls) and
    finishes the episodes, and the result says how much of them it drove."""
    run = tmp_path / "run"
    train(TrainConfig(task="PickCube", demos=1, env_steps=30, eval_every=30, learner="inline", run_dir=str(run),
                      **TINY), log=lambda m: None)
    from robot_rl.agents.sac import SACAgent

    monkeypatch.setattr(SACAgent, "act", lambda self, obs, deterministic=False: np.zeros(7, np.float32))  # stalls
    assert main(["eval", "--checkpoint", str(run), "--episodes", "3", "--simulated-human", "0.5", "--stochastic"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["policy"] == "stochastic" and result["human_eagerness"] == 0.5
    assert result["episodes_with_a_takeover"] == 3 and result["takeovers_by_reason"].get("stall", 0) >= 3
    assert result["takeovers"] == sum(result["takeovers_by_reason"].values())
    steps = result["episode_length_mean"] * 3
    assert 0 < result["human_steps"] < steps and result["human_share"] == pytest.approx(result["human_steps"] / steps,
                                                                                        abs=1e-3)
    assert main(["eval", "--checkpoint", str(run), "--simulated-human", "2"]) == 2
    assert "--simulated-human is an eagerness" in capsys.readouterr().err


def test_the_collision_reflex_is_the_runs_choice_in_training_and_in_its_evaluations():
    """--collision-reflex: the actor's twin, the evaluations' twin and `robot-rl eval`'s (from the
    run's recorded config) all stop a press on the block as a Franka would; without it none does."""
    from robot_rl.commands.evaluate import make_twin_env
    from robot_rl.commands.train import make_run_envs
    from tests.helpers.common import press_the_peg_onto_the_block

    for reflex in (True, False):
        cell, evaluation = make_run_envs(TrainConfig(task="PegInsertHard", collision_reflex=reflex))
        later = make_twin_env("PegInsertHard", "mujoco", {"task": "PegInsertHard", "collision_reflex": reflex})
        try:
            for env in (cell, evaluation, later):
                assert env.unwrapped.collision_reflex is reflex
            *_, info = list(press_the_peg_onto_the_block(cell))[-1]
            assert info["reflex"] is reflex
        finally:
            for env in (cell, evaluation, later):
                env.close()
    assert not make_twin_env("PegInsertHard", "mujoco", {}).unwrapped.collision_reflex  # runs from before the flag


def test_the_arms_force_bound_is_the_runs_choice_in_training_and_in_its_evaluations():
    """--arm-max-force: the actor's twin, the evaluations' and `robot-rl eval`'s (from the recorded
    config) bound the controller's force alike; a press on the block stays under it, where the
    controller's own 60 N presses through the Franka's 20 N."""
    from robot_rl import contract
    from robot_rl.commands.evaluate import make_twin_env
    from robot_rl.commands.train import make_run_envs
    from tests.helpers.common import press_the_peg_onto_the_block

    for bound in (15.0, ARM_MAX_FORCE):
        cell, evaluation = make_run_envs(TrainConfig(task="PegInsertHard", arm_max_force=bound))
        later = make_twin_env("PegInsertHard", "mujoco", {"task": "PegInsertHard", "arm_max_force": bound})
        try:
            for env in (cell, evaluation, later):
                assert env.unwrapped.max_force == bound
            obs, *_ = list(press_the_peg_onto_the_block(cell))[-1]
            pressing = obs["state"][contract.STATE_SLICES["ee_force"]][2]
            assert (pressing < 20.0) if bound == 15.0 else (pressing > 30.0), pressing
        finally:
            for env in (cell, evaluation, later):
                env.close()
    assert make_twin_env("PegInsertHard", "mujoco", {}).unwrapped.max_force == ARM_MAX_FORCE  # runs from before it


def test_a_runs_evaluations_and_recorded_rollouts_meet_the_twin_it_practised_on(tmp_path, monkeypatch):
    """A run with the collision reflex and a force bound: `robot-rl eval` and `robot-rl record
    --policy` (the main job's rollouts for the classifier's check) build the twin as it trained."""
    import robot_rl.sim
    from robot_rl.commands.evaluate import make_twin_env
    from robot_rl.commands.record import record_rollouts
    from robot_rl.runtime.checkpoint import read_state, resolve_checkpoint

    run = tmp_path / "run"
    train(TrainConfig(task="PegInsertHard", demos=1, env_steps=10, eval_every=10, learner="inline", run_dir=str(run),
                      collision_reflex=True, arm_max_force=15.0, **TINY), log=lambda m: None)
    trained = read_state(resolve_checkpoint(run))["train_config"]
    later = make_twin_env("PegInsertHard", "mujoco", trained)
    assert later.unwrapped.collision_reflex and later.unwrapped.max_force == 15.0
    later.close()
    built, make = [], robot_rl.sim.make
    monkeypatch.setattr(robot_rl.sim, "make", lambda *a, **kw: built.append(kw) or make(*a, **kw))
    record_rollouts(tmp_path / "rollouts.zarr", "PegInsertHard", 1, policy=str(run))
    assert built and built[-1]["collision_reflex"] is True and built[-1]["max_force"] == 15.0
    # the scripted expert's takes (the main job's demonstrations) on the twin asked for, the store saying which
    from robot_rl.data.store import EpisodeStore

    record_rollouts(tmp_path / "demos.zarr", "PegInsertHard", 1, collision_reflex=True, arm_max_force=15.0)
    assert built[-1]["collision_reflex"] is True and built[-1]["max_force"] == 15.0
    attrs = EpisodeStore.open(tmp_path / "demos.zarr").attrs
    assert attrs["collision_reflex"] is True and attrs["arm_max_force"] == 15.0
    record_rollouts(tmp_path / "plain.zarr", "PegInsertHard", 1)
    assert "collision_reflex" not in built[-1] and "max_force" not in built[-1]
    assert EpisodeStore.open(tmp_path / "plain.zarr").attrs["arm_max_force"] == ARM_MAX_FORCE


def test_train_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["train", "--pretrained", str(tmp_path / "resnet18.pt"), "--obs", "pixels", "--steps", "10"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["train", "--task", "Juggle", "--steps", "10"]) == 2
    assert "Juggle" in capsys.readouterr().err
    assert main(["train", "--agent", "no_such_key=1", "--steps", "10", "--run-dir", str(tmp_path / "r")]) == 2
    assert "no_such_key" in capsys.readouterr().err


def test_without_demos_learning_waits_for_the_random_phase_then_keeps_the_ratio(tmp_path):
    from robot_rl.runtime.checkpoint import load_agent, resolve_checkpoint

    run = tmp_path / "run"
    s = train(TrainConfig(task="PegInsert", demos=0, env_steps=120, random_steps=60, eval_every=120, learner="inline",
                          run_dir=str(run), **TINY), log=lambda m: None)
    assert s["updates"] == 2 * 120  # UTD 2 over every online transition, caught up after the random phase
    agent = load_agent(resolve_checkpoint(run) / "agent.safetensors", with_optimizers=False)
    assert agent.config.residual_scale == 0.0  # no demos: no base policy to build on
    assert not np.allclose(agent.encoder.normalizer.std.numpy(), 1.0)  # fitted on the random-phase data


def test_classifier_reward_drives_training_and_ground_truth_grades_it(tmp_path):
    """A classifier that fires on every frame pays each first step: every training episode is a
    one-step false positive, counted against ground truth; evaluation ignores the classifier."""
    from robot_rl.commands.record import record_rollouts
    from robot_rl.data.store import EpisodeStore
    from robot_rl.reward.classifier import Calibration, ClassifierConfig, SuccessClassifier, save_classifier

    model = SuccessClassifier(ClassifierConfig(cameras=("front",), image_size=(32, 32), hidden=(16,), features=8))
    save_classifier(tmp_path / "clf", model, Calibration(threshold=0.0, target_fpr=0.01))
    run = tmp_path / "run"
    s = train(TrainConfig(task="PickCube", demos=1, env_steps=30, eval_every=30, learner="inline", run_dir=str(run),
                          reward_classifier=str(tmp_path / "clf"), **TINY), log=lambda m: None)
    assert s["reward"] == "classifier" and s["episodes"] == 30
    assert s["classifier_episodes"] == {"true_positive": 0, "false_positive": 30, "false_negative": 0,
                                        "true_negative": 0}
    assert s["evals"][-1]["episode_length"] > 1  # graded by ground truth, not ended by the classifier
    from robot_rl.commands.report import ReportError, write_report

    report = write_report(run).read_text()
    assert "learned success classifier" in report and "| classifier: success | 0 | 30 |" in report
    # one final figure, stated alike by summary.json and report.md, with its episodes and seeds
    final = s["final"]
    assert final["episodes"] == 3 and final["env_steps"] == 30 and final["seed_range"] == [2_000_000, 2_000_002]
    assert final["success_rate"] == s["final_success_rate"] == s["evals"][-1]["success_rate"]
    assert json.loads((run / "summary.json").read_text())["final"] == final
    assert (f"final success: {final['success_rate']:.2f} over 3 episodes (seeds 2000000-2000002) at env step 30"
            in report), report
    assert len(re.findall(r"final success", report)) == 1
    from robot_rl.runtime.logging import curve_title

    assert curve_title(s["evals"], TrainConfig(task="PickCube", demos=1)) == (  # the curve's title says the same
        "PickCube (state): final success " f"{final['success_rate']:.2f} over 3 episodes\n"
        "demos: 1 scripted expert demonstrations (action noise 0.1), recorded at the start")
    config = json.loads((run / "config.json").read_text())
    assert config["demo_source"] == s["demo_source"] == ("1 scripted expert demonstrations (action noise 0.1), "
                                                         "recorded at the start")
    from robot_rl.config_values import read_config_file

    assert read_config_file(run / "config.json", TrainConfig)["demos"] == 1  # a run's config.json is a valid --config file
    with pytest.raises(ReportError, match="no summary.json"):
        write_report(tmp_path)
    # the partly trained policy's rollouts recorded for classifier work (robot-rl record --policy)
    out = record_rollouts(tmp_path / "rollouts.zarr", "PickCube", 2, policy=str(run), images=True,
                          image_size=(32, 32), cameras=("front",))
    store = EpisodeStore.open(out["path"])
    assert len(store) == 2 and store.attrs["source"] == "policy" and store.cameras == {"front": (32, 32)}
    with pytest.raises(FileNotFoundError, match="reward classifier"):
        train(TrainConfig(reward_classifier=str(tmp_path / "missing"), learner="inline", **TINY))


def test_stop_at_success_ends_the_run_at_the_first_evaluation_that_reaches_it(tmp_path):
    run = tmp_path / "run"
    s = train(TrainConfig(task="PickCube", demos=1, env_steps=200, eval_every=20, learner="inline", run_dir=str(run),
                          stop_at_success=0.0, **TINY), log=lambda m: None)
    assert s["env_steps"] == 20 and [e["env_steps"] for e in s["evals"]] == [0, 20]
    assert s["checkpoint"].endswith("step_000000020")  # the stopping point is checkpointed


def _final_weights(run) -> dict:
    from safetensors.numpy import load_file

    (ckpt,) = sorted((run / "checkpoints").glob("step_*"))[-1:]
    return load_file(str(ckpt / "agent.safetensors"))


@pytest.mark.parametrize("learner", ["inline", "process"])
def test_the_final_figure_grades_the_weights_the_final_checkpoint_holds(tmp_path, learner):
    """While training the actor acts with weights up to max_lead steps and weights_every updates
    behind the learner; the final evaluation waits for the learner's weights as they are at the last
    step, so the figure the run reports is that of the checkpoint a user evaluates or deploys."""
    from robot_rl.commands.evaluate import evaluate_checkpoint
    from robot_rl.runtime.checkpoint import read_state, resolve_checkpoint

    run = tmp_path / "run"
    summary = train(TrainConfig(task="PickCube", demos=2, env_steps=120, eval_every=60, weights_every=1000,
                                learner=learner, run_dir=str(run), **TINY), log=lambda m: None)
    saved = read_state(resolve_checkpoint(run))["updates"]
    assert saved == TINY["critic_warmup_steps"] + 2 * 120  # the critic's warm-up, then UTD 2
    assert summary["final"]["policy_updates"] == saved
    # the evaluations before acted with the schedule's weights: the first, after the warm-up
    assert [e["policy_updates"] for e in summary["evals"]][:2] == [TINY["critic_warmup_steps"]] * 2
    again = evaluate_checkpoint(str(run), episodes=3, seed=2_000_000)
    assert (again["success_rate"], again["episode_length"]) == (summary["evals"][-1]["success_rate"],
                                                                 summary["evals"][-1]["episode_length"])


def test_the_evaluations_leave_the_training_as_it_is(tmp_path):
    """Evaluating more or less often changes the curve's points and the time, never what is
    learnt: the same seed at two --eval-every values ends with the same weights, episodes and
    takeovers, and the evaluations both runs made agree (the main job evaluates every 4,000 env
    steps for that reason)."""
    cfg = dict(task="PickCube", demos=2, env_steps=120, learner="inline", weights_every=10, human_eagerness=1.0,
               **TINY)
    runs = {}
    for every in (40, 120):
        run = tmp_path / f"every_{every}"
        runs[every] = (train(TrainConfig(eval_every=every, run_dir=str(run), **cfg), log=lambda m: None),
                       _final_weights(run))
    (often, often_weights), (seldom, seldom_weights) = runs[40], runs[120]
    assert [e["env_steps"] for e in often["evals"]] == [0, 40, 80, 120]
    assert [e["env_steps"] for e in seldom["evals"]] == [0, 120]
    assert often["interventions"] > 0
    for key in ("final", "episode_interventions", "interventions", "updates", "episodes"):
        assert often[key] == seldom[key], key
    assert [often["evals"][i] for i in (0, 3)] == seldom["evals"]
    assert often_weights.keys() == seldom_weights.keys()
    for key in often_weights:
        np.testing.assert_array_equal(often_weights[key], seldom_weights[key], err_msg=key)


@pytest.mark.learning
def test_one_seed_gives_one_run_whatever_the_learner_timing(tmp_path):
    """Sim pacing with a weights schedule: a learner in its own process (overlapping the actor,
    timed by the OS) and one driven inline between control steps learn the same weights and act
    the same, so the final figures are equal. Weights every 10 updates: many swaps, each of which
    would land at another env step if the actor took the newest weights when they came."""
    cfg = dict(task="PickCube", demos=2, env_steps=160, eval_every=80, weights_every=10, human_eagerness=1.0,
               **TINY)
    runs = {}
    for name, learner in (("process_a", "process"), ("process_b", "process"), ("inline", "inline")):
        run = tmp_path / name
        summary = train(TrainConfig(learner=learner, run_dir=str(run), **cfg), log=lambda m: None)
        runs[name] = (summary, _final_weights(run))
    reference, weights = runs["inline"]
    assert reference["interventions"] > 0  # the simulated human's takeovers are part of the run
    for name, (summary, theirs) in runs.items():
        for key in ("final", "evals", "episode_interventions", "updates", "episodes"):
            assert summary[key] == reference[key], (name, key)
        assert theirs.keys() == weights.keys()
        for key in weights:
            np.testing.assert_array_equal(theirs[key], weights[key], err_msg=f"{name}: {key}")

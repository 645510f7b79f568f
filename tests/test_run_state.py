"""The run's typed state (robot_rl/runtime/run_state.py): the actor loop counts steps, episodes
and takeovers once, into its round's ``ActorCounts``; the run's totals add the rounds up; state.json
round-trips, a checkpoint written before ``RunState`` existed loads as it was, and a bad value is
one line naming the file and the key."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from robot_rl.actor import ActorLoop
from robot_rl.envs import FlatObservation
from robot_rl.runtime.checkpoint import CheckpointError
from robot_rl.runtime.run_state import ActorCounts, RunState

# a checkpoint's state.json as robot-rl train wrote it before RunState (a 400-step run of PickCube
# with 5 demonstrations and the simulated human at 0.5; its evaluations shortened), the learner's
# keys included
OLD_STATE = {
    "env_steps": 400, "episodes": 6,
    "evals": [{"env_steps": 0, "success_rate": 0.4, "episode_length": 68.8, "episodes": 5, "steps_to_success": 22.0,
               "successful_episodes": 2, "seed_range": [2000000, 2000004]},
              {"env_steps": 200, "success_rate": 0.2, "episode_length": 83.4, "episodes": 5, "steps_to_success": 17.0,
               "successful_episodes": 1, "seed_range": [2000000, 2000004]}],
    "train_successes": [True, True, True, True, True, False],
    "demo_episodes": 5, "demo_steps_to_success": 18.8, "demo_successful_episodes": 5,
    "interventions": 11, "intervention_steps": 128,
    "episode_interventions": [[40, 1, 10, 40], [118, 2, 28, 78], [176, 2, 30, 58], [241, 2, 24, 65],
                              [292, 2, 18, 51], [363, 2, 18, 71]],
    "train_episodes": [[40, True, True], [118, True, True], [176, True, True], [241, True, True], [292, True, True],
                       [363, False, True]],
    "human_stretches": [[21, 30], [79, 91], [104, 118], [143, 157], [162, 176], [200, 208], [226, 240], [260, 262],
                        [276, 290], [322, 324], [343, 357], [388, 396]],
    "rounds": [{"resumed_from": None, "started_at": 1795733106.3115664, "env_step_range": [0, 400], "wall_s": 22.0,
                "episodes": 6, "interventions": 11, "intervention_steps": 128, "human_eagerness": 0.5}],
    "demo_steps": 94, "updates": 1000, "online_updates": 800,
    "train_config": {"task": "PickCube", "env_steps": 400, "seed": 0},
    "network": {"state_dim": 30, "action_dim": 7, "cameras": []},
}
LEARNER_KEYS = ("updates", "online_updates", "train_config", "network")


def run_state_part(state: dict) -> dict:
    return {k: v for k, v in state.items() if k not in LEARNER_KEYS}


def test_actor_counts_count_steps_and_episodes():
    counts = ActorCounts()
    for _ in range(3):
        counts.count_step()
    counts.count_episode(True, interventions=2, intervention_steps=5)
    counts.count_episode(False, interventions=0, intervention_steps=0)
    assert counts.as_dict() == {"steps": 3, "episodes": 2, "successes": 1, "interventions": 2,
                                "intervention_steps": 5, "recorded": 0, "rerecorded": 0, "dropped_arm_held": 0,
                                "reflex_stops": 0}


def test_a_checkpoint_written_before_run_state_loads_and_round_trips():
    old = copy.deepcopy(OLD_STATE)
    run = RunState.from_json(old, "ckpt/state.json")
    assert old == OLD_STATE  # read, not changed
    assert run.to_json() == run_state_part(OLD_STATE)  # every key and value as it was, in the same order
    assert list(run.to_json()) == list(run_state_part(OLD_STATE))
    totals = run.totals
    assert (run.env_steps, totals.episodes, totals.interventions, totals.intervention_steps) == (400, 6, 11, 128)
    assert run.recent_successes(2) == [True, False] and run.demo_steps == 94
    again = RunState.from_json(json.loads(json.dumps(run.to_json())))
    assert again.to_json() == run.to_json()
    # a resume opens a round at env step 400; its loop's counts add to the run's totals
    counts = run.start_round("ckpt", human_eagerness=0.5)
    assert run.round.env_step_range == [400, 400] and counts is run.round.counts
    counts.count_step()
    run.count_step(by_human=True, episode_step=1)
    counts.count_episode(True, interventions=1, intervention_steps=1)
    run.count_episode({"success": True, "ground_truth_solved": True, "interventions": 1, "intervention_steps": 1,
                       "episode_steps": 1})
    state = run.to_json()
    assert [state[k] for k in ("env_steps", "episodes", "interventions", "intervention_steps")] == [401, 7, 12, 129]
    assert state["rounds"][0] == OLD_STATE["rounds"][0]
    assert {k: state["rounds"][1][k] for k in ("resumed_from", "env_step_range", "episodes", "interventions",
                                                "intervention_steps")} == {
        "resumed_from": "ckpt", "env_step_range": [400, 401], "episodes": 1, "interventions": 1,
        "intervention_steps": 1}
    assert state["train_successes"][-1] is True and state["train_episodes"][-1] == [401, True, True]
    assert state["human_stretches"][-1] == [401, 401] and state["episode_interventions"][-1] == [401, 1, 1, 1]


def test_older_checkpoints_without_rounds_or_optional_keys_keep_the_start_values():
    state = {"env_steps": 50, "episodes": 2, "evals": [], "train_successes": [True, False]}
    run = RunState.from_json(state)
    assert run.rounds == [] and run.train_episodes == [] and run.demo_steps is None and run.success_source is None
    run.start_round(None, human_eagerness=0.0)
    assert run.env_steps == 50 and run.round.env_step_range == [50, 50]


def test_a_classifier_round_grades_each_episode_and_round_trips():
    run = RunState()
    run.start_round(None, human_eagerness=0.0, reward_classifier="clf")
    for said, truth in ((True, True), (True, False), (True, False), (False, True)):
        run.round.counts.count_step()
        run.round.counts.count_episode(said, 0, 0)
        run.count_episode({"success": said, "ground_truth_solved": truth, "interventions": 0, "intervention_steps": 0,
                           "episode_steps": 1})
    assert run.classifier_total() == {"true_positive": 1, "false_positive": 2, "false_negative": 1, "true_negative": 0}
    assert run.episode_interventions == []  # no human
    state = run.to_json()
    assert state["rounds"][0]["reward_classifier"] == "clf"
    back = RunState.from_json(json.loads(json.dumps(state)))
    assert back.to_json() == state and back.classifier_total() == run.classifier_total()
    summary = back.rounds[0].summary()
    assert "started_at" not in summary and summary["started"] and summary["classifier_episodes"]["false_positive"] == 2


@pytest.mark.parametrize("key, value, says", [
    ("env_steps", "ten", "env_steps is 'ten', not a count"),
    ("episodes", -1, "episodes is -1, not a count"),
    ("evals", [{"env_steps": 0, "episodes": 5}], "evals[0] has no success_rate"),
    ("train_episodes", [[40, True]], "train_episodes[0] is [40, True], not a list of 3"),
    ("human_stretches", {"a": 1}, "human_stretches is {'a': 1}, not a list"),
    ("rounds", [{"resumed_from": None}], "rounds[0] has no env_step_range"),
    ("rounds", [{**OLD_STATE["rounds"][0], "env_step_range": [400, 0]}], "rounds[0].env_step_range [400, 0] ends"),
    ("rounds", [{**OLD_STATE["rounds"][0], "wall_s": None}], "rounds[0].wall_s is None, not a number"),
    ("demo_steps_to_success", "fast", "demo_steps_to_success is 'fast', not a number"),
])
def test_a_bad_value_is_one_line_naming_the_file_and_the_key(tmp_path, key, value, says):
    path = tmp_path / "checkpoints" / "step_000000400" / "state.json"
    with pytest.raises(CheckpointError) as caught:
        RunState.from_json({**OLD_STATE, key: value}, path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path} is not a run's state: ") and says in message
    assert message.endswith("use an earlier checkpoint")


def test_a_state_that_is_not_an_object_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"state.json is not a run's state: it holds a list, not an object; "
                                              r"use an earlier checkpoint"):
        RunState.from_json([1, 2], tmp_path / "state.json")


def test_the_actor_loop_counts_into_the_rounds_counts_once():
    """robot-rl train gives its ActorLoop the round's counts: the loop's episodes and takeovers are
    the run's, and a second round (a resume) adds to the first's."""
    from robot_rl.sim.env import PandaCellEnv

    class Human:  # drives steps 3..5 of every episode
        def __init__(self):
            self.t = 0

        def reset(self):
            self.t = 0

        def __call__(self, raw):
            self.t += 1
            return np.zeros(7, np.float32) if 3 <= self.t <= 5 else None

    def one_round(run: RunState, steps: int) -> ActorLoop:
        env = PandaCellEnv("PickCube", "mujoco", images=False, privileged=True, max_episode_steps=8)
        flat = FlatObservation(env, "state")
        loop = ActorLoop(env, flat.observation, lambda raw, obs: np.zeros(7, np.float32), human=Human(),
                         stats=run.start_round(None, human_eagerness=1.0), log=lambda m: None)
        loop.start(seed=0)
        for _ in range(steps):
            result = loop.step()
            run.count_step(result.by_human, result.episode_step)
            if result.episode is not None:
                run.count_episode(result.episode)
        env.close()
        return loop

    run = RunState()
    loop = one_round(run, 20)  # two episodes of 8 steps, and 4 steps of a third
    assert loop.stats is run.round.counts
    totals = run.totals
    assert (run.env_steps, totals.episodes, totals.interventions, totals.intervention_steps) == (20, 2, 2, 6)
    assert loop.stats.successes == 0 and run.human_stretches == [[3, 5], [11, 13], [19, 20]]
    assert [e[0] for e in run.train_episodes] == [8, 16]
    resumed = RunState.from_json(json.loads(json.dumps(run.to_json())))
    one_round(resumed, 8)  # a new loop from step 20: one more whole episode
    assert (resumed.env_steps, resumed.totals.episodes, resumed.totals.interventions,
            resumed.totals.intervention_steps) == (28, 3, 3, 9)
    assert [r.env_step_range for r in resumed.rounds] == [[0, 20], [20, 28]]
    assert [r.counts.episodes for r in resumed.rounds] == [2, 1]
    assert [b["interventions"] for b in resumed.per_block(human=True, size=10)] == [1, 2, 1]

"""summary.json's figures of a whole run: its rounds (start and resumes), its training wall time,
the human's takeovers and the training success per block of env steps, and the cycle time."""

import json

import numpy as np

from robot_rl.actor import EpisodeTally
from robot_rl.commands.cli import main
from robot_rl.commands.report import _cycle_time_lines
from robot_rl.commands.train import TrainConfig, train
from robot_rl.commands.train_summary import cycle_time
from robot_rl.rollout import evaluate, steps_to_success
from robot_rl.runtime.run_state import RunState


def play(run: RunState, cfg: TrainConfig, episodes: list[list[bool]]) -> list[bool]:
    """Feed episodes (each a list of per-step human flags) through the run's tallies as ``_train``
    and its ``ActorLoop`` do (the loop counts into the round's counts); returns every env step's flag."""
    rng = np.random.default_rng(0)
    flags, counts = [], run.round.counts
    for human in episodes:
        tally = EpisodeTally()
        for k, by_human in enumerate(human, start=1):
            tally.add(0.0, by_human)
            counts.count_step()
            run.count_step(by_human, k)
            flags.append(by_human)
        success = bool(rng.random() < 0.5)
        counts.count_episode(success, tally.interventions, tally.intervention_steps)
        run.count_episode({"success": success, "ground_truth_solved": not success, **tally.summary()})
    return flags


def fresh_state(cfg: TrainConfig) -> RunState:
    run = RunState()
    run.start_round(None, cfg.human_eagerness, cfg.reward_classifier)
    return run


def test_per_block_figures_agree_with_the_episodes_and_every_step():
    """Episodes straddle the blocks and one begins under human control right after another
    ended so: the takeovers per block are counted where each began (a new episode starts a new
    one, as EpisodeTally counts them), and the totals equal the per-episode records."""
    cfg = TrainConfig(human_eagerness=0.5)
    state = fresh_state(cfg)
    rng = np.random.default_rng(1)
    episodes = [list(rng.random(n) < 0.4) for n in rng.integers(3, 17, size=12)]
    episodes[3][-1] = episodes[4][0] = True  # the human drives across an episode's end
    flags = play(state, cfg, episodes)
    end = state.env_steps
    rows = state.per_block(human=True, size=10)
    assert [r["env_step_range"] for r in rows] == [[lo, min(lo + 10, end)] for lo in range(0, end, 10)]
    starts, ends, k = [], [], 0  # brute force: each step's flag, each takeover's first step, each episode's end
    for human in episodes:
        starts += [k + i + 1 for i, h in enumerate(human) if h and (i == 0 or not human[i - 1])]
        k += len(human)
        ends.append(k)
    per_episode = state.episode_interventions
    for row in rows:
        lo, hi = row["env_step_range"]
        assert row["intervention_steps"] == sum(flags[lo:hi])
        assert row["intervention_rate"] == round(sum(flags[lo:hi]) / (hi - lo), 4)
        assert row["interventions"] == sum(lo < s <= hi for s in starts)
        ended = [e for e in state.train_episodes if lo < e[0] <= hi]
        assert row["episodes"] == len(ended) == sum(lo < e <= hi for e in ends)
        if ended:
            assert row["success_rate"] == round(np.mean([e[1] for e in ended]), 4)
            assert row["ground_truth_solved_rate"] == round(1 - row["success_rate"], 4)
        else:
            assert row["success_rate"] is row["ground_truth_solved_rate"] is None
    # the run ends at an episode's end: the blocks hold exactly the episodes' takeovers and human steps
    assert sum(r["interventions"] for r in rows) == sum(e[1] for e in per_episode) == state.totals.interventions
    assert sum(r["intervention_steps"] for r in rows) == sum(e[2] for e in per_episode) == sum(flags)
    assert sum(r["episodes"] for r in rows) == len(episodes) == state.round.counts.episodes == state.totals.episodes
    assert state.intervention_rate_last(20) == round(sum(flags[-20:]) / 20, 4)
    assert state.intervention_rate_last(10_000) == round(sum(flags) / end, 4)  # a shorter run: all its steps
    assert "interventions" not in state.per_block(human=False, size=10)[0]  # no human, no human columns


def test_progress_line_states_the_human_takeovers_and_recent_share(tmp_path, capsys):
    from robot_rl.runtime.logging import RunLogger

    cfg = TrainConfig(human_eagerness=0.5)
    state = fresh_state(cfg)
    flags = play(state, cfg, [[False] * 90 + [True] * 10, [True] * 6 + [False] * 94])
    logger = RunLogger(tmp_path, 200)  # plain lines: the output is not a terminal
    try:
        logger.progress(200, state, {})
    finally:
        logger.close()
    assert sum(flags) == 16
    assert "human 2 takeovers, 8% of the last 200 steps" in capsys.readouterr().out  # 16 of 200


class ScriptedEpisodes:
    """An evaluation env whose episode from seed ``s`` lasts ``episodes[s][0]`` steps and ends in
    success (``episodes[s][1]``) or is cut short."""

    def __init__(self, episodes: dict[int, tuple[int, bool]]):
        self.episodes = episodes

    def reset(self, seed: int):
        (self.length, self.success), self.t = self.episodes[seed], 0
        return {}, {}

    def step(self, action):
        self.t += 1
        end = self.t == self.length
        return {}, 0.0, end and self.success, end and not self.success, {"success": end and self.success}


def test_evaluation_counts_the_steps_of_its_successful_episodes_only():
    env = ScriptedEpisodes({5: (10, True), 6: (30, False), 7: (20, True), 8: (50, False)})
    result = evaluate(lambda obs: None, env, 4, seed=5)
    assert result["episode_length"] == 27.5 and result["success_rate"] == 0.5  # every episode
    assert result["steps_to_success"] == 15.0 and result["successful_episodes"] == 2  # the successes alone
    assert result["steps_to_success_median"] == 15.0
    failed = evaluate(lambda obs: None, ScriptedEpisodes({0: (7, False)}), 1, seed=0)
    assert failed["steps_to_success"] is failed["steps_to_success_median"] is None and failed["successful_episodes"] == 0


def test_cycle_time_sets_the_final_policy_against_the_demonstrations_and_the_clone():
    def evaluation(env_steps: int, lengths: list[int], successes: list[bool]) -> dict:
        return {"env_steps": env_steps, "episodes": len(lengths), **steps_to_success(lengths, successes)}

    demos = steps_to_success([20, 30, 99], [True, True, False])  # a failed take in the store is not counted
    assert demos == {"steps_to_success": 25.0, "steps_to_success_median": 25.0, "successful_episodes": 2}
    state = RunState(evals=[evaluation(0, [30, 50, 90, 90], [True, True, False, False]),
                            evaluation(100, [25, 90], [True, False]),
                            evaluation(200, [10, 10, 40], [True, True, True])],  # one long search: mean 20, median 10
                     demo_successful_episodes=2, demo_episodes=3)
    state.record_demos(149, demos)
    cycle = cycle_time(state)
    assert cycle == {"final_steps_to_success": 20.0, "clone_steps_to_success": 40.0, "demo_steps_to_success": 25.0,
                     "final_vs_demos": 0.8, "final_vs_clone": 0.5, "target_final_vs_demos": 0.7,
                     "median_steps_to_success": {"final": 10.0, "clone": 40.0, "demos": 25.0}, "final_vs_demos_median": 0.4,
                     "successful_episodes": {"final": 3, "clone": 2, "demos": 2},
                     "episodes": {"final": 3, "clone": 4, "demos": 3}}
    kept = RunState()
    kept.record_demos(149, demos)
    assert RunState.from_json(json.loads(json.dumps(kept.to_json()))).demo_steps_to_success_median == 25.0  # checkpointed
    lines = "\n".join(_cycle_time_lines(cycle))
    assert "## Cycle time (steps to success, successful episodes only)" in lines
    assert "| demonstrations | 25.00 | 25.00 | 2 of 3 |" in lines and "| final policy | 20.00 | 10.00 | 3 of 3 |" in lines
    assert "final vs demonstrations: 0.8x** (target <= 0.7x: not met)" in lines
    assert "medians, final vs demonstrations: 0.4x" in lines
    # no successful final episode, no step-0 evaluation (a run resumed from before it), no demonstrations: null
    none = cycle_time(RunState(evals=[evaluation(100, [25], [True]), evaluation(200, [90, 90], [False, False])]))
    assert none["final_steps_to_success"] is none["clone_steps_to_success"] is none["demo_steps_to_success"] is None
    assert none["final_vs_demos"] is none["final_vs_clone"] is None
    assert none["successful_episodes"] == {"final": 0, "clone": None, "demos": 0}
    assert json.loads(json.dumps(none, allow_nan=False)) == none
    lines = "\n".join(_cycle_time_lines(none))
    assert "| cloned base (step-0 evaluation) | - | - | - |" in lines and "(target <= 0.7x: no figure)" in lines
    assert none["median_steps_to_success"] == {"final": None, "clone": None, "demos": None}
    assert cycle_time(RunState())["final_steps_to_success"] is None


def test_a_resumed_run_states_each_round_and_the_whole_run(tmp_path):
    """Round 1 to env step 110, then a resume to 220, with a simulated human: every figure is
    the whole run's unless it sits in ``rounds``, and the report shows the per-1000 table."""
    run = tmp_path / "run"
    tiny = dict(task="PickCube", demos=1, eval_every=110, eval_episodes=1, final_eval_episodes=1, pretrain_steps=10,
                critic_warmup_steps=5, batch_size=32, agent={"hidden": [32, 32]}, human_eagerness=1.0,
                learner="inline", progress=False)
    first = train(TrainConfig(env_steps=110, run_dir=str(run), **tiny), log=lambda m: None)
    second = train(TrainConfig(env_steps=220, **tiny), resume=str(run), log=lambda m: None)
    assert [r["env_step_range"] for r in first["rounds"]] == [[0, 110]]
    one, two = second["rounds"]
    assert one["env_step_range"] == [0, 110] and two["env_step_range"] == [110, 220]
    assert two["resumed_from"].endswith("step_000000110") and one["resumed_from"] is None
    assert one["episodes"] == first["episodes"]
    assert second["episodes"] == one["episodes"] + two["episodes"] == len(second["episode_interventions"])
    assert second["interventions"] == one["interventions"] + two["interventions"]
    assert second["train_wall_s"] >= max(one["wall_s"], two["wall_s"]) > 0
    assert second["classifier_episodes"] is None and "classifier_episodes" not in one  # ground-truth reward
    per_episode = second["episode_interventions"]
    (block,) = second["per_1000_steps"]
    assert block["env_step_range"] == [0, 220] and block["episodes"] == second["episodes"]
    # every env step counts, episodes cut short by the resume or the end included
    assert block["intervention_steps"] >= sum(e[2] for e in per_episode) > 0
    assert block["interventions"] >= sum(e[1] for e in per_episode)
    assert block["intervention_rate"] == round(block["intervention_steps"] / 220, 4)
    assert second["intervention_rate_last_2000"] == block["intervention_rate"]  # the run is shorter than 2,000
    assert json.loads((run / "summary.json").read_text())["rounds"] == second["rounds"]
    # the cycle time: each one-episode evaluation's steps to success is its length if it succeeded
    for e in second["evals"]:
        assert e["steps_to_success"] == (e["episode_length"] if e["success_rate"] == 1 else None), e
    cycle = json.loads((run / "summary.json").read_text())["cycle_time"]
    assert cycle == second["cycle_time"]
    assert cycle["final_steps_to_success"] == second["evals"][-1]["steps_to_success"]
    assert cycle["clone_steps_to_success"] == second["evals"][0]["steps_to_success"]
    assert cycle["episodes"]["demos"] == cycle["successful_episodes"]["demos"] == 1  # the expert's take succeeded
    assert cycle["demo_steps_to_success"] == first["cycle_time"]["demo_steps_to_success"] > 0  # kept by the resume
    assert cycle["median_steps_to_success"]["demos"] == cycle["demo_steps_to_success"]  # one take: its own median
    from robot_rl.commands.report import write_report

    report = write_report(run).read_text()
    assert "## Cycle time (steps to success, successful episodes only)" in report
    assert f"| demonstrations | {cycle['demo_steps_to_success']:.2f} | {cycle['demo_steps_to_success']:.2f} | 1 of 1 |" in report
    assert f"training wall time: {second['train_wall_s']} s in 2 round(s)" in report
    assert "| env steps | episodes | success | solved | takeovers | human share |" in report
    assert f"| 0-220 | {block['episodes']} |" in report
    assert (run / "learning_curve.png").is_file()
    # the main job adds its own wall time, set-up and every stage, named as such
    assert main(["report", str(run), "--job-wall-s", "1234"]) == 0
    assert json.loads((run / "summary.json").read_text())["job_wall_s"] == 1234.0
    assert "job wall time (set-up and every stage): 1234.0 s; training wall time" in (run / "report.md").read_text()
    assert main(["report", str(run), "--job-wall-s", "-1"]) == 2
    # episodes the twin's collision reflex stopped (none on PickCube, whose twin has it off) are named
    assert all(e["reflex_stops"] == 0 for e in second["evals"]) and "collision reflex" not in report
    summary = json.loads((run / "summary.json").read_text())
    summary["evals"][-1]["reflex_stops"] = 1
    (run / "summary.json").write_text(json.dumps(summary))
    assert (f"collision reflex stopped (failures, the end effector over the Franka's thresholds): 1 at step "
            f"{summary['evals'][-1]['env_steps']}.") in write_report(run).read_text()

"""A ``robot-rl train`` run's figures as summary.json states them: the final success, the steps
to 90 % and 95 %, the cycle time against the demonstrations' and the clone's, the human's share,
the base policy's latencies."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.actor import LearnerClient
from robot_rl.commands.learning_aids import human_watches
from robot_rl.config import TrainConfig, task_name
from robot_rl.config_values import demo_source
from robot_rl.runtime.run_state import RunState


def final_figure(evaluation: dict, success_source: str | None = None) -> dict:
    """The run's final success figure as every file states it: rate, episodes, seeds, env step;
    graded by the sim's ground truth or, on a Gymnasium env, by its ``success_source``."""
    graded = f"the env's {success_source}" if success_source else "sim ground truth"
    return {"success_rate": evaluation["success_rate"], "episodes": evaluation["episodes"],
            "seed_range": evaluation.get("seed_range"), "env_steps": evaluation["env_steps"],
            "policy_updates": evaluation.get("policy_updates"), "graded_by": f"{graded}, deterministic policy"}


def steps_to(evals: list[dict], threshold: float) -> int | None:
    for e in evals:
        if e["success_rate"] >= threshold:
            return e["env_steps"]
    return None


CYCLE_TIME_TARGET = 0.7  # HIL-SERL's cycle time: the final policy's steps to success at most 0.7x the demonstrations'


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def cycle_time(run: RunState) -> dict:
    """The cycle time (mean steps to success over successful episodes only, as each evaluation and
    the demonstrations record it) of the final policy, against the demonstrations' and the cloned
    base's (the evaluation at env step 0, before any online update); None where there is no such
    figure (no successful episode, no step-0 evaluation, no demonstrations). The medians beside
    them (``median_steps_to_success``, ``final_vs_demos_median``) show the typical episode: a mean
    over 50 episodes moves by a step with one long search."""
    evals = run.evals
    final = evals[-1] if evals else {}
    clone = evals[0] if evals and evals[0]["env_steps"] == 0 else {}
    final_steps, clone_steps = final.get("steps_to_success"), clone.get("steps_to_success")
    demo_steps = run.demo_steps_to_success
    medians = {"final": final.get("steps_to_success_median"), "clone": clone.get("steps_to_success_median"),
               "demos": run.demo_steps_to_success_median}
    return {"final_steps_to_success": final_steps, "clone_steps_to_success": clone_steps,
            "demo_steps_to_success": demo_steps, "final_vs_demos": ratio(final_steps, demo_steps),
            "final_vs_clone": ratio(final_steps, clone_steps), "target_final_vs_demos": CYCLE_TIME_TARGET,
            "median_steps_to_success": medians, "final_vs_demos_median": ratio(medians["final"], medians["demos"]),
            "successful_episodes": {"final": final.get("successful_episodes"),
                                    "clone": clone.get("successful_episodes"),
                                    "demos": run.demo_successful_episodes},
            "episodes": {"final": final.get("episodes"), "clone": clone.get("episodes"),
                         "demos": run.demo_episodes}}


def base_summary(cfg: TrainConfig, cell, act_ms: list[float]) -> dict | None:
    """The base policy (with ``--base-policy``): its source and this round's latencies, p50 / p99 in
    ms: the base per query and per control step, and the residual policy's time to act."""
    if not cfg.base_policy:
        return None
    pct = lambda q: round(float(np.percentile(act_ms, q)), 3) if act_ms else None  # noqa: E731
    return {"source": cfg.base_policy, "python": cfg.base_python, **cell.latency(),
            "residual_act_ms_p50": pct(50), "residual_act_ms_p99": pct(99)}


def make_summary(cfg: TrainConfig, run: RunState, learner: LearnerClient, run_dir: Path,
                 resume_from: str | None = None, cell=None, act_ms: list[float] = (), goal_relabel: float = 0.0) -> dict:
    """Every figure is the whole run's (all its rounds: the start and each resume) unless it sits in
    ``rounds``. ``goal_relabel``: the hindsight share the run resolved at its start and learnt with."""
    evals, rounds, human = run.evals, run.rounds, run.human
    run.round.touch()
    return {
        "task": task_name(cfg), "env": cfg.env, "obs": cfg.obs, "backend": cfg.backend, "demos": run.demo_episodes, "demo_store": cfg.demo_store,
        "env_steps": run.env_steps, "episodes": run.totals.episodes,
        "updates": learner.status.get("updates", 0),
        "demo_source": demo_source(cfg),
        # the run's one final figure: its last evaluation (ground truth), with its episodes and seeds
        "final": final_figure(evals[-1], run.success_source) if evals else None,
        "success_source": run.success_source or "sim ground truth",
        "final_success_rate": evals[-1]["success_rate"] if evals else None,
        "final_eval_episodes": evals[-1]["episodes"] if evals else 0,
        "steps_to_90": steps_to(evals, 0.9), "steps_to_95": steps_to(evals, 0.95),
        "cycle_time": cycle_time(run),
        "train_wall_s": round(sum(r.wall_s for r in rounds), 1),
        "checkpoint": learner.last_checkpoint or resume_from, "run_dir": str(run_dir),
        "dropped_transitions": learner.dropped, **learner.lag_figures(),
        "reward": "classifier" if cfg.reward_classifier else "ground_truth",
        "classifier_episodes": run.classifier_total(),
        "base_policy": base_summary(cfg, cell, list(act_ms)),
        "human_eagerness": cfg.human_eagerness, "human_watches": human_watches(cfg, cell) if cell else None,
        "goal_relabel": goal_relabel,
        "interventions": run.totals.interventions,
        "intervention_steps": run.totals.intervention_steps,
        "intervention_rate_last_2000": run.intervention_rate_last(2000) if human else None,
        "rounds": [r.summary() for r in rounds],
        "per_1000_steps": run.per_block(human),
        "episode_interventions": run.episode_interventions, "evals": evals,
    }


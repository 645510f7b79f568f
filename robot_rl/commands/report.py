"""``robot-rl report RUN``: one Markdown page for a training run.

It gathers what the run folder holds: the training summary and learning curve (graded by the
sim's ground truth), and, for a run trained on a success classifier's reward, the classifier's
held-out validation, its confusion plot, how its rewards compared with ground truth during
training, and any ``classifier eval`` results saved next to the run (``classifier_*.json``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from robot_rl.errors import UserFacingError


class ReportError(UserFacingError):
    pass


def _steps(value) -> str:
    return "not reached" if value is None else str(value)


def _seeds(evaluation: dict) -> str:
    seeds = evaluation.get("seed_range")
    return f"{seeds[0]}-{seeds[1]}" if seeds else "not recorded"


def _final(summary: dict) -> str:
    """The run's one final figure, with its episodes and seeds (older summaries: rate and episodes)."""
    final = summary.get("final") or {"success_rate": summary["final_success_rate"],
                                     "episodes": summary["final_eval_episodes"], "env_steps": summary["env_steps"]}
    return (f"{final['success_rate']:.2f} over {final['episodes']} episodes (seeds {_seeds(final)}) at env step "
            f"{final['env_steps']}, graded by the sim's ground truth")


def _demos(summary: dict) -> str:
    source = summary.get("demo_source") or (f"episode store {summary['demo_store']}" if summary.get("demo_store")
                                            else "scripted expert, recorded at the start")
    return f"{summary['demos']} episodes from {source}" if summary.get("demo_store") and summary.get("demos") else source


def _wall_time(summary: dict) -> str:
    """The run's training wall time over all its rounds, and each round's (older summaries: the last start's)."""
    if "train_wall_s" not in summary:
        return f"wall time: {summary['wall_s']} s"
    rounds = summary["rounds"]
    each = ", ".join(f"env steps {r['env_step_range'][0]}-{r['env_step_range'][1]} in {r['wall_s']} s" for r in rounds)
    job = f"job wall time (set-up and every stage): {summary['job_wall_s']} s; " if "job_wall_s" in summary else ""
    return f"{job}training wall time: {summary['train_wall_s']} s in {len(rounds)} round(s): {each}"


def _rate(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _times(value) -> str:
    return "-" if value is None else f"{value}x"


def _cycle_time_lines(cycle: dict | None) -> list[str]:
    """HIL-SERL's cycle time: the final policy's mean steps to success against the demonstrations'
    and the cloned base's (older summaries have none)."""
    if not cycle:
        return []
    target, versus = cycle["target_final_vs_demos"], cycle["final_vs_demos"]
    verdict = "no figure" if versus is None else "met" if versus <= target else "not met"
    lines = ["", "## Cycle time (steps to success, successful episodes only)", "",
             f"Target: the final policy's steps to success at most {target}x the demonstrations'.", "",
             "| policy | steps to success (mean) | median | successful episodes |", "|---|---:|---:|---:|"]
    medians = cycle.get("median_steps_to_success") or {}
    for name, figure, count in (("demonstrations", "demo", "demos"), ("cloned base (step-0 evaluation)", "clone", "clone"),
                                ("final policy", "final", "final")):
        successful, episodes = cycle["successful_episodes"][count], cycle["episodes"][count]
        lines.append(f"| {name} | {_rate(cycle[f'{figure}_steps_to_success'])} | {_rate(medians.get(count))} | "
                     f"{'-' if episodes is None else f'{successful} of {episodes}'} |")
    lines += ["", f"- **final vs demonstrations: {_times(versus)}** (target <= {target}x: {verdict})",
              f"- final vs cloned base: {_times(cycle['final_vs_clone'])}",
              f"- medians, final vs demonstrations: {_times(cycle.get('final_vs_demos_median'))} (the typical "
              "episode; a few long searches move the mean, not the median)"]
    return lines


def _block_lines(blocks: list[dict]) -> list[str]:
    """Training per 1,000 env steps: episodes ended and their success and, with a human, its share."""
    if not blocks:
        return []
    human = "intervention_rate" in blocks[0]
    what = ("episodes counted in the block where they ended; success as the run's reward said it, solved by the "
            "sim's ground truth")
    header, rule = "| env steps | episodes | success | solved |", "|---:|---:|---:|---:|"
    if human:
        what += "; takeovers counted where they began; human share: of the block's env steps"
        header, rule = header + " takeovers | human share |", rule + "---:|---:|"
    lines = ["", f"Training per 1,000 env steps ({what}):", "", header, rule]
    for b in blocks:
        row = (f"| {b['env_step_range'][0]}-{b['env_step_range'][1]} | {b['episodes']} | {_rate(b['success_rate'])} | "
               f"{_rate(b['ground_truth_solved_rate'])} |")
        if human:
            row += f" {b['interventions']} | {b['intervention_rate']:.2f} |"
        lines.append(row)
    return lines


def _metrics_row(name: str, m: dict) -> str:
    return (f"| {name} | {m.get('frames', m.get('tp', 0) + m.get('fp', 0) + m.get('fn', 0) + m.get('tn', 0))} | "
            f"{m['precision']:.3f} | {m['recall']:.3f} | {m['fpr']:.4f} | {m['roc_auc']:.4f} |")


def _ros_run_lines(run: Path, actor: dict) -> tuple[list[str], dict]:
    """A run of the ROS 2 stack: the actor's log of episodes, and the final evaluation if any."""
    lines = [f"# {actor['task']} ({actor['obs']} policy) — training report (ROS 2 stack)", "",
             f"- reward: **{'learned success classifier' if actor['reward'] == 'classifier' else 'sim ground truth'}**",
             f"- demonstrations: {actor.get('demo_store') or 'none'}",
             f"- env steps: {actor['steps']}, episodes: {actor['episodes']}, weights received: v{actor['weights_version']}",
             f"- frame-to-command latency p50/p99: {actor['frame_to_command_ms_p50']:.1f} / "
             f"{actor['frame_to_command_ms_p99']:.1f} ms" if actor.get("frame_to_command_ms_p50") is not None else "- no steps",
             ]
    if actor.get("intervention_steps"):
        lines.append(f"- human interventions: {actor.get('interventions', 0)} takeovers, {actor['intervention_steps']} "
                     f"steps ({actor['intervention_steps'] / max(actor['steps'], 1):.0%} of all steps)")
    evaluation = run / "eval.json"
    if evaluation.is_file():
        e = json.loads(evaluation.read_text())
        lines.append(f"- **final success: {e['success_rate']:.2f} over {e['episodes']} episodes (seeds {_seeds(e)}), "
                     "graded by the sim's ground truth** (`robot-rl eval`, eval.json)")
    log = actor.get("episode_log") or []
    lines += ["", "Training episodes, in blocks of 10 (success as the reward saw it):", "",
              "| episodes | env steps at end | success | human share of steps |", "|---|---:|---:|---:|"]
    for i in range(0, len(log), 10):
        block = log[i:i + 10]
        human = sum(e.get("intervention_rate", 0.0) for e in block) / len(block)
        lines.append(f"| {i + 1}-{i + len(block)} | {block[-1]['steps']} | "
                     f"{sum(e['success'] for e in block) / len(block):.2f} | {human:.2f} |")
    counts = {}
    if actor["reward"] == "classifier" and all(e.get("ground_truth_solved") is not None for e in log):
        for name, said, truth in (("true_positive", True, True), ("false_positive", True, False),
                                  ("false_negative", False, True), ("true_negative", False, False)):
            counts[name] = sum(e["success"] == said and e["ground_truth_solved"] == truth for e in log)
    return lines, {"reward": actor["reward"], "classifier_episodes": counts,
                   "reward_classifier": actor.get("reward_classifier")}


def record_job_wall(run: Path, seconds: float) -> None:
    """The whole job's wall time (a script around the training, e.g. the main job) into summary.json."""
    path = run / "summary.json"
    summary = json.loads(path.read_text())
    summary["job_wall_s"] = round(float(seconds), 1)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(path)


def write_report(run_dir: str | Path, job_wall_s: float | None = None) -> Path:
    """``<run>/report.md``; ``job_wall_s``: the wall time of the job that made the run, recorded in
    summary.json as ``job_wall_s`` first."""
    run = Path(run_dir)
    if job_wall_s is not None:
        if not (run / "summary.json").is_file():
            raise ReportError(f"{run} has no summary.json to record the job's wall time in")
        record_job_wall(run, job_wall_s)
    if not (run / "summary.json").is_file() and (run / "actor_summary.json").is_file():
        lines, info = _ros_run_lines(run, json.loads((run / "actor_summary.json").read_text()))
        return _finish(run, lines, info["reward"], info["reward_classifier"], info["classifier_episodes"])
    if not (run / "summary.json").is_file():
        raise ReportError(f"{run} has no summary.json (robot-rl train) or actor_summary.json (ROS 2 stack): "
                          "not a finished training run")
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text()) if (run / "config.json").is_file() else {}
    lines = [f"# {summary['task']} ({summary['obs']} policy) — training report", ""]
    reward = summary.get("reward", "ground_truth")
    lines += [
        f"- reward: **{'learned success classifier' if reward == 'classifier' else 'sim ground truth'}**",
        f"- demonstrations: {_demos(summary)}",
        f"- env steps: {summary['env_steps']}, episodes: {summary['episodes']}, gradient updates: {summary['updates']}",
        f"- **final success: {_final(summary)}**",
        f"- env steps to 90% / 95% success: {_steps(summary['steps_to_90'])} / {_steps(summary['steps_to_95'])}",
        f"- {_wall_time(summary)}; checkpoint: `{summary['checkpoint']}`",
    ]
    if summary.get("intervention_rate_last_2000") is not None:
        lines.append(f"- simulated human: {summary['interventions']} takeovers and {summary['intervention_steps']} env "
                     f"steps in finished episodes; {summary['intervention_rate_last_2000']:.0%} of the last "
                     f"{min(summary['env_steps'], 2000)} env steps")
    lines += [
        "",
        "Evaluations during training (ground truth, deterministic policy; the last row is the final figure):", "",
        "| env steps | success | episodes | seeds | mean episode length | steps to success |",
        "|---:|---:|---:|---|---:|---:|",
    ]
    lines += [f"| {e['env_steps']} | {e['success_rate']:.2f} | {e['episodes']} | {_seeds(e)} | {e['episode_length']:.1f} | "
              f"{_rate(e.get('steps_to_success'))} |" for e in summary["evals"]]
    stopped = [f"{e['reflex_stops']} at step {e['env_steps']}" for e in summary["evals"] if e.get("reflex_stops")]
    if stopped:
        lines += ["", f"Episodes the twin's collision reflex stopped (failures, the end effector over the Franka's "
                      f"thresholds): {', '.join(stopped)}."]
    if (run / "learning_curve.png").is_file():
        lines += ["", "![learning curve](learning_curve.png)"]
    lines += _block_lines(summary.get("per_1000_steps") or [])
    lines += _observation_lines(summary, config)
    lines += _cycle_time_lines(summary.get("cycle_time"))
    return _finish(run, lines, reward, config.get("reward_classifier"), summary.get("classifier_episodes") or {})


def _observation_lines(summary: dict, config: dict) -> list[str]:
    """What the policy read: the sim's object poses (state, sim only) or the cameras, and for a
    frozen encoder the candidates ``encoder pretrain`` measured."""
    if summary["obs"] == "state":
        return ["", "Observation: robot state + the sim's object poses (privileged: sim only)."]
    cams = " + ".join(config.get("cameras", []))
    lines = ["", f"Observation: cameras {cams} at {'x'.join(map(str, config.get('image_size', [])))} + robot state "
                 "(what a real cell has; no object pose)."]
    encoder = config.get("frozen_encoder")
    report = Path(encoder) / "report.json" if encoder else None
    if report is not None and report.is_file():
        r = json.loads(report.read_text())
        lines += [f"Frozen encoder `{encoder}`: **{r['chosen']}** (features {r['feature_shape']}, cached float16), "
                  "chosen by a held-out probe (lower is better):", "",
                  "| candidate | held-out loss | motion MSE | gripper accuracy | train s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {name} | {c['held_out_loss']:.4f} | {c['held_out_motion_mse']:.4f} | "
                  f"{c['held_out_gripper_accuracy']:.2f} | {c['train_s']} |" for name, c in r["candidates"].items()]
    return lines


def _finish(run: Path, lines: list[str], reward: str, classifier: str | None, counts: dict) -> Path:
    if reward == "classifier" and classifier:
        lines += ["", "## Success classifier", "", f"`{classifier}`", ""]
        if counts:
            lines += ["Training episodes, classifier's verdict vs ground truth (solved at any step):", "",
                      "| | solved | not solved |", "|---|---:|---:|",
                      f"| classifier: success | {counts['true_positive']} | {counts['false_positive']} |",
                      f"| classifier: no success | {counts['false_negative']} | {counts['true_negative']} |", ""]
        tables = []
        report_file = Path(classifier) / "report.json"
        if report_file.is_file():
            tables.append(_metrics_row("validation (held-out training episodes)",
                                       json.loads(report_file.read_text())["validation"]))
        for extra in sorted(run.glob("classifier_*.json")):
            tables.append(_metrics_row(extra.stem.removeprefix("classifier_").replace("_", " "),
                                       json.loads(extra.read_text())))
        if tables:
            lines += ["| frames | n | precision | recall | false-positive rate | ROC-AUC |",
                      "|---|---:|---:|---:|---:|---:|", *tables]
        confusion = Path(classifier) / "confusion.png"
        if confusion.is_file():
            lines += ["", f"![classifier confusion]({os.path.relpath(confusion, run)})"]
    out = run / "report.md"
    out.write_text("\n".join(lines) + "\n")
    return out

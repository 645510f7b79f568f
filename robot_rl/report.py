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


def _metrics_row(name: str, m: dict) -> str:
    return (f"| {name} | {m.get('frames', m.get('tp', 0) + m.get('fp', 0) + m.get('fn', 0) + m.get('tn', 0))} | "
            f"{m['precision']:.3f} | {m['recall']:.3f} | {m['fpr']:.4f} | {m['roc_auc']:.4f} |")


def write_report(run_dir: str | Path) -> Path:
    run = Path(run_dir)
    if not (run / "summary.json").is_file():
        raise ReportError(f"{run} has no summary.json: not a finished training run")
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text()) if (run / "config.json").is_file() else {}
    lines = [f"# {summary['task']} ({summary['obs']} policy) — training report", ""]
    reward = summary.get("reward", "ground_truth")
    lines += [
        f"- reward: **{'learned success classifier' if reward == 'classifier' else 'sim ground truth'}**",
        f"- demonstrations: {summary['demos']} ({summary.get('demo_store') or 'scripted, in memory'})",
        f"- env steps: {summary['env_steps']}, episodes: {summary['episodes']}, gradient updates: {summary['updates']}",
        f"- final success (ground truth, {summary['final_eval_episodes']} episodes): {summary['final_success_rate']:.2f}",
        f"- env steps to 90% / 95% success: {_steps(summary['steps_to_90'])} / {_steps(summary['steps_to_95'])}",
        f"- wall time: {summary['wall_s']} s; checkpoint: `{summary['checkpoint']}`", "",
        "| env steps | success | mean episode length |", "|---:|---:|---:|",
    ]
    lines += [f"| {e['env_steps']} | {e['success_rate']:.2f} | {e['episode_length']:.1f} |" for e in summary["evals"]]
    if (run / "learning_curve.png").is_file():
        lines += ["", "![learning curve](learning_curve.png)"]
    classifier = config.get("reward_classifier")
    if reward == "classifier" and classifier:
        lines += ["", "## Success classifier", "", f"`{classifier}`", ""]
        counts = summary.get("classifier_episodes") or {}
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

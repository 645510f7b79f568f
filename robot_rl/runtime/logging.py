"""Run-folder output for long jobs: TensorBoard scalars, progress (steps, success rate,
updates, the simulated human's takeovers, rate, ETA) and the learning-curve PNG. Progress is a
live bar on a terminal and a plain line every 100 env steps and at least every 15 s
(``ProgressLines``) when the output is a file, a pipe or a CI log."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from robot_rl.runtime.progress import ProgressLines

if TYPE_CHECKING:
    from robot_rl.runtime.run_state import RunState


class RunLogger:
    def __init__(self, run_dir: Path, total_steps: int, enabled: bool = True):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.total = total_steps
        self._last_logged = 0
        self._lines: ProgressLines | None = None  # made at the first report (a resumed run starts late)
        self.bar = None
        self.lines = enabled and not sys.stdout.isatty()
        if enabled and not self.lines:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                                TimeRemainingColumn())
            self.task = self.bar.add_task("train", total=total_steps, info="")
            self.bar.start()

    @property
    def last_line_at(self) -> float | None:
        """When the plain progress lines last spoke (monotonic seconds); None without them."""
        return self._lines.last if self._lines is not None else None

    def scalar(self, name: str, value: float, step: int) -> None:
        self.writer.add_scalar(name, value, step)

    def progress(self, step: int, run: RunState, status: dict) -> None:
        if self.lines and self._lines is None:
            self._lines = ProgressLines("train", self.total, first=step - 1)
            self._last_logged = step - 1  # a resumed run's first line comes after its own 100 steps
        overdue = self._lines is not None and self._lines.due(step)  # 15 s without a line
        if step - self._last_logged < 100 and step != self.total and not overdue:
            return
        self._last_logged = step
        recent = run.recent_successes(20)
        train_success = float(np.mean(recent)) if recent else 0.0
        self.scalar("train/success_rate_last20", train_success, step)
        for key, value in status.get("metrics", {}).items():
            self.scalar(f"learner/{key}", value, step)
        self.scalar("learner/updates", status.get("updates", 0), step)
        evals = run.evals
        figures = {"train success (last 20)": f"{train_success:.2f}"}
        if evals:
            figures["latest eval"] = f"{evals[-1]['success_rate']:.2f}"
        figures["updates"] = status.get("updates", 0)
        if run.round.human_eagerness > 0:
            stretches, window = run.human_stretches, min(step, 1000)
            share = human_steps_in(stretches, step - window, step) / max(window, 1)
            figures["human"] = f"{len(stretches)} takeovers, {share:.0%} of the last {window} steps"
        if self.bar is not None:
            self.bar.update(self.task, completed=step, info=" ".join(f"{k} {v}" for k, v in figures.items()))
        if self._lines is not None:
            self._lines.update(step, force=True, **figures)

    def plot_curve(self, evals: list[dict], cfg, blocks: list[dict] | None = None) -> Path | None:
        """The eval success curve; below it, when ``blocks`` (summary.json's ``per_1000_steps``)
        are given, the training episodes' success per block and, with a human, its share of the steps."""
        if not evals:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if blocks:
            fig, (ax, low) = plt.subplots(2, 1, figsize=(6, 6), sharex=True, gridspec_kw={"height_ratios": (3, 2)})
        else:
            fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([e["env_steps"] for e in evals], [e["success_rate"] for e in evals], marker="o")
        ax.set_ylabel("eval success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.set_title(curve_title(evals, cfg), fontsize=9)
        if blocks:
            ends = [b["env_step_range"][1] for b in blocks]
            nan = float("nan")  # a block in which no episode ended
            low.plot(ends, [nan if b["success_rate"] is None else b["success_rate"] for b in blocks], marker=".",
                     label="training episodes' success (as the reward said)")
            if "intervention_rate" in blocks[0]:
                low.plot(ends, [b["intervention_rate"] for b in blocks], marker=".", color="tab:red",
                         label="share of env steps under human control")
            low.set_ylabel("per 1000 env steps")
            low.set_ylim(-0.02, 1.02)
            low.grid(alpha=0.3)
            low.legend(fontsize=7)
        (low if blocks else ax).set_xlabel("env steps")
        fig.tight_layout()
        path = self.run_dir / "learning_curve.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.writer.close()


def human_steps_in(stretches: list[list[int]], lo: int, hi: int) -> int:
    """Env steps in (lo, hi] under human control; ``stretches``: [first, last] env step of each takeover."""
    return sum(max(0, min(last, hi) - max(first, lo + 1) + 1) for first, last in stretches)


def curve_title(evals: list[dict], cfg) -> str:
    """The learning curve's title: the task, the run's final figure (the last evaluation, as
    summary.json and report.md state it) and where the demonstrations came from."""
    from robot_rl.config_values import demo_source

    last = evals[-1]
    final = f"final success {last['success_rate']:.2f} over {last.get('episodes', '?')} episodes"
    demos = textwrap.fill(f"demos: {demo_source(cfg)}", width=90)  # a long store path wraps, never cut
    return f"{cfg.task} ({cfg.obs}): {final}\n{demos}"

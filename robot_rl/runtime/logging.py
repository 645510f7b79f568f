"""Run-folder output for long jobs: TensorBoard scalars, progress (steps, success rate,
updates, rate, ETA) and the learning-curve PNG. Progress is a live bar on a terminal and a
plain line every 100 env steps when the output is a file, a pipe or a CI log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np


class RunLogger:
    def __init__(self, run_dir: Path, total_steps: int, enabled: bool = True):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.total = total_steps
        self._last_logged = 0
        self._first: tuple[int, float] | None = None  # (step, time) of the first report: the rate
        self.bar = None
        self.lines = enabled and not sys.stdout.isatty()
        if enabled and not self.lines:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                                TimeRemainingColumn())
            self.task = self.bar.add_task("train", total=total_steps, info="")
            self.bar.start()

    def scalar(self, name: str, value: float, step: int) -> None:
        self.writer.add_scalar(name, value, step)

    def progress(self, step: int, actor_state: dict, status: dict) -> None:
        if step - self._last_logged < 100 and step != self.total:
            return
        self._last_logged = step
        recent = actor_state["train_successes"][-20:]
        train_success = float(np.mean(recent)) if recent else 0.0
        self.scalar("train/success_rate_last20", train_success, step)
        for key, value in status.get("metrics", {}).items():
            self.scalar(f"learner/{key}", value, step)
        self.scalar("learner/updates", status.get("updates", 0), step)
        evals = actor_state["evals"]
        info = (f"train {train_success:.2f} eval {evals[-1]['success_rate']:.2f} " if evals else "") + \
            f"updates {status.get('updates', 0)}"
        if self.bar is not None:
            self.bar.update(self.task, completed=step, info=info)
        if self.lines:
            print(f"train: step {step}/{self.total} {info} {self._rate(step)}", flush=True)

    def _rate(self, step: int) -> str:
        now = time.monotonic()
        if self._first is None:
            self._first = (step, now)
        done, elapsed = step - self._first[0], now - self._first[1]
        if done <= 0 or elapsed <= 0:
            return ""
        rate = done / elapsed
        return f"{rate:.1f} steps/s ETA {(self.total - step) / rate / 60:.1f} min"

    def plot_curve(self, evals: list[dict], cfg) -> Path | None:
        if not evals:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([e["env_steps"] for e in evals], [e["success_rate"] for e in evals], marker="o")
        ax.set_xlabel("env steps")
        ax.set_ylabel("eval success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.set_title(f"{cfg.task} ({cfg.obs}, {cfg.demos} demos)")
        fig.tight_layout()
        path = self.run_dir / "learning_curve.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.writer.close()

"""``robot-rl sim run``: the scripted expert solves each task on each backend, and the
run folder gets a success table, a summary JSON and a GIF (front | wrist) per task."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import time

import imageio.v3 as iio
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from robot_rl.sim import make
from robot_rl.sim.experts import make_expert, run_episode


@dataclasses.dataclass
class ExpertRunConfig:
    tasks: tuple[str, ...] = ("PickCube", "PegInsert")
    backends: tuple[str, ...] = ("mujoco",)
    episodes: int = 20
    noise: float = 0.0
    seed: int = 0
    gif: bool = True
    image_size: int = 128
    out: str = "runs"


def new_run_dir(root: str, prefix: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(root, f"{prefix}-{stamp}")
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(root, f"{prefix}-{stamp}-{n}")
    os.makedirs(path)
    return path


def _gif_frame(obs: dict) -> np.ndarray:
    return np.concatenate([obs["images"]["front"], obs["images"]["wrist"]], axis=1)


def run(cfg: ExpertRunConfig, console: Console | None = None) -> dict:
    console = console or Console()
    run_dir = new_run_dir(cfg.out, "sim-expert")
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(dataclasses.asdict(cfg), f, indent=2)
    rows = []
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("success {task.fields[rate]:.0%}"), TimeRemainingColumn(), console=console,
    )
    with progress:
        for backend in cfg.backends:
            for task in cfg.tasks:
                rows.append(_run_one(cfg, task, backend, run_dir, progress))
    summary = {"run_dir": run_dir, "results": rows}
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    with open(os.path.join(run_dir, "success.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = Table(title=f"Scripted expert, noise {cfg.noise}, {cfg.episodes} episodes each")
    for col in ("backend", "task", "success_rate", "mean_steps", "steps_per_s"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["backend"], r["task"], f"{r['success_rate']:.0%}", f"{r['mean_steps']:.1f}", f"{r['steps_per_s']:.0f}")
    console.print(table)
    console.print(f"run folder: {run_dir}")
    return summary


def _run_one(cfg: ExpertRunConfig, task: str, backend: str, run_dir: str, progress: Progress) -> dict:
    env = make(task, backend=backend, images=False)
    expert = make_expert(task, noise=cfg.noise, seed=cfg.seed)
    bar = progress.add_task(f"{backend} {task}", total=cfg.episodes, rate=0.0)
    results, t0, steps = [], time.perf_counter(), 0
    for i in range(cfg.episodes):
        res = run_episode(env, expert, seed=cfg.seed + i)
        results.append(res)
        steps += res["steps"]
        progress.update(bar, advance=1, rate=float(np.mean([r["success"] for r in results])))
    elapsed = time.perf_counter() - t0
    env.close()
    row = {
        "backend": backend,
        "task": task,
        "episodes": cfg.episodes,
        "success_rate": float(np.mean([r["success"] for r in results])),
        "mean_steps": float(np.mean([r["steps"] for r in results])),
        "steps_per_s": steps / elapsed,
        "gif": "",
    }
    if cfg.gif:
        size = (cfg.image_size, cfg.image_size)
        env = make(task, backend=backend, images=True, image_size=size)
        frames: list = []
        run_episode(env, make_expert(task, noise=cfg.noise, seed=cfg.seed), seed=cfg.seed, frames=frames)
        env.close()
        path = os.path.join(run_dir, f"{task}_{backend}.gif")
        iio.imwrite(path, [_gif_frame(o) for o in frames], duration=100, loop=0)
        row["gif"] = os.path.basename(path)
    return row

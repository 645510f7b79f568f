"""``robot-rl bench learning``: sample efficiency of the full actor/learner runtime on the twin.

Each figure is one ``robot-rl train`` run (learner in its own process, UTD 2, evaluation
every ``eval_every`` env steps over 50 episodes with the deterministic policy). A run that
never reaches the threshold reports null and its final success rate. The ablation runs the
same PickCube configuration without the residual-on-BC lever (textbook RLPD after BC
pre-training and critic warm-up), to show what the lever buys (see docs/CALIBRATION.md).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

from robot_rl.commands.train import TrainConfig, train

FULL = dict(pick_steps=20_000, peg_steps=30_000, pixel_steps=3_000, eval_every=2000, eval_episodes=50,
            pixel_eval_episodes=20, pretrain=1000, warmup=1000, pixel_pretrain=500, pixel_warmup=200)
QUICK = dict(pick_steps=400, peg_steps=400, pixel_steps=40, eval_every=200, eval_episodes=5,
             pixel_eval_episodes=2, pretrain=200, warmup=100, pixel_pretrain=20, pixel_warmup=10)


def train_run(name: str, kw: dict) -> dict:
    """One training run in a temporary run folder (runs in a worker process)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        t0 = time.time()
        summary = train(TrainConfig(run_dir=tmp, progress=False, **kw), log=lambda m: print(f"[{name}] {m}", flush=True))
        summary["wall_s"] = round(time.time() - t0, 1)
    print(f"[{name}] final success {summary['final_success_rate']:.2f} in {summary['wall_s']} s", flush=True)
    return summary


def plan(p: dict) -> dict[str, dict]:
    """Every run of the benchmark, longest first (they are scheduled in this order)."""
    common = dict(eval_every=p["eval_every"], eval_episodes=p["eval_episodes"], final_eval_episodes=p["eval_episodes"],
                  pretrain_steps=p["pretrain"], critic_warmup_steps=p["warmup"])
    return {
        "peginsert_state_demos20": dict(task="PegInsert", demos=20, env_steps=p["peg_steps"], **common),
        "pickcube_state_demos10": dict(task="PickCube", demos=10, env_steps=p["pick_steps"], **common),
        "pickcube_state_demos0": dict(task="PickCube", demos=0, env_steps=p["pick_steps"], **common),
        "ablation_pickcube_state_demos10_no_residual": dict(task="PickCube", demos=10, env_steps=p["pick_steps"],
                                                            residual=False, **common),
        "pickcube_pixels_demos20": dict(
            task="PickCube", obs="pixels", demos=20, env_steps=p["pixel_steps"],
            eval_every=max(p["pixel_steps"] // 3, 1), eval_episodes=p["pixel_eval_episodes"],
            final_eval_episodes=p["pixel_eval_episodes"], pretrain_steps=p["pixel_pretrain"],
            critic_warmup_steps=p["pixel_warmup"], utd=0.5, batch_size=64, replay_capacity=20_000, demo_capacity=5_000),
    }


def run(quick: bool = False, log=print, jobs: int | None = None, device: str = "auto") -> dict:
    """Run every configuration of ``plan``, ``jobs`` at a time (default: one per CPU core;
    each run is one learner busy on one core, its actor mostly waiting for it); the learners
    on ``device`` (auto, cpu, cuda, cuda:N, mps), the actors on the CPU."""
    from robot_rl.runtime.device import resolve_device

    device = resolve_device(device)
    p = QUICK if quick else FULL
    runs = {name: dict(kw, device=device) for name, kw in plan(p).items()}
    jobs = max(1, min(len(runs), jobs or os.cpu_count() or 1))
    log(f"{len(runs)} training runs, {jobs} at a time")
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {name: pool.submit(train_run, name, kw) for name, kw in runs.items()}
        results = {name: f.result() for name, f in futures.items()}
    figures: dict = {"device": device, "eval_episodes": p["eval_episodes"], "parallel_runs": jobs, "total_wall_s": round(time.time() - t0, 1)}
    for name in runs:
        s = results[name]
        curve = [[e["env_steps"], e["success_rate"]] for e in s["evals"]]
        if name.startswith("pickcube_pixels"):
            figures[f"{name}_success_at_end"] = s["final_success_rate"]
            figures[f"{name}_env_steps"] = s["env_steps"]
            figures[f"{name}_wall_s"] = s["wall_s"]
            figures[f"{name}_curve"] = curve
            continue
        threshold = 90 if name.startswith("peginsert") else 95
        figures[f"{name}_steps_to_{threshold}"] = s[f"steps_to_{threshold}"]
        figures[f"{name}_final_success"] = s["final_success_rate"]
        figures[f"{name}_wall_s"] = s["wall_s"]
        figures[f"{name}_curve"] = curve
    figures["notes"] = [
        "state runs: UTD 2, batch 256 (128 demo / 128 online), 2 critics, residual RL on a BC base (scale 0.5, "
        "penalised deviation from the base), grasp critic on PickCube, learner in its own process paced to the UTD",
        "pixels: front+wrist 64x64 + robot state, no privileged state; CPU-bound (about 0.15 s per batch-64 update "
        "here), so UTD 0.5, batch 64 and a short budget: 'as far as CPU allows'",
        "steps_to_* counts env steps after demos (0: the cloned policy already passes the threshold); evaluation "
        "every eval_every steps over eval_episodes episodes with the deterministic policy",
        f"runs execute {jobs} at a time on this machine; each wall_s is that run's own wall time",
    ]
    return figures

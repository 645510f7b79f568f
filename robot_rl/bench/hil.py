"""``robot-rl bench hil``: what a human in the loop buys, on the sim twin.

Per task (PickCube, PegInsert), two ``robot-rl train`` runs from the same few scripted demos
with the same seed: one where the simulated human (teleop/simulated_human.py, eagerness
``EAGERNESS``) takes over when the policy stalls or heads for failure, its actions executed,
flagged and learned from (online and demo buffers), and one without interventions. Both are
graded every ``eval_every`` env steps over ``eval_episodes`` episodes of the policy alone
(no human) and stop at 90%. Figures: env steps to 90% with and without interventions, their
ratio, and the human's steps (intervention steps) in the run with interventions.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

EAGERNESS = 0.5
TASKS = {"pickcube": "PickCube", "peginsert": "PegInsert"}
FULL = dict(demos=3, env_steps=20_000, eval_every=1000, eval_episodes=50, pretrain=1000, warmup=1000)
QUICK = dict(demos=1, env_steps=200, eval_every=100, eval_episodes=3, pretrain=20, warmup=10)


def _run(name: str, kw: dict) -> dict:
    """One training run in a temporary run folder (runs in a worker process)."""
    from robot_rl.train import TrainConfig, train

    with tempfile.TemporaryDirectory(prefix=f"bench-hil-{name}-") as tmp:
        t0 = time.time()
        summary = train(TrainConfig(run_dir=tmp, progress=False, **kw), log=lambda m: print(f"[{name}] {m}", flush=True))
        summary["wall_s"] = round(time.time() - t0, 1)
    print(f"[{name}] steps to 90%: {summary['steps_to_90']}, human steps {summary['intervention_steps']}", flush=True)
    return summary


def plan(p: dict) -> dict[str, dict]:
    runs = {}
    for key, task in TASKS.items():
        common = dict(task=task, demos=p["demos"], env_steps=p["env_steps"], seed=0, eval_every=p["eval_every"],
                      eval_episodes=p["eval_episodes"], final_eval_episodes=p["eval_episodes"], stop_at_success=0.9,
                      pretrain_steps=p["pretrain"], critic_warmup_steps=p["warmup"], checkpoint_every=p["env_steps"])
        runs[f"{key}_with_interventions"] = dict(common, human_eagerness=EAGERNESS)
        runs[f"{key}_without_interventions"] = common
    return runs


def run(quick: bool = False, log=print, jobs: int | None = None) -> dict:
    p = QUICK if quick else FULL
    runs = plan(p)
    jobs = max(1, min(len(runs), jobs or os.cpu_count() or 1))
    log(f"{len(runs)} training runs, {jobs} at a time")
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {name: pool.submit(_run, name, kw) for name, kw in runs.items()}
        results = {name: f.result() for name, f in futures.items()}
    figures: dict = {"eagerness": EAGERNESS, "demos": p["demos"], "eval_episodes": p["eval_episodes"]}
    for key in TASKS:
        with_h, without = results[f"{key}_with_interventions"], results[f"{key}_without_interventions"]
        a, b = with_h["steps_to_90"], without["steps_to_90"]
        figures[f"{key}_steps_to_90_with_interventions"] = a
        figures[f"{key}_steps_to_90_without_interventions"] = b
        figures[f"{key}_intervention_steps"] = with_h["intervention_steps"]
        figures[f"{key}_interventions"] = with_h["interventions"]
        figures[f"{key}_steps_ratio"] = round(a / b, 3) if a is not None and b else None
        figures[f"{key}_final_success_with_interventions"] = with_h["final_success_rate"]
        figures[f"{key}_final_success_without_interventions"] = without["final_success_rate"]
        for name, s in ((f"{key}_with_interventions", with_h), (f"{key}_without_interventions", without)):
            figures[f"{name}_curve"] = [[e["env_steps"], e["success_rate"]] for e in s["evals"]]
            figures[f"{name}_wall_s"] = s["wall_s"]
        figures[f"{key}_intervention_steps_by_episode"] = [e[2] for e in with_h["episode_interventions"]]
    figures["total_wall_s"] = round(time.time() - t0, 1)
    figures["notes"] = [
        f"{p['demos']} scripted demos (noise 0.1) per task, seed 0, state policy, UTD 2, residual RL on a BC base; "
        "the runs with and without interventions share demos and seeds",
        f"simulated human: eagerness {EAGERNESS} (takes over after {round(6 / EAGERNESS)} steps without progress or "
        "when progress falls, for 15 steps, at most 3 times an episode); its transitions are flagged and go to both "
        "buffers",
        "steps_to_90 counts env steps (the human's included) to the first evaluation at >= 90%; evaluations run "
        "the policy alone, so success there is success without interventions",
        f"runs execute {jobs} at a time on this machine",
    ]
    return figures

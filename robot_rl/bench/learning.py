"""``robot-rl bench learning``: sample efficiency of the full actor/learner runtime on the twin.

Each figure is one ``robot-rl train`` run (learner in its own process, UTD 2, evaluation
every ``eval_every`` env steps over 50 episodes with the deterministic policy). A run that
never reaches the threshold reports null and its final success rate. The ablation runs the
same PickCube configuration without the residual-on-BC lever (textbook RLPD after BC
pre-training and critic warm-up), to show what the lever buys (see docs/CALIBRATION.md).

The pixel rows learn from what a real cell sees (front + wrist 64x64 + robot state, no object
pose), from 20 demonstrations recorded with images, one row per path and seed:

* ``pickcube_pixels_frozen``: a frozen backbone from ``robot-rl encoder pretrain`` on those demos
  (candidates: behaviour cloning, a spatial autoencoder, the success classifier's trunks; the
  probe picks), features cached in the replay, ground-truth reward;
* ``pickcube_pixels_frozen_classifier``: the same with the success classifier's reward (the main
  job's recipe), graded by ground truth;
* ``pickcube_pixels_trainable``: the conv encoder trained end to end by the critic (a GPU's path;
  on a CPU a short budget).

Figures are medians over the seeds (a run that never reaches 90% counts as beyond every run that
does), the cycle time (``*_cycle_time``: summary.json's ``cycle_time``) one per seed;
``updates_per_s_state`` and ``pickcube_pixels_frozen_updates_per_s`` are the two agents' update rates
measured interleaved in this process (``bench.learner.frozen_and_state_rates``).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from robot_rl.commands.train import TrainConfig, train

FULL = dict(pick_steps=20_000, peg_steps=30_000, pixel_steps=3_000, eval_every=2000, eval_episodes=50,
            pixel_eval_episodes=20, pretrain=1000, warmup=1000, pixel_pretrain=500, pixel_warmup=200,
            frozen_steps=20_000, seeds=3, pixel_demos=20, encoder_steps=1000, probe_steps=500,
            classifier_episodes=20, classifier_steps=4000)
QUICK = dict(pick_steps=400, peg_steps=400, pixel_steps=40, eval_every=200, eval_episodes=5,
             pixel_eval_episodes=2, pretrain=200, warmup=100, pixel_pretrain=20, pixel_warmup=10,
             frozen_steps=200, seeds=1, pixel_demos=4, encoder_steps=10, probe_steps=10,
             classifier_episodes=3, classifier_steps=30)
PIXEL_ROWS = ("pickcube_pixels_frozen", "pickcube_pixels_frozen_classifier", "pickcube_pixels_trainable")


def train_run(name: str, kw: dict) -> dict:
    """One training run in a temporary run folder (runs in a worker process)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        t0 = time.time()
        summary = train(TrainConfig(run_dir=tmp, progress=False, **kw), log=lambda m: print(f"[{name}] {m}", flush=True))
        summary["wall_s"] = round(time.time() - t0, 1)
    print(f"[{name}] final success {summary['final_success_rate']:.2f} in {summary['wall_s']} s", flush=True)
    return summary


def prepare_pixel_data(folder: Path, p: dict, log=print,
                       objectives: tuple[str, ...] = ("bc", "autoencoder", "classifier"), task: str = "PickCube") -> dict:
    """What the pixel rows learn from, made as a lab would: demonstrations with images, the
    success classifier's takes (the task's ``classifier_cameras``) and the classifier, then the
    frozen encoder, chosen by probe among the candidates ``objectives`` names (default: behaviour
    cloning, the spatial autoencoder and the classifier's trunks; ``("bc",)`` is the main job's one
    fixed objective)."""
    from robot_rl.commands.encoder import pretrain_encoder
    from robot_rl.commands.record import record_rollouts
    from robot_rl.reward.training import train_classifier
    from robot_rl.sim.tasks import get_task

    cams, size, n = ("front", "wrist"), (64, 64), p["classifier_episodes"]
    takes_cams, failure_noise = get_task(task).classifier_cameras, get_task(task).failed_takes_noise
    demos, good, bad = folder / "demos.zarr", folder / "classifier_successes.zarr", folder / "classifier_failures.zarr"
    record_rollouts(demos, task, p["pixel_demos"], noise=0.1, seed=10_000, images=True, image_size=size,
                    cameras=cams, keep="successes")
    record_rollouts(good, task, n, noise=0.1, seed=100, images=True, image_size=size, cameras=takes_cams,
                    keep="successes", hold_after_success=30, hold_motion=0.4, hold_rise=0.3, hold_release=0.5)
    record_rollouts(bad, task, n, noise=failure_noise, seed=200, images=True, image_size=size, cameras=takes_cams,
                    keep="failures", hold_after_failure=20, hold_motion=0.4, hold_rise=0.3)
    train_classifier([good, bad], folder / "classifier", steps=p["classifier_steps"], consecutive=2, device="cpu",
                     log=lambda m: None)
    trunks = str(folder / "classifier") if "classifier" in objectives else None
    report = pretrain_encoder([demos], folder / "encoder", cameras=cams, objectives=tuple(objectives), classifier=trunks,
                              steps=p["encoder_steps"], probe_steps=p["probe_steps"], log=lambda m: None)
    log(f"pixel data ready: encoder {report['chosen']} (held-out loss "
        + ", ".join(f"{k} {v['held_out_loss']}" for k, v in report["candidates"].items()) + ")")
    return {"demo_store": str(demos), "frozen_encoder": str(folder / "encoder"),
            "reward_classifier": str(folder / "classifier"), "encoder_report": report}


def pixel_plan(p: dict, data: dict) -> dict[str, dict]:
    """The pixel rows' runs, one per seed."""
    evals = dict(eval_every=p["eval_every"], eval_episodes=p["eval_episodes"], final_eval_episodes=p["eval_episodes"])
    frozen = dict(task="PickCube", obs="pixels", demo_store=data["demo_store"], frozen_encoder=data["frozen_encoder"],
                  env_steps=p["frozen_steps"], pretrain_steps=p["pretrain"], critic_warmup_steps=p["warmup"], **evals)
    trainable = dict(task="PickCube", obs="pixels", demo_store=data["demo_store"], env_steps=p["pixel_steps"],
                     eval_every=max(p["pixel_steps"] // 3, 1), eval_episodes=p["pixel_eval_episodes"],
                     final_eval_episodes=p["pixel_eval_episodes"], pretrain_steps=p["pixel_pretrain"],
                     critic_warmup_steps=p["pixel_warmup"], utd=0.5, batch_size=64, replay_capacity=20_000,
                     demo_capacity=5_000)
    runs = {}
    for seed in range(p["seeds"]):
        runs[f"pickcube_pixels_frozen_seed{seed}"] = dict(frozen, seed=seed)
        runs[f"pickcube_pixels_frozen_classifier_seed{seed}"] = dict(frozen, seed=seed,
                                                                     reward_classifier=data["reward_classifier"])
        runs[f"pickcube_pixels_trainable_seed{seed}"] = dict(trainable, seed=seed)
    return runs


def median_steps(values: list[int | None]) -> int | None:
    """The (lower) median of steps-to-threshold figures, a run that never got there counting as the most."""
    ranked = sorted(values, key=lambda v: float("inf") if v is None else v)
    return ranked[(len(ranked) - 1) // 2]


def pixel_figures(results: dict[str, dict], seeds: int) -> dict:
    """Per pixel row: the medians over seeds, and each seed's curve."""
    figures: dict = {}
    for row in PIXEL_ROWS:
        runs = [results[f"{row}_seed{seed}"] for seed in range(seeds)]
        figures[f"{row}_steps_to_90"] = median_steps([r["steps_to_90"] for r in runs])
        figures[f"{row}_final_success"] = statistics.median(r["final_success_rate"] for r in runs)
        figures[f"{row}_wall_s"] = statistics.median(r["wall_s"] for r in runs)
        figures[f"{row}_train_updates_per_s"] = statistics.median(round(r["updates"] / r["wall_s"], 2) for r in runs)
        figures[f"{row}_env_steps"] = runs[0]["env_steps"]
        figures[f"{row}_curves"] = [[[e["env_steps"], e["success_rate"]] for e in r["evals"]] for r in runs]
        figures[f"{row}_cycle_time"] = [r["cycle_time"] for r in runs]
    return figures


def plan(p: dict) -> dict[str, dict]:
    """Every state run of the benchmark, longest first (they are scheduled in this order)."""
    common = dict(eval_every=p["eval_every"], eval_episodes=p["eval_episodes"], final_eval_episodes=p["eval_episodes"],
                  pretrain_steps=p["pretrain"], critic_warmup_steps=p["warmup"])
    return {
        "peginsert_state_demos20": dict(task="PegInsert", demos=20, env_steps=p["peg_steps"], **common),
        "pickcube_state_demos10": dict(task="PickCube", demos=10, env_steps=p["pick_steps"], **common),
        "pickcube_state_demos0": dict(task="PickCube", demos=0, env_steps=p["pick_steps"], **common),
        "ablation_pickcube_state_demos10_no_residual": dict(task="PickCube", demos=10, env_steps=p["pick_steps"],
                                                            residual=False, **common),
        # the tasks where imitation from 20 demonstrations gets at most half (docs/CALIBRATION.md)
        "peginserthard_state_demos20": dict(task="PegInsertHard", demos=20, env_steps=p["pick_steps"], **common),
        "pushcube_state_demos20": dict(task="PushCube", demos=20, env_steps=p["pick_steps"], **common),
    }


def run(quick: bool = False, log=print, jobs: int | None = None, device: str = "auto") -> dict:
    """Run every configuration of ``plan``, ``jobs`` at a time (default: one per CPU core;
    each run is one learner busy on one core, its actor mostly waiting for it); the learners
    on ``device`` (auto, cpu, cuda, cuda:N, mps), the actors on the CPU."""
    from robot_rl.runtime.device import resolve_device

    from robot_rl.bench.learner import FULL as LEARNER_FULL
    from robot_rl.bench.learner import QUICK as LEARNER_QUICK
    from robot_rl.bench.learner import frozen_and_state_rates

    device = resolve_device(device)
    p = QUICK if quick else FULL
    t0 = time.time()
    figures: dict = {"device": device, "eval_episodes": p["eval_episodes"]}
    rates = frozen_and_state_rates(LEARNER_QUICK if quick else LEARNER_FULL, device, log)
    figures["updates_per_s_state"] = rates["updates_per_s_state_e2"]
    figures["pickcube_pixels_frozen_updates_per_s"] = rates["updates_per_s_pixels_frozen_e2"]
    figures["pixels_frozen_over_state_updates"] = rates["pixels_frozen_over_state_e2"]
    with tempfile.TemporaryDirectory(prefix="bench-pixel-data-") as data_dir:
        data = prepare_pixel_data(Path(data_dir), p, log)
        figures["encoder_candidates"] = data["encoder_report"]["candidates"]
        figures["encoder_chosen"] = data["encoder_report"]["chosen"]
        runs = {name: dict(kw, device=device) for name, kw in {**plan(p), **pixel_plan(p, data)}.items()}
        jobs = max(1, min(len(runs), jobs or os.cpu_count() or 1))
        log(f"{len(runs)} training runs, {jobs} at a time")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {name: pool.submit(train_run, name, kw) for name, kw in runs.items()}
            results = {name: f.result() for name, f in futures.items()}
    figures.update(parallel_runs=jobs, total_wall_s=round(time.time() - t0, 1))
    figures.update(pixel_figures(results, p["seeds"]))
    for name in plan(p):
        s = results[name]
        curve = [[e["env_steps"], e["success_rate"]] for e in s["evals"]]
        threshold = 95 if "pickcube" in name else 90
        figures[f"{name}_steps_to_{threshold}"] = s[f"steps_to_{threshold}"]
        figures[f"{name}_final_success"] = s["final_success_rate"]
        figures[f"{name}_wall_s"] = s["wall_s"]
        figures[f"{name}_curve"] = curve
        figures[f"{name}_cycle_time"] = s["cycle_time"]
    figures["notes"] = [
        "state runs: UTD 2, batch 256 (128 demo / 128 online), 2 critics, residual RL on a BC base (scale 0.5, "
        "penalised deviation from the base), grasp critic on PickCube, learner in its own process paced to the UTD",
        f"pixel rows: front+wrist 64x64 + robot state, no privileged state, {p['pixel_demos']} demos recorded with "
        f"images, median of {p['seeds']} seeds; frozen: backbone from robot-rl encoder pretrain (candidates and "
        "their held-out probe loss in encoder_candidates), UTD 2, batch 256 as the state rows; trainable: the conv "
        "encoder trained by the critic, CPU-bound, so UTD 0.5, batch 64 and a short budget",
        "steps_to_* counts env steps after demos (0: the cloned policy already passes the threshold); evaluation "
        "every eval_every steps over eval_episodes episodes with the deterministic policy",
        "*_cycle_time (one per seed on the pixel rows): summary.json's cycle_time, mean steps to success over "
        "successful episodes only of the final policy, the demonstrations and the cloned base (step-0 evaluation), "
        "final_vs_demos against HIL-SERL's target of at most 0.7",
        f"runs execute {jobs} at a time on this machine; each wall_s is that run's own wall time",
    ]
    return figures

"""``robot-rl bench classifier``: the learned success classifier as the reward, measured on PickCube.

1. Classifier data, as HIL-SERL tells an operator to record it: 20 successful takes of the
   scripted expert (noise 0.1), each followed by 30 frames carrying the cube about and up
   through the workspace, half of them letting go of it in the second half (a dropped or flung
   cube above the line is a success too), and 20 failed takes (noise 0.5), each followed by 20
   frames of the arm moving about and up without it; front, wrist and side cameras at 64x64
   (the side camera looks level at the 10 cm lift line and sees the whole safety box); every
   frame labelled by ground truth. Trained 4000 steps, calibrated for 1% false positives on
   held-out episodes; the reward asks for 2 positive frames in a row.
2. Held-out rollouts of policies that made none of that data: the scripted expert at noise 0.3,
   and the ground-truth run's first checkpoint (a partly trained agent, stochastic policy),
   each run to the time limit rather than cut at success. Frame metrics at the calibrated
   threshold: false-positive rate, recall, ROC-AUC; and per episode, whether the reward would
   have fired.
3. End to end: PickCube trainings from the same 10-demo store, with the sim's ground-truth
   reward and with the classifier's (the policy sees state; the classifier sees the cameras),
   for each of ``seeds`` seeds (the same seeds both ways). Each is graded by ground truth every
   ``eval_every`` env steps over 50 episodes and stops at 90%; ``steps_ratio`` = the median
   over seeds with the classifier / the median with ground truth (one seed's steps-to-90 swings
   by thousands of steps from run to run: one pair of runs cannot tell the two rewards apart).

The trainings run two at a time (one per core); the classifier is trained while the first
ground-truth runs go.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from robot_rl.config import TrainConfig

FULL = dict(image_size=64, successes=20, failures=20, hold_success=30, hold_failure=20, classifier_steps=4000,
            env_steps=20_000, eval_every=1000, eval_episodes=50, heldout_expert=30, heldout_agent=20,
            pretrain=1000, warmup=1000, checkpoint_every=2000, seeds=3, batch_size=TrainConfig.batch_size)
# quick: toy size, each update on 32 transitions; env_steps > the 100-step time limit: an episode ends
QUICK = dict(image_size=32, successes=2, failures=2, hold_success=3, hold_failure=2, classifier_steps=20,
             env_steps=120, eval_every=60, eval_episodes=2, heldout_expert=2, heldout_agent=1,
             pretrain=20, warmup=10, checkpoint_every=60, seeds=2, batch_size=32)
HOLD_MOTION, HOLD_RISE = 0.4, 0.3  # the arm wanders and rises after a take: see record_rollouts
HOLD_RELEASE = 0.5  # share of successful takes whose hold lets go of the cube
CONSECUTIVE = 2  # positive frames in a row for the reward: a frame just below the line alone never pays
CAMERAS = ("front", "wrist", "side")  # the side camera looks level at the lift height
FULL_EPISODE = 10_000  # held-out rollouts are not cut at success: the actor goes on to the time limit


def _record(out: Path, **kw) -> dict:
    from robot_rl.commands.record import record_rollouts

    return record_rollouts(out, "PickCube", cameras=CAMERAS, **kw)


def _train_policy(name: str, run_dir: str, kw: dict) -> dict:
    """One training run (in a worker process)."""
    from robot_rl.commands.train import train

    log = lambda m: print(f"[{name}] {m}", flush=True)  # noqa: E731
    t0 = time.time()
    summary = train(TrainConfig(run_dir=run_dir, progress=False, **kw), log=log)
    summary["wall_s"] = round(time.time() - t0, 1)
    log(f"steps to 90%: {summary['steps_to_90']} (final {summary['final_success_rate']:.2f}, {summary['wall_s']} s)")
    return summary


def _classifier_job(work: str, p: dict, device: str = "auto") -> dict:
    """Record the classifier's data and train it (in a worker process)."""
    return _make_classifier(work, p, log=lambda m: print(f"[classifier] {m}", flush=True), device=device)


def _median_steps(steps: list[int | None]) -> float | None:
    """Median env steps to 90% over seeds; a run that never got there counts as more than any
    that did (None when the median itself never got there)."""
    ranked = sorted(steps, key=lambda s: float("inf") if s is None else s)
    mid = len(ranked) // 2
    pair = ranked[mid - 1: mid + 1] if len(ranked) % 2 == 0 else [ranked[mid]]
    return None if None in pair else float(np.mean(pair))


def _make_classifier(work: str, p: dict, log, device: str = "auto") -> dict:
    from robot_rl.reward.training import train_classifier

    work = Path(work)
    size = (p["image_size"], p["image_size"])
    t0 = time.time()
    _record(work / "successes.zarr", episodes=p["successes"], noise=0.1, seed=100, keep="successes", images=True,
            image_size=size, hold_after_success=p["hold_success"], hold_motion=HOLD_MOTION, hold_rise=HOLD_RISE,
            hold_release=HOLD_RELEASE)
    _record(work / "failures.zarr", episodes=p["failures"], noise=0.5, seed=200, keep="failures", images=True,
            image_size=size, hold_after_failure=p["hold_failure"], hold_motion=HOLD_MOTION, hold_rise=HOLD_RISE)
    record_s = time.time() - t0
    report = train_classifier([work / "successes.zarr", work / "failures.zarr"], work / "classifier",
                              steps=p["classifier_steps"], consecutive=CONSECUTIVE, seed=0, log=log, device=device)
    return {"classifier": str(work / "classifier"), "classifier_validation": report["validation"],
            "classifier_record_s": round(record_s, 1), "classifier_train_s": report["wall_s"]}


def run(quick: bool = False, log=print, device: str = "auto") -> dict:
    """``device``: where the classifier trains and scores, the learners learn and the held-out
    agent acts (auto, cpu, cuda, cuda:N, mps)."""
    from robot_rl.commands.record import record_rollouts
    from robot_rl.commands.train_summary import ratio
    from robot_rl.reward.training import evaluate_classifier
    from robot_rl.runtime.device import resolve_device

    device = resolve_device(device)
    p = QUICK if quick else FULL
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-classifier-") as tmp:
        work = Path(tmp)
        demos = work / "demos.zarr"
        record_rollouts(demos, "PickCube", 10, noise=0.1, seed=10_000, keep="successes")
        common = dict(task="PickCube", obs="state", demo_store=str(demos), env_steps=p["env_steps"],
                      eval_every=p["eval_every"], eval_episodes=p["eval_episodes"],
                      final_eval_episodes=p["eval_episodes"], stop_at_success=0.9, pretrain_steps=p["pretrain"],
                      critic_warmup_steps=p["warmup"], checkpoint_every=p["checkpoint_every"], device=device,
                      batch_size=p["batch_size"])
        seeds = list(range(p["seeds"]))
        log(f"training the classifier and, seeds {seeds}, PickCube with ground-truth reward and then with the "
            "classifier's reward, two at a time")
        with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
            made = pool.submit(_classifier_job, str(work), p, device)
            truth = [pool.submit(_train_policy, f"ground_truth seed {s}", str(work / f"run_truth_{s}"),
                                 dict(common, seed=s)) for s in seeds]
            made = made.result()
            learned = [pool.submit(_train_policy, f"classifier seed {s}", str(work / f"run_classifier_{s}"),
                                   dict(common, seed=s, reward_classifier=made["classifier"])) for s in seeds]
            truth, learned = [f.result() for f in truth], [f.result() for f in learned]
        first_checkpoint = min((work / "run_truth_0" / "checkpoints").glob("step_*"))
        size = (p["image_size"], p["image_size"])
        log("held-out rollouts: the scripted expert at noise 0.3 and the partly trained agent "
            f"({first_checkpoint.name})")
        heldout = {
            "expert_noise_0.3": _record(work / "heldout_expert.zarr", episodes=p["heldout_expert"], noise=0.3,
                                        seed=300, images=True, image_size=size, continue_after_success=FULL_EPISODE),
            "agent": _record(work / "heldout_agent.zarr", episodes=p["heldout_agent"], policy=str(first_checkpoint),
                             device=device, seed=400, images=True, image_size=size, continue_after_success=FULL_EPISODE),
        }
        stores = [h["path"] for h in heldout.values()]
        metrics = evaluate_classifier(made["classifier"], stores, device=device)["metrics"]
        per_source = {name: evaluate_classifier(made["classifier"], [h["path"]], device=device)["metrics"]
                      for name, h in heldout.items()}

    steps_truth = _median_steps([r["steps_to_90"] for r in truth])
    steps_learned = _median_steps([r["steps_to_90"] for r in learned])
    steps_ratio = ratio(steps_learned, steps_truth)
    outcomes = {k: sum(r["classifier_episodes"][k] for r in learned) for k in learned[0]["classifier_episodes"]}
    figures = {
        "device": device,
        "heldout_fpr": round(metrics["fpr"], 4), "heldout_recall": round(metrics["recall"], 4),
        "heldout_roc_auc": round(metrics["roc_auc"], 4), "heldout_precision": round(metrics["precision"], 4),
        "heldout_frames": metrics["frames"], "heldout_positive_frames": metrics["tp"] + metrics["fn"],
        "heldout_episode_false_positives": metrics["episode_false_positives"],
        "heldout_failed_episodes": metrics["failed_episodes"],
        "heldout_episode_detections": metrics["episode_detections"],
        "heldout_successful_episodes": metrics["successful_episodes"],
        "heldout_by_policy": {name: {k: m[k] for k in ("fpr", "recall", "roc_auc", "frames", "episodes")}
                              for name, m in per_source.items()},
        "heldout_agent_checkpoint": first_checkpoint.name,
        "classifier_threshold": round(metrics["threshold"], 4),
        "classifier_validation": {k: made["classifier_validation"][k] for k in ("fpr", "recall", "roc_auc")},
        "classifier_train_s": made["classifier_train_s"],
        "seeds": seeds,
        "steps_to_90_classifier_reward": steps_learned, "steps_to_90_ground_truth_reward": steps_truth,
        "steps_ratio": steps_ratio,
        "steps_to_90_classifier_reward_by_seed": [r["steps_to_90"] for r in learned],
        "steps_to_90_ground_truth_reward_by_seed": [r["steps_to_90"] for r in truth],
        "classifier_reward_training_episodes": outcomes,
        "curve_classifier_reward": [[[e["env_steps"], e["success_rate"]] for e in r["evals"]] for r in learned],
        "curve_ground_truth_reward": [[[e["env_steps"], e["success_rate"]] for e in r["evals"]] for r in truth],
        "wall_s_classifier_reward": [r["wall_s"] for r in learned],
        "wall_s_ground_truth_reward": [r["wall_s"] for r in truth],
        "total_wall_s": round(time.time() - t0, 1),
        "notes": [
            "classifier data: 20 successful takes (expert noise 0.1, then 30 frames carrying the cube about and up, "
            "half of them letting go of it) + 20 failed takes (expert noise 0.5, then 20 frames of the arm moving "
            "about and up), front+wrist+side 64x64; threshold for 1% FPR on held-out training episodes, never below "
            "0.5; the reward fires on 2 positive frames in a row (episode figures too; frame figures are per frame)",
            "held-out: full-length rollouts (not cut at success) of the scripted expert at noise 0.3 and of the "
            "ground-truth run's first checkpoint (stochastic policy), neither of which made training data; frame "
            "labels are the sim's ground truth (cube >= 10 cm above its start)",
            "trainings: PickCube, state policy, the same 10-demo store, seeds 0..n-1 with each reward, evaluated by "
            "ground truth over eval_episodes every eval_every env steps, stopped at 90%; steps_to_90 figures are "
            "medians over seeds (a run that never got there ranks last), curves per seed; two runs at a time",
        ],
    }
    return figures

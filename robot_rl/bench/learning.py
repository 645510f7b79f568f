"""``robot-rl bench learning``: sample efficiency of the full actor/learner runtime on the twin.

Each figure is one ``robot-rl train`` run (learner in its own process, UTD 2, evaluation
every ``eval_every`` env steps over 50 episodes with the deterministic policy). A run that
never reaches the threshold reports null and its final success rate. The ablation runs the
same PickCube configuration without the residual-on-BC lever (textbook RLPD after BC
pre-training and critic warm-up), to show what the lever buys (see CALIBRATION.md).
"""

from __future__ import annotations

import tempfile
import time

from robot_rl.train import TrainConfig, train

FULL = dict(pick_steps=20_000, peg_steps=30_000, pixel_steps=3_000, eval_every=2000, eval_episodes=50,
            pixel_eval_episodes=20, pretrain=1000, warmup=1000, pixel_pretrain=500, pixel_warmup=200)
QUICK = dict(pick_steps=400, peg_steps=400, pixel_steps=40, eval_every=200, eval_episodes=5,
             pixel_eval_episodes=2, pretrain=200, warmup=100, pixel_pretrain=20, pixel_warmup=10)


def _run(name: str, log, **kw) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        t0 = time.time()
        summary = train(TrainConfig(run_dir=tmp, progress=False, **kw), log=lambda m: log(f"[{name}] {m}"))
        summary["wall_s"] = round(time.time() - t0, 1)
    log(f"[{name}] final success {summary['final_success_rate']:.2f} in {summary['wall_s']} s")
    return summary


def run(quick: bool = False, log=print) -> dict:
    p = QUICK if quick else FULL
    common = dict(eval_every=p["eval_every"], eval_episodes=p["eval_episodes"], final_eval_episodes=p["eval_episodes"],
                  pretrain_steps=p["pretrain"], critic_warmup_steps=p["warmup"])
    figures: dict = {"eval_episodes": p["eval_episodes"]}
    runs = {
        "pickcube_state_demos10": dict(task="PickCube", demos=10, env_steps=p["pick_steps"], **common),
        "pickcube_state_demos0": dict(task="PickCube", demos=0, env_steps=p["pick_steps"], **common),
        "peginsert_state_demos20": dict(task="PegInsert", demos=20, env_steps=p["peg_steps"], **common),
        "ablation_pickcube_state_demos10_no_residual": dict(task="PickCube", demos=10, env_steps=p["pick_steps"],
                                                            residual=False, **common),
    }
    for name, kw in runs.items():
        s = _run(name, log, **kw)
        threshold = 0.9 if name.startswith("peginsert") else 0.95
        key = f"{name}_steps_to_{int(threshold * 100)}"
        figures[key] = s["steps_to_90"] if threshold == 0.9 else s["steps_to_95"]
        figures[f"{name}_final_success"] = s["final_success_rate"]
        figures[f"{name}_wall_s"] = s["wall_s"]
        figures[f"{name}_curve"] = [[e["env_steps"], e["success_rate"]] for e in s["evals"]]
    s = _run("pickcube_pixels_demos20", log, task="PickCube", obs="pixels", demos=20, env_steps=p["pixel_steps"],
             eval_every=max(p["pixel_steps"] // 3, 1), eval_episodes=p["pixel_eval_episodes"],
             final_eval_episodes=p["pixel_eval_episodes"], pretrain_steps=p["pixel_pretrain"],
             critic_warmup_steps=p["pixel_warmup"], utd=0.5, batch_size=64, replay_capacity=20_000,
             demo_capacity=5_000)
    figures["pickcube_pixels_demos20_success_at_end"] = s["final_success_rate"]
    figures["pickcube_pixels_demos20_env_steps"] = s["env_steps"]
    figures["pickcube_pixels_demos20_wall_s"] = s["wall_s"]
    figures["pickcube_pixels_demos20_curve"] = [[e["env_steps"], e["success_rate"]] for e in s["evals"]]
    figures["notes"] = [
        "state runs: UTD 2, batch 256 (128 demo / 128 online), 2 critics, residual RL on a BC base (scale 0.5), "
        "grasp critic on PickCube, learner in its own process paced to the UTD",
        "pixels: front+wrist 64x64 + robot state, no privileged state; CPU-bound (about 0.5 s per batch-64 update "
        "here), so UTD 0.5, batch 64 and a short budget: 'as far as CPU allows'",
        "steps_to_* counts env steps after demos; evaluation every eval_every steps over eval_episodes episodes",
    ]
    return figures

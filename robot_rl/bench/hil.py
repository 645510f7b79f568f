"""``robot-rl bench hil``: what a human in the loop buys, on the sim twin, from pixels.

``TASK`` (PegInsertHard: imitation from 20 demonstrations gets at most half of it, so the human
has work to do) as the main job (robot-rl main) trains it: the policy sees the front and wrist
cameras at 64x64 and the arm's own state (no object pose) through a frozen image encoder
pretrained by behaviour cloning on demonstrations recorded with images (the same data
``robot-rl bench learning`` prepares, ``bench.learning.prepare_pixel_data``, with the encoder's
one fixed objective ``bc``). Two rewards: the sim's ground truth, and the learned success
classifier trained on that data. Per reward and seed, two ``robot-rl train`` runs from the same
demonstrations, encoder and classifier with the same seed: one where the simulated human
(teleop/simulated_human.py, eagerness ``EAGERNESS``) takes over when the policy stalls or heads
for failure, its actions executed, flagged and learned from (online and demo buffers), and one
without. Each is graded by ground truth every ``eval_every`` env steps over ``eval_episodes``
episodes of the policy alone (no human) and stops at 90%. Figures per reward and seed: env steps
to 90% with and without the human, their ratio, the human's steps and takeovers, both final
success rates; over seeds: the median of the per-seed ratios (seeds where both runs reached 90%)
and how many runs reached 90% each way.

Console latency: the teleop node (with its console) runs as its own process; this process, as
the operator's browser would, POSTs keyboard input to the console's HTTP API and, as the arm
node does, subscribes to ``teleop/action``: input sent -> the matching arm command received
over ROS 2, p50/p99 over ``console_inputs`` inputs (intervention toggled on first).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from robot_rl import bench
from robot_rl.config import TrainConfig

EAGERNESS = 0.5
TASK = "PegInsertHard"  # a task where imitation alone gets at most half (docs/CALIBRATION.md): the human has work
KEY = TASK.lower()  # the figures' prefix
REWARDS = ("ground_truth", "classifier")  # the sim's success, or the learned classifier's on the cameras
# the pixel data (demos, classifier, encoder) as bench.learning.prepare_pixel_data makes it, at the
# main job's sizes in full; the quick numbers are the learning bench's quick pixel rows', the
# budget just past the task's 100-step time limit, so that an episode ends
FULL = dict(seeds=3, env_steps=20_000, eval_every=1000, eval_episodes=20, pretrain=1000, warmup=1000,
            console_inputs=300, pixel_demos=20, classifier_episodes=20, classifier_steps=4000,
            encoder_steps=1000, probe_steps=500, batch_size=TrainConfig.batch_size)
# quick: the same runs at toy size, each update on 32 transitions (its figures are there, not meaningful)
QUICK = dict(seeds=1, env_steps=120, eval_every=120, eval_episodes=2, pretrain=20, warmup=10, console_inputs=30,
             pixel_demos=4, classifier_episodes=3, classifier_steps=30, encoder_steps=10, probe_steps=10, batch_size=32)


def console_latency(inputs: int, log=print) -> dict:
    import rclpy
    from rclpy.node import Node
    from std_msgs.msg import Float32MultiArray

    from robot_rl.drivers import topics
    from robot_rl.drivers.node import spin_in_background
    from robot_rl.teleop.console import CONSOLE_TOKEN_ENV, new_token

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    domain = bench.private_domain(200, 30)
    token = new_token()  # the console's, as the operator's page holds it
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", PYTHONUNBUFFERED="1",
               **{CONSOLE_TOKEN_ENV: token})
    env.pop("ROS_LOCALHOST_ONLY", None)
    url = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryDirectory(prefix="bench-hil-console-") as tmp:
        out = open(Path(tmp) / "teleop.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "robot_rl.teleop.teleop_node", "--ros-args", "-p", "devices:=[]",
                                 "-p", f"console_port:={port}", "-p", "cameras:=[]"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain)
        node = Node("bench_console_arm_side", context=context)
        received: list = []
        node.create_subscription(Float32MultiArray, topics.TELEOP_ACTION,
                                 lambda m: received.append((time.perf_counter(), m.data[0])), topics.qos_sensor())
        executor = spin_in_background(node)

        def post(path: str, body: dict | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            request = urllib.request.Request(url + path, data=data, method="POST",
                                             headers={"Content-Type": "application/json", "X-Console-Token": token})
            urllib.request.urlopen(request, timeout=5).close()

        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"{url}api/state?token={token}", timeout=2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"the teleop node's console did not come up (log: {out.name})")
                    time.sleep(0.2)
            post("api/intervene/toggle")
            while not received:  # DDS matched, intervention on
                time.sleep(0.05)
            latencies = []
            for i in range(inputs):
                keys, expect = (["w"], 0.6) if i % 2 == 0 else ([], 0.0)
                time.sleep(0.03 + 0.02 * np.random.rand())  # a human's key presses, not a flood
                seen = len(received)
                t0 = time.perf_counter()
                post("api/keys", {"keys": keys})
                end = time.monotonic() + 2.0
                hit = None
                while hit is None and time.monotonic() < end:
                    hit = next((t for t, x in received[seen:] if t >= t0 and abs(x - expect) < 1e-3), None)
                    if hit is None:
                        time.sleep(0.0005)
                if hit is not None:
                    latencies.append((hit - t0) * 1000)
            log(f"console: {len(latencies)} of {inputs} inputs reached teleop/action")
            return {"console_input_to_command_ms_p50": round(float(np.percentile(latencies, 50)), 2),
                    "console_input_to_command_ms_p99": round(float(np.percentile(latencies, 99)), 2),
                    "console_inputs": inputs, "console_inputs_seen": len(latencies)}
        finally:
            executor.shutdown()
            node.destroy_node()
            context.try_shutdown()
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            out.close()


def plan(p: dict, data: dict) -> dict[str, dict]:
    """Per reward and seed, the run with the simulated human and the one without (same demos,
    encoder, classifier and seed)."""
    from robot_rl.agents.settings import HUMAN_IN_THE_LOOP_EXPLORATION, AgentSettings

    common = dict(task=TASK, obs="pixels", demo_store=data["demo_store"], frozen_encoder=data["frozen_encoder"],
                  env_steps=p["env_steps"], eval_every=p["eval_every"], eval_episodes=p["eval_episodes"],
                  final_eval_episodes=p["eval_episodes"], stop_at_success=0.9, pretrain_steps=p["pretrain"],
                  critic_warmup_steps=p["warmup"], checkpoint_every=p["env_steps"], batch_size=p["batch_size"],
                  agent=AgentSettings(**HUMAN_IN_THE_LOOP_EXPLORATION))  # the main job's exploration, in both runs
    runs = {}
    for seed in range(p["seeds"]):
        for reward in REWARDS:
            kw = dict(common, seed=seed)
            if reward == "classifier":
                kw["reward_classifier"] = data["reward_classifier"]
            runs[f"{KEY}_{reward}_seed{seed}_with_human"] = dict(kw, human_eagerness=EAGERNESS, intervention_bc_steps=1)
            runs[f"{KEY}_{reward}_seed{seed}_without_human"] = kw
    return runs


def steps_ratio(with_human: int | None, without: int | None) -> float | None:
    """Env steps to 90% with the human over without; None unless both reached it (and without
    took more than 0 steps)."""
    from robot_rl.commands.train_summary import ratio

    return ratio(with_human, without)


def steps_to_90_after_start(evals: list[dict]) -> int | None:
    """Env steps to the first evaluation after step 0 at >= 90 %: where the run stops
    (``stop_at_success`` judges no evaluation before learning), so a base that already
    succeeds counts the dip and the climb back, not 0."""
    return next((e["env_steps"] for e in evals if e["env_steps"] > 0 and e["success_rate"] >= 0.9), None)


def reward_figures(results: dict[str, dict], reward: str, seeds: int) -> dict:
    """One reward's figures: per seed, then over the seeds."""
    figures: dict = {}
    ratios, reached_with, reached_without = [], 0, 0
    lowest: dict[str, list[float]] = {"with_human": [], "without_human": []}
    for seed in range(seeds):
        key = f"{KEY}_{reward}_seed{seed}"
        with_h, without = results[f"{key}_with_human"], results[f"{key}_without_human"]
        a, b = steps_to_90_after_start(with_h["evals"]), steps_to_90_after_start(without["evals"])
        ratio = steps_ratio(a, b)
        reached_with += a is not None
        reached_without += b is not None
        if ratio is not None:
            ratios.append(ratio)
        figures[f"{key}_steps_to_90_with_human"] = a
        figures[f"{key}_steps_to_90_without_human"] = b
        figures[f"{key}_steps_ratio"] = ratio
        figures[f"{key}_intervention_steps"] = with_h["intervention_steps"]
        figures[f"{key}_interventions"] = with_h["interventions"]
        figures[f"{key}_final_success_with_human"] = with_h["final_success_rate"]
        figures[f"{key}_final_success_without_human"] = without["final_success_rate"]
        figures[f"{key}_intervention_steps_by_episode"] = [e[2] for e in with_h["episode_interventions"]]
        for run, s in (("with_human", with_h), ("without_human", without)):
            figures[f"{key}_{run}_curve"] = [[e["env_steps"], e["success_rate"]] for e in s["evals"]]
            figures[f"{key}_{run}_wall_s"] = s["wall_s"]
            learning = [e["success_rate"] for e in s["evals"] if e["env_steps"] > 0]
            figures[f"{key}_lowest_eval_{run}"] = min(learning) if learning else None
            if learning:
                lowest[run].append(min(learning))
    figures[f"{KEY}_{reward}_steps_ratio_median"] = round(statistics.median(ratios), 3) if ratios else None
    figures[f"{KEY}_{reward}_seeds_with_ratio"] = len(ratios)
    figures[f"{KEY}_{reward}_reached_90_with_human"] = reached_with
    figures[f"{KEY}_{reward}_reached_90_without_human"] = reached_without
    for run, values in lowest.items():  # how far the policy alone falls while it learns
        figures[f"{KEY}_{reward}_lowest_eval_median_{run}"] = round(statistics.median(values), 3) if values else None
    return figures


def run(quick: bool = False, log=print, jobs: int | None = None) -> dict:
    from robot_rl.bench.learning import prepare_pixel_data, train_run
    from robot_rl.sim.tasks import get_task

    p = QUICK if quick else FULL
    console = console_latency(p["console_inputs"], log)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-hil-pixel-data-") as data_dir:
        data = prepare_pixel_data(Path(data_dir), p, log, objectives=("bc",), task=TASK)
        runs = plan(p, data)
        jobs = max(1, min(len(runs), jobs or os.cpu_count() or 1))
        log(f"{len(runs)} training runs, {jobs} at a time")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {name: pool.submit(train_run, name, kw) for name, kw in runs.items()}
            results = {name: f.result() for name, f in futures.items()}
    first = results[next(iter(runs))]
    figures: dict = {"eagerness": EAGERNESS, "seeds": p["seeds"], "env_steps": p["env_steps"],
                     "eval_every": p["eval_every"], "eval_episodes": p["eval_episodes"],
                     f"{KEY}_demos": first["demos"],
                     "encoder_held_out_loss": data["encoder_report"]["candidates"]["bc"]["held_out_loss"], **console}
    for reward in REWARDS:
        figures.update(reward_figures(results, reward, p["seeds"]))
    figures.update(parallel_runs=jobs, total_wall_s=round(time.time() - t0, 1))
    figures["notes"] = [
        f"{TASK} from pixels as robot-rl main trains it: front + wrist cameras at 64x64 + the arm's state, no "
        f"object pose, through a frozen encoder pretrained by behaviour cloning ({p['encoder_steps']} steps, the one "
        f"objective bc) on {p['pixel_demos']} demos recorded with images (scripted expert, noise 0.1, successful "
        "takes); SAC/RLPD, UTD 2, residual RL on a BC base, learner in its own process",
        f"two rewards: ground_truth (the sim's success) and classifier (the learned success classifier: "
        f"{', '.join(get_task(TASK).classifier_cameras)} at 64x64, trained {p['classifier_steps']} steps on {p['classifier_episodes']} successful "
        f"and {p['classifier_episodes']} failed takes, calibrated for 1% false positives, firing on 2 positive "
        "frames in a row); evaluation always grades by ground truth",
        f"seeds 0-{p['seeds'] - 1}; per reward and seed the runs with and without the human share the demos, the "
        "encoder, the classifier and the seed",
        f"simulated human: eagerness {EAGERNESS} (takes over after {round(6 / EAGERNESS)} steps without progress or "
        "when progress falls; the episode's first takeover hands back once the scene passes where the policy had it, "
        "later ones drive 15 steps; at most 3 an episode); its transitions are flagged and go to both "
        "buffers (RLPD's 50/50 batches then draw on them), and each human step owes one behaviour-cloning step of "
        "the base policy on the demo buffer (intervention_bc_steps 1, as the main job)",
        f"evaluation every {p['eval_every']} env steps over {p['eval_episodes']} episodes of the policy alone "
        f"(deterministic, no human), so success there is success without interventions; a run stops at the first "
        f"evaluation after step 0 at >= 90% or after {p['env_steps']} env steps; steps_to_90 counts env steps (the "
        "human's included) to that evaluation, null if never reached (an evaluation at step 0, the cloned base's, "
        "counts for neither)",
        "steps_ratio per seed: steps to 90% with the human / without, null unless both runs reached 90% (and the one "
        "without after more than 0 steps); steps_ratio_median: the median over the seeds that have a ratio "
        "(seeds_with_ratio of them; null if none); reached_90_with_human / _without_human: runs that reached 90%",
        "lowest_eval: a run's lowest evaluation after step 0 (how far the policy alone falls while it learns; with a "
        "cloned base that already succeeds, what the human buys shows here more than in steps to 90%); "
        "lowest_eval_median_*: the median over the seeds",
        f"runs execute {jobs} at a time on this machine; each wall_s is that run's own wall time; total_wall_s: "
        "making the pixel data (demos, classifier, encoder) and the runs, not the console measurement",
        "console_input_to_command: HTTP POST of a key change to the console (the teleop node, its own process) -> "
        "the teleop/action message with that input received by a subscriber in this process (where the arm node "
        "takes it: the arm executes the operator's action first); measured before the trainings start",
    ]
    return figures

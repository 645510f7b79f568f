"""``robot-rl bench hil``: what a human in the loop buys, on the sim twin.

Per task (PickCube, PegInsert), two ``robot-rl train`` runs from the same few scripted demos
with the same seed: one where the simulated human (teleop/simulated_human.py, eagerness
``EAGERNESS``) takes over when the policy stalls or heads for failure, its actions executed,
flagged and learned from (online and demo buffers), and one without interventions. Both are
graded every ``eval_every`` env steps over ``eval_episodes`` episodes of the policy alone
(no human) and stop at 90%. Figures: env steps to 90% with and without interventions, their
ratio, and the human's steps (intervention steps) in the run with interventions.

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
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

EAGERNESS = 0.5
# key -> (task, scripted demos): few enough that the cloned policy starts well short of 90 %
TASKS = {"pickcube": ("PickCube", 10), "peginsert": ("PegInsert", 3)}
FULL = dict(demos=None, env_steps=20_000, eval_every=1000, eval_episodes=50, pretrain=1000, warmup=1000,
            console_inputs=300)
QUICK = dict(demos=1, env_steps=200, eval_every=100, eval_episodes=3, pretrain=20, warmup=10, console_inputs=30)


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
    domain = 200 + os.getpid() % 30
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


def plan(p: dict) -> dict[str, dict]:
    runs = {}
    for key, (task, demos) in TASKS.items():
        common = dict(task=task, demos=p["demos"] or demos, env_steps=p["env_steps"], seed=0, eval_every=p["eval_every"],
                      eval_episodes=p["eval_episodes"], final_eval_episodes=p["eval_episodes"], stop_at_success=0.9,
                      pretrain_steps=p["pretrain"], critic_warmup_steps=p["warmup"], checkpoint_every=p["env_steps"])
        runs[f"{key}_with_interventions"] = dict(common, human_eagerness=EAGERNESS)
        runs[f"{key}_without_interventions"] = common
    return runs


def run(quick: bool = False, log=print, jobs: int | None = None) -> dict:
    from robot_rl.bench.learning import train_run

    p = QUICK if quick else FULL
    runs = plan(p)
    jobs = max(1, min(len(runs), jobs or os.cpu_count() or 1))
    console = console_latency(p["console_inputs"], log)
    log(f"{len(runs)} training runs, {jobs} at a time")
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {name: pool.submit(train_run, name, kw) for name, kw in runs.items()}
        results = {name: f.result() for name, f in futures.items()}
    figures: dict = {"eagerness": EAGERNESS, "eval_episodes": p["eval_episodes"], **console}
    for key in TASKS:
        with_h, without = results[f"{key}_with_interventions"], results[f"{key}_without_interventions"]
        a, b = with_h["steps_to_90"], without["steps_to_90"]
        figures[f"{key}_demos"] = with_h["demos"]
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
        "scripted demos (noise 0.1): PickCube 10, PegInsert 3; seed 0, state policy, UTD 2, residual RL on a BC base; "
        "the runs with and without interventions share demos and seeds",
        f"simulated human: eagerness {EAGERNESS} (takes over after {round(6 / EAGERNESS)} steps without progress or "
        "when progress falls, for 15 steps, at most 3 times an episode); its transitions are flagged and go to both "
        "buffers (RLPD's 50/50 batches then draw on them)",
        "steps_to_90 counts env steps (the human's included) to the first evaluation at >= 90%; evaluations run "
        "the policy alone, so success there is success without interventions",
        f"runs execute {jobs} at a time on this machine",
        "console_input_to_command: HTTP POST of a key change to the console (the teleop node, its own process) -> "
        "the teleop/action message with that input received by a subscriber in this process (where the arm node "
        "takes it: the arm executes the operator's action first); measured before the trainings start",
    ]
    return figures

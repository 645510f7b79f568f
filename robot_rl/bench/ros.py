"""``robot-rl bench ros``: the control loop and the learner link over ROS 2 (real DDS on loopback).

Per policy kind (``state``: robot state + the sim's object poses; ``pixels``: two cameras + robot
state, the size the pixel learner trains at):

- control loop at 10 Hz: the sim arm node and the sim camera nodes run as their own processes;
  this process is the actor (``RosArmEnv`` + a SAC policy). Frame-to-command latency: the newest
  input's stamp (camera frame, or the arm state for a state policy) to the command's publish,
  p50/p99. A sim camera stamps its frame with the scene instant it renders, so its render time
  is inside the figure, as a real camera's pipeline delay is; ``observation_to_command`` is
  the actor's own share (the observation's last message received -> command published).
  Loop jitter: |interval between commands - 100 ms|, p99. Measured as actor_node runs by
  default (each command leaves ``command_latency_ms`` after its observation's arm tick) and
  again with commands sent the moment they are ready (``..._asap_<kind>``).
- transitions/s: transitions as the actor sends them (pixels: obs and next obs with two
  128x128 images each; state: the state vectors) published as fast as possible to a
  learner-side process, counted there.
- weight push latency: the learner-side process publishes the policy's weights (the real
  tensors of that policy kind) on the latched weights topic; stamp at send -> receipt here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl.node_config import LEARNER_PRIORITIES, LearnerNodeConfig
from robot_rl.runtime.priority import normal_priority, set_control_priority

from robot_rl import bench

FULL = dict(steps=300, pixel_size=64, throughput_s=5.0, weight_pushes=20, franka_periods=300, opencv_s=10.0,
            so101_periods=300)
QUICK = dict(steps=40, pixel_size=32, throughput_s=2.0, weight_pushes=5, franka_periods=60, opencv_s=2.0,
             so101_periods=60)
THROUGHPUT_IMAGE = 128


def _env(domain: int) -> dict:
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", MUJOCO_GL="egl",
               PYTHONUNBUFFERED="1")
    env.pop("ROS_LOCALHOST_ONLY", None)
    return env


def _start(module: str, params: dict, domain: int, log_dir: Path, name: str, extra: list | None = None):
    args = [sys.executable, "-m", module] + (extra or []) + ["--ros-args"]
    for k, v in params.items():
        args += ["-p", f"{k}:={str(v).lower() if isinstance(v, bool) else v}"]
    out = open(log_dir / f"{name}.log", "w")
    return subprocess.Popen(args, env=_env(domain), stdout=out, stderr=subprocess.STDOUT)


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def _percentiles(values, *qs) -> list:
    return [round(float(np.percentile(values, q)), 2) for q in qs] if len(values) else [None] * len(qs)


def _policy(kind: str, size: int):
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.contract import STATE_DIM

    if kind == "pixels":
        config = SACConfig(state_dim=STATE_DIM, cameras=("front", "wrist"), image_size=(size, size), grasp_critic=True)
    else:
        config = SACConfig(state_dim=STATE_DIM + 7 + 3, grasp_critic=True)
    return SACAgent(config)


def control_loop(kind: str, p: dict, domain: int, log_dir: Path, log, command_latency_ms: float,
                 learner_priority: str | None = None, control_priority: str = "realtime") -> dict:
    """The actor's control loop over the arm and camera nodes; with ``learner_priority`` a learner
    trains beside it at that priority the whole time (figures suffixed ``_with_learner_<priority>``),
    as on a one-PC cell. The arm, the cameras and this process (the actor) run at
    ``control_priority``, the nodes' own default realtime (``_control_normal`` otherwise)."""
    import rclpy
    from rclpy.node import Node

    from robot_rl.drivers.node import spin_in_background
    from robot_rl.drivers.ros_env import RosArmEnv
    from robot_rl.envs import FlatObservation

    import torch

    torch.set_num_threads(1)  # as actor_node: the control loop never waits on an intra-op thread pool
    size = p["pixel_size"]
    cameras = ("front", "wrist") if kind == "pixels" else ()
    procs = [_start("robot_rl.drivers.arm_node", {"seed": 1, "priority": control_priority}, domain, log_dir,
                    f"arm_{kind}")]
    procs += [_start("robot_rl.drivers.camera_node", {"name": c, "height": size, "width": size,
                                                      "priority": control_priority}, domain, log_dir,
                     f"camera_{c}_{kind}") for c in cameras]
    learner = None
    if learner_priority is not None:
        learner_result = log_dir / f"learner_{kind}_{learner_priority}.json"
        learner = _start("robot_rl.bench.ros", {}, domain, log_dir, f"learner_{kind}_{learner_priority}",
                         ["learner", kind, learner_priority, str(learner_result)])
        procs.append(learner)
    realtime = set_control_priority(control_priority, warn=log)  # this process is the actor
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = Node(f"bench_actor_{kind}", context=context)
    executor = spin_in_background(node)
    try:
        env = FlatObservation(RosArmEnv(node, "PickCube", cameras, (size, size), sim=True, privileged=True,
                                        max_episode_steps=100_000, stale_timeout_s=60.0,
                                        command_latency_s=command_latency_ms / 1e3), kind)
        policy = _policy(kind, size)
        if learner is not None:  # the loop starts once it trains (its start-up is no part of the loop)
            _wait_until_training(learner, learner_result, log_dir / f"learner_{kind}_{learner_priority}.log")
        obs, _ = env.reset()
        for _ in range(10):  # warm-up: torch's first calls, DDS matching
            obs, *_ = env.step(policy.act(obs))
        ros_env = env.env
        ros_env.latencies_ms.clear()
        ros_env.ready_latencies_ms.clear()
        ros_env.command_times.clear()
        beside = "" if learner is None else f", a learner training beside it at priority {learner_priority}"
        log(f"{kind}: {p['steps']} control steps at 10 Hz, command latency {command_latency_ms:g} ms{beside}")
        for _ in range(p["steps"]):
            obs, _, terminated, truncated, _ = env.step(policy.act(obs))
            if terminated or truncated:
                obs, _ = env.reset()
        intervals = np.diff(ros_env.command_times) * 1000
        intervals = intervals[intervals < 500]  # a reset's pause is not loop jitter
        jitter = np.abs(intervals - 100.0)
        p50, p99 = _percentiles(ros_env.latencies_ms, 50, 99)
        kind = f"asap_{kind}" if command_latency_ms == 0 else kind
        kind += "" if learner is None else f"_with_learner_{learner_priority}"
        kind += "" if control_priority == "realtime" else f"_control_{control_priority}"
        figures = {f"frame_to_command_latency_ms_p50_{kind}": p50, f"frame_to_command_latency_ms_p99_{kind}": p99,
                   f"loop_jitter_ms_p99_{kind}": _percentiles(jitter, 99)[0],
                   f"observation_to_action_ms_p99_{kind}": _percentiles(ros_env.ready_latencies_ms, 99)[0],
                   f"command_latency_misses_{kind}": ros_env.command_latency_misses,
                   f"commands_{kind}": len(ros_env.latencies_ms),
                   f"loop_period_ms_mean_{kind}": round(float(np.mean(intervals)), 2)}
    finally:
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
        if realtime:
            normal_priority()
        _stop(procs)
    if learner is not None:  # it trained the whole time: its update rate says how hard
        trained = json.loads(learner_result.read_text())
        figures[f"learner_updates_per_s_{kind}"] = round(trained["updates"] / trained["seconds"], 2)
    return figures


def _training_marker(result_file) -> Path:
    """The file the learner beside the control loop creates after its first update."""
    return Path(f"{result_file}.training")


def _wait_until_training(learner, result_file: Path, learner_log: Path, limit_s: float = 600.0) -> None:
    """Waits for the learner process's first update (its marker file): on a loaded machine its
    start-up (torch, the agent, the synthetic replay) can outlast the whole timed loop, which would
    then measure nothing beside it. An error naming its log if it exits or never trains."""
    deadline = time.monotonic() + limit_s
    while not _training_marker(result_file).exists():
        if learner.poll() is not None:
            raise RuntimeError(f"the learner beside the control loop exited ({learner.returncode}) before training: "
                               f"see {learner_log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the learner beside the control loop did not train within {limit_s:g} s: see {learner_log}")
        time.sleep(0.1)


def learner_main(kind: str, priority: str, result_file: str) -> None:
    """A learner training beside the control loop: SAC updates back to back on a replay of
    synthetic transitions (the trainable pixel encoder for ``pixels``: the heaviest update), with
    the learner node's torch threads and the priority given, until SIGTERM; then its update count."""
    import signal

    import torch

    from robot_rl.agents.sac import SACConfig
    from robot_rl.runtime.priority import lower_priority
    from robot_rl.bench.learner import QUICK as SIZES, make_agent, make_replay, pixel_spec, sample_batches, state_spec
    lower_priority(priority)
    torch.set_num_threads(LearnerNodeConfig.torch_threads)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    if kind == "pixels":
        spec, config = pixel_spec(), SACConfig(state_dim=20, cameras=("front", "wrist"), image_size=(64, 64),
                                               grasp_critic=True, device="cpu")
    else:
        spec = state_spec()
        config = SACConfig(state_dim=spec["state"][0][0], grasp_critic=True, device="cpu")
    replay = make_replay(spec, SIZES, seed=0)
    batches = sample_batches(replay, SIZES["batches"], "cpu")
    agent = make_agent(config, replay, seed=0)
    updates, start = 0, time.monotonic()
    while not stop:
        agent.update(batches[updates % len(batches)])
        updates += 1
        if updates == 1:
            _training_marker(result_file).touch()  # the control loop's timed steps may start
    Path(result_file).write_text(json.dumps({"updates": updates, "seconds": time.monotonic() - start}))


def learner_link(kind: str, p: dict, domain: int, log_dir: Path, log) -> dict:
    """Transitions out to a learner-side process; weights back from it."""
    import rclpy
    from rclpy.node import Node

    from robot_rl.drivers.node import spin_in_background
    from robot_rl.drivers.ros_transport import actor_endpoint
    from robot_rl.contract import Transition
    from robot_rl.runtime.wire import transition_arrays

    size = THROUGHPUT_IMAGE
    result_file = log_dir / f"peer_{kind}.json"
    peer = _start("robot_rl.bench.ros", {}, domain, log_dir, f"peer_{kind}",
                  ["peer", kind, str(p["pixel_size"]), str(p["weight_pushes"]), str(result_file)])
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = Node(f"bench_link_{kind}", context=context)
    executor = spin_in_background(node)
    try:
        endpoint = actor_endpoint(node)
        rng = np.random.default_rng(0)
        state = rng.normal(size=30).astype(np.float32)
        obs = {"state": state}
        if kind == "pixels":
            obs.update({c: rng.integers(0, 255, (size, size, 3), dtype=np.uint8) for c in ("front", "wrist")})
        arrays = transition_arrays(Transition(obs, np.zeros(7, np.float32), 0.0, obs, False, False))
        latencies = []
        deadline = time.monotonic() + 120
        while len(latencies) < p["weight_pushes"] and time.monotonic() < deadline:
            for msg in endpoint.receive(0.5):
                if msg.kind == "weights" and msg.meta.get("push", -1) >= 0:
                    latencies.append((time.time_ns() - msg.meta["sent_ns"]) / 1e6)
        log(f"{kind}: {len(latencies)} weight pushes received; transitions for {p['throughput_s']} s")
        sent, start = 0, time.monotonic()
        while time.monotonic() - start < p["throughput_s"]:
            endpoint.send("transition", arrays)
            sent += 1
        endpoint.send("transition", arrays, {"last": True, "sent": sent + 1})
        peer.wait(60)
        counted = json.loads(result_file.read_text())
        weights_bytes = counted["weights_bytes"]
        return {f"transitions_per_s_{kind}": round(counted["received"] / counted["seconds"], 1),
                f"transitions_sent_{kind}": sent + 1, f"transitions_received_{kind}": counted["received"],
                f"transition_bytes_{kind}": counted["transition_bytes"],
                f"weight_push_latency_ms_{kind}": _percentiles(latencies, 50)[0],
                f"weight_push_latency_ms_p99_{kind}": _percentiles(latencies, 99)[0],
                f"weights_bytes_{kind}": weights_bytes}
    finally:
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
        _stop([peer])


def peer_main(kind: str, pixel_size: int, pushes: int, result_file: str) -> None:
    """The learner side: pushes weights ``pushes`` times, then counts transitions until the
    actor's last one (or 30 s of silence)."""
    import rclpy
    from rclpy.node import Node

    from robot_rl.drivers.node import spin_in_background
    from robot_rl.drivers.ros_transport import learner_endpoint

    rclpy.init(args=None)
    node = Node("bench_peer")
    executor = spin_in_background(node)
    endpoint = learner_endpoint(node)
    weights = {k: v.numpy() for k, v in _policy(kind, pixel_size).policy_state_dict().items()}
    time.sleep(2.0)  # discovery
    for i in range(pushes):
        endpoint.send("weights", weights, {"version": i + 1, "push": i, "sent_ns": time.time_ns()})
        time.sleep(0.3)
    received, first, last_seen, size = 0, None, time.monotonic(), 0
    done = False
    while not done and time.monotonic() - last_seen < 30:
        for msg in endpoint.receive(0.5):
            if msg.kind != "transition":
                continue
            now = time.monotonic()
            first = first or now
            last_seen = now
            received += 1
            size = size or sum(a.nbytes for a in msg.arrays.values())
            done = done or bool(msg.meta.get("last"))
    seconds = (last_seen - first) if first else 1.0
    Path(result_file).write_text(json.dumps({"received": received, "seconds": max(seconds, 1e-6),
                                             "transition_bytes": size,
                                             "weights_bytes": int(sum(v.nbytes for v in weights.values()))}))
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


def run(quick: bool = False, log=print) -> dict:
    from robot_rl.node_config import ActorNodeConfig

    p = QUICK if quick else FULL
    domain = bench.private_domain(150, 50)
    latency_ms = ActorNodeConfig.command_latency_ms
    figures: dict = {"control_hz": 10.0, "pixel_image_size": p["pixel_size"], "throughput_image_size": THROUGHPUT_IMAGE,
                     "command_latency_ms": latency_ms}
    with tempfile.TemporaryDirectory(prefix="bench-ros-") as tmp:
        for kind in ("state", "pixels"):
            figures.update(control_loop(kind, p, domain, Path(tmp), log, latency_ms))
            figures.update(control_loop(kind, p, domain, Path(tmp), log, 0.0))
            figures.update(learner_link(kind, p, domain, Path(tmp), log))
        # a one-PC cell: a learner trains beside the pixel control loop, at the learner node's
        # default priority and (full) at the others, to show what each buys
        for priority in LEARNER_PRIORITIES if not quick else (LearnerNodeConfig.priority,):
            figures.update(control_loop("pixels", p, domain, Path(tmp), log, latency_ms, learner_priority=priority))
        # and what the control path's realtime priority buys: the same with the arm, cameras and actor at normal
        figures.update(control_loop("pixels", p, domain, Path(tmp), log, latency_ms,
                                    learner_priority=LearnerNodeConfig.priority, control_priority="normal"))
        figures["control_path_realtime"] = set_control_priority("realtime", warn=log)  # whether this system allows it
        normal_priority()
    from robot_rl.bench import franka

    figures.update(franka.run(p["franka_periods"], log))
    from robot_rl.bench import so101

    figures.update(so101.run(p["so101_periods"], log))
    from robot_rl.bench import opencv_camera

    with tempfile.TemporaryDirectory(prefix="bench-ros-opencv-") as tmp:
        figures.update(opencv_camera.run(p["opencv_s"], domain, Path(tmp), _start, _stop, log))
    figures["notes"] = [
        "DDS: Fast DDS over loopback (ROS 2 Kilted wheels from PyPI); arm, cameras and learner side in their own "
        "processes on this 2-core machine",
        "frame_to_command: a sim camera's stamp is the scene instant it renders, so its render time (about 2 ms "
        "per 64x64 frame here, two cameras in parallel) is included; observation_to_action is the actor's own "
        "share (last input received -> action computed)",
        f"actor_node's default: each command leaves {latency_ms:g} ms after its observation's arm tick (constant "
        "delay, regular rate); the _asap_ figures send each command the moment it is ready",
        "franka_*: the arm node's command path (supervisor -> FrankaArm -> franky-control) against franky-sim's "
        "libfranka server in its own process on loopback, not over DDS and not on a physical arm; franky-sim may "
        "run slower than real time on a loaded machine",
        "so101_*: the arm node's command path (supervisor -> So101Arm -> Feetech's SDK) against the simulated "
        "SO-101 (MuJoCo physics behind a pty speaking the servos' protocol) in its own process, not over DDS and not "
        "on a physical arm: a pty has no 1 Mbaud byte time; its states are two sync reads of the six servos",
        "opencv_*: camera_node backend:=opencv reading a generated 640x480 MJPG file at 30 fps (a webcam's MJPG), "
        "publishing 64x64 frames to this process over DDS; its stamps are arrival times (OpenCV gives no exposure "
        "stamp), so opencv_frame_to_receipt_ms is the node's resize and publish plus the DDS hop, not the sensor's "
        "exposure-to-host delay (about one frame period more on a real webcam)",
        "transitions: pixels = obs and next_obs with two 128x128 RGB images each, state = state vectors (wire "
        "frames, safetensors)",
        "_with_learner_<priority>: the pixel control loop while a learner process trains beside it the whole time "
        "(SAC updates back to back on synthetic transitions, the trainable 64x64 pixel encoder, "
        f"{LearnerNodeConfig.torch_threads} torch thread as the learner node) at that priority (idle: SCHED_IDLE; "
        f"low: niceness 10; normal); the learner node's default is {LearnerNodeConfig.priority}; "
        "command_latency_misses counts commands that left after their slot",
        "the arm, the cameras and the actor run at the control-path nodes' default priority realtime (SCHED_FIFO, "
        "when control_path_realtime is true: the system allows it) but in the _control_normal figures, where they "
        "run at normal priority beside the same learner",
    ]
    return figures


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "learner":
        learner_main(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) >= 2 and sys.argv[1] == "peer":
        peer_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])

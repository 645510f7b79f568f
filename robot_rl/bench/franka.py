"""The Franka backend's figures (part of ``robot-rl bench ros``): the arm node's code path for a
velocity command (``ArmSupervisor`` -> ``FrankaArm`` -> franky-control -> libfranka protocol)
against franky-sim's server in its own process on loopback, paced by a wall-clock control loop
at the contract's 10 Hz as the arm node's timer is.

- command_to_motion: a velocity command arriving while the arm is at rest -> the first robot
  state whose TCP velocity along the command reaches 10% of the commanded speed. The states
  are read continuously between control periods.
- state_rate: robot states read per second (each read waits for the robot's next 1 kHz packet,
  and reads the gripper too).
- loop_jitter: |interval between control periods - 100 ms|, p99.
- commands_dropped: commands the backend did not get to the robot (failed or never sent).
- step_error: |the TCP's displacement over a control period - the displacement commanded for it|
  (the contract's action is a displacement), p50 and p99, moving and at rest; tracking_misses:
  the backend's count of steps more than 1 mm from their target 3 periods in a row.

Not over DDS: the command's DDS hop is the control-loop figures' part of this benchmark.
"""

from __future__ import annotations

import time

import numpy as np

from robot_rl.contract import STATE_SLICES, ControlLimits


def run(periods: int = 200, log=print) -> dict:
    from robot_rl.drivers.arm import ArmSupervisor
    from robot_rl.drivers.franka import FrankaArm, FrankaSettings
    from robot_rl.drivers.franka_sim_node import ServerProcess
    from robot_rl.sim.tasks import get_task

    task = get_task("PickCube")
    limits = ControlLimits()
    period = 1.0 / limits.control_hz
    start = (np.asarray(task.home_tcp_pos), np.array([0.0, 1.0, 0.0, 0.0]))
    with ServerProcess() as server:
        arm = FrankaArm(FrankaSettings(server.host, realtime_kernel=False), task.safety_box, task.home_joints,
                        lambda rng: start, limits)
        try:
            arm.reset()
            supervisor = ArmSupervisor(limits, task.safety_box)
            reads0 = arm.reads
            moves = paced_moves(arm.state, arm.refresh, arm.apply, supervisor, limits, periods)
            reads = arm.reads - reads0
            dropped = arm.counts["commands_failed"] + (periods - arm.counts["commands"])
            faults = arm.counts["faults"]
            misses = arm.counts["tracking_misses"]
        finally:
            arm.close()
    log(f"franka: {len(moves['latencies'])} motion onsets, {reads} states in {moves['elapsed']:.1f} s")
    return {**loop_figures("franka", moves, period, reads, "state_rate"), "franka_commands_dropped": int(dropped),
            "franka_faults": int(faults), "franka_periods": periods, "franka_tracking_misses": int(misses)}


def paced_moves(state, read, apply, supervisor, limits: ControlLimits, periods: int) -> dict:
    """An arm driven as the arm node drives it, by a wall-clock loop at the control rate: 5 periods
    moving sideways at half speed, 5 at rest, the direction changing every 10. ``state()`` reads
    the arm for a period's command, ``read()`` again and again until the next period starts,
    ``apply(action)`` commands it. Returns each motion onset's latency (s), the intervals between
    periods (s), each period's displacement error (m) and the elapsed time (s)."""
    period = 1.0 / limits.control_hz
    speed = 0.5 * limits.max_translation_m / period
    latencies, intervals, step_errors = [], [], []
    last_pos = last_delta = last_start = None
    t0 = deadline = time.perf_counter()
    for k in range(periods):
        moving = (k % 10) < 5
        sign = 1.0 if (k // 10) % 2 == 0 else -1.0
        command = np.array([0.0, 0.5 * sign, 0.0, 0.0, 0.0, 0.0]) if moving else np.zeros(6)
        now = time.perf_counter()
        if last_start is not None:
            intervals.append(now - last_start)
        last_start = received = now
        supervisor.command_velocity(command)
        before = state()[STATE_SLICES["tcp_pos"]].astype(np.float64)
        if k:  # the last period's displacement against the one commanded
            step_errors.append(float(np.linalg.norm(before - last_pos - last_delta)))
        action = supervisor.action(state())
        apply(action)
        last_pos, last_delta = before, np.asarray(action[:3], np.float64) * limits.max_translation_m
        onset = moving and k % 10 == 0
        deadline += period
        while time.perf_counter() < deadline:
            now_state = read()
            if onset and now_state[STATE_SLICES["tcp_linvel"]][1] * sign >= 0.1 * speed:
                latencies.append(time.perf_counter() - received)
                onset = False
    return {"latencies": latencies, "intervals": intervals, "step_errors": step_errors,
            "elapsed": time.perf_counter() - t0}


def loop_figures(prefix: str, moves: dict, period: float, reads: int, rate: str) -> dict:
    """The figures both arms' benchmarks give from ``paced_moves`` (``rate``: the name of the
    states-read-per-second figure)."""
    lat = np.asarray(moves["latencies"]) * 1000
    jitter = np.abs(np.asarray(moves["intervals"]) - period) * 1000
    errors = moves["step_errors"]
    return {f"{prefix}_command_to_motion_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
            f"{prefix}_command_to_motion_ms_p99": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
            f"{prefix}_motion_onsets": len(lat),
            f"{prefix}_{rate}_hz": round(reads / moves["elapsed"], 1),
            f"{prefix}_loop_jitter_ms_p99": round(float(np.percentile(jitter, 99)), 2),
            f"{prefix}_step_error_mm_p50": round(1000 * float(np.percentile(errors, 50)), 2),
            f"{prefix}_step_error_mm_p99": round(1000 * float(np.percentile(errors, 99)), 2)}

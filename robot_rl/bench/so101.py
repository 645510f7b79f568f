"""The SO-101 backend's figures (part of ``robot-rl bench ros``): the arm node's code path for a
velocity command (``ArmSupervisor`` -> ``So101Arm`` -> Feetech's SDK -> the serial bus) against
the simulated SO-101 (drivers/so101_sim.py: MuJoCo physics behind a pseudo-terminal speaking
the servos' protocol) in its own process, paced by a wall-clock control loop at the contract's
10 Hz as the arm node's timer is. The same figures as the Franka's (bench/franka.py):

- command_to_motion: a velocity command arriving while the arm is at rest -> the first state
  read whose TCP velocity along the command reaches 10% of the commanded speed; the states are
  read continuously between control periods;
- bus_read_rate: whole states read per second (two sync reads of the six servos each: position,
  velocity and load; voltage, temperature and status);
- loop_jitter: |interval between control periods - 100 ms|, p99;
- commands_dropped: periods whose goals did not reach the servos;
- step_error: |the TCP's displacement over a control period - the displacement commanded for it|,
  p50 and p99, moving and at rest.

A pty, not a USB adapter at 1 Mbaud: the bytes' time on a real bus (about 0.2 ms for a sync
read's replies) is not in these figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl.contract import STATE_SLICES, ControlLimits


def run(periods: int = 200, log=print) -> dict:
    try:
        import scservo_sdk  # noqa: F401
    except ImportError:
        log("bench ros: no Feetech SDK here (pip install robot-rl[so101]): the so101 figures are null")
        return {"so101_command_to_motion_ms_p50": None}
    from robot_rl.cell import example_task_files, load_task_file
    from robot_rl.drivers.arm import ArmSupervisor
    from robot_rl.drivers.so101 import So101Arm, So101Calibration, So101Settings

    task = load_task_file(example_task_files()["PickCubeSO101"])
    limits = ControlLimits()
    period = 1.0 / limits.control_hz
    latencies, intervals, step_errors = [], [], []
    last_pos = last_delta = None
    with tempfile.TemporaryDirectory(prefix="bench-so101-") as tmp:
        link, calibration = Path(tmp) / "so101", Path(tmp) / "calibration.json"
        sim = subprocess.Popen([sys.executable, "-m", "robot_rl.drivers.so101_sim", "--link", str(link),
                                "--calibration-out", str(calibration)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
        try:
            sim.stdout.readline()
            arm = So101Arm(So101Settings(port=str(link), latency_timer_ms=100.0),
                           So101Calibration.from_dict(json.loads(calibration.read_text())), task.workspace,
                           lambda rng: (np.array(task.start.position), np.array(task.start.quat_wxyz)), limits)
            try:
                arm.reset()
                supervisor = ArmSupervisor(limits, task.workspace)
                reads0, commands0, t0 = arm.counts["reads"], arm.counts["commands"], time.perf_counter()
                deadline, last_start = t0, None
                for k in range(periods):
                    moving = (k % 10) < 5  # 5 periods moving, 5 at rest
                    sign = 1.0 if (k // 10) % 2 == 0 else -1.0
                    command = np.array([0.0, 0.5 * sign, 0.0, 0.0, 0.0, 0.0]) if moving else np.zeros(6)
                    now = time.perf_counter()
                    if last_start is not None:
                        intervals.append(now - last_start)
                    last_start = received = now
                    supervisor.command_velocity(command)
                    before = arm.state()[STATE_SLICES["tcp_pos"]].astype(np.float64)
                    if k:
                        step_errors.append(float(np.linalg.norm(before - last_pos - last_delta)))
                    action = supervisor.action(arm.state())
                    arm.apply(action)
                    last_pos, last_delta = before, np.asarray(action[:3], np.float64) * limits.max_translation_m
                    onset = moving and k % 10 == 0
                    speed = 0.5 * limits.max_translation_m / period
                    deadline += period
                    while time.perf_counter() < deadline:
                        state = arm.state()
                        if onset and state[STATE_SLICES["tcp_linvel"]][1] * sign >= 0.1 * speed:
                            latencies.append(time.perf_counter() - received)
                            onset = False
                elapsed = time.perf_counter() - t0
                reads = arm.counts["reads"] - reads0
                dropped = periods - (arm.counts["commands"] - commands0)
                faults = arm.counts["faults"]
                misses = arm.counts["ik_misses"]
            finally:
                arm.close()
        finally:
            sim.terminate()
            sim.wait(10)
    lat = np.asarray(latencies) * 1000
    jitter = np.abs(np.asarray(intervals) - period) * 1000
    log(f"so101: {len(lat)} motion onsets, {reads} states in {elapsed:.1f} s")
    return {"so101_command_to_motion_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
            "so101_command_to_motion_ms_p99": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
            "so101_motion_onsets": len(lat),
            "so101_bus_read_rate_hz": round(reads / elapsed, 1),
            "so101_loop_jitter_ms_p99": round(float(np.percentile(jitter, 99)), 2),
            "so101_commands_dropped": int(dropped), "so101_faults": int(faults), "so101_periods": periods,
            "so101_step_error_mm_p50": round(1000 * float(np.percentile(step_errors, 50)), 2),
            "so101_step_error_mm_p99": round(1000 * float(np.percentile(step_errors, 99)), 2),
            "so101_ik_misses": int(misses)}


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 60)))

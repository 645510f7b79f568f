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
  p50 and p99, moving and at rest;
- arm_cpu_share: the arm's CPU time over wall time while it is driven as the arm node drives it
  (one state read and one command per period, idle between), its reads of each reply blocking in
  the kernel (``So101Bus``'s ``read_block_s``), against ``arm_cpu_share_busy_wait``, the SDK's
  own reads (each returning at once: a reply waited for by spinning), measured in the same run.

A pty, not a USB adapter at 1 Mbaud: the bytes' time on a real bus (about 0.2 ms for a sync
read's replies) is not in these figures.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time

import numpy as np

from robot_rl.contract import ControlLimits


def cpu_share(arm, periods: int, period: float) -> float:
    """The arm's CPU time / wall time over ``periods`` control periods of one state read and one
    command each (at rest: the reads and writes are what is measured), idle between them."""
    pace = threading.Event()
    wall, cpu = time.perf_counter(), time.process_time()
    deadline = wall
    for _ in range(periods):
        arm.state()
        arm.apply(np.zeros(7, np.float32))
        deadline += period
        pace.wait(max(0.0, deadline - time.perf_counter()))
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def run(periods: int = 200, log=print) -> dict:
    try:
        import scservo_sdk  # noqa: F401
    except ImportError:
        log("bench ros: no Feetech SDK here (pip install robot-rl[so101]): the so101 figures are null")
        return {"so101_command_to_motion_ms_p50": None}
    from robot_rl.bench.franka import loop_figures, paced_moves
    from robot_rl.cell import example_task_files, load_task_file
    from robot_rl.drivers.arm import ArmSupervisor
    from robot_rl.drivers.so101 import So101Arm, So101Settings
    from robot_rl.drivers.so101_bus import READ_BLOCK_S, So101Calibration
    from robot_rl.drivers.so101_sim import SimulatedSo101Process

    task = load_task_file(example_task_files()["PickCubeSO101"])
    limits = ControlLimits()

    def open_arm(sim, read_block_s: float = READ_BLOCK_S) -> So101Arm:
        return So101Arm(So101Settings(port=sim.port, latency_timer_ms=100.0, read_block_s=read_block_s),
                        So101Calibration.from_dict(sim.calibration()), task.workspace,
                        lambda rng: (np.array(task.start.position), np.array(task.start.quat_wxyz)), limits)

    period = 1.0 / limits.control_hz
    with tempfile.TemporaryDirectory(prefix="bench-so101-") as tmp, SimulatedSo101Process(tmp) as sim:
        arm = open_arm(sim)
        try:
            arm.reset()
            reads0, commands0 = arm.counts["reads"], arm.counts["commands"]
            moves = paced_moves(arm.state, arm.state, arm.apply, ArmSupervisor(limits, task.workspace), limits,
                                periods)
            reads = arm.counts["reads"] - reads0
            dropped = periods - (arm.counts["commands"] - commands0)
            faults, misses = arm.counts["faults"], arm.counts["ik_misses"]
            share = cpu_share(arm, periods, period)
        finally:
            arm.close()
        arm = open_arm(sim, read_block_s=0.0)
        try:
            share_busy = cpu_share(arm, periods, period)
        finally:
            arm.close()
    log(f"so101: {len(moves['latencies'])} motion onsets, {reads} states in {moves['elapsed']:.1f} s")
    return {**loop_figures("so101", moves, period, reads, "bus_read_rate"),
            "so101_commands_dropped": int(dropped), "so101_faults": int(faults), "so101_periods": periods,
            "so101_ik_misses": int(misses), "so101_arm_cpu_share": round(share, 4),
            "so101_arm_cpu_share_busy_wait": round(share_busy, 4),
            "so101_arm_cpu_share_ratio": round(share / share_busy, 4) if share_busy > 0 else None}


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 60)))

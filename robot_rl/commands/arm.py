"""``robot-rl arm calibrate --backend so101 --port PORT --out FILE``: an arm's calibration, walked
through at the terminal (drivers/so101_bus.py ``calibrate``: the middle of the range, then a sweep of
every joint), written as LeRobot's calibration file, which ``arm_node backend:=so101`` reads."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

BACKENDS = ("so101",)


def add_arm(sub) -> None:
    arm = sub.add_parser("arm", help="a real arm's set-up").add_subparsers(dest="arm_command", required=True)
    cal = arm.add_parser("calibrate", help="calibrate an arm at the terminal and write its calibration file "
                                           "(LeRobot's format)")
    cal.add_argument("--backend", required=True, choices=BACKENDS, help="the arm (only so101 needs a calibration)")
    cal.add_argument("--port", required=True, help="the servo bus's serial port, e.g. /dev/ttyACM0")
    cal.add_argument("--out", required=True, type=Path, help="the calibration file to write (JSON)")
    cal.add_argument("--latency-timer-ms", type=float, default=16.0,
                     help="how long Feetech's SDK waits for a reply (the USB adapter's latency timer; default 16)")
    cal.set_defaults(func=run)


def enter_pressed(message: str) -> threading.Event:
    """Print ``message``; the event is set when the user presses Enter (or stdin ends)."""
    print(message, flush=True)
    done = threading.Event()

    def wait():
        sys.stdin.readline()
        done.set()

    threading.Thread(target=wait, daemon=True, name="enter").start()
    return done


def run(args) -> int:
    from robot_rl.drivers.so101_bus import calibrate
    from robot_rl.errors import InputError

    if args.out.is_dir():
        raise InputError(f"--out {args.out} is a folder; give the calibration file's path (e.g. so101_follower.json)")
    if not args.out.parent.is_dir():
        raise InputError(f"--out {args.out}: no folder {args.out.parent}")
    calibration = calibrate(args.port, enter_pressed, args.latency_timer_ms)
    calibration.write(args.out)
    for name, motor in calibration.motors.items():
        print(f"  {name:<14s} id {motor.id}  homing offset {motor.homing_offset:+5d}  range {motor.range_min} .. "
              f"{motor.range_max}")
    print(f"wrote {args.out}: give it to the arm node (calibration:=..., or the train stack's so101_calibration:=...)")
    return 0

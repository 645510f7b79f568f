"""A simulated SO-101 on a pseudo-terminal: what the SO-101 backend (drivers/so101.py) and
Feetech's SDK see of a real arm's serial bus, with MuJoCo physics behind it.

``SimulatedSo101Bus`` opens a pty and answers the Feetech protocol (drivers/feetech.py) on it as
the arm's six STS3215 servos (IDs 1-6: shoulder_pan .. gripper) would: ping, read, write, sync
read and sync write of their control tables. Each servo is a joint of the MuJoCo SO-101
(sim/so101_physics.py ``So101Sim``), stepped in real time on a thread of its own: its goal
position becomes the joint's target, reached at the servo's own speed and torque limits; its
present position, velocity, load, current, voltage and temperature are read from the joint. The
encoder's zero sits where the servo happened to be mounted (``mount_offsets``, different per
servo, as on an arm just assembled): a calibration (its homing offsets and ranges, LeRobot's
format: ``calibration()`` gives the true one) is what maps ticks to the model's joint angles.

Faults, injected on request: a servo that stops answering (``silence``), status packets with a
bad checksum (``corrupt``), an overload (``overload``: the servo reports it and drops its
torque, as the STS3215's protection does), an overheating servo (``overheat``), and the bus
unplugged (``unplug``: the pty closes).

    python -m robot_rl.drivers.so101_sim --link /tmp/so101 --calibration-out calib.json
        # prints the port, serves until killed; fault commands on stdin (``control``)
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import threading
import time
import tty

import numpy as np

from robot_rl.drivers import feetech as ft

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
IDS = (1, 2, 3, 4, 5, 6)
# where each servo's encoder zero sat when it was mounted (ticks from the joint's zero): a fixed,
# arbitrary set, as an arm's before its calibration
MOUNT_OFFSETS = (-371, 512, -1020, 230, 805, -160)
PHYSICS_DT_S = 0.002
HOT_C = 75  # an overheating servo's temperature


class SimulatedSo101Bus:
    """``port``: the path the SDK opens (the pty, or ``link``, a symlink to it). ``physics``: a
    ``So101Sim`` (default: a new one, with the cube and cameras); it is stepped in real time once
    ``start()``ed. ``close()`` stops both threads and closes the pty."""

    def __init__(self, physics=None, link: str | None = None, mount_offsets=MOUNT_OFFSETS):
        from robot_rl.sim.so101_description import LIMITS
        from robot_rl.sim.so101_physics import So101Sim

        self.physics = physics if physics is not None else So101Sim()
        self.limits = np.array([LIMITS[name] for name in JOINTS])
        self.mount_offsets = np.asarray(mount_offsets, np.int64)
        self.lock = threading.RLock()
        self.tables = {sid: bytearray(ft.TABLE_SIZE) for sid in IDS}
        self.targets = self.physics.joint_positions().copy()
        self.torque = np.zeros(len(IDS), bool)
        self.silenced: set[int] = set()
        self.overloaded: set[int] = set()
        self.hot: set[int] = set()
        self.corrupt_left = 0
        self.hand: np.ndarray | None = None  # joints a hand holds the arm at (None: physics alone)
        self.refreshed = threading.Condition(self.lock)
        self.refreshes = 0
        self.counts = {"packets": 0, "replies": 0, "corrupt_in": 0}
        for sid in IDS:
            self._put(sid, "Model_Number", ft.STS3215_MODEL)
            self._put(sid, "ID", sid)
            self._put(sid, "Min_Position_Limit", 0)
            self._put(sid, "Max_Position_Limit", ft.TICKS_PER_TURN - 1)
            self._put(sid, "Max_Temperature_Limit", 70)
            self._put(sid, "Max_Torque_Limit", 1000)
            self._put(sid, "Torque_Limit", 1000)
            self._put(sid, "P_Coefficient", 32)
            self._put(sid, "Present_Voltage", 74)
            self._put(sid, "Present_Temperature", 30)
        self._refresh_present()
        for sid in IDS:
            self._put(sid, "Goal_Position", self._get(sid, "Present_Position"))
        self.master, slave = os.openpty()
        tty.setraw(slave)
        self.slave_path = os.ttyname(slave)
        self._slave = slave  # kept open so the pty does not hang up between the SDK's opens
        self.link = link
        if link:
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(self.slave_path, link)
        self.port = link or self.slave_path
        self.stopped = threading.Event()
        self.unplugged = threading.Event()
        self.threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ registers
    def _put(self, sid: int, name: str, value: int) -> None:
        address, size = ft.REGISTERS[name]
        self.tables[sid][address:address + size] = ft.encode(name, value)

    def _get(self, sid: int, name: str) -> int:
        address, size = ft.REGISTERS[name]
        return ft.decode(name, self.tables[sid][address:address + size])

    def raw_ticks(self, joints: np.ndarray) -> np.ndarray:
        """The encoders' raw ticks (before any homing offset) at these joint angles."""
        return (ft.CENTRE_TICK + self.mount_offsets + np.round(joints * ft.TICKS_PER_RAD)).astype(np.int64)

    def calibration(self) -> dict:
        """The true calibration of this simulated arm, in LeRobot's SO-101 format (per motor: id,
        drive_mode, homing_offset, range_min, range_max): with it, ticks read as the model's angles."""
        low, high = self.limits[:, 0], self.limits[:, 1]
        out = {}
        for i, name in enumerate(JOINTS):
            offset = int(self.mount_offsets[i])
            out[name] = {"id": IDS[i], "drive_mode": 0, "homing_offset": offset,
                         "range_min": int(ft.CENTRE_TICK + round(low[i] * ft.TICKS_PER_RAD)),
                         "range_max": int(ft.CENTRE_TICK + round(high[i] * ft.TICKS_PER_RAD))}
        # LeRobot's degrees mode puts a joint's zero at its range's middle: the model's zero is there
        # for the arm joints (symmetric limits); the gripper is read as a fraction of its range
        return out

    def _refresh_present(self) -> None:
        q = self.physics.joint_positions()
        qd = self.physics.joint_velocities()
        effort = self.physics.joint_efforts()
        from robot_rl.sim.so101_description import SERVO_STALL_TORQUE_NM

        raw = self.raw_ticks(q)
        for i, sid in enumerate(IDS):
            present = (int(raw[i]) - self._get(sid, "Homing_Offset")) % ft.TICKS_PER_TURN
            self._put(sid, "Present_Position", present)
            self._put(sid, "Present_Velocity", int(round(qd[i] * ft.TICKS_PER_RAD)))
            load = int(np.clip(round(1000 * effort[i] / SERVO_STALL_TORQUE_NM), -1000, 1000))
            self._put(sid, "Present_Load", load)
            self._put(sid, "Present_Current", int(abs(load) * 2.7 / ft.CURRENT_UNIT_MA))  # ~2.7 A at stall
            self._put(sid, "Moving", int(abs(qd[i]) > 0.01))
            self._put(sid, "Present_Temperature", HOT_C if sid in self.hot else 30)
            self._put(sid, "Status", self.error_byte(sid))

    def error_byte(self, sid: int) -> int:
        return (0x20 if sid in self.overloaded else 0) | (0x04 if sid in self.hot else 0)

    def _apply_goals(self) -> None:
        """Each servo's goal (and torque) becomes its joint's target: ticks -> the model's angle."""
        for i, sid in enumerate(IDS):
            enabled = bool(self._get(sid, "Torque_Enable")) and sid not in self.overloaded
            self.torque[i] = enabled
            if enabled:
                raw = self._get(sid, "Goal_Position") + self._get(sid, "Homing_Offset")
                self.targets[i] = (raw - ft.CENTRE_TICK - self.mount_offsets[i]) / ft.TICKS_PER_RAD
        q = self.physics.joint_positions()
        targets = np.where(self.torque, self.targets, q)  # a servo without torque goes where it is pushed
        self.physics.set_targets(targets)
        self.physics.set_torque_enabled(self.torque)

    # ------------------------------------------------------------------ faults
    def silence(self, sid: int, on: bool = True) -> None:
        with self.lock:
            (self.silenced.add if on else self.silenced.discard)(sid)

    def corrupt(self, replies: int = 1) -> None:
        with self.lock:
            self.corrupt_left += replies

    def overload(self, sid: int, on: bool = True) -> None:
        with self.lock:
            (self.overloaded.add if on else self.overloaded.discard)(sid)
            if on:
                self._put(sid, "Torque_Enable", 0)  # the protection drops the torque
            self._refresh_present()

    def overheat(self, sid: int, on: bool = True) -> None:
        with self.lock:
            (self.hot.add if on else self.hot.discard)(sid)
            self._refresh_present()

    def hold_by_hand(self, joints) -> None:
        """A hand holds the arm at ``joints`` (None: lets go), as a user moves a limp arm while
        calibrating it; returns once the registers show the pose."""
        with self.lock:
            self.hand = None if joints is None else np.asarray(joints, np.float64)
            if self.hand is not None:
                self.physics.hold(self.hand)
                self._refresh_present()

    def wait_read(self, replies: int, timeout_s: float = 10.0) -> bool:
        """Wait until ``replies`` more status packets have been sent (the arm's state read by
        whoever drives the bus; a failsafe timeout only)."""
        with self.refreshed:
            target = self.counts["replies"] + replies
            return self.refreshed.wait_for(lambda: self.counts["replies"] >= target or self.stopped.is_set(), timeout_s)

    def wait_refreshed(self, count: int = 2, timeout_s: float = 5.0) -> bool:
        """Wait for ``count`` more physics steps' registers (a failsafe timeout only)."""
        with self.refreshed:
            target = self.refreshes + count
            return self.refreshed.wait_for(lambda: self.refreshes >= target or self.stopped.is_set(), timeout_s)

    def unplug(self) -> None:
        """The USB cable pulled: the pty closes under the SDK."""
        self.unplugged.set()
        self.close()

    # ------------------------------------------------------------------ protocol
    def handle(self, packet: ft.Packet) -> bytes:
        """The reply bytes (possibly none) to one instruction packet."""
        self.counts["packets"] += 1
        sid, inst, params = packet.servo_id, packet.code, packet.params
        if inst == ft.SYNC_WRITE and sid == ft.BROADCAST_ID and len(params) >= 2:
            address, size = params[0], params[1]
            for k in range(2, len(params) - size, size + 1):
                target = params[k]
                if target in self.tables and target not in self.silenced:
                    self._write(target, address, params[k + 1:k + 1 + size])
            return b""
        if inst == ft.SYNC_READ and sid == ft.BROADCAST_ID and len(params) >= 2:
            address, size = params[0], params[1]
            return b"".join(self._reply(target, self.tables[target][address:address + size])
                            for target in params[2:] if target in self.tables and target not in self.silenced)
        if sid not in self.tables or sid in self.silenced:
            return b""
        if inst == ft.PING:
            return self._reply(sid, b"")
        if inst == ft.READ and len(params) == 2:
            return self._reply(sid, self.tables[sid][params[0]:params[0] + params[1]])
        if inst == ft.WRITE and len(params) >= 2:
            self._write(sid, params[0], params[1:])
            return self._reply(sid, b"")
        return b""

    def _write(self, sid: int, address: int, data: bytes) -> None:
        torque_at = ft.REGISTERS["Torque_Enable"][0]
        if sid in self.overloaded and address <= torque_at < address + len(data) and data[torque_at - address]:
            data = bytearray(data)
            data[torque_at - address] = 0  # an overloaded servo keeps its torque off
        self.tables[sid][address:address + len(data)] = data

    def _reply(self, sid: int, params: bytes) -> bytes:
        self.counts["replies"] += 1
        reply = ft.status(sid, self.error_byte(sid), bytes(params))
        if self.corrupt_left > 0:
            self.corrupt_left -= 1
            reply = reply[:-1] + bytes([reply[-1] ^ 0x5A])
        return reply

    # ------------------------------------------------------------------ threads
    def start(self) -> "SimulatedSo101Bus":
        for target, name in ((self._serve, "so101-bus"), (self._simulate, "so101-physics")):
            thread = threading.Thread(target=target, daemon=True, name=name)
            thread.start()
            self.threads.append(thread)
        return self

    def _serve(self) -> None:
        reader = ft.PacketReader()
        while not self.stopped.is_set():
            try:
                ready, _, _ = select.select([self.master], [], [], 0.05)
                if not ready:
                    continue
                data = os.read(self.master, 4096)
            except (OSError, ValueError):
                return
            reader.feed(data)
            replies = []
            with self.lock:
                for packet in reader.packets():
                    replies.append(self.handle(packet))
                    if packet.code in (ft.WRITE, ft.SYNC_WRITE):  # a new homing offset shows at once
                        self._refresh_present()
                self.counts["corrupt_in"] = reader.corrupt
                self.refreshed.notify_all()
            out = b"".join(replies)
            if out:
                try:
                    os.write(self.master, out)
                except OSError:
                    return

    def _simulate(self) -> None:
        """Physics in real time: PHYSICS_DT_S steps, at most 50 ms of catching up at a time."""
        due = time.monotonic()
        while not self.stopped.is_set():
            with self.lock:
                self._apply_goals()
                behind = min(time.monotonic() - due, 0.05)
                steps = max(1, int(behind / PHYSICS_DT_S))
                if self.hand is not None:
                    self.physics.hold(self.hand)
                else:
                    self.physics.step(steps * PHYSICS_DT_S)
                self._refresh_present()
                self.refreshes += 1
                self.refreshed.notify_all()
            due += steps * PHYSICS_DT_S
            self.stopped.wait(max(0.0, due - time.monotonic()))

    def close(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        for thread in self.threads:
            if thread is not threading.current_thread():
                thread.join(2.0)
        for fd in (self.master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.link and os.path.islink(self.link):
            os.unlink(self.link)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        self.physics.close()


COMMANDS = ("silence", "answer", "corrupt", "overload", "overheat", "cool", "unplug", "hand", "release", "joints",
            "reads", "tick")


def control(bus: SimulatedSo101Bus, line: str) -> str:
    """One fault command from the process's stdin: ``silence ID``, ``answer ID`` (the servo answers
    again), ``corrupt N`` (the next N replies), ``overload ID``, ``overheat ID``, ``cool ID``,
    ``unplug``; queries: ``joints`` (the physics' joint angles, JSON), ``tick`` (replies after the
    physics' next steps), ``reads N`` (after N more reads of the servos' state); and a hand on the arm: ``hand Q1 .. Q6 [READS]`` (the joints held there, radians,
    as a user moves a limp arm while calibrating it; with READS, the reply waits until the servos'
    state has been read that many times), ``release``. Returns what it did, or why not."""
    words = line.split()
    if not words or words[0] not in COMMANDS:
        return f"error: commands are {', '.join(COMMANDS)}"
    if words[0] == "joints":  # the physics' joint angles now (JSON)
        import json

        with bus.lock:
            return json.dumps(bus.physics.joint_positions().tolist())
    if words[0] == "tick":  # after the physics' next steps
        bus.wait_refreshed(2)
        return "ok tick"
    if words[0] == "reads":  # after N more reads of the six servos' state by whoever drives the bus
        bus.wait_read(int(words[1]) * len(IDS))
        return f"ok {line.strip()}"
    if words[0] in ("hand", "release"):
        try:
            joints = None if words[0] == "release" else [float(w) for w in words[1:]]
        except ValueError:
            return "error: hand takes 6 joint angles (radians)"
        reads = 0
        if joints is not None and len(joints) == len(JOINTS) + 1:
            reads = int(joints.pop())
        if joints is not None and len(joints) != len(JOINTS):
            return "error: hand takes 6 joint angles (radians), then optionally how many reads to hold them for"
        bus.hold_by_hand(joints)
        bus.wait_refreshed(2)
        if reads:
            bus.wait_read(reads * len(IDS))  # held until the arm's state has been read that many times
        return f"ok {line.strip()}"
    try:
        arg = int(words[1]) if len(words) > 1 else None
    except ValueError:
        return f"error: {words[1]!r} is not a number"
    if words[0] != "unplug" and arg is None:
        return f"error: {words[0]} needs a servo id (or a count)"
    action = {"silence": lambda: bus.silence(arg), "answer": lambda: bus.silence(arg, on=False),
              "corrupt": lambda: bus.corrupt(arg), "overload": lambda: bus.overload(arg),
              "overheat": lambda: bus.overheat(arg), "cool": lambda: bus.overheat(arg, on=False),
              "unplug": bus.unplug}[words[0]]
    action()
    return f"ok {line.strip()}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="a simulated SO-101 on a pseudo-terminal (Feetech protocol, "
                                                 "MuJoCo physics); fault commands on stdin (silence ID, answer ID, "
                                                 "corrupt N, overload ID, overheat ID, cool ID, unplug)")
    parser.add_argument("--link", default=None, help="a symlink to the pty to create (e.g. /tmp/so101)")
    parser.add_argument("--calibration-out", default=None,
                        help="write this arm's true calibration there (LeRobot's format), for the arm node")
    args = parser.parse_args(argv)
    bus = SimulatedSo101Bus(link=args.link).start()
    if args.calibration_out:
        import json

        with open(args.calibration_out, "w") as out:
            json.dump(bus.calibration(), out, indent=4)
    print(bus.port, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())

    def read_commands():
        for line in sys.stdin:
            print(control(bus, line), flush=True)
        # stdin closed: keep serving until signalled

    threading.Thread(target=read_commands, daemon=True, name="so101-control").start()
    done.wait()
    bus.close()
    bus.physics.close()
    sys.exit(0)


class SimulatedSo101Process:
    """The simulated SO-101 in a process of its own (``python -m robot_rl.drivers.so101_sim``),
    as a real arm is another device: a bus reading with the SDK's own busy-wait (``read_block_s``
    0) in the same process would starve the simulated bus's threads. Its port, its true
    calibration, and ``control``'s commands as methods."""

    def __init__(self, folder):
        import json
        import subprocess
        from pathlib import Path

        from robot_rl.sim.so101_description import LIMITS_HIGH, LIMITS_LOW

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.link, self.calibration_path = folder / "so101", folder / "so101_calibration.json"
        self.limits = np.stack([LIMITS_LOW, LIMITS_HIGH], axis=1)
        self.mount_offsets = np.asarray(MOUNT_OFFSETS, np.int64)
        self.proc = subprocess.Popen([sys.executable, "-m", "robot_rl.drivers.so101_sim", "--link", str(self.link),
                                      "--calibration-out", str(self.calibration_path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        if not self.proc.stdout.readline().strip():
            self.close()
            raise RuntimeError("the simulated SO-101 did not start")
        self.port = str(self.link)
        self._json = json

    def command(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().strip()
        if reply.startswith("error"):
            raise ValueError(f"simulated SO-101: {line!r}: {reply}")
        return reply

    def calibration(self) -> dict:
        return self._json.loads(self.calibration_path.read_text())

    def joints(self) -> np.ndarray:
        return np.array(self._json.loads(self.command("joints")))

    def raw_ticks(self, joints: np.ndarray) -> np.ndarray:
        return (ft.CENTRE_TICK + self.mount_offsets + np.round(np.asarray(joints) * ft.TICKS_PER_RAD)).astype(np.int64)

    def silence(self, sid: int, on: bool = True) -> None:
        self.command(f"{'silence' if on else 'answer'} {sid}")

    def corrupt(self, replies: int) -> None:
        self.command(f"corrupt {replies}")

    def overload(self, sid: int) -> None:
        self.command(f"overload {sid}")

    def overheat(self, sid: int, on: bool = True) -> None:
        self.command(f"{'overheat' if on else 'cool'} {sid}")

    def unplug(self) -> None:
        self.command("unplug")

    def hold_by_hand(self, joints, reads: int = 0) -> None:
        if joints is None:
            self.command("release")
        else:
            self.command("hand " + " ".join(f"{q:.6f}" for q in joints) + f" {reads}")

    def tick(self) -> None:
        self.command("tick")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - a simulator that will not stop is killed
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    main()

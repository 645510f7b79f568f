"""franky-sim's libfranka protocol server in a subprocess, on a loopback address of its own."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading


def free_loopback() -> str:
    """A 127.x.y.z whose libfranka ports (1337 robot, 1338 gripper) are free."""
    rng = random.Random(os.getpid() ^ random.getrandbits(32))
    for _ in range(50):
        host = f"127.{rng.randint(1, 254)}.{rng.randint(1, 254)}.{rng.randint(1, 254)}"
        try:
            for port in (1337, 1338):
                with socket.socket() as s:
                    s.bind((host, port))
            return host
        except OSError:
            continue
    raise RuntimeError("no free loopback address for a franky-sim server")


class FrankaSimServer:
    """``python -m robot_rl.drivers.franka_sim_node --host HOST``; ``start()`` returns once it
    serves (its "ready" line), ``stop()`` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, host: str | None = None):
        self.host = host or free_loopback()
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    def start(self, timeout_s: float = 120.0) -> "FrankaSimServer":
        ready = threading.Event()
        self.proc = subprocess.Popen([sys.executable, "-m", "robot_rl.drivers.franka_sim_node", "--host", self.host],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def pump(stream):
            for line in stream:
                self.output.append(line)
                if line.startswith("ready"):
                    ready.set()
            ready.set()  # it exited: start() reports that below

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        if not ready.wait(timeout_s) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"franky-sim did not start on {self.host}:\n{''.join(self.output)[-2000:]}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

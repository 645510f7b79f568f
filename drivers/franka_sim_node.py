"""``franka_sim_node``: franky-sim's MuJoCo Franka (FR3 with its hand) behind the libfranka network
protocol on a loopback address, standing in for a real robot's FCI. franky-control connects to
it exactly as to a real arm (``robot_ip``); its scene holds only the robot.

    python -m robot_rl.drivers.franka_sim_node --host 127.0.0.2       (prints "ready" when serving)
    franka_sim_node --ros-args -p robot_ip:=127.0.0.2                (as a node of a stack)

The server binds the libfranka ports (1337 and the gripper's 1338) on ``robot_ip``, which must
be a loopback address (127.x.y.z): several servers can run side by side on different ones.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass

from robot_rl.errors import UserFacingError


def check_loopback(host: str) -> str:
    parts = host.split(".")
    if len(parts) != 4 or parts[0] != "127" or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise UserFacingError(f"franka_sim_node serves on a loopback address 127.x.y.z only, got {host!r}")
    return host


def serve(host: str, ready=lambda host: None, stop: threading.Event | None = None) -> None:
    """Run the server on ``host`` until ``stop`` is set (or forever); ``ready(host)`` once bound."""
    import franky_sim
    from franky_sim.mujoco_simulator import MujocoSimulator

    stop = stop or threading.Event()
    with MujocoSimulator() as sim:
        sim.add_robot()
        with franky_sim.SimulationServer(sim, hostname_candidates=[check_loopback(host)]) as server:
            ready(host)
            while not stop.is_set():
                server.run_once(realtime=True)


def free_loopback() -> str:
    """A 127.x.y.z whose libfranka ports (1337 robot, 1338 gripper) are free."""
    import random
    import socket

    rng = random.Random()
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


class ServerProcess:
    """This module as a subprocess serving on ``host``: ``start()`` returns once it serves (its
    "ready" line), ``stop()`` ends it (SIGTERM, then SIGKILL). For tests and benchmarks."""

    def __init__(self, host: str | None = None):
        self.host = host or free_loopback()
        self.proc = None
        self.output: list[str] = []

    def start(self, timeout_s: float = 120.0) -> "ServerProcess":
        import subprocess

        ready = threading.Event()
        self.proc = subprocess.Popen([sys.executable, "-m", "robot_rl.drivers.franka_sim_node", "--host", self.host],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def pump(stream):
            for line in stream:
                self.output.append(line)
                if line.startswith("ready"):
                    ready.set()
            ready.set()  # it exited: reported below

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        if not ready.wait(timeout_s) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"franky-sim did not start on {self.host}:\n{''.join(self.output)[-2000:]}")
        return self

    def stop(self) -> None:
        import subprocess

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


@dataclass
class FrankaSimConfig:
    robot_ip: str = "127.0.0.2"  # the loopback address to serve the libfranka protocol on


def ros_main(args) -> None:
    from rclpy.node import Node

    from robot_rl.drivers.node import declare_config, run

    class FrankaSimNode(Node):
        def __init__(self):
            super().__init__("franka_sim")
            self.cfg = declare_config(self, FrankaSimConfig)
            check_loopback(self.cfg.robot_ip)
            self.stop = threading.Event()
            bound = threading.Event()
            self.thread = threading.Thread(target=serve, args=(self.cfg.robot_ip, lambda h: bound.set(), self.stop),
                                           daemon=True, name="franky-sim")
            self.thread.start()
            if not bound.wait(60.0):
                raise UserFacingError(f"franky-sim did not start serving on {self.cfg.robot_ip}")
            self.get_logger().info(f"franky-sim: a simulated Franka serves the libfranka protocol on "
                                   f"{self.cfg.robot_ip}")

        def close(self):
            self.stop.set()
            self.thread.join(5.0)

    run(FrankaSimNode, args)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--ros-args" in argv:
        return ros_main(sys.argv)
    parser = argparse.ArgumentParser(prog="franka_sim_node", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.2", help="loopback address to serve on (127.x.y.z)")
    opts = parser.parse_args(argv)
    try:
        serve(opts.host, ready=lambda host: print(f"ready: franky-sim serving on {host}", flush=True))
    except UserFacingError as e:
        print(f"franka_sim_node: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

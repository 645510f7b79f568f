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

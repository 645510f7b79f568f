"""``so101_sim_node``: the SO-101 twin's cell for the ROS 2 stack (``robot-rl launch so101_sim``):
a simulated SO-101 on a pseudo-terminal (drivers/so101_sim.py: the Feetech protocol, MuJoCo
physics of the arm and a cube on its table) that the arm node's ``so101`` backend drives exactly
as a real arm's serial bus, and what the sim knows for the rest of the stack.

- ``port``: the symlink to the pty the arm node opens; ``calibration_out``: this arm's true
  calibration (LeRobot's format) for the arm node's ``calibration``. Both are written before the
  node says it is ready; the arm node waits for them (its ``port_wait_s``).
- Per arm tick (each ``arm/joint_states``) the scene at that instant, stamped as the arm's state:
  ``sim/scene`` (what the sim cameras render), ``sim/success`` (the task's ground truth) and
  ``sim/objects`` (the cube's pose: the state policy's and the simulated human's).
- ``sim/reset_scene`` (Trigger): a new episode's scene, the cube placed by the task's layout; the
  arm node calls it after its reset's motion (its ``scene_reset``), as a person resets a real cell.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_rl.errors import InputError

SCENE_RESET = "sim/reset_scene"  # std_srvs/Trigger: the arm node's scene_reset in the so101_sim stack


@dataclass
class So101SimNodeConfig:
    task: str = "PickCubeSO101"  # an SO-101 sim task: its cube layout and success
    port: str = "so101.tty"  # the symlink to the simulated bus's pty (the arm node's port)
    calibration_out: str = "so101_calibration.json"  # the arm's true calibration (the arm node's calibration)
    seed: int = 0


class So101Scene:
    """The simulated arm's scene, as the stack sees it (no ROS here): the layout of each episode,
    what the cameras render, the ground truth. ``bus``: a running SimulatedSo101Bus."""

    def __init__(self, bus, task: str, seed: int = 0):
        from robot_rl.sim.tasks import get_task

        self.bus, self.task = bus, get_task(task)
        if self.task.robot != "so101":
            raise InputError(f"so101_sim_node runs an SO-101 task; {task} is the {self.task.robot}'s (try "
                             "PickCubeSO101)")
        self.rng = np.random.default_rng(seed)
        self.layout = None
        self.episodes = 0
        self.place_objects()

    def place_objects(self) -> None:
        """A new layout (the task's random cube pose), the cube put there at rest."""
        layout = self.task.sample_layout(self.rng)
        pos, quat = layout.object_poses["cube"]
        with self.bus.lock:
            self.bus.physics.place_cube(pos, quat)
            self.layout = layout
        self.episodes += 1

    def snapshot(self) -> tuple[np.ndarray, bool, np.ndarray]:
        """(scene state, success, object poses sorted by name) at this instant."""
        with self.bus.lock:
            physics = self.bus.physics
            scene = physics.scene_state()
            pos, quat = physics.cube_pose()
            layout = self.layout
        success = self.task.is_success({"cube": (pos, quat)}, layout)
        return scene, success, np.concatenate([pos, quat])


def start_bus(port: str, calibration_out: str):
    """The simulated bus serving on a pty linked at ``port``, its calibration written to
    ``calibration_out`` (through a temporary file: the arm node never reads half of it)."""
    import json

    from robot_rl.drivers.so101_sim import SimulatedSo101Bus

    for path in (port, calibration_out):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    if os.path.islink(port):  # a stale link of an earlier run
        os.unlink(port)
    bus = SimulatedSo101Bus(link=port).start()
    tmp = f"{calibration_out}.tmp"
    Path(tmp).write_text(json.dumps(bus.calibration(), indent=4))
    os.replace(tmp, calibration_out)
    return bus


def main(args=None) -> None:
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from std_srvs.srv import Trigger

    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers import topics
    from robot_rl.drivers.node import declare_config, run

    class So101SimNode(Node):
        def __init__(self):
            super().__init__("so101_sim")
            self.cfg = cfg = declare_config(self, So101SimNodeConfig)
            self.bus = start_bus(cfg.port, cfg.calibration_out)
            try:
                self.scene = So101Scene(self.bus, cfg.task, cfg.seed)
            except Exception:
                self.bus.close()
                raise
            q = topics.qos_sensor()
            self.pub_scene = self.create_publisher(Float64MultiArray, topics.SIM_SCENE, q)
            self.pub_success = self.create_publisher(Float64MultiArray, topics.SIM_SUCCESS, q)
            self.pub_objects = self.create_publisher(Float64MultiArray, topics.SIM_OBJECTS, q)
            self.create_subscription(JointState, topics.JOINT_STATES, self.on_arm_state, q)
            self.create_service(Trigger, SCENE_RESET, self.on_reset_scene)
            self.get_logger().info(f"a simulated SO-101 ({cfg.task}) on {cfg.port} -> {self.bus.port}; its "
                                   f"calibration in {cfg.calibration_out}")

        def on_arm_state(self, msg):
            """The scene of the arm's tick, stamped as its state (the actor matches them)."""
            stamp_s = msgs.ns_from_stamp(msg.header.stamp) / 1e9
            scene, success, objects = self.scene.snapshot()
            self.pub_scene.publish(Float64MultiArray(data=[stamp_s, *scene.tolist()]))
            self.pub_success.publish(Float64MultiArray(data=[stamp_s, float(success)]))
            self.pub_objects.publish(Float64MultiArray(data=[stamp_s, *objects.tolist()]))

        def on_reset_scene(self, request, response):
            self.scene.place_objects()
            self.bus.wait_refreshed(2, timeout_s=1.0)  # the physics has stepped with the new layout
            response.success, response.message = True, f"episode {self.scene.episodes}; scene placed at {time.time_ns()} ns"
            return response

        def close(self):
            self.bus.close()
            self.bus.physics.close()

    run(So101SimNode, args)


if __name__ == "__main__":
    main()

"""``recorder_node``: finished episodes from the actors into a Zarr episode store.

Each ``recorder/episodes`` message is one whole episode (a wire frame of the store's fields,
frames first), committed atomically by ``EpisodeStore.add_episode``; an episode that does not
fit the store (missing or unknown fields, wrong shapes) is dropped with a warning and counted.
"""

from __future__ import annotations

import os
import shutil
import time
import sys
from dataclasses import dataclass
from pathlib import Path

from rclpy.node import Node
from std_msgs.msg import String, UInt8MultiArray

from robot_rl.drivers import messages as msgs
from robot_rl.drivers import topics
from robot_rl.drivers.node import apply_task_file, declare_config, run, status_json


@dataclass
class RecorderNodeConfig:
    path: str = "runs/ros-train/online.zarr"
    task: str = "PickCube"
    cameras: tuple[str, ...] = ("front", "wrist")  # () for a state-only store
    image_size: tuple[int, ...] = (64, 64)
    privileged: bool = True  # sim: keep the object poses (state policies, evaluation)
    control_hz: float = 10.0
    image_codec: str = "lossless"
    rosbag: bool = False  # also every committed episode into a rosbag2 (MCAP) beside the store, <path>.bag-<time>/
    task_file: str = ""  # a real cell's task file: its name, rate and image size replace task, control_hz, image_size


def open_store(cfg: RecorderNodeConfig, task=None):
    """The store at ``cfg.path``, created for this cell's contract if it does not exist; ``task``:
    a ``robot_rl.cell.CellTask`` (default: the sim task ``cfg.task``)."""
    from robot_rl.data.recorder import store_fields
    from robot_rl.data.store import EpisodeStore
    from robot_rl.envs import SpecEnv

    path = Path(cfg.path)
    if not path.exists():  # created aside and renamed into place: a reader never sees half a store
        spec = SpecEnv(task or cfg.task, tuple(cfg.cameras), tuple(cfg.image_size), cfg.privileged)
        fields, cams = store_fields(spec.observation_space, spec.action_space.shape[0])
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        robot = getattr(task, "robot", "panda")  # the sim twin's arm is a Panda
        EpisodeStore.create(tmp, fields, task=cfg.task, robot=robot, control_hz=cfg.control_hz, cameras=cams,
                            images=cfg.image_codec, source="ros_actor")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, path)
        except OSError:  # another recorder made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return EpisodeStore.open(path, "a")


class RecorderNode(Node):
    def __init__(self, **node_kwargs):
        self.bag = None  # before anything that may fail: destroy_node reads it
        super().__init__("recorder", **node_kwargs)
        self.cfg, task = apply_task_file(declare_config(self, RecorderNodeConfig))
        self.store = open_store(self.cfg, task)
        self.drops = msgs.DropCounter(self.get_logger().warning)
        self.handled: dict[str, int] = {}  # sender -> the last episode (seq) committed or refused
        self.pub_status = self.create_publisher(String, topics.RECORDER_STATUS, topics.qos_latched())
        self.create_subscription(UInt8MultiArray, topics.EPISODES, self.on_episode, topics.qos_data(100))
        if self.cfg.rosbag:  # a session opens in Foxglove as it is recorded (data/rosbag.py); a new bag per start
            from robot_rl.data.rosbag import BagWriter

            self.bag_path = Path(f"{self.cfg.path}.bag-{time.strftime('%Y%m%d-%H%M%S')}")
            self.bag = BagWriter(self.bag_path, self.store)
            self.get_logger().info(f"also writing each episode to the rosbag2 {self.bag_path}")
        self.get_logger().info(f"recording episodes into {self.cfg.path} ({len(self.store)} there already)")
        self.publish_status()

    def on_episode(self, msg) -> None:
        from robot_rl.data.store import StoreError
        from robot_rl.errors import DiskFullError, is_disk_full
        from robot_rl.runtime.wire import decode

        try:
            message = decode(msgs.payload_bytes(msg))
        except ValueError as e:
            self.drops.drop("episode", str(e))
            return self.publish_status()
        try:
            index = self.store.add_episode(message.arrays)
        except (ValueError, StoreError) as e:
            self.drops.drop("episode", str(e))
        except OSError as e:
            if not is_disk_full(e):
                raise
            # one line, and an exit the launcher does not respawn (status 2): a new recorder would
            # open the same store on the same full disk and fail again
            raise DiskFullError(f"disk full: {self.cfg.path} keeps the {len(self.store)} episodes committed before "
                                f"({e.strerror}); free space, then start the recorder again: it appends") from e
        else:
            self.get_logger().info(f"episode {index} committed ({len(message.arrays['action'])} frames, "
                                   f"success {bool(message.arrays['success'][-1])})")
            if self.bag is not None:
                self.bag.add_episode(self.store[index])  # as committed
        sender, seq = message.meta.get("sender"), message.meta.get("seq")
        if isinstance(sender, str) and isinstance(seq, int):
            self.handled[sender] = max(seq, self.handled.get(sender, -1))
        self.publish_status()

    def destroy_node(self):
        if getattr(self, "bag", None) is not None:  # the bag's metadata.yaml is written on close
            self.bag.close()
            self.bag = None
        return super().destroy_node()

    def publish_status(self) -> None:
        self.pub_status.publish(String(data=status_json(episodes=len(self.store), frames=int(self.store.n_frames),
                                                        dropped=self.drops.counts, handled=self.handled)))


def main(args=None) -> None:
    from robot_rl.errors import UserFacingError

    try:
        run(RecorderNode, args)
    except UserFacingError as e:  # e.g. a store whose index does not match its frames: refused, nothing deleted
        print(f"recorder_node: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

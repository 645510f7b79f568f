"""Episode stores to and from rosbag2 with MCAP storage, what `ros2 bag record` writes and
Foxglove opens, through ``rosbags`` (pure Python: no ROS install needed).

Export (``export_rosbag``): every store frame becomes messages stamped with its time (the
episode's start plus the store's timestamp; episodes one second apart), standard types where
ROS has them, our own topics for the rest::

    /robot_rl/<camera>/image_raw   sensor_msgs/msg/Image (rgb8)    each camera
    /robot_rl/tcp_pose             geometry_msgs/msg/PoseStamped   tcp_pos, tcp_quat (frame "base")
    /robot_rl/tcp_twist            geometry_msgs/msg/TwistStamped  tcp_linvel, tcp_angvel
    /robot_rl/tcp_wrench           geometry_msgs/msg/WrenchStamped ee_force, ee_torque
    /robot_rl/joint_states         sensor_msgs/msg/JointState      the two finger joints (gripper_width / 2 each)
    /robot_rl/state                std_msgs/msg/Float32MultiArray  the whole state vector, as stored
    /robot_rl/action               std_msgs/msg/Float32MultiArray  the action [7] (zeros on an episode's final frame)
    /robot_rl/reward               std_msgs/msg/Float32            the frame's reward
    /robot_rl/is_intervention      std_msgs/msg/Bool               the human drove this step
    /robot_rl/flags                std_msgs/msg/UInt8MultiArray    success, terminated, truncated, has_action
    /robot_rl/privileged/<name>    std_msgs/msg/Float32MultiArray  the sim's object poses, when stored
    /robot_rl/episode              std_msgs/msg/String             JSON {"event": "start"|"end", "episode": i}

Import (``import_rosbag``): a bag of ours comes back equal (states, actions, rewards, flags,
episode boundaries, pixels). A bag a lab recorded (its own topic names and rates) goes through
a map (YAML, ``BagMap``; rosbag_map.py): frames are resampled to the control rate by timestamp (each topic's
latest message at or before the frame's time), episodes are split by a topic or by time gaps,
the state is assembled from standard messages in the cell's layout (the TCP's pose from a
PoseStamped or from /tf, the chain of transforms from a parent frame to the TCP's composed; the
gripper's width from the JointState joints the map names), and the action comes from a topic or
from the TCP's motion between frames. The summary says how many messages were
dropped (never the latest at a frame) and how many frames held an older one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from robot_rl.config_values import read_yaml_file
from robot_rl.contract import ACTION_DIM, STATE_DIM, STATE_SLICES
from robot_rl.data.output import remove, written_whole
from robot_rl.data.recorder import PRIVILEGED_PREFIX
from robot_rl.data.store import EpisodeStore, StoreError, store_to_export
from robot_rl.errors import UserFacingError

if TYPE_CHECKING:
    from robot_rl.data.rosbag_map import BagMap

OWN = "/robot_rl/"
FLAG_NAMES = ("success", "terminated", "truncated", "has_action")
FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
T0_NS = 1_767_225_600 * 10**9  # 2026-01-01: where an exported bag's clock starts
EPISODE_GAP_NS = 10**9


class RosbagError(UserFacingError):
    """A bag that cannot be read or written here; the message names the bag and the topic."""


def _typestore():
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


# ------------------------------------------------------------------------------------- export
def export_rosbag(store_path: str | Path, out: str | Path) -> dict:
    """The store at ``store_path`` as a rosbag2 folder ``out`` (MCAP storage), written aside and
    renamed into place whole. Returns a summary."""
    out = Path(out)
    store = store_to_export(store_path, out, RosbagError)
    # the bag is written as <staging>/<name> (its file is <name>.mcap), then moved into place
    # whole; the staging folder goes either way
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    remove(staging)
    staging.mkdir(parents=True)
    try:
        writer = BagWriter(staging / out.name, store)
        try:
            for e in range(len(store)):
                writer.add_episode(store[e])
        finally:
            writer.close()
        (staging / out.name).rename(out)
    finally:
        remove(staging)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"out": str(out), "format": "rosbag2", "storage": "mcap", "episodes": len(store),
            "frames": int(store.n_frames), "messages": writer.messages, "topics": sorted(writer.connections),
            "bytes": size, "store_bytes": store.nbytes_stored()}


class BagWriter:
    """Episodes of ``store`` (its fields and attributes; the episodes need not be in it yet) into a
    new rosbag2 at ``path`` as they come: ``export_rosbag``, and the recorder node's ``rosbag``
    parameter (a session opens in Foxglove as it is recorded). ``close`` writes the bag's
    metadata.yaml."""

    def __init__(self, path: Path, store: EpisodeStore):
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.ts = _typestore()
        self.m = _Messages(self.ts)
        self.cameras = list(store.cameras)
        self.privileged = [k for k in store.fields if k.startswith(PRIVILEGED_PREFIX)]
        self.standard = store.fields["state"][0] == (STATE_DIM,)  # the cell's layout: poses, twist, wrench, fingers
        self.writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
        self.writer.open()
        for key in ("task", "robot", "control_hz"):  # metadata.yaml's custom_data
            self.writer.set_custom_data(f"robot_rl.{key}", str(store.attrs.get(key, "")))
        self.connections: dict = {}
        self.next_start, self.episodes, self.messages = T0_NS, 0, 0

    def _write(self, topic: str, msg, stamp: int) -> None:
        if topic not in self.connections:
            self.connections[topic] = self.writer.add_connection(topic, msg.__msgtype__, typestore=self.ts)
        self.writer.write(self.connections[topic], stamp, self.ts.serialize_cdr(msg, msg.__msgtype__))
        self.messages += 1

    def add_episode(self, ep: dict[str, np.ndarray]) -> None:
        m = self.m
        stamps = self.next_start + np.round(ep["timestamp"] * 1e9).astype(np.int64)
        for t, stamp in enumerate(stamps):
            stamp = int(stamp)
            out = [(f"{OWN}state", m.floats(ep["state"][t])), (f"{OWN}action", m.floats(ep["action"][t])),
                   (f"{OWN}reward", m.float(ep["reward"][t])), (f"{OWN}is_intervention", m.bool(ep["is_intervention"][t])),
                   (f"{OWN}flags", m.flags([ep[f][t] for f in FLAG_NAMES]))]
            out += [(f"{OWN}{cam}/image_raw", m.image(ep[cam][t], stamp, cam)) for cam in self.cameras]
            out += [(f"{OWN}privileged/{k[len(PRIVILEGED_PREFIX):]}", m.floats(ep[k][t])) for k in self.privileged]
            if self.standard:
                out += m.cell_state(ep["state"][t], stamp)
            if t == 0 or t == len(stamps) - 1:
                out.append((f"{OWN}episode", m.string(json.dumps({"event": "start" if t == 0 else "end",
                                                                  "episode": self.episodes}))))
            for topic, msg in out:
                self._write(topic, msg, stamp)
        self.next_start = int(stamps[-1]) + EPISODE_GAP_NS
        self.episodes += 1

    def close(self) -> None:
        self.writer.close()


class _Messages:
    """Message objects of the typestore ``ts``."""

    def __init__(self, ts):
        self.ts = ts
        self.t = ts.types

    def header(self, stamp: int, frame: str):
        return self.t["std_msgs/msg/Header"](stamp=self.t["builtin_interfaces/msg/Time"](
            sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id=frame)

    def floats(self, values):
        layout = self.t["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
        return self.t["std_msgs/msg/Float32MultiArray"](layout=layout, data=np.asarray(values, np.float32).ravel())

    def float(self, value):
        return self.t["std_msgs/msg/Float32"](data=float(value))

    def bool(self, value):
        return self.t["std_msgs/msg/Bool"](data=bool(value))

    def string(self, text: str):
        return self.t["std_msgs/msg/String"](data=text)

    def flags(self, values):
        dim = self.t["std_msgs/msg/MultiArrayDimension"](label=",".join(FLAG_NAMES), size=len(FLAG_NAMES),
                                                          stride=len(FLAG_NAMES))
        layout = self.t["std_msgs/msg/MultiArrayLayout"](dim=[dim], data_offset=0)
        return self.t["std_msgs/msg/UInt8MultiArray"](layout=layout, data=np.asarray(values, np.uint8))

    def image(self, pixels: np.ndarray, stamp: int, frame: str):
        h, w = pixels.shape[:2]
        return self.t["sensor_msgs/msg/Image"](header=self.header(stamp, frame), height=h, width=w, encoding="rgb8",
                                               is_bigendian=0, step=w * 3, data=np.ascontiguousarray(pixels).ravel())

    def cell_state(self, state: np.ndarray, stamp: int) -> list:
        s = {k: np.asarray(state[v], np.float64) for k, v in STATE_SLICES.items()}
        vec = self.t["geometry_msgs/msg/Vector3"]
        w, x, y, z = s["tcp_quat"]
        pose = self.t["geometry_msgs/msg/PoseStamped"](header=self.header(stamp, "base"), pose=self.t[
            "geometry_msgs/msg/Pose"](position=self.t["geometry_msgs/msg/Point"](*s["tcp_pos"]),
                                      orientation=self.t["geometry_msgs/msg/Quaternion"](x, y, z, w)))
        twist = self.t["geometry_msgs/msg/TwistStamped"](header=self.header(stamp, "base"), twist=self.t[
            "geometry_msgs/msg/Twist"](linear=vec(*s["tcp_linvel"]), angular=vec(*s["tcp_angvel"])))
        wrench = self.t["geometry_msgs/msg/WrenchStamped"](header=self.header(stamp, "base"), wrench=self.t[
            "geometry_msgs/msg/Wrench"](force=vec(*s["ee_force"]), torque=vec(*s["ee_torque"])))
        half = float(s["gripper_width"][0]) / 2
        joints = self.t["sensor_msgs/msg/JointState"](header=self.header(stamp, ""), name=list(FINGERS),
                                                      position=np.array([half, half]), velocity=np.zeros(0),
                                                      effort=np.zeros(0))
        return [(f"{OWN}tcp_pose", pose), (f"{OWN}tcp_twist", twist), (f"{OWN}tcp_wrench", wrench),
                (f"{OWN}joint_states", joints)]


# ------------------------------------------------------------------------------------- import
def is_own_bag(topics: dict[str, str]) -> bool:
    return all(f"{OWN}{t}" in topics for t in ("state", "action", "flags", "episode"))


def import_rosbag(bag: str | Path, out: str | Path, mapping: BagMap | str | Path | None = None) -> dict:
    """A rosbag2 folder (MCAP or SQLite storage) into a new store at ``out``, written aside and
    renamed whole. ``mapping``: a ``BagMap`` or its YAML file; None for a bag ``export_rosbag``
    wrote."""
    from rosbags.rosbag2 import Reader

    bag, out = Path(bag), Path(out)
    if not (bag / "metadata.yaml").is_file():
        raise RosbagError(f"{bag / 'metadata.yaml'}: no such file: {bag} is not a rosbag2 folder")
    if out.exists():
        raise StoreError(f"{out} already exists; choose a new path")
    ts = _typestore()
    try:
        reader = Reader(bag)
        reader.open()
    except Exception as err:  # rosbags raises its own errors for a damaged bag
        raise RosbagError(f"{bag}: not a readable rosbag2 ({type(err).__name__}: {err})") from None
    try:
        topics = {c.topic: c.msgtype for c in reader.connections}
        if mapping is None:
            if not is_own_bag(topics):
                raise RosbagError(f"{bag} was not written by robot-rl data export: give a map (--map FILE.yaml) "
                                  "naming its topics")
            return _import_own(reader, ts, bag, out, topics)
        from robot_rl.data.rosbag_map import BagMap, check_bag_map, import_mapped, read_bag_map

        mapping = check_bag_map(mapping) if isinstance(mapping, BagMap) else read_bag_map(mapping)
        return import_mapped(reader, ts, bag, out, topics, mapping)
    finally:
        reader.close()


def read_topics(reader, ts, bag: Path, wanted: dict[str, str]) -> dict[str, list[tuple[int, object]]]:
    """``{topic: [(stamp, message), ...]}`` in time order for the topics ``wanted``
    (``{topic: what it is for}``); a topic with no messages is one error naming it."""
    conns = [c for c in reader.connections if c.topic in wanted]
    found: dict[str, list] = {t: [] for t in wanted}
    for connection, stamp, raw in reader.messages(connections=conns):
        found[connection.topic].append((stamp, ts.deserialize_cdr(raw, connection.msgtype)))
    for topic, messages in found.items():
        if not messages:
            raise RosbagError(f"{bag}: no messages on {topic} (mapped as the {wanted[topic]})")
        messages.sort(key=lambda m: m[0])
    return found


def _import_own(reader, ts, bag: Path, out: Path, topics: dict[str, str]) -> dict:
    cameras = sorted(t[len(OWN):-len("/image_raw")] for t in topics if t.startswith(OWN) and t.endswith("/image_raw"))
    privileged = sorted(t[len(OWN + "privileged/"):] for t in topics if t.startswith(OWN + "privileged/"))
    names = {"state": "state", "action": "action", "reward": "reward", "is_intervention": "is_intervention",
             "flags": "flags", "episode": "episode", **{f"{c}/image_raw": c for c in cameras},
             **{f"privileged/{p}": PRIVILEGED_PREFIX + p for p in privileged}}
    msgs = read_topics(reader, ts, bag, {OWN + k: v for k, v in names.items()})
    by_stamp = {k: {s: m for s, m in msgs[OWN + k]} for k in names}
    events = [(s, json.loads(m.data)) for s, m in msgs[OWN + "episode"]]
    starts = [s for s, e in events if e["event"] == "start"]
    ends = [s for s, e in events if e["event"] == "end"]
    stamps = np.array([s for s, _ in msgs[OWN + "state"]])
    shapes = {c: (int(msgs[OWN + f"{c}/image_raw"][0][1].height), int(msgs[OWN + f"{c}/image_raw"][0][1].width))
              for c in cameras}
    first_state = msgs[OWN + "state"][0][1].data
    fields = {"state": ((len(first_state),), np.dtype(np.float32)), "action": ((ACTION_DIM,), np.dtype(np.float32)),
              **{PRIVILEGED_PREFIX + p: ((len(msgs[OWN + f"privileged/{p}"][0][1].data),), np.dtype(np.float32))
                 for p in privileged},
              **{c: ((*shape, 3), np.dtype(np.uint8)) for c, shape in shapes.items()}}
    custom = _custom_data(bag)
    with written_whole(out) as tmp:
        store = EpisodeStore.create(tmp, fields, task=custom.get("robot_rl.task", "unknown"),
                                    robot=custom.get("robot_rl.robot", ""),
                                    control_hz=float(custom.get("robot_rl.control_hz", 10.0)), cameras=shapes,
                                    source="rosbag2", rosbag=str(bag))
        for start, end in zip(starts, ends):
            frame_stamps = stamps[(stamps >= start) & (stamps <= end)]
            flags = np.array([by_stamp["flags"][s].data for s in frame_stamps], bool)
            episode = {"state": np.stack([by_stamp["state"][s].data for s in frame_stamps]),
                       "action": np.stack([by_stamp["action"][s].data for s in frame_stamps]),
                       "reward": np.array([by_stamp["reward"][s].data for s in frame_stamps], np.float32),
                       "is_intervention": np.array([by_stamp["is_intervention"][s].data for s in frame_stamps]),
                       **{f: flags[:, i] for i, f in enumerate(FLAG_NAMES)},
                       "timestamp": (frame_stamps - start) / 1e9,
                       **{c: np.stack([pixels(by_stamp[f"{c}/image_raw"][s], bag, c) for s in frame_stamps])
                          for c in cameras},
                       **{PRIVILEGED_PREFIX + p: np.stack([by_stamp[f"privileged/{p}"][s].data for s in frame_stamps])
                          for p in privileged}}
            store.add_episode(episode)
    return {"out": str(out), "episodes": len(starts), "frames": int(EpisodeStore.open(out).n_frames),
            "cameras": cameras, "dropped_messages": 0, "held_frames": 0}


def _custom_data(bag: Path) -> dict:
    """metadata.yaml's custom_data (what export_rosbag records: task, robot, control rate), as
    strings; a control rate that is not a number above 0 is an error naming the file."""
    info = read_yaml_file(bag / "metadata.yaml", RosbagError, "bag metadata") or {}
    custom = (info.get("rosbag2_bagfile_information") or {}).get("custom_data") or {}
    custom = {str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {}
    rate = custom.get("robot_rl.control_hz", "10")
    try:
        ok = bool(np.isfinite(float(rate)) and float(rate) > 0)
    except ValueError:
        ok = False
    if not ok:
        raise RosbagError(f"{bag / 'metadata.yaml'}: custom_data robot_rl.control_hz is {rate!r}; it must be a number "
                          "above 0 (the control rate in Hz)")
    return custom


def pixels(msg, bag: Path, topic: str) -> np.ndarray:
    """An Image (rgb8, bgr8) or CompressedImage (jpeg, png) message as uint8 [H, W, 3] RGB."""
    if hasattr(msg, "format"):  # CompressedImage
        import io

        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(bytes(msg.data))).convert("RGB"))
    pixels = np.asarray(msg.data, np.uint8).reshape(msg.height, msg.step)[:, : msg.width * 3].reshape(
        msg.height, msg.width, 3)
    if msg.encoding == "bgr8":
        return pixels[..., ::-1].copy()
    if msg.encoding != "rgb8":
        raise RosbagError(f"{bag}: image encoding {msg.encoding!r} on {topic}; rgb8, bgr8 or a CompressedImage")
    return pixels.copy()

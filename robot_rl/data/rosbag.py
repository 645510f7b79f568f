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
a map (YAML, ``BagMap``): frames are resampled to the control rate by timestamp (each topic's
latest message at or before the frame's time), episodes are split by a topic or by time gaps,
the state is assembled from standard messages in the cell's layout (the TCP's pose from a
PoseStamped or from /tf, the chain of transforms from a parent frame to the TCP's composed; the
gripper's width from the JointState joints the map names), and the action comes from a topic or
from the TCP's motion between frames. The summary says how many messages were
dropped (never the latest at a frame) and how many frames held an older one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from robot_rl.config import read_map_file, read_yaml_file
from robot_rl.contract import ACTION_DIM, STATE_DIM, STATE_SLICES, ControlLimits, state_quat
from robot_rl.data.output import remove, written_whole
from robot_rl.data.recorder import PRIVILEGED_PREFIX
from robot_rl.data.store import EpisodeStore, StoreError, store_to_export
from robot_rl.errors import UserFacingError
from robot_rl.geometry import matrix_to_quat, matrix_to_rotvec, quat_to_matrix

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
TF = "tf2_msgs/msg/TFMessage"


@dataclasses.dataclass(frozen=True)
class PoseSource:
    """The TCP's pose: a PoseStamped topic, or (``parent`` and ``child`` given) a TFMessage topic
    (/tf) whose chain of transforms from ``parent`` to ``child`` is composed, with the bag's
    /tf_static transforms, which hold throughout."""

    topic: str
    parent: str | None = None
    child: str | None = None


@dataclasses.dataclass(frozen=True)
class GripperSource:
    """The gripper's width from a JointState: ``scale`` x the sum of the named joints' positions
    (a Panda's two fingers sum to the opening). Without ``joints`` every joint the message carries
    is summed, and they must all be the Panda's fingers."""

    topic: str
    joints: tuple[str, ...] | None = None
    scale: float = 1.0


@dataclasses.dataclass
class BagMap:
    """Which topics of a lab's bag make a store's frames (a YAML file; see docs/datasets.md)."""

    rate: float = 10.0  # the control rate frames are resampled to (Hz)
    cameras: dict[str, str] = dataclasses.field(default_factory=dict)  # our camera -> Image / CompressedImage topic
    pose: str | dict | PoseSource | None = None  # tcp_pos, tcp_quat (and, without an action topic, the action)
    twist: str | None = None  # TwistStamped: tcp_linvel, tcp_angvel (else zeros)
    wrench: str | None = None  # WrenchStamped: ee_force, ee_torque (else zeros)
    gripper: str | dict | GripperSource | None = None  # JointState: gripper_width
    action: str | None = None  # Float32MultiArray of our 7 numbers; None: from the TCP's motion between frames
    episodes: dict = dataclasses.field(default_factory=lambda: {"gap_s": 1.0})  # {gap_s: S} or {topic: T}
    intervention: str | None = None  # std_msgs/Bool
    success: str | None = "all"  # "all": every episode a successful demonstration; or a std_msgs/Bool topic
    task: str = "unknown"
    robot: str = "panda"


SUPPORTED = {"camera": ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"),
             "pose": ("geometry_msgs/msg/PoseStamped", TF), "twist": ("geometry_msgs/msg/TwistStamped",),
             "wrench": ("geometry_msgs/msg/WrenchStamped",), "gripper": ("sensor_msgs/msg/JointState",),
             "action": ("std_msgs/msg/Float32MultiArray",), "intervention": ("std_msgs/msg/Bool",),
             "success": ("std_msgs/msg/Bool",), "episodes": ("std_msgs/msg/String", "std_msgs/msg/Bool")}


def read_bag_map(path: str | Path) -> BagMap:
    return check_bag_map(BagMap(**read_map_file(path, BagMap, RosbagError)), f"map {path}")


def _got(value) -> str:
    kind = {dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)
    return f"{kind} {value!r}"[:120]


def check_bag_map(m: BagMap, where: str = "map") -> BagMap:
    """``m`` with every field's type checked (a wrong one is one error naming ``where`` and the
    field) and its pose and gripper as a ``PoseSource`` and a ``GripperSource``."""

    def fail(field: str, takes: str, value):
        raise RosbagError(f"{where}: {field} takes {takes}; got {_got(value)}")

    def topic(field: str, value, optional: bool = True):
        if (value is None and optional) or (isinstance(value, str) and value):
            return value
        fail(field, "a topic name", value)

    def number(field: str, value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            fail(field, "a positive number", value)
        return float(value)

    pose_takes = "a PoseStamped topic or {topic: /tf, parent: FRAME, child: FRAME}"
    pose = m.pose
    if pose is None:
        raise RosbagError(f"{where}: pose ({pose_takes}, the TCP) is needed: it is the state's core and, "
                          "without an action topic, the action")
    if isinstance(pose, str):
        pose = PoseSource(topic("pose", pose))
    elif isinstance(pose, dict):
        if set(pose) - {"topic", "parent", "child"}:
            fail("pose", pose_takes, pose)
        frames = [pose.get(k) for k in ("parent", "child")]
        if frames != [None, None] and (not all(isinstance(f, str) and f.strip("/") for f in frames)
                                       or frames[0].strip("/") == frames[1].strip("/")):
            fail("pose", "a parent and a child frame, two different names", pose)
        pose = PoseSource(topic("pose.topic", pose.get("topic"), False),
                          *[f.strip("/") if f else None for f in frames])
    elif not isinstance(pose, PoseSource):
        fail("pose", pose_takes, pose)
    gripper = m.gripper
    gripper_takes = "a JointState topic or {topic: T, joints: [NAME, ...], scale: S}"
    if isinstance(gripper, str):
        gripper = GripperSource(topic("gripper", gripper))
    elif isinstance(gripper, dict):
        if set(gripper) - {"topic", "joints", "scale"}:
            fail("gripper", gripper_takes, gripper)
        joints = gripper.get("joints")
        joints = [joints] if isinstance(joints, str) else joints
        if joints is not None and (not isinstance(joints, list) or not joints
                                   or not all(isinstance(j, str) and j for j in joints)):
            fail("gripper.joints", "a list of joint names", gripper.get("joints"))
        gripper = GripperSource(topic("gripper.topic", gripper.get("topic"), False),
                                tuple(joints) if joints else None, number("gripper.scale", gripper.get("scale", 1.0)))
    elif gripper is not None and not isinstance(gripper, GripperSource):
        fail("gripper", gripper_takes, gripper)
    for field in ("twist", "wrench", "action", "intervention", "success"):
        topic(field, getattr(m, field))
    cameras = m.cameras or {}
    if not isinstance(cameras, dict) or not all(isinstance(c, str) and c for c in cameras):
        fail("cameras", "a mapping of camera name: Image topic", cameras)
    for cam, t in cameras.items():
        topic(f"cameras.{cam}", t, False)
    episodes = m.episodes
    if not isinstance(episodes, dict) or not episodes or set(episodes) - {"gap_s", "topic"}:
        fail("episodes", "{gap_s: SECONDS} or {topic: T}", episodes)
    if "topic" in episodes:
        topic("episodes.topic", episodes["topic"], False)
    else:
        number("episodes.gap_s", episodes["gap_s"])
    for field in ("task", "robot"):
        if not isinstance(getattr(m, field), str):
            fail(field, "a name", getattr(m, field))
    return dataclasses.replace(m, pose=pose, gripper=gripper, cameras=cameras, rate=number("rate", m.rate))


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
        mapping = check_bag_map(mapping) if isinstance(mapping, BagMap) else read_bag_map(mapping)
        return _import_mapped(reader, ts, bag, out, topics, mapping)
    finally:
        reader.close()


def _read_topics(reader, ts, bag: Path, wanted: dict[str, str]) -> dict[str, list[tuple[int, object]]]:
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
    msgs = _read_topics(reader, ts, bag, {OWN + k: v for k, v in names.items()})
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
                       **{c: np.stack([_pixels(by_stamp[f"{c}/image_raw"][s], bag, c) for s in frame_stamps])
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


def _pixels(msg, bag: Path, topic: str) -> np.ndarray:
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


def _import_mapped(reader, ts, bag: Path, out: Path, topics: dict[str, str], m: BagMap) -> dict:
    roles: dict[str, tuple[str, str]] = {}  # topic -> (role, what it is for)
    for cam, topic in m.cameras.items():
        roles[topic] = ("camera", f"camera {cam}")
    for role in ("pose", "twist", "wrench", "gripper", "action", "intervention"):
        source = getattr(m, role)
        if source:
            roles[getattr(source, "topic", source)] = (role, role)
    if m.success not in (None, "all"):
        roles[m.success] = ("success", "success")
    if "topic" in m.episodes:
        roles[m.episodes["topic"]] = ("episodes", "episode boundaries")
    for topic, (role, what) in roles.items():
        if topic not in topics:
            raise RosbagError(f"{bag}: no topic {topic} (mapped as the {what}); it has {', '.join(sorted(topics))}")
        if topics[topic] not in SUPPORTED[role]:
            raise RosbagError(f"{bag}: {topic} carries {topics[topic]}, a message type the {what} cannot be read "
                              f"from (use {' or '.join(SUPPORTED[role])})")
    tf = topics[m.pose.topic] == TF
    if tf != (m.pose.parent is not None):
        raise RosbagError(f"{bag}: {m.pose.topic} carries {topics[m.pose.topic]}: " + (
            f"map pose as {{topic: {m.pose.topic}, parent: FRAME, child: FRAME}} (the TCP's frame and the frame "
            "it is posed in)" if tf else "pose.parent and pose.child name frames of a tf2_msgs/msg/TFMessage "
            "topic (/tf); map pose as the topic alone"))
    msgs = _read_topics(reader, ts, bag, {t: what for t, (_, what) in roles.items()})
    if tf:
        static = [(s, ts.deserialize_cdr(raw, c.msgtype)) for c, s, raw in reader.messages(
            connections=[c for c in reader.connections if c.topic == "/tf_static" and c.msgtype == TF])]
        msgs[m.pose.topic] = _tf_poses(msgs[m.pose.topic], static, m.pose, bag)
    else:
        msgs[m.pose.topic] = [(s, _pose(msg.pose.position, msg.pose.orientation)) for s, msg in msgs[m.pose.topic]]
    if m.gripper:
        msgs[m.gripper.topic] = _gripper_widths(msgs[m.gripper.topic], m.gripper, bag)
    period = int(round(1e9 / m.rate))
    spans = _episode_spans(msgs, m)
    shapes = {cam: _pixels(msgs[t][0][1], bag, t).shape[:2] for cam, t in m.cameras.items()}
    fields = {"state": ((STATE_DIM,), np.dtype(np.float32)), "action": ((ACTION_DIM,), np.dtype(np.float32)),
              **{cam: ((*shape, 3), np.dtype(np.uint8)) for cam, shape in shapes.items()}}
    counts = {"held_frames": 0, "used": {t: set() for t in msgs}}
    limits = ControlLimits()
    with written_whole(out) as tmp:
        store = EpisodeStore.create(tmp, fields, task=m.task, robot=m.robot, control_hz=m.rate, cameras=shapes,
                                    source="rosbag2", rosbag=str(bag))
        for start, end in spans:
            times = np.arange(start, end + 1, period)
            if len(times) < 2:
                continue
            pick = {t: _latest(msgs[t], times, period, counts, t) for t in msgs}
            state = np.zeros((len(times), STATE_DIM), np.float32)
            poses = [msgs[m.pose.topic][i][1] for i in pick[m.pose.topic]]
            state[:, STATE_SLICES["tcp_pos"]] = [pos for pos, _ in poses]
            state[:, STATE_SLICES["tcp_quat"]] = [state_quat(quat) for _, quat in poses]
            if m.twist:
                tw = [msgs[m.twist][i][1].twist for i in pick[m.twist]]
                state[:, STATE_SLICES["tcp_linvel"]] = [[v.linear.x, v.linear.y, v.linear.z] for v in tw]
                state[:, STATE_SLICES["tcp_angvel"]] = [[v.angular.x, v.angular.y, v.angular.z] for v in tw]
            if m.wrench:
                wr = [msgs[m.wrench][i][1].wrench for i in pick[m.wrench]]
                state[:, STATE_SLICES["ee_force"]] = [[w.force.x, w.force.y, w.force.z] for w in wr]
                state[:, STATE_SLICES["ee_torque"]] = [[w.torque.x, w.torque.y, w.torque.z] for w in wr]
            if m.gripper:
                state[:, STATE_SLICES["gripper_width"]] = [[msgs[m.gripper.topic][i][1]] for i in pick[m.gripper.topic]]
            if m.action:
                action = np.stack([np.asarray(msgs[m.action][i][1].data, np.float32) for i in pick[m.action]])
                if action.shape[1] != ACTION_DIM:
                    raise RosbagError(f"{bag}: {m.action} carries {action.shape[1]} numbers; the action is "
                                      f"{ACTION_DIM} (dx dy dz droll dpitch dyaw gripper)")
                action[-1] = 0
            else:
                action = _actions_from_motion(state, limits)
            n = len(times)
            succeeded = m.success == "all" or (m.success is not None and bool(msgs[m.success][pick[m.success][-1]][1].data))
            reward = np.zeros(n, np.float32)
            reward[n - 2] = float(succeeded)
            last = np.arange(n) == n - 2
            episode = {"state": state, "action": action, "reward": reward, "terminated": last & succeeded,
                       "truncated": last & (not succeeded), "has_action": np.arange(n) < n - 1,
                       "success": np.arange(n) == n - 1 if succeeded else np.zeros(n, bool),
                       "is_intervention": (np.array([bool(msgs[m.intervention][i][1].data) for i in pick[m.intervention]])
                                           if m.intervention else np.zeros(n, bool)),
                       "timestamp": (times - times[0]) / 1e9,
                       **{cam: np.stack([_pixels(msgs[t][i][1], bag, t) for i in pick[t]])
                          for cam, t in m.cameras.items()}}
            store.add_episode(episode)
    dropped = sum(len(msgs[t]) - len(used) for t, used in counts["used"].items())
    result = EpisodeStore.open(out)
    return {"out": str(out), "episodes": len(result), "frames": int(result.n_frames), "cameras": list(shapes),
            "rate_hz": m.rate, "dropped_messages": int(dropped), "held_frames": int(counts["held_frames"]),
            "note": "frames resampled to the rate: each topic's latest message at or before the frame; "
                    "held_frames: frames that reused a message older than one period on some topic; "
                    "dropped_messages: messages no frame used"}


def _pose(position, q) -> tuple[np.ndarray, np.ndarray]:
    """A message's position and orientation as (xyz, quaternion w x y z)."""
    return np.array([position.x, position.y, position.z]), np.array([q.w, q.x, q.y, q.z])


def _transform(t) -> np.ndarray:
    """A geometry_msgs/Transform as a 4x4 matrix."""
    pos, quat = _pose(t.translation, t.rotation)
    out = np.eye(4)
    out[:3, :3], out[:3, 3] = quat_to_matrix(quat), pos
    return out


def _tf_poses(messages: list, static: list, source: PoseSource, bag: Path) -> list[tuple[int, tuple]]:
    """The pose of frame ``source.child`` in ``source.parent`` after each TFMessage that moves a
    transform of the chain between them: the chain's latest transforms composed (``static``: the
    /tf_static messages, which hold throughout). No chain is one error naming the frames found."""
    up: dict[str, str] = {}  # child frame -> its parent, over every transform in the bag
    for _, msg in [*static, *messages]:
        for t in msg.transforms:
            up[t.child_frame_id.strip("/")] = t.header.frame_id.strip("/")
    chain, frame = [], source.child
    while frame != source.parent and frame in up and len(chain) <= len(up):
        chain.append(frame)
        frame = up[frame]
    if frame != source.parent:
        found = ", ".join(sorted(f"{p} -> {c}" for c, p in up.items())) or "none"
        raise RosbagError(f"{bag}: {source.topic} has no chain of transforms from {source.parent} to {source.child} "
                          f"(map pose.parent, pose.child); its transforms (parent -> child): {found}")
    latest = {t.child_frame_id.strip("/"): _transform(t.transform) for _, msg in static for t in msg.transforms}
    poses = []
    for stamp, msg in messages:
        moved = [t for t in msg.transforms if t.child_frame_id.strip("/") in chain]
        for t in moved:
            latest[t.child_frame_id.strip("/")] = _transform(t.transform)
        if moved and all(c in latest for c in chain):
            pose = np.eye(4)
            for c in reversed(chain):  # from the parent down to the child
                pose = pose @ latest[c]
            poses.append((stamp, (pose[:3, 3], matrix_to_quat(pose[:3, :3]))))
    if not poses:
        raise RosbagError(f"{bag}: {source.topic} never moves the chain {' -> '.join([source.parent, *chain[::-1]])} "
                          "(map pose.parent, pose.child)")
    return poses


def _gripper_widths(messages: list, source: GripperSource, bag: Path) -> list[tuple[int, float]]:
    """Each JointState's gripper width (see ``GripperSource``); a message that carries none of the
    named joints (the arm's, on a shared topic) is skipped. A JointState with joints the map does
    not name, without ``joints``, is one error naming the topic and the joints."""
    widths, seen = [], []
    for stamp, msg in messages:
        names = list(msg.name)
        seen = seen or names
        if source.joints is None and (not names or set(names) - set(FINGERS)):
            raise RosbagError(f"{bag}: {source.topic} carries the joints {', '.join(names) or '(no names)'}: name "
                              f"the one(s) whose positions sum to the gripper's width in the map's gripper: "
                              f"{{topic: {source.topic}, joints: [NAME, ...]}}")
        joints = source.joints or names
        if not set(joints) & set(names):
            continue
        missing = [j for j in joints if j not in names]
        if missing or len(msg.position) < len(names):
            raise RosbagError(f"{bag}: {source.topic} at {stamp} ns carries the joints {', '.join(names)} with "
                              f"{len(msg.position)} positions; the map's gripper.joints names {', '.join(joints)}")
        widths.append((stamp, source.scale * float(sum(msg.position[names.index(j)] for j in joints))))
    if not widths:
        raise RosbagError(f"{bag}: no message on {source.topic} carries {', '.join(source.joints or ())} "
                          f"(map gripper.joints); it carries {', '.join(seen) or '(no names)'}")
    return widths


def _episode_spans(msgs: dict, m: BagMap) -> list[tuple[int, int]]:
    """[(start, end)] in bag time: from an episode topic (String JSON start/end events, or a Bool
    that is true while recording), else split where the pose stream pauses longer than gap_s."""
    if "topic" in m.episodes:
        spans, start = [], None
        for stamp, msg in msgs[m.episodes["topic"]]:
            on = msg.data if isinstance(msg.data, bool) else json.loads(msg.data).get("event") == "start"
            if on and start is None:
                start = stamp
            elif not on and start is not None:
                spans.append((start, stamp))
                start = None
        return spans
    stamps = np.array([s for s, _ in msgs[m.pose.topic]])
    gap = int(float(m.episodes.get("gap_s", 1.0)) * 1e9)
    cuts = np.flatnonzero(np.diff(stamps) > gap)
    spans = []
    for a, b in zip(np.r_[0, cuts + 1], np.r_[cuts, len(stamps) - 1]):
        # the episode starts once every mapped stream has spoken in it, so no frame reads the last one's
        firsts = [next((t for t, _ in messages if t >= stamps[a]), None) for messages in msgs.values()]
        if None not in firsts and max(firsts) < stamps[b]:
            spans.append((int(max(firsts)), int(stamps[b])))
    return spans


def _latest(messages: list, times: np.ndarray, period: int, counts: dict, topic: str) -> list[int]:
    """For each frame time, the index of the topic's latest message at or before it."""
    stamps = np.array([s for s, _ in messages])
    index = np.searchsorted(stamps, times, side="right") - 1
    index = np.clip(index, 0, len(stamps) - 1)
    counts["held_frames"] += int(np.sum(times - stamps[index] > period))
    counts["used"][topic].update(index.tolist())
    return index.tolist()


def _actions_from_motion(state: np.ndarray, limits: ControlLimits) -> np.ndarray:
    """The action that moved the TCP from each frame to the next, in the contract's units:
    translation and rotation (axis-angle) over the step limits, clipped to [-1, 1]; the gripper
    closing or opening by more than 2 mm a step. The last frame has none."""
    n = len(state)
    action = np.zeros((n, ACTION_DIM), np.float32)
    pos, quat = state[:, STATE_SLICES["tcp_pos"]], state[:, STATE_SLICES["tcp_quat"]]
    width = state[:, STATE_SLICES["gripper_width"]][:, 0]
    for t in range(n - 1):
        action[t, :3] = (pos[t + 1] - pos[t]) / limits.max_translation_m
        turn = quat_to_matrix(quat[t + 1]) @ quat_to_matrix(quat[t]).T
        action[t, 3:6] = matrix_to_rotvec(turn) / limits.max_rotation_rad
        change = width[t + 1] - width[t]
        action[t, 6] = 1.0 if change < -0.002 else (-1.0 if change > 0.002 else 0.0)
    return np.clip(action, -1.0, 1.0)

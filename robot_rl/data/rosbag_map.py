"""A bag a lab recorded, into an episode store through a map (``import_rosbag`` with a map; the
bag's own format and export: rosbag.py).

The map (YAML, ``BagMap``, checked whole before any work: ``check_bag_map``) names the bag's
topics: cameras, the TCP's pose (a PoseStamped, or a chain of /tf transforms from a parent frame
to the TCP's, composed with /tf_static), twist, wrench, the gripper's width (the JointState joints
it names), the action (a topic, or the TCP's motion between frames) and the intervention flag.
Frames are resampled to the control rate by timestamp (each topic's latest message at or before
the frame's time), episodes split by a topic or by time gaps; the summary says how many messages
were dropped (never the latest at a frame) and how many frames held an older one.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from robot_rl.config_values import read_map_file
from robot_rl.contract import ACTION_DIM, STATE_DIM, STATE_SLICES, ControlLimits, state_quat
from robot_rl.data.output import written_whole
from robot_rl.data.rosbag import FINGERS, RosbagError, pixels, read_topics
from robot_rl.data.store import EpisodeStore
from robot_rl.geometry import matrix_to_quat, matrix_to_rotvec, quat_to_matrix

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


def import_mapped(reader, ts, bag: Path, out: Path, topics: dict[str, str], m: BagMap) -> dict:
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
    msgs = read_topics(reader, ts, bag, {t: what for t, (_, what) in roles.items()})
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
    shapes = {cam: pixels(msgs[t][0][1], bag, t).shape[:2] for cam, t in m.cameras.items()}
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
                       **{cam: np.stack([pixels(msgs[t][i][1], bag, t) for i in pick[t]])
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

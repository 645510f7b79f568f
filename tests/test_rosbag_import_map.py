"""A lab's rosbag2 through the import map (robot_rl/data/rosbag.py): the gripper's width from the
JointState joints the map names, the TCP's pose from /tf (a direct transform, or a chain composed
with /tf_static), and a map field of the wrong type as one line naming the map file and the field."""

from pathlib import Path

import numpy as np
import pytest

from robot_rl.commands.cli import main
from robot_rl.contract import STATE_SLICES
from robot_rl.data.rosbag import RosbagError, import_rosbag
from robot_rl.data.store import EpisodeStore
from tests.helpers.common import one_line_error

T0 = 1_767_225_600 * 10**9
ARM = [f"panda_joint{i}" for i in range(1, 8)]
READY = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])  # the Panda's ready pose: with a finger, sums to -0.745
STATIC = {"panda_hand": ("panda_link1", [0.02, 0.0, 0.1], [1.0, 0.0, 0.0, 0.0]),  # xyzw: half a turn about x
          "panda_hand_tcp": ("panda_hand", [0.0, 0.0, 0.1034], [0.0, 0.0, 0.0, 1.0])}


def link1(t: float) -> tuple[np.ndarray, float]:
    """panda_link0 -> panda_link1 at time t: a translation and an angle about z."""
    return np.array([0.4 + 0.05 * t, -0.1 + 0.02 * t, 0.3 - 0.06 * t]), 0.3 * t


def tcp(t: float) -> tuple[np.ndarray, np.ndarray]:
    """panda_link0 -> panda_hand_tcp (link1, then the two static transforms), worked by hand:
    (position, quaternion w x y z)."""
    pos, a = link1(t)
    c, s = np.cos(a), np.sin(a)
    offset = np.array([0.02, 0.0, 0.1]) + np.array([0.0, 0.0, -0.1034])  # half a turn about x flips z
    return pos + np.array([c * offset[0] - s * offset[1], s * offset[0] + c * offset[1], offset[2]]), np.array(
        [0.0, np.cos(a / 2), np.sin(a / 2), 0.0])


def finger(t: float) -> float:
    return 0.04 if t < 1.0 else 0.01  # the gripper closes once, a second in


@pytest.fixture(scope="module")
def lab_bag(tmp_path_factory) -> Path:
    """A 2 s demonstration at 50 Hz: /joint_states with the 7 arm joints (moving) and one finger;
    /franka/ee_pose (PoseStamped, the TCP); /tf with the TCP as one transform panda_link0 -> tcp_direct,
    panda_link0 -> panda_link1 and a camera's frame; /tf_static with panda_link1 -> panda_hand -> panda_hand_tcp."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    path = tmp_path_factory.mktemp("lab") / "bag"

    def header(ns: int, frame: str):
        return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                                        frame_id=frame)

    def stamped(ns: int, parent: str, child: str, pos, xyzw):
        return T["geometry_msgs/msg/TransformStamped"](header=header(ns, parent), child_frame_id=child, transform=T[
            "geometry_msgs/msg/Transform"](translation=T["geometry_msgs/msg/Vector3"](*map(float, pos)),
                                           rotation=T["geometry_msgs/msg/Quaternion"](*map(float, xyzw))))

    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        joints = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        tf = writer.add_connection("/tf", "tf2_msgs/msg/TFMessage", typestore=ts)
        static = writer.add_connection("/tf_static", "tf2_msgs/msg/TFMessage", typestore=ts)
        ee_pose = writer.add_connection("/franka/ee_pose", "geometry_msgs/msg/PoseStamped", typestore=ts)
        msg = T["tf2_msgs/msg/TFMessage"](transforms=[stamped(T0, p, c, pos, q) for c, (p, pos, q) in STATIC.items()])
        writer.write(static, T0, ts.serialize_cdr(msg, msg.__msgtype__))
        for k in range(100):
            t, ns = k * 0.02, T0 + k * 2 * 10**7
            arm = READY + np.array([0.0, 0.0, 0.0, 0.35 * t, 0.0, 0.0, 0.0])  # the elbow moves throughout
            msg = T["sensor_msgs/msg/JointState"](
                header=header(ns, ""), name=[*ARM, "panda_finger_joint1"], position=np.r_[arm, finger(t)],
                velocity=np.zeros(0), effort=np.zeros(0))
            writer.write(joints, ns, ts.serialize_cdr(msg, msg.__msgtype__))
            (pos1, a), (pos, q) = link1(t), tcp(t)
            msg = T["tf2_msgs/msg/TFMessage"](transforms=[
                stamped(ns, "panda_link0", "panda_link1", pos1, [0.0, 0.0, np.sin(a / 2), np.cos(a / 2)]),
                stamped(ns, "world", "camera_link", [1.0, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0]),
                stamped(ns, "panda_link0", "tcp_direct", pos, [*q[1:], q[0]])])
            writer.write(tf, ns, ts.serialize_cdr(msg, msg.__msgtype__))
            msg = T["geometry_msgs/msg/PoseStamped"](header=header(ns, "panda_link0"), pose=T[
                "geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](*pos),
                                          orientation=T["geometry_msgs/msg/Quaternion"](*q[1:], q[0])))
            writer.write(ee_pose, ns, ts.serialize_cdr(msg, msg.__msgtype__))
    return path


def _import(bag: Path, out: Path, map_text: str) -> EpisodeStore:
    (out.parent / "map.yaml").write_text(map_text)
    import_rosbag(bag, out, out.parent / "map.yaml")
    return EpisodeStore.open(out)


GRIPPER = "gripper: {topic: /joint_states, joints: [panda_finger_joint1]}\n"


def test_a_joint_state_with_the_arms_joints_is_refused_unless_the_map_names_the_fingers(lab_bag, tmp_path):
    """The issue's case: 7 arm joints and a finger summed to a width of -0.745 -> -0.093 and an
    "open" command every frame; now refused, and with the finger named the width is the finger's."""
    with pytest.raises(RosbagError) as err:
        _import(lab_bag, tmp_path / "a.zarr", "pose: /franka/ee_pose\ngripper: /joint_states\n")
    line = str(err.value)
    assert "\n" not in line and not (tmp_path / "a.zarr").exists()
    for named in ("/joint_states", "panda_joint1", "panda_joint7", "panda_finger_joint1", "gripper", "joints"):
        assert named in line, (named, line)
    store = _import(lab_bag, tmp_path / "b.zarr", "pose: /franka/ee_pose\n" + GRIPPER)
    ep = store[0]
    width = ep["state"][:, STATE_SLICES["gripper_width"]][:, 0]
    np.testing.assert_allclose(width, [finger(k * 0.1) for k in range(len(width))], atol=1e-7)
    assert list(ep["action"][:-1, 6]).count(1.0) == 1 and -1.0 not in ep["action"][:, 6]  # closes once, never opens
    scaled = _import(lab_bag, tmp_path / "c.zarr", "pose: /franka/ee_pose\n"  # one finger of two, by name alone
                     "gripper: {topic: /joint_states, joints: panda_finger_joint1, scale: 2}\n")[0]
    np.testing.assert_allclose(scaled["state"][:, STATE_SLICES["gripper_width"]][:, 0], 2 * width, atol=1e-7)


@pytest.mark.parametrize("child", ["tcp_direct", "panda_hand_tcp"])  # one transform; a chain with /tf_static
def test_the_tcp_pose_comes_from_tf(lab_bag, tmp_path, child):
    ep = _import(lab_bag, tmp_path / "s.zarr", f"pose: {{topic: /tf, parent: panda_link0, child: {child}}}\n"
                 + GRIPPER)[0]
    n = len(ep["state"])
    assert n == 20  # 2 s at 10 Hz, each frame on a /tf message
    for k in range(n):
        pos, q = tcp(k * 0.1)
        np.testing.assert_allclose(ep["state"][k, STATE_SLICES["tcp_pos"]], pos, atol=1e-6)
        assert abs(float(ep["state"][k, STATE_SLICES["tcp_quat"]] @ q)) == pytest.approx(1.0, abs=1e-6)
    steps = np.diff(ep["state"][:, STATE_SLICES["tcp_pos"]], axis=0) / 0.03  # the action is the TCP's motion
    np.testing.assert_allclose(ep["action"][:-1, :3], np.clip(steps, -1, 1), atol=1e-5)


@pytest.mark.parametrize("map_text, named", [
    ("pose: [/tf, panda_link0]\n", ["pose", "a list"]),
    ("pose: {topic: /tf, parent: panda_link0, child: tcp_direct, frame: x}\n", ["pose", "a mapping"]),
    ("pose: {topic: /tf, parent: panda_link0}\n", ["pose", "a parent and a child"]),
    ("pose: {topic: /tf, parent: panda_link0, child: tcp_direct}\ntwist: {topic: /twist}\n", ["twist", "a topic name"]),
    ("pose: {topic: /tf, parent: panda_link0, child: tcp_direct}\ngripper: {topic: /joint_states, joints: [1]}\n",
     ["gripper.joints"]),
])
def test_a_map_field_of_the_wrong_type_is_one_line_naming_the_map_and_the_field(map_text, named, lab_bag, tmp_path,
                                                                                capsys):
    (tmp_path / "map.yaml").write_text(map_text)
    assert main(["data", "import", str(lab_bag), "--format", "rosbag2", "--map", str(tmp_path / "map.yaml"),
                 "--out", str(tmp_path / "out.zarr")]) == 2
    one_line_error(capsys.readouterr().err, f"map {tmp_path / 'map.yaml'}", *named)
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize("map_text, named", [
    ("pose: /tf\n", ["/tf carries tf2_msgs/msg/TFMessage", "parent: FRAME, child: FRAME"]),
    ("pose: {topic: /tf, parent: panda_link0, child: camera_link}\n" + GRIPPER,
     ["no chain of transforms from panda_link0 to camera_link", "world -> camera_link", "panda_link0 -> panda_link1",
      "panda_hand -> panda_hand_tcp"]),
    ("pose: {topic: /tf, parent: panda_link0, child: tcp_direct}\n"
     "gripper: {topic: /joint_states, joints: [panda_finger_joint2]}\n",
     ["/joint_states", "panda_finger_joint2", "gripper.joints", "panda_finger_joint1"]),
])
def test_a_pose_or_gripper_the_bag_cannot_give_is_one_line_naming_the_bag(map_text, named, lab_bag, tmp_path):
    with pytest.raises(RosbagError) as err:
        _import(lab_bag, tmp_path / "out.zarr", map_text)
    assert "\n" not in str(err.value) and str(lab_bag) in str(err.value)
    for needle in named:
        assert needle in str(err.value), (needle, str(err.value))
    assert not (tmp_path / "out.zarr").exists()

"""Write tests/fixtures/rosbag2_lab_pick: a small rosbag2 (MCAP) in the topic layout a lab's
`ros2 bag record` of a Franka cell produces (each driver's own topic, type and rate: a RealSense
colour stream in bgr8 at 15 Hz, the arm's end-effector pose and wrench at 50 Hz, the gripper's
joint states at 20 Hz, a teleop flag at 10 Hz), two demonstrations 3 s apart, written with
rosbags' own writer and standard message types. Also expected.npz: every message's stamp and
values as written, for tests/test_interchange.py. Run with robot_rl's venv:

    .venv/bin/python scripts/make_rosbag_fixture.py tests/fixtures/rosbag2_lab_pick
"""

import shutil
import sys
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

H, W = 16, 24
T0 = 1_767_225_600 * 10**9 + 123_456_789  # an arbitrary wall clock
EPISODES = ((0.0, 2.0), (5.0, 6.6))  # (start s, end s) of each demonstration
RATES = {"image": 15.0, "pose": 50.0, "wrench": 50.0, "gripper": 20.0, "intervention": 10.0}


def pose_at(t: float) -> tuple[np.ndarray, np.ndarray]:
    """The TCP moves down and sideways, turning slowly about z (quaternion w, x, y, z)."""
    pos = np.array([0.4 + 0.05 * t, -0.1 + 0.02 * t, 0.3 - 0.06 * t])
    angle = 0.1 * t
    return pos, np.array([np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)])


def width_at(t: float, t0: float) -> float:
    return 0.08 if t - t0 < 1.0 else 0.03  # the gripper closes a second into each demonstration


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    header = lambda ns, frame: T["std_msgs/msg/Header"](  # noqa: E731
        stamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9), frame_id=frame)
    vec = T["geometry_msgs/msg/Vector3"]
    expected: dict[str, list] = {f"{k}_{f}": [] for k, fs in (("image", ("t", "rgb")), ("pose", ("t", "pos", "quat")),
                                                               ("wrench", ("t", "force")), ("gripper", ("t", "width")),
                                                               ("intervention", ("t", "on"))) for f in fs}
    with Writer(out, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {
            "image": writer.add_connection("/camera/color/image_raw", "sensor_msgs/msg/Image", typestore=ts),
            "pose": writer.add_connection("/franka/ee_pose", "geometry_msgs/msg/PoseStamped", typestore=ts),
            "wrench": writer.add_connection("/franka/ee_wrench", "geometry_msgs/msg/WrenchStamped", typestore=ts),
            "gripper": writer.add_connection("/franka_gripper/joint_states", "sensor_msgs/msg/JointState",
                                             typestore=ts),
            "intervention": writer.add_connection("/teleop/is_intervention", "std_msgs/msg/Bool", typestore=ts),
        }
        messages = []
        for start, end in EPISODES:
            for kind, rate in RATES.items():
                offset = {"image": 0.013, "pose": 0.0, "wrench": 0.004, "gripper": 0.021, "intervention": 0.0}[kind]
                for t in np.arange(start + offset, end, 1.0 / rate):
                    ns = T0 + int(round(t * 1e9))
                    if kind == "image":
                        k = int(round((t - start) * 15))
                        rgb = np.zeros((H, W, 3), np.uint8)
                        rgb[..., 0], rgb[..., 1], rgb[..., 2] = 10 * k % 256, np.arange(W)[None] * 9, 200
                        msg = T["sensor_msgs/msg/Image"](header=header(ns, "camera_color_optical_frame"), height=H,
                                                          width=W, encoding="bgr8", is_bigendian=0, step=W * 3,
                                                          data=rgb[..., ::-1].copy().ravel())
                        expected["image_rgb"].append(rgb)
                    elif kind == "pose":
                        pos, q = pose_at(t)
                        msg = T["geometry_msgs/msg/PoseStamped"](header=header(ns, "panda_link0"), pose=T[
                            "geometry_msgs/msg/Pose"](position=T["geometry_msgs/msg/Point"](*pos),
                                                      orientation=T["geometry_msgs/msg/Quaternion"](q[1], q[2], q[3],
                                                                                                    q[0])))
                        expected["pose_pos"].append(pos)
                        expected["pose_quat"].append(q)
                    elif kind == "wrench":
                        force = np.array([0.0, 0.0, -2.0 - t])
                        msg = T["geometry_msgs/msg/WrenchStamped"](header=header(ns, "panda_link0"), wrench=T[
                            "geometry_msgs/msg/Wrench"](force=vec(*force), torque=vec(0.0, 0.0, 0.0)))
                        expected["wrench_force"].append(force)
                    elif kind == "gripper":
                        w = width_at(t, start)
                        msg = T["sensor_msgs/msg/JointState"](header=header(ns, ""), name=["panda_finger_joint1",
                                                                                          "panda_finger_joint2"],
                                                              position=np.array([w / 2, w / 2]), velocity=np.zeros(0),
                                                              effort=np.zeros(0))
                        expected["gripper_width"].append(w)
                    else:
                        on = 0.5 <= t - start < 1.0
                        msg = T["std_msgs/msg/Bool"](data=on)
                        expected["intervention_on"].append(on)
                    expected[f"{kind}_t"].append(ns)
                    messages.append((ns, kind, msg))
        for ns, kind, msg in sorted(messages, key=lambda m: m[0]):
            writer.write(conns[kind], ns, ts.serialize_cdr(msg, msg.__msgtype__))
    np.savez_compressed(out / "expected.npz", **{k: np.asarray(v) for k, v in expected.items()},
                        episodes=np.array(EPISODES), t0=np.array(T0))
    print(f"wrote {out}: {len(messages)} messages")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Episode stores to and from LeRobotDataset v3.0 (robot_rl/data/lerobot.py): round trips that
lose nothing we claim, a fixture written by LeRobot's own writer, `train --demos` on such a
folder, and each bad input as one line naming the file."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from robot_rl.commands.cli import main
from robot_rl.data.lerobot import ActionMap, DatasetMap, LeRobotError, export_lerobot, import_lerobot
from robot_rl.data.store import EpisodeStore
from tests.helpers.common import one_line_error, synthetic_episode

FIXTURE = Path(__file__).parent / "fixtures" / "lerobot_v3_pick"  # scripts/make_lerobot_fixture.py made it
FIXTURE_MAP = DatasetMap(cameras={"front": "observation.images.front", "wrist": "observation.images.wrist"},
                         action=ActionMap(motion=(0, 1, 2, None, None, None), gripper=3,
                                          gripper_values={"close": 2.0, "stay": 1.0, "open": 0.0}),
                         intervention="complementary_info.is_intervention", task="PickCube")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def _store(path: Path, episodes: int = 4, smooth: bool = False) -> Path:
    """Two cameras, interventions, and both successful and failed episodes."""
    cams = {"front": (16, 20), "wrist": (12, 16)}
    store = EpisodeStore.create(path, {"state": ((5,), np.float32), "action": ((7,), np.float32),
                                       "privileged_cube": ((7,), np.float32),
                                       **{c: ((h, w, 3), np.uint8) for c, (h, w) in cams.items()}},
                                task="PickCube", robot="panda", control_hz=10.0, cameras=cams)
    for seed in range(episodes):
        ep = synthetic_episode(seed, cameras={} if smooth else cams, smooth_cameras=cams if smooth else None)
        ep["success"][:] = seed % 2 == 0
        ep["is_intervention"][: len(ep["reward"]) // 2] = True
        store.add_episode(ep)
    return path


def _assert_same_store(a_path: Path, b_path: Path, images: str = "equal") -> list[float]:
    a, b = EpisodeStore.open(a_path), EpisodeStore.open(b_path)
    assert len(a) == len(b) and list(a.episode_lengths) == list(b.episode_lengths)
    assert sorted(a.fields) == sorted(b.fields) and a.cameras == b.cameras
    assert b.attrs["task"] == a.attrs["task"] and b.attrs["control_hz"] == a.attrs["control_hz"]
    psnrs = []
    for e in range(len(a)):
        ea, eb = a[e], b[e]
        for key in ea:
            if key in a.cameras and images != "equal":
                psnrs.append(psnr(ea[key], eb[key]))
            else:
                np.testing.assert_array_equal(ea[key], eb[key], err_msg=f"episode {e} {key}")
    return psnrs


def test_a_store_exported_to_lerobot_and_imported_back_is_equal(tmp_path, capsys):
    store = _store(tmp_path / "s.zarr")
    assert main(["data", "export", str(store), "--format", "lerobot", "--out", str(tmp_path / "ds")]) == 0
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert exported["episodes"] == 4 and exported["video"] == "lossless"
    info = json.loads((tmp_path / "ds/meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10.0 and info["total_episodes"] == 4
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index", "observation.state", "action",
                "next.reward", "next.done", "is_intervention", "success", "observation.images.front",
                "observation.images.wrist"):
        assert key in info["features"], key
    for path in ("meta/tasks.parquet", "meta/stats.json", "meta/episodes/chunk-000/file-000.parquet",
                 "data/chunk-000/file-000.parquet", "videos/observation.images.front/chunk-000/file-000.mp4"):
        assert (tmp_path / "ds" / path).is_file(), path
    assert main(["data", "import", str(tmp_path / "ds"), "--format", "lerobot", "--out", str(tmp_path / "b.zarr")]) == 0
    _assert_same_store(store, tmp_path / "b.zarr")  # states, actions, rewards, flags, boundaries, pixels
    assert main(["data", "check", str(tmp_path / "b.zarr")]) == 0


def test_lossy_video_comes_back_within_the_stated_psnr(tmp_path):
    store = _store(tmp_path / "s.zarr", smooth=True)
    for codec in ("h264", "av1"):
        export_lerobot(store, tmp_path / codec, video=codec)
        import_lerobot(tmp_path / codec, tmp_path / f"{codec}.zarr")
        psnrs = _assert_same_store(store, tmp_path / f"{codec}.zarr", images="lossy")
        assert min(psnrs) >= 35.0, (codec, min(psnrs))  # docs/datasets.md's figure for smooth scenes


def test_a_dataset_written_by_lerobot_imports_as_its_writer_wrote_it(tmp_path):
    expected = np.load(FIXTURE / "expected.npz")
    result = import_lerobot(FIXTURE, tmp_path / "fx.zarr", FIXTURE_MAP)
    store = EpisodeStore.open(tmp_path / "fx.zarr")
    lengths = np.bincount(expected["episode_index"])
    assert result["episodes"] == len(store) == len(lengths) and result["frames_read"] == lengths.sum()
    assert list(store.episode_lengths) == list(lengths + 1)  # + the final observation, repeated
    assert store.attrs["task"] == "PickCube" and store.attrs["control_hz"] == 10.0
    start = 0
    for e, n in enumerate(lengths):
        ep, rows = store[e], slice(start, start + n)
        np.testing.assert_array_equal(ep["state"][:n], expected["state"][rows])
        np.testing.assert_array_equal(ep["state"][n], expected["state"][start + n - 1])
        np.testing.assert_array_equal(ep["action"][:n, :3], expected["action"][rows, :3])
        assert not ep["action"][:n, 3:6].any()
        gripper = np.select([expected["action"][rows, 3] == 2, expected["action"][rows, 3] == 0], [1.0, -1.0], 0.0)
        np.testing.assert_array_equal(ep["action"][:n, 6], gripper)
        np.testing.assert_array_equal(ep["reward"][:n], expected["reward"][rows])
        np.testing.assert_array_equal(ep["is_intervention"][:n], expected["intervention"][rows])
        assert list(ep["has_action"]) == [True] * n + [False]
        succeeded = bool(expected["reward"][start + n - 1] > 0)
        assert ep["terminated"][n - 1] == succeeded and ep["truncated"][n - 1] == (not succeeded)
        assert not ep["terminated"][: n - 1].any() and not ep["truncated"][: n - 1].any()
        for cam in ("front", "wrist"):  # AV1 at crf 30, LeRobot's default: lossy
            assert psnr(ep[cam][:n], expected[cam][rows]) >= 25.0, (e, cam)
        start += n


def test_train_demos_reads_a_lerobot_folder_as_the_store_it_came_from(tmp_path):
    """The demo buffer from an exported folder is the store's, transition for transition and pixel
    for pixel: a run from either is the same run (sync mode)."""
    from robot_rl.commands.record import record_rollouts
    from robot_rl.data.demos import load_demos
    from robot_rl.envs import spec_env

    store = tmp_path / "demos.zarr"
    record_rollouts(store, "PickCube", 2, noise=0.1, seed=10_000, keep="successes", images=True, image_size=(32, 32))
    export_lerobot(store, tmp_path / "ds")
    env = spec_env("PickCube", "pixels", image_size=(32, 32))  # what a pixel run's demo buffer holds
    seen: dict[str, list] = {"store": [], "lerobot": []}
    for name, path in (("store", store), ("lerobot", tmp_path / "ds")):
        info = load_demos(path, env, "PickCube", seen[name].append)
        assert info["episodes"] == 2
    assert len(seen["store"]) == len(seen["lerobot"]) > 0
    for a, b in zip(seen["store"], seen["lerobot"]):  # two Transitions
        for x, y in zip(a, b):
            if isinstance(x, dict):
                assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
            else:
                assert np.array_equal(x, y), (x, y)
    with pytest.raises(LeRobotError, match="give a map"):  # a foreign dataset needs its map
        load_demos(FIXTURE, env, "PickCube", lambda *t: None)


# ------------------------------------------------------------------------------------ bad input
def _bad_dataset(tmp_path: Path, change) -> Path:
    folder = shutil.copytree(FIXTURE, tmp_path / "bad")
    change(folder)
    return folder


def _set_version(folder: Path) -> None:
    info = json.loads((folder / "meta/info.json").read_text())
    (folder / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))


def _short_video(folder: Path) -> None:
    import av

    path = folder / "videos/observation.images.front/chunk-000/file-000.mp4"
    with av.open(str(path)) as src:
        frames = [f.to_ndarray(format="rgb24") for f in src.decode(video=0)][:10]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for image in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode(None))


@pytest.mark.parametrize("change, map_text, named", [
    (_set_version, None, ["meta/info.json", "codebase_version 'v2.1'"]),
    (lambda f: (f / "meta/info.json").unlink(), None, ["meta/info.json", "no such file"]),
    (lambda f: None, "state: [observation.joints]\n", ["meta/info.json", "'observation.joints'"]),
    (_short_video, None, ["observation.images.front/chunk-000/file-000.mp4", "shorter than its parquet frames"]),
    (lambda f: None, "action: {motion: [0, 1, 2, null, null, null], gripper: 9}\n", ["action index 9", "4 dimensions"]),
])
def test_bad_lerobot_imports_are_one_line_naming_the_file_and_leave_nothing(change, map_text, named, tmp_path, capsys):
    folder = _bad_dataset(tmp_path, change)
    map_file = tmp_path / "map.yaml"
    map_file.write_text(map_text or "cameras: {front: observation.images.front, wrist: observation.images.wrist}\n"
                                    "action: {motion: [0, 1, 2, null, null, null], gripper: 3, gripper_values: "
                                    "{close: 2.0, stay: 1.0, open: 0.0}}\n")
    out = tmp_path / "out.zarr"
    assert main(["data", "import", str(folder), "--format", "lerobot", "--map", str(map_file), "--out", str(out)]) == 2
    one_line_error(capsys.readouterr().err, *named)
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_an_export_into_a_non_empty_folder_is_refused(tmp_path, capsys):
    store = _store(tmp_path / "s.zarr", episodes=1)
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "mine.txt").write_text("keep me")
    assert main(["data", "export", str(store), "--format", "lerobot", "--out", str(tmp_path / "ds")]) == 2
    one_line_error(capsys.readouterr().err, str(tmp_path / "ds"), "not an empty folder")
    assert [p.name for p in (tmp_path / "ds").iterdir()] == ["mine.txt"]


@pytest.mark.skipif(not os.environ.get("ROBOT_RL_LEROBOT_PYTHON"),
                    reason="needs LeRobot's own venv (ROBOT_RL_LEROBOT_PYTHON=/path/to/its/python; "
                           "scripts/make_lerobot_fixture.py says how to make one)")
def test_lerobots_own_loader_reads_an_export_frame_for_frame(tmp_path):
    store = _store(tmp_path / "s.zarr", episodes=2)
    export_lerobot(store, tmp_path / "ds")
    frames = np.concatenate([EpisodeStore.open(store)[e]["front"] for e in range(2)])
    np.save(tmp_path / "front.npy", frames)
    script = ("import sys, numpy as np\nfrom lerobot.datasets.lerobot_dataset import LeRobotDataset\n"
              "ds = LeRobotDataset('robot_rl/export', root=sys.argv[1], video_backend='pyav')\n"
              "front = np.load(sys.argv[2])\nassert ds.num_frames == len(front), (ds.num_frames, len(front))\n"
              "for i in range(len(ds)):\n"
              "    img = (ds[i]['observation.images.front'].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)\n"
              "    assert np.array_equal(img, front[i]), i\nprint('ok', ds.num_episodes, ds.num_frames)\n")
    out = subprocess.run([os.environ["ROBOT_RL_LEROBOT_PYTHON"], "-c", script, str(tmp_path / "ds"),
                          str(tmp_path / "front.npy")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0 and out.stdout.strip().endswith("ok 2 " + str(len(frames))), out.stderr[-2000:]


# ------------------------------------------------------------------------------------ rosbag2
BAG_FIXTURE = Path(__file__).parent / "fixtures" / "rosbag2_lab_pick"  # scripts/make_rosbag_fixture.py made it
BAG_MAP = ("rate: 10\ncameras: {front: /camera/color/image_raw}\npose: /franka/ee_pose\nwrench: /franka/ee_wrench\n"
           "gripper: /franka_gripper/joint_states\nintervention: /teleop/is_intervention\nepisodes: {gap_s: 1.0}\n"
           "success: all\ntask: PickCube\n")


def test_a_store_exported_to_rosbag2_and_imported_back_is_equal(tmp_path, capsys):
    import yaml

    from robot_rl.contract import STATE_DIM

    store = EpisodeStore.create(tmp_path / "s.zarr", {"state": ((STATE_DIM,), np.float32), "action": ((7,), np.float32),
                                                      "privileged_cube": ((7,), np.float32),
                                                      "front": ((16, 20, 3), np.uint8), "wrist": ((12, 16, 3), np.uint8)},
                                task="PickCube", robot="panda", control_hz=10.0,
                                cameras={"front": (16, 20), "wrist": (12, 16)})
    for seed in range(3):
        ep = synthetic_episode(seed, state_dim=STATE_DIM, cameras={"front": (16, 20), "wrist": (12, 16)})
        ep["timestamp"] = np.arange(len(ep["reward"])) * 0.1
        ep["success"][:] = seed == 1
        store.add_episode(ep)
    assert main(["data", "export", str(tmp_path / "s.zarr"), "--format", "rosbag2", "--out", str(tmp_path / "bag")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["storage"] == "mcap" and summary["episodes"] == 3
    meta = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["storage_identifier"] == "mcap"
    types = {t["topic_metadata"]["name"]: t["topic_metadata"]["type"] for t in meta["topics_with_message_count"]}
    assert types["/robot_rl/front/image_raw"] == "sensor_msgs/msg/Image"
    assert types["/robot_rl/tcp_pose"] == "geometry_msgs/msg/PoseStamped"
    assert types["/robot_rl/tcp_wrench"] == "geometry_msgs/msg/WrenchStamped"
    assert types["/robot_rl/joint_states"] == "sensor_msgs/msg/JointState"
    assert types["/robot_rl/action"] == "std_msgs/msg/Float32MultiArray" and "/robot_rl/episode" in types
    assert main(["data", "import", str(tmp_path / "bag"), "--format", "rosbag2", "--out", str(tmp_path / "b.zarr")]) == 0
    a, b = EpisodeStore.open(tmp_path / "s.zarr"), EpisodeStore.open(tmp_path / "b.zarr")
    assert list(a.episode_lengths) == list(b.episode_lengths) and b.attrs["task"] == "PickCube"
    for e in range(len(a)):
        for key, value in a[e].items():
            if key == "timestamp":
                np.testing.assert_allclose(b[e][key], value, atol=1e-9)
            else:
                np.testing.assert_array_equal(b[e][key], value, err_msg=f"episode {e} {key}")
    assert main(["data", "check", str(tmp_path / "b.zarr")]) == 0


def test_a_labs_bag_imports_resampled_to_the_control_rate(tmp_path):
    from robot_rl.contract import STATE_SLICES
    from robot_rl.data.rosbag import import_rosbag

    (tmp_path / "map.yaml").write_text(BAG_MAP)
    result = import_rosbag(BAG_FIXTURE, tmp_path / "lab.zarr", tmp_path / "map.yaml")
    x = np.load(BAG_FIXTURE / "expected.npz")
    store = EpisodeStore.open(tmp_path / "lab.zarr")
    assert len(store) == result["episodes"] == len(x["episodes"]) and store.attrs["control_hz"] == 10
    latest = lambda stamps, t: int(np.searchsorted(stamps, t, side="right") - 1)  # noqa: E731
    for e, (start_s, end_s) in enumerate(x["episodes"]):
        ep = store[e]
        n = len(ep["state"])
        in_episode = lambda key: (x[f"{key}_t"] >= x["t0"] + start_s * 1e9) & (x[f"{key}_t"] < x["t0"] + end_s * 1e9)  # noqa: E731
        first = max(int(x[f"{k}_t"][in_episode(k)][0]) for k in ("image", "pose", "wrench", "gripper", "intervention"))
        times = first + np.arange(n) * 10**8
        assert times[-1] <= x["t0"] + end_s * 1e9 < times[-1] + 2 * 10**8  # the episode as its messages span it
        for k, t in enumerate(times):
            i = latest(x["pose_t"], t)
            np.testing.assert_allclose(ep["state"][k, STATE_SLICES["tcp_pos"]], x["pose_pos"][i], atol=1e-6)
            np.testing.assert_allclose(ep["state"][k, STATE_SLICES["tcp_quat"]], x["pose_quat"][i], atol=1e-6)
            np.testing.assert_allclose(ep["state"][k, STATE_SLICES["ee_force"]], x["wrench_force"][latest(x["wrench_t"], t)],
                                       atol=1e-5)
            assert ep["state"][k, STATE_SLICES["gripper_width"]][0] == pytest.approx(
                x["gripper_width"][latest(x["gripper_t"], t)], abs=1e-6)
            np.testing.assert_array_equal(ep["front"][k], x["image_rgb"][latest(x["image_t"], t)])  # bgr8 -> rgb
            assert ep["is_intervention"][k] == x["intervention_on"][latest(x["intervention_t"], t)]
        # the action moved the TCP to the next frame's pose, in the cell's step units
        steps = np.diff(ep["state"][:, STATE_SLICES["tcp_pos"]], axis=0) / 0.03
        np.testing.assert_allclose(ep["action"][:-1, :3], np.clip(steps, -1, 1), atol=1e-5)
        assert ep["action"][:-1, 6].min() == 0 and (ep["action"][:-1, 6] == 1).sum() == 1  # closes once
        assert list(ep["has_action"]) == [True] * (n - 1) + [False] and ep["terminated"][n - 2]
    assert result["dropped_messages"] > 0 and result["held_frames"] == 0  # 50 Hz poses into 10 Hz frames


def _bag_with(tmp_path: Path, topics: dict[str, str], messages: int = 3) -> Path:
    """A bag whose every topic in ``topics`` ({name: type}) is declared; Bool topics get messages."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    path = tmp_path / "made"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        for topic, kind in topics.items():
            conn = writer.add_connection(topic, kind, typestore=ts)
            if kind == "std_msgs/msg/Bool":
                for i in range(messages):
                    writer.write(conn, 10**9 + i * 10**8, ts.serialize_cdr(ts.types[kind](data=True), kind))
    return path


@pytest.mark.parametrize("make, map_text, named", [
    (lambda p: _bag_with(p, {"/franka/ee_pose": "geometry_msgs/msg/PoseStamped", "/flag": "std_msgs/msg/Bool"}),
     "pose: /franka/ee_pose\nintervention: /flag\n", ["made", "no messages on /franka/ee_pose"]),
    (lambda p: _bag_with(p, {"/franka/ee_pose": "std_msgs/msg/Bool"}),
     "pose: /franka/ee_pose\n", ["made", "/franka/ee_pose carries std_msgs/msg/Bool", "PoseStamped"]),
    (lambda p: BAG_FIXTURE, "pose: /franka/pose\n", ["rosbag2_lab_pick", "no topic /franka/pose"]),
    (lambda p: p, "pose: /franka/ee_pose\n", ["metadata.yaml", "not a rosbag2 folder"]),
])
def test_bad_bag_imports_are_one_line_naming_the_bag_and_leave_nothing(make, map_text, named, tmp_path, capsys):
    bag = make(tmp_path)
    (tmp_path / "map.yaml").write_text(map_text)
    out = tmp_path / "out.zarr"
    assert main(["data", "import", str(bag), "--format", "rosbag2", "--map", str(tmp_path / "map.yaml"),
                 "--out", str(out)]) == 2
    one_line_error(capsys.readouterr().err, *named)
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_a_rosbag_export_into_a_non_empty_folder_is_refused(tmp_path, capsys):
    store = _store(tmp_path / "s.zarr", episodes=1)
    (tmp_path / "bag").mkdir()
    (tmp_path / "bag" / "mine.txt").write_text("keep me")
    assert main(["data", "export", str(store), "--format", "rosbag2", "--out", str(tmp_path / "bag")]) == 2
    one_line_error(capsys.readouterr().err, str(tmp_path / "bag"), "not an empty folder")
    assert [p.name for p in (tmp_path / "bag").iterdir()] == ["mine.txt"]


@pytest.mark.ros
def test_the_recorder_node_also_writes_a_rosbag_beside_its_store(tmp_path):
    """With rosbag:=true every committed episode also goes into a rosbag2 (MCAP) beside the store,
    closed with the node; it imports back equal to the store."""
    import rclpy
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.data.rosbag import import_rosbag
    from robot_rl.drivers.recorder_node import RecorderNode
    from robot_rl.runtime.wire import encode
    from tests.helpers.ros import free_domain_id

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=free_domain_id(),
               args=["--ros-args", "-p", f"path:={tmp_path / 'online.zarr'}", "-p", "cameras:=[front]",
                     "-p", "image_size:=[32,32]", "-p", "rosbag:=true"])
    try:
        recorder = RecorderNode(context=context)
        rng = np.random.default_rng(0)
        for n in (5, 8):
            arrays = {k: (rng.integers(0, 256, (n, *shape)) if dtype == np.uint8 else rng.normal(size=(n, *shape)))
                      .astype(dtype) for k, (shape, dtype) in recorder.store.fields.items()}
            arrays.update(has_action=np.arange(n) < n - 1, timestamp=np.arange(n) * 0.1)
            recorder.on_episode(UInt8MultiArray(data=encode("episode", arrays, {"sender": "/actor:1", "seq": n})))
        assert len(recorder.store) == 2
        bag = recorder.bag_path
        recorder.destroy_node()
    finally:
        context.try_shutdown()
    import_rosbag(bag, tmp_path / "from-bag.zarr")
    a, b = EpisodeStore.open(tmp_path / "online.zarr"), EpisodeStore.open(tmp_path / "from-bag.zarr")
    assert list(a.episode_lengths) == list(b.episode_lengths) == [5, 8]
    for e in range(2):
        for key in ("state", "action", "reward", "front", "is_intervention", "success", "has_action"):
            np.testing.assert_array_equal(a[e][key], b[e][key], err_msg=f"{e} {key}")

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
        assert min(psnrs) >= 35.0, (codec, min(psnrs))  # the README's figure for smooth scenes


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
        info = load_demos(path, env, "PickCube", lambda *t, name=name: seen[name].append(t))
        assert info["episodes"] == 2
    assert len(seen["store"]) == len(seen["lerobot"]) > 0
    for a, b in zip(seen["store"], seen["lerobot"]):  # (obs, action, reward, next_obs, terminated, truncated)
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

"""Issue 44 items 2 and 3: every reader of an episode's frames checks them against the digests
recorded at its commit (per array, so a reader of one camera checks that camera), and a store's
attributes follow one schema, checked when it opens and by ``data check``."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl.commands.cli import main
from robot_rl.data import EpisodeStore, StoreError, check_store
from tests.helpers.common import one_line_error

FIELDS = {"state": ((3,), np.float32), "action": ((2,), np.float32),
          "front": ((8, 8, 3), np.uint8), "wrist": ((8, 8, 3), np.uint8)}
CAMERAS = {"front": (8, 8), "wrist": (8, 8)}
FRAMES = 20  # per episode: 5 episodes are 100 frames; image shard 1 (frames 64-127) holds episodes 3 and 4
SHARD = "data/{}/c/1/0/0/0"


def episode(i: int, frames: int = FRAMES) -> dict:
    rng = np.random.default_rng(i)
    return {"state": rng.normal(size=(frames, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, (frames, 2)).astype(np.float32),
            "front": rng.integers(0, 256, (frames, 8, 8, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (frames, 8, 8, 3), dtype=np.uint8),
            "reward": rng.normal(size=frames).astype(np.float32), "terminated": np.arange(frames) == frames - 2,
            "truncated": np.zeros(frames, bool), "is_intervention": np.zeros(frames, bool),
            "success": np.arange(frames) >= frames - 3 if i % 2 else np.zeros(frames, bool),
            "has_action": np.arange(frames) < frames - 1, "timestamp": np.arange(frames) * 0.1}


def make_store(path: Path, episodes: int = 5, images: str = "lossless") -> Path:
    store = EpisodeStore.create(path, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras=CAMERAS,
                                images=images)
    for i in range(episodes):
        store.add_episode(episode(i))
    return path


def swap_front_and_wrist(path: Path) -> None:
    """The tester's case: camera front's shard 1 and wrist's shard 1 change places (each passes its CRC)."""
    front, wrist = path / SHARD.format("front"), path / SHARD.format("wrist")
    a, b = front.read_bytes(), wrist.read_bytes()
    front.write_bytes(b)
    wrist.write_bytes(a)


def cli(args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------ digests per array
def test_a_camera_shard_swapped_with_another_cameras_is_refused_by_every_reader(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr")
    assert EpisodeStore.open(path).has_array_digests
    swap_front_and_wrist(path)

    report = check_store(path)
    assert not report["ok"] and report["damaged_episodes"] == [3, 4]
    problems = report["episode_problems"]["4"]  # a line per camera, naming its file
    assert len(problems) == 2 and problems[0].startswith(SHARD.format("front") + ": ") and "digest" in problems[0]
    assert problems[1].startswith(SHARD.format("wrist") + ": ")
    assert any(SHARD.format("front") in p for p in report["episode_problems"]["3"])

    store = EpisodeStore.open(path)
    with pytest.raises(StoreError) as err:  # a reader of one camera checks that camera
        store.get_episode(3, ["front"])
    assert "\n" not in str(err.value) and "episode 3 (frames 60-79)" in str(err.value)
    assert SHARD.format("front") in str(err.value) and "wrist" not in str(err.value)
    with pytest.raises(StoreError, match="digest"):  # the numeric arrays alone are intact: they read
        store.get_episode(4, ["wrist", "success"])
    np.testing.assert_array_equal(store.get_episode(4, ["state"])["state"], episode(4)["state"])
    np.testing.assert_array_equal(store.get_episode(2, ["front"])["front"], episode(2)["front"])

    # the readers the issue names: export-video (all, or one episode), view, classifier training, encoder pretrain
    for args in (["data", "export-video", path, "--out", tmp_path / "v.gif"],
                 ["data", "export-video", path, "--out", tmp_path / "v.gif", "--episodes", "3"],
                 ["data", "view", path, "--out", tmp_path / "w.gif", "--episodes", "4"]):
        code, out, err = cli(args, capsys)
        assert code == 2 and out == "", args
        one_line_error(err, str(path), "data/", "digest")
    assert not (tmp_path / "v.gif").exists() and not (tmp_path / "w.gif").exists()
    from robot_rl.commands.encoder import load_frames as encoder_frames
    from robot_rl.reward.training import load_frames as classifier_frames

    with pytest.raises(StoreError, match="episode 3 .*digest"):
        classifier_frames([path], ("front",))
    with pytest.raises(StoreError, match="episode 3 .*digest"):
        encoder_frames([str(path)], ("wrist",))


def test_a_store_with_whole_episode_digests_only_checks_a_reader_of_one_camera_whole(tmp_path):
    """Stores made before per-array digests: a reader of some arrays reads the rest to check the
    episode's digest; stores made before any digest read as they did."""
    path = make_store(tmp_path / "old.zarr")
    shutil.rmtree(path / "meta/array_digests")
    swap_front_and_wrist(path)
    store = EpisodeStore.open(path)
    assert store.has_digests and not store.has_array_digests
    with pytest.raises(StoreError, match=r"episode 3 \(frames 60-79\): data \(which array"):
        store.get_episode(3, ["front"])
    np.testing.assert_array_equal(store.get_episode(2, ["front"])["front"], episode(2)["front"])
    assert check_store(path)["damaged_episodes"] == [3, 4]
    shutil.rmtree(path / "meta/episode_digests")  # before digests: nothing to check against
    front = EpisodeStore.open(path).get_episode(3, ["front"])["front"]  # frames 64-79 are wrist's
    np.testing.assert_array_equal(front[4:], episode(3)["wrist"][4:])


def test_per_array_digests_hold_for_lossy_images_and_appends(tmp_path):
    path = make_store(tmp_path / "j.zarr", episodes=2, images="jpeg")
    EpisodeStore.open(path, "a").add_episode(episode(2))
    store = EpisodeStore.open(path)
    for i in range(3):
        assert set(store.recorded_array_digests(store.episode_range(i)[1])) == set(store.arrays)
        front = store.get_episode(i, ["front"])["front"].astype(int)  # what was stored, not what was given
        assert np.abs(front - episode(i)["front"]).mean() < 60
        store.get_episode(i)
    assert check_store(path)["ok"]


# ------------------------------------------------------------------------------ attributes
BAD_ATTRIBUTES = {
    "control_hz": ("ten", "'ten' (a string); it must be a number above 0"),
    "cameras": ([["front", 8, 8]], "(a list); it must be a mapping of camera name to [height, width]"),
    "image_codec": (5, "is 5 (an integer); it must be 'lossless' or 'jpeg'"),
    "task": (7, "is 7 (an integer); it must be a string"),
}


@pytest.mark.parametrize("name", [*BAD_ATTRIBUTES, "camera_size"])
def test_an_attribute_of_the_wrong_type_is_refused_on_open_and_reported_by_check(tmp_path, capsys, name):
    path = make_store(tmp_path / "s.zarr", episodes=1)
    value, why = BAD_ATTRIBUTES.get(name, ({"front": "8x8", "wrist": [8, 8]}, "it must be a mapping of camera"))
    attrs = zarr.open_group(str(path), mode="r+").attrs
    attrs["cameras" if name == "camera_size" else name] = value
    with pytest.raises(StoreError) as err:
        EpisodeStore.open(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path / 'zarr.json'}: attribute ") and why in message
    report = check_store(path)
    assert not report["ok"] and any(p.startswith("zarr.json: attribute ") and why in p for p in report["problems"])
    code, out, _ = cli(["data", "check", path], capsys)
    assert code == 1 and "store: zarr.json: attribute" in out
    code, out, err = cli(["data", "info", path], capsys)  # no traceback in info
    assert code == 2 and out == ""
    one_line_error(err, "zarr.json", why)


def test_exports_of_a_store_with_a_bad_control_rate_are_one_line_and_write_nothing(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr", episodes=1)
    zarr.open_group(str(path), mode="r+").attrs["control_hz"] = "ten"
    for args in (["data", "export-video", path, "--out", tmp_path / "v.mp4"],
                 ["data", "export", path, "--format", "lerobot", "--out", tmp_path / "le"],
                 ["data", "export", path, "--format", "rosbag2", "--out", tmp_path / "bag"]):
        code, out, err = cli(args, capsys)
        assert code == 2 and out == "", args
        one_line_error(err, "zarr.json", "'control_hz'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_creating_a_store_checks_the_same_schema(tmp_path):
    with pytest.raises(StoreError, match="attribute 'task' is 7"):
        EpisodeStore.create(tmp_path / "a.zarr", FIELDS, task=7, robot="panda", control_hz=10, cameras=CAMERAS)
    with pytest.raises(StoreError, match="attribute 'control_hz' is 0.0"):
        EpisodeStore.create(tmp_path / "b.zarr", FIELDS, task="PickCube", robot="panda", control_hz=0, cameras=CAMERAS)
    assert not list(tmp_path.iterdir())
    store = EpisodeStore.create(tmp_path / "c.zarr", FIELDS, task="PickCube", robot="panda",
                                control_hz=np.float32(20), cameras=CAMERAS)  # numpy's numbers are numbers
    assert store.attrs["control_hz"] == 20.0 and not store.attribute_problems


@pytest.mark.parametrize("version, shown", [("1", "is '1' (a string)"), (True, "is True (a boolean)"),
                                            (1.0, "is 1.0 (a number)"), (2, "has schema version 2")])
def test_a_schema_version_says_what_was_found_and_what_is_read(tmp_path, version, shown):
    path = make_store(tmp_path / "s.zarr", episodes=1)
    zarr.open_group(str(path), mode="r+").attrs["schema_version"] = version
    with pytest.raises(StoreError) as err:
        EpisodeStore.open(path)
    assert str(err.value).startswith(f"{path / 'zarr.json'}: ") and shown in str(err.value)
    assert "this robot_rl reads version 1" in str(err.value)


def test_info_lists_the_per_array_digests(tmp_path):
    from robot_rl.data.info import info

    summary = info(make_store(tmp_path / "s.zarr", episodes=2))
    assert summary["arrays"]["meta/array_digests"]["role"] == "digests"
    assert summary["arrays"]["meta/array_digests"]["shape"] == [1 + len(FIELDS) + 7]
    assert json.dumps(summary)


def test_a_bag_whose_metadata_gives_a_bad_control_rate_imports_as_one_line(tmp_path, capsys):
    """What the old rosbag2 export wrote from a store with ``control_hz: "ten"``: its import named the file."""
    path = make_store(tmp_path / "s.zarr", episodes=1)
    assert main(["data", "export", str(path), "--format", "rosbag2", "--out", str(tmp_path / "bag")]) == 0
    meta = tmp_path / "bag/metadata.yaml"
    meta.write_text(meta.read_text().replace("robot_rl.control_hz: '10.0'", "robot_rl.control_hz: ten"))
    capsys.readouterr()
    code, out, err = cli(["data", "import", tmp_path / "bag", "--format", "rosbag2", "--out", tmp_path / "b.zarr"],
                         capsys)
    assert code == 2 and out == "" and not (tmp_path / "b.zarr").exists()
    one_line_error(err, str(meta), "robot_rl.control_hz is 'ten'")

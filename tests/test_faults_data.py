"""Faults in the episode store, each reproduced on a small real store: nothing committed is ever
deleted, damage is one line naming the file (never other pixels, never a traceback), ``data
check`` reports it per episode, and outputs appear whole or not at all."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl.commands.cli import main
from robot_rl.data import EpisodeStore, StoreError, check_store

HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))
from write_gate import GatedProcess  # noqa: E402
from tests.helpers.common import one_line_error  # noqa: E402

pytestmark = pytest.mark.faults

FIELDS = {"state": ((3,), np.float32), "action": ((2,), np.float32), "front": ((8, 8, 3), np.uint8)}
FRAMES = 12  # per episode: 6 episodes are 72 frames, so the images span two shards of 64 frames
SHARD = "data/front/c/{}/0/0/0"


def episode(i: int, frames: int = FRAMES) -> dict:
    rng = np.random.default_rng(i)
    return {"state": rng.normal(size=(frames, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, (frames, 2)).astype(np.float32),
            "front": rng.integers(0, 256, (frames, 8, 8, 3), dtype=np.uint8),
            "reward": rng.normal(size=frames).astype(np.float32), "terminated": np.arange(frames) == frames - 2,
            "truncated": np.zeros(frames, bool), "is_intervention": rng.random(frames) < 0.5,
            "success": rng.random(frames) < 0.5, "has_action": np.arange(frames) < frames - 1,
            "timestamp": np.arange(frames) * 0.1}


def make_store(path: Path, episodes: int = 6) -> Path:
    store = EpisodeStore.create(path, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras={"front": (8, 8)})
    for i in range(episodes):
        store.add_episode(episode(i))
    return path


def assert_intact(path: Path, episodes: int = 6) -> None:
    store = EpisodeStore.open(path)
    assert len(store) == episodes
    for i in range(episodes):
        for key, want in episode(i).items():
            np.testing.assert_array_equal(store.get_episode(i)[key], want, err_msg=f"episode {i} {key}")


def files(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def flip_byte(file: Path, offset: int | None = None) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0xFF
    file.write_bytes(bytes(data))


def garble_frame(store: Path, frame: int) -> Path:
    """Flip a byte inside the one image chunk of ``frame`` (found through its shard's index)."""
    shard = store / SHARD.format(frame // 64)
    data = shard.read_bytes()
    index = np.frombuffer(data[-(64 * 16 + 4):-4], "<u8").reshape(-1, 2)
    offset, length = (int(x) for x in index[frame % 64])
    flip_byte(shard, offset + length // 2)
    return shard


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def no_partial_outputs(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if ".partial-" in p.name]


# ------------------------------------------------------------------------------ the index
def test_a_corrupt_index_entry_is_refused_by_every_open_and_repaired_from_the_flags(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr")
    zarr.open_group(str(path), mode="r+")["meta/episode_ends"][2] = 10  # below its neighbours (24, 36)
    before = files(path)
    for mode in ("r", "a"):
        with pytest.raises(StoreError) as refused:
            EpisodeStore.open(path, mode)
        message = str(refused.value)
        assert "\n" not in message and str(path) in message and "robot-rl data check --repair" in message
        assert "index entry 2 is 10" in message
    code, _, err = cli(["data", "info", path], capsys)
    assert code == 2
    one_line_error(err, str(path), "robot-rl data check --repair")
    assert files(path) == before  # nothing deleted, nothing changed
    code, out, _ = cli(["data", "check", path], capsys)
    assert code == 1
    report = json.loads(out.strip().splitlines()[-1])
    assert not report["ok"] and "index entry 2 is 10" in report["problems"][0]
    assert report["fix"].startswith("rebuild the index of 6 episodes")
    assert files(path) == before
    code, out, _ = cli(["data", "check", path, "--repair"], capsys)
    assert code == 0 and out.startswith("repaired: rebuild the index")
    assert json.loads(out.strip().splitlines()[-1])["ok"]
    assert_intact(path)


@pytest.mark.parametrize("damage", ["emptied", "deleted"])
def test_an_emptied_or_deleted_index_chunk_is_refused_then_rebuilt(tmp_path, damage):
    path = make_store(tmp_path / "s.zarr")
    chunk = path / "meta/episode_ends/c/0"
    chunk.write_bytes(b"") if damage == "emptied" else chunk.unlink()
    before = files(path)
    for mode in ("r", "a"):
        with pytest.raises(StoreError, match=r"meta/episode_ends/c/0: (empty file|missing).*robot-rl data check --repair"):
            EpisodeStore.open(path, mode)
    assert files(path) == before
    report = check_store(path, repair=True)
    assert report["ok"] and report["repaired"].startswith("rebuild the index of 6 episodes")
    assert_intact(path)


def test_an_index_that_cannot_be_rebuilt_is_left_alone(tmp_path, capsys):
    """A damaged index and damaged flags: nothing provable, so --repair changes nothing."""
    path = make_store(tmp_path / "s.zarr")
    zarr.open_group(str(path), mode="r+")["meta/episode_ends"][2] = 10
    flip_byte(path / "data/has_action/c/0")
    before = files(path)
    with pytest.raises(StoreError, match=r"data/has_action/c/0: checksum mismatch.*restore it from a backup"):
        EpisodeStore.open(path, "a")
    code, out, _ = cli(["data", "check", path, "--repair"], capsys)
    assert code == 1 and "repaired" not in out.splitlines()[0]
    assert json.loads(out.strip().splitlines()[-1])["repaired"] is None
    assert files(path) == before


def test_what_a_writer_killed_mid_episode_leaves_is_repaired_on_append(tmp_path):
    """The provably uncommitted cases: frames after the last committed end (dropped), and an
    index entry grown but never written after all its episode's frames (completed)."""
    path = make_store(tmp_path / "s.zarr", episodes=3)
    store = EpisodeStore.open(path, "a")
    cut_off = episode(3)
    for key, array in store.arrays.items():  # killed after 5 frames of episode 3
        array.resize((array.shape[0] + 5, *array.shape[1:]))
        array[-5:] = cut_off[key][:5]
    assert check_store(path)["ok"] and check_store(path)["fix"].startswith("drop 5 frames")
    assert len(EpisodeStore.open(path)) == 3  # a reader sees the committed episodes only
    with pytest.warns(UserWarning, match="drop 5 frames of an episode that was not completed"):
        store = EpisodeStore.open(path, "a")
    assert all(a.shape[0] == 3 * FRAMES for a in store.arrays.values())
    for key, array in store.arrays.items():  # every frame of episode 3 written, then the index grew: killed
        array.resize((4 * FRAMES, *array.shape[1:]))
        array[3 * FRAMES:] = episode(3)[key]
    store._ends_array.resize((4,))
    with pytest.warns(UserWarning, match="complete index entry 3"):
        EpisodeStore.open(path, "a")
    assert_intact(path, episodes=4)


def test_an_unwritten_index_entry_followed_by_no_whole_episode_is_refused(tmp_path):
    """The index grew but the frames after the last end are not one complete episode: no writer
    leaves that, so it is damage, and nothing is dropped on a guess."""
    path = make_store(tmp_path / "s.zarr", episodes=3)
    store = EpisodeStore.open(path, "a")
    for key, array in store.arrays.items():
        array.resize((array.shape[0] + 5, *array.shape[1:]))
        array[-5:] = episode(3)[key][:5]
    store._ends_array.resize((4,))
    before = files(path)
    with pytest.raises(StoreError, match="index entry 3 was never written"):
        EpisodeStore.open(path, "a")
    assert files(path) == before


# ------------------------------------------------------------------------------ chunks
@pytest.mark.parametrize("damage", ["deleted image shard", "emptied image shard", "garbled image chunk",
                                    "garbled numeric chunk"])
def test_a_damaged_chunk_is_one_line_naming_the_file_never_other_data(tmp_path, capsys, damage):
    path = make_store(tmp_path / "s.zarr")
    if damage == "deleted image shard":  # frames 64-71: the last episode (60-71) only
        file, damaged, episode_index = path / SHARD.format(1), [5], 5
        file.unlink()
    elif damage == "emptied image shard":
        file, damaged, episode_index = path / SHARD.format(1), [5], 5
        file.write_bytes(b"")
    elif damage == "garbled image chunk":  # frame 30: episode 2 only
        file, damaged, episode_index = garble_frame(path, 30), [2], 2
    else:
        file, damaged, episode_index = path / "data/state/c/0/0", list(range(6)), 0
        flip_byte(file)
    store = EpisodeStore.open(path)
    with pytest.raises(StoreError) as error:
        store.get_episode(episode_index)
    assert str(error.value).startswith(f"{file}: ") and "\n" not in str(error.value)
    assert f"robot-rl data check {path}" in str(error.value)
    if damaged != list(range(6)):
        good = next(i for i in range(6) if i not in damaged)
        np.testing.assert_array_equal(store.get_episode(good)["front"], episode(good)["front"])
    code, _, err = cli(["data", "split", path, "--episodes", "0-5", "--out", tmp_path / "out.zarr"], capsys)
    assert code == 2
    one_line_error(err, str(file))
    assert not (tmp_path / "out.zarr").exists() and no_partial_outputs(tmp_path)
    code, out, _ = cli(["data", "check", path], capsys)
    assert code == 1
    lines = out.strip().splitlines()
    report = json.loads(lines[-1])
    assert report["damaged_episodes"] == damaged and not report["ok"]
    for i in range(6):
        assert lines[i].startswith(f"episode {i}: " + ("DAMAGED: " if i in damaged else "ok"))
    assert str(file.relative_to(path)) in report["episode_problems"][str(damaged[0])][0]
    if len(damaged) < 6:  # the way out keeps the good episodes, and works
        assert "--episodes" in report["hint"]
        spec = report["hint"].split("--episodes ")[1].split()[0]
        assert cli(["data", "split", path, "--episodes", spec, "--out", tmp_path / "good.zarr"], capsys)[0] == 0
        assert len(EpisodeStore.open(tmp_path / "good.zarr")) == 6 - len(damaged)


def test_a_garbled_array_metadata_file_is_one_line_naming_it(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr")
    meta = path / "data/state/zarr.json"
    meta.write_text("{\n" + meta.read_text()[40:])
    with pytest.raises(StoreError, match=rf"^{meta}: unreadable array metadata .*restore this file from a backup$"):
        EpisodeStore.open(path)
    for command in (["data", "info", path], ["data", "check", path],
                    ["data", "merge", path, "--out", tmp_path / "m.zarr"]):
        code, _, err = cli(command, capsys)
        assert code == 2
        one_line_error(err, str(meta))
    assert not (tmp_path / "m.zarr").exists() and no_partial_outputs(tmp_path)


def test_all_zero_chunks_are_written_so_a_missing_one_is_damage_not_zeros(tmp_path, capsys):
    path = tmp_path / "z.zarr"
    store = EpisodeStore.create(path, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras={"front": (8, 8)})
    black = {k: np.zeros_like(v) for k, v in episode(0).items()}
    black["has_action"] = episode(0)["has_action"]
    store.add_episode(black)
    assert (path / SHARD.format(0)).is_file() and (path / "data/truncated/c/0").is_file()  # all zeros, still written
    assert cli(["data", "check", path], capsys)[0] == 0
    (path / "data/truncated/c/0").unlink()
    with pytest.raises(StoreError, match="data/truncated/c/0: missing"):
        EpisodeStore.open(path).get_episode(0)


def test_a_store_made_before_checksums_still_opens_and_reads(tmp_path, capsys):
    """Older stores (no ``integrity`` attribute) never wrote all-zero chunks: a missing chunk
    there reads as zeros, as it always did, and ``data check`` says what it cannot see."""
    path = make_store(tmp_path / "old.zarr", episodes=2)
    group = zarr.open_group(str(path), mode="r+")
    del group.attrs["integrity"]
    (path / "data/truncated/c/0").unlink()  # an all-False chunk an older store did not write
    store = EpisodeStore.open(path)
    assert not store.get_episode(1)["truncated"].any()
    np.testing.assert_array_equal(store.get_episode(1)["front"], episode(1)["front"])
    code, out, _ = cli(["data", "check", path], capsys)
    assert code == 0 and "older store without checksums" in out
    assert json.loads(out.strip().splitlines()[-1])["integrity"] is None


def test_repair_never_drops_a_committed_episode_even_a_damaged_one(tmp_path):
    path = make_store(tmp_path / "s.zarr")
    garble_frame(path, 30)
    store = EpisodeStore.open(path, "a")
    for key, array in store.arrays.items():  # and a cut-off episode after the committed ones
        array.resize((array.shape[0] + 4, *array.shape[1:]))
        array[-4:] = episode(6)[key][:4]
    report = check_store(path, repair=True)
    assert report["repaired"].startswith("drop 4 frames") and report["damaged_episodes"] == [2]
    store = EpisodeStore.open(path)
    assert len(store) == 6 and all(a.shape[0] == 6 * FRAMES for a in store.arrays.values())
    np.testing.assert_array_equal(store.get_episode(5)["front"], episode(5)["front"])


def test_data_check_passes_a_sound_store(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr")
    code, out, _ = cli(["data", "check", path], capsys)
    lines = out.strip().splitlines()
    assert code == 0 and lines[:6] == [f"episode {i}: ok" for i in range(6)]
    report = json.loads(lines[-1])
    assert report["ok"] and report["episodes"] == 6 and report["integrity"] == "crc32c" and report["fix"] is None


def test_an_episode_must_end_on_its_only_frame_without_an_action(tmp_path):
    store = EpisodeStore.open(make_store(tmp_path / "s.zarr", episodes=1), "a")
    for flags in ([True] * FRAMES, [True] * 5 + [False] + [True] * 5 + [False]):
        bad = episode(1)
        bad["has_action"] = np.array(flags)
        with pytest.raises(StoreError, match="has_action must be True on every frame of an episode but the last"):
            store.add_episode(bad)
    assert len(EpisodeStore.open(tmp_path / "s.zarr")) == 1


# ------------------------------------------------------------------------------ outputs
@pytest.mark.parametrize("command", ["merge", "split"])
def test_merge_or_split_killed_midway_leaves_no_output_and_a_rerun_works(tmp_path, capsys, command):
    a, b = make_store(tmp_path / "a.zarr", episodes=4), tmp_path / "b.zarr"
    store_b = EpisodeStore.create(b, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras={"front": (8, 8)})
    for i in range(4, 8):
        store_b.add_episode(episode(i))
    out = tmp_path / "out.zarr"
    args = ["data", "merge", a, b, "--out", out] if command == "merge" else ["data", "split", a, "--episodes", "0-3",
                                                                             "--out", out]
    writer = GatedProcess([str(HELPERS / "write_gate.py"), *map(str, args)], stderr=open(tmp_path / "err.log", "w"))
    commits = 0
    for line in writer.lines():  # killed right after a frame write of the third episode
        commits += line == "wrote meta/episode_ends/c/0"
        if commits == 2 and line.startswith("wrote data/"):
            writer.kill()
            break
        writer.go()
    assert writer.proc.returncode == -9, "the command ended before it was killed"
    assert not out.exists() and not no_partial_outputs(tmp_path)  # only the temporary, never the output
    assert cli(args, capsys)[0] == 0
    assert no_partial_outputs(tmp_path)  # the rerun removed what the killed run left
    merged = EpisodeStore.open(out)
    assert len(merged) == (8 if command == "merge" else 4)
    for i in range(len(merged)):
        np.testing.assert_array_equal(merged.get_episode(i)["front"], episode(i)["front"])


def test_a_store_is_created_whole_or_not_at_all(tmp_path):
    """A recorder killed while it creates a new store leaves nothing at the path (a half-made
    store would be refused for good); the next one creates it and clears the leftover."""
    path = tmp_path / "new.zarr"
    for kill_at in (1, 6, None):
        writer = GatedProcess([str(HELPERS / "record_forever.py"), str(path)], stderr=open(tmp_path / "err.log", "w"))
        writes = 0
        for line in writer.lines():
            writes += line.startswith("wrote")
            if writes == kill_at or line.startswith("ready"):
                writer.kill()
                break
            writer.go()
        assert writer.proc.returncode == -9
        if kill_at:
            assert not path.exists() and not no_partial_outputs(tmp_path)
    assert len(EpisodeStore.open(path)) == 0 and no_partial_outputs(tmp_path)


def test_split_with_a_backwards_range_is_an_error(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr", episodes=3)
    code, _, err = cli(["data", "split", path, "--episodes", "2-0", "--out", tmp_path / "x.zarr"], capsys)
    assert code == 2
    one_line_error(err, "'2-0' runs backwards", "2-0")
    assert not (tmp_path / "x.zarr").exists()
    code, _, err = cli(["data", "split", path, "--episodes", "0", "--out", path], capsys)
    assert code == 2
    one_line_error(err, "already exists")


def test_a_video_that_fails_leaves_no_file(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr", episodes=3)
    garble_frame(path, 15)
    for command in (["data", "export-video", path, "--out", tmp_path / "v.mp4"],
                    ["data", "view", path, "--out", tmp_path / "v.gif"]):
        code, _, err = cli(command, capsys)
        assert code == 2
        one_line_error(err, str(path / SHARD.format(0)))
    assert not (tmp_path / "v.mp4").exists() and not (tmp_path / "v.gif").exists() and no_partial_outputs(tmp_path)
    assert cli(["data", "view", path, "--episodes", "0,2", "--out", tmp_path / "v.gif"], capsys)[0] == 0
    assert (tmp_path / "v.gif").stat().st_size > 0


def cut_the_third_episode(monkeypatch, error) -> None:
    """The third episode ``add_episode`` writes raises ``error`` after two of its array writes (its
    first frames are on disk, its index entry is not)."""
    real_add, calls = EpisodeStore.add_episode, []

    def add(self, ep):
        calls.append(1)
        if len(calls) == 3:
            real_setitem, writes = zarr.Array.__setitem__, []

            def setitem(array, selection, value):
                if len(writes) == 2:
                    raise error
                writes.append(1)
                real_setitem(array, selection, value)

            monkeypatch.setattr(zarr.Array, "__setitem__", setitem)
        return real_add(self, ep)

    monkeypatch.setattr(EpisodeStore, "add_episode", add)


def test_record_interrupted_keeps_its_committed_episodes(tmp_path, capsys, monkeypatch):
    """Ctrl-C in the middle of the third episode's frames: the two committed stay, the cut-off
    one never reads as an episode, and the command says so in one line."""
    out = tmp_path / "rec.zarr"
    cut_the_third_episode(monkeypatch, KeyboardInterrupt)
    code, _, err = cli(["record", "--task", "PickCube", "--episodes", "5", "--out", out], capsys)
    monkeypatch.undo()
    said = err.strip().splitlines()  # a line per committed episode, then one line for the interruption
    assert said[:2] == ["record: episode 0 committed (success)", "record: episode 1 committed (success)"]
    assert code == 130 and said[2:] == [f"robot-rl: interrupted: {out} keeps the 2 episodes committed before"]
    store = EpisodeStore.open(out)
    assert len(store) == 2 and max(a.shape[0] for a in store.arrays.values()) > store.n_frames  # the cut-off frames
    assert check_store(out)["ok"]


def test_the_recorder_node_refuses_a_damaged_store_in_one_line(tmp_path):
    path = make_store(tmp_path / "online.zarr")
    zarr.open_group(str(path), mode="r+")["meta/episode_ends"][2] = 10
    before = files(path)
    env = {**os.environ, "ROS_DOMAIN_ID": str(100 + os.getpid() % 100), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    done = subprocess.run([sys.executable, "-m", "robot_rl.drivers.recorder_node", "--ros-args", "-p", f"path:={path}",
                           "-p", "cameras:=[front]", "-p", "image_size:=[8,8]"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"recorder_node: error: {path}: index entry 2 is 10")
    assert "robot-rl data check --repair" in lines[0]
    assert files(path) == before


def test_the_readme_import_works():
    done = subprocess.run([sys.executable, "-c", "from robot_rl.data import EpisodeStore, StoreError, check_store; "
                                                 "print(EpisodeStore.__name__, check_store.__name__)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["EpisodeStore", "check_store"], done.stderr
    from robot_rl.data import store

    assert EpisodeStore is store.EpisodeStore


def test_a_store_loaded_for_inspection_cannot_be_appended_to(tmp_path):
    path = make_store(tmp_path / "s.zarr", episodes=2)
    with pytest.raises(StoreError, match="loaded without checking its index"):
        EpisodeStore.load(path, "a").add_episode(episode(2))
    assert_intact(path, episodes=2)


@pytest.mark.parametrize("damage", ["empty", "garbled", "deleted"])
def test_an_append_that_would_rewrite_a_damaged_file_is_refused_and_changes_nothing(tmp_path, damage):
    path = make_store(tmp_path / "s.zarr")  # 72 frames: the second image shard holds frames 64-71
    last_shard = path / SHARD.format(1)
    if damage == "empty":
        last_shard.write_bytes(b"")
    elif damage == "garbled":
        flip_byte(last_shard, 10)
    else:
        last_shard.unlink()
    before = files(path)
    with pytest.raises(StoreError) as err:
        EpisodeStore.open(path, "a")
    message = str(err.value)
    assert "\n" not in message and str(last_shard) in message and "nothing was appended" in message
    assert files(path) == before  # the damaged file is left as it is, for a backup to replace
    assert not check_store(path)["ok"]  # what `data check` calls damaged is what an append refuses
    # a sound store with a full last shard appends as before
    sound = make_store(tmp_path / "full.zarr", episodes=0)
    store = EpisodeStore.open(sound, "a")
    store.add_episode(episode(0, frames=64))
    EpisodeStore.open(sound, "a").add_episode(episode(1))
    assert len(EpisodeStore.open(sound)) == 2


def test_a_repeated_index_entry_is_repaired_to_every_intact_episode(tmp_path, capsys):
    path = make_store(tmp_path / "s.zarr")  # ends 12, 24, ..., 72
    index = zarr.open_group(str(path), mode="r+")["meta/episode_ends"]
    index.resize((7,))
    index[:] = [12, 24, 24, 36, 48, 60, 72]  # entry 2 repeats entry 1: an episode of no frames
    before = files(path)
    with pytest.raises(StoreError, match="robot-rl data check --repair"):
        EpisodeStore.open(path)
    code, out, _ = cli(["data", "check", path], capsys)
    report = json.loads(out.strip().splitlines()[-1])
    assert code == 1 and report["episodes"] == 6 and "keep those 6 episodes" in report["fix"]
    assert files(path) == before
    code, out, _ = cli(["data", "check", path, "--repair"], capsys)
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["ok"]
    assert_intact(path)
    # an entry that ends no complete episode is still refused, not guessed at
    other = make_store(tmp_path / "t.zarr")
    index = zarr.open_group(str(other), mode="r+")["meta/episode_ends"]
    index.resize((7,))
    index[:] = [12, 24, 30, 36, 48, 60, 72]
    code, out, _ = cli(["data", "check", other, "--repair"], capsys)
    assert code != 0 and "cannot be rebuilt" in out


def test_a_chunk_copied_over_another_episodes_is_detected_naming_the_episodes(tmp_path, capsys):
    """The tester's misplaced chunk: a shard copied over another passes its CRC, not the digests."""
    path = make_store(tmp_path / "s.zarr", episodes=12)  # 144 frames: image shards 0 (0-63), 1 (64-127), 2
    shard0, shard1 = path / SHARD.format(0), path / SHARD.format(1)
    shard0.write_bytes(shard1.read_bytes())  # frames 0-63 now hold frames 64-127's pixels
    code, out, _ = cli(["data", "check", path], capsys)
    report = json.loads(out.strip().splitlines()[-1])
    assert code == 1 and not report["ok"] and report["episode_digests"]
    assert report["damaged_episodes"] == [0, 1, 2, 3, 4, 5]  # the episodes whose frames 0-63 moved
    assert "digest" in report["episode_problems"]["0"][0]
    store = EpisodeStore.open(path)
    with pytest.raises(StoreError) as err:  # a whole episode read checks it too
        store.get_episode(2)
    assert "\n" not in str(err.value) and "episode 2 (frames 24-35)" in str(err.value)
    np.testing.assert_array_equal(store.get_episode(7)["front"], episode(7)["front"])  # the others read as before
    # an append afterwards does not hide it
    EpisodeStore.open(path, "a").add_episode(episode(12))
    code, out, _ = cli(["data", "check", path], capsys)
    assert code == 1 and json.loads(out.strip().splitlines()[-1])["damaged_episodes"] == [0, 1, 2, 3, 4, 5]


def _disk_full(filename="chunk"):
    import errno

    return OSError(errno.ENOSPC, "No space left on device", filename)


def test_record_into_a_full_disk_is_one_line_keeps_its_episodes_and_appends_after(tmp_path, capsys, monkeypatch):
    out = tmp_path / "rec.zarr"
    cut_the_third_episode(monkeypatch, _disk_full(str(out / "data/state/c/0/0")))
    code, _, err = cli(["record", "--task", "PickCube", "--episodes", "5", "--out", out], capsys)
    monkeypatch.undo()
    said = err.strip().splitlines()
    assert code == 1 and len(said) == 3 and "Traceback" not in err
    assert said[2].startswith(f"robot-rl: disk full: {out} keeps the 2 episodes committed before")
    assert check_store(out)["ok"] and len(EpisodeStore.open(out)) == 2
    with pytest.warns(UserWarning, match="drop"):  # space freed: the cut-off frames go, the store appends
        EpisodeStore.open(out, "a").add_episode(EpisodeStore.open(out).get_episode(0))
    assert len(EpisodeStore.open(out)) == 3 and check_store(out)["ok"]


def test_merge_into_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    a, b = make_store(tmp_path / "a.zarr", 2), make_store(tmp_path / "b.zarr", 2)
    real_add = EpisodeStore.add_episode

    def full(self, ep):
        if len(self) == 3:
            raise _disk_full()
        return real_add(self, ep)

    monkeypatch.setattr(EpisodeStore, "add_episode", full)
    code, out, err = cli(["data", "merge", a, b, "--out", tmp_path / "m.zarr"], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"robot-rl: disk full: {tmp_path / 'm.zarr'} was not written")
    assert no_partial_outputs(tmp_path) and not (tmp_path / "m.zarr").exists()


def test_a_checkpoint_save_on_a_full_disk_is_one_line_and_keeps_the_earlier_ones(tmp_path, monkeypatch):
    from robot_rl.commands.train import TrainConfig, train
    from robot_rl.errors import DiskFullError
    from robot_rl.runtime import checkpoint

    real_save, saves = checkpoint.save_agent, []

    def save_until_full(agent, path):
        saves.append(path)
        if len(saves) == 2:
            raise _disk_full(str(path))
        return real_save(agent, path)

    monkeypatch.setattr(checkpoint, "save_agent", save_until_full)
    run = tmp_path / "run"
    with pytest.raises(DiskFullError) as err:
        train(TrainConfig(task="PickCube", obs="state", demos=0, learner="inline", eval_every=100_000, eval_episodes=1,
                          final_eval_episodes=1, progress=False, env_steps=40, checkpoint_every=20, run_dir=str(run)),
              log=lambda m: None)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"disk full: checkpoint {run / 'checkpoints' / 'step_000000040'}")
    assert f"robot-rl train --resume {run}" in message
    kept = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name != "latest")
    assert kept == ["step_000000020"]  # no half-written folder
    checkpoint.verify_checkpoint(run / "checkpoints" / "step_000000020")


def test_the_recorder_node_on_a_full_disk_stops_with_one_line_and_no_respawn(tmp_path):
    rclpy = pytest.importorskip("rclpy")
    from rclpy.parameter import Parameter

    from robot_rl.drivers import messages as msgs
    from robot_rl.drivers.recorder_node import RecorderNode
    from robot_rl.errors import DiskFullError, UserFacingError
    from robot_rl.runtime.launcher import USER_ERROR_EXIT
    from robot_rl.runtime.wire import encode
    from tests.helpers.ros import free_domain_id

    path = make_store(tmp_path / "online.zarr", 2)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=free_domain_id())
    try:
        node = RecorderNode(context=context, parameter_overrides=[
            Parameter("path", value=str(path)), Parameter("cameras", value=["front"]),
            Parameter("image_size", value=[8, 8])])
        try:
            real_add = node.store.add_episode
            node.store.add_episode = lambda ep: (_ for _ in ()).throw(_disk_full())
            message = msgs.payload_msg(encode("episode", episode(5), {"sender": "actor", "seq": 0}))
            with pytest.raises(DiskFullError) as err:
                node.on_episode(message)
            assert isinstance(err.value, UserFacingError) and USER_ERROR_EXIT == 2  # main: one line, exit 2
            text = str(err.value)
            assert "\n" not in text and text.startswith(f"disk full: {path} keeps the 2 episodes committed before")
            node.store.add_episode = real_add
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    assert_intact(path, 2)

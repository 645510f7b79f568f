"""Complete episodes past the index are never dropped unasked (an older ``meta/`` copied over
newer data: ``data check`` reports them, ``--repair`` restores them, an append refuses), and
``data check`` says each damaged file once per episode."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl.commands.cli import main
from robot_rl.data import EpisodeStore, StoreError, check_store
from robot_rl.errors import InputError

FIELDS = {"state": ((3,), np.float32), "action": ((2,), np.float32), "front": ((8, 8, 3), np.uint8)}
FRAMES = 12  # per episode; image shards hold 64 frames
SHARD0 = "data/front/c/0/0/0/0"


def episode(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {"state": rng.normal(size=(FRAMES, 3)).astype(np.float32),
            "action": rng.uniform(-1, 1, (FRAMES, 2)).astype(np.float32),
            "front": rng.integers(0, 256, (FRAMES, 8, 8, 3), dtype=np.uint8),
            "reward": rng.normal(size=FRAMES).astype(np.float32), "terminated": np.arange(FRAMES) == FRAMES - 2,
            "truncated": np.zeros(FRAMES, bool), "is_intervention": rng.random(FRAMES) < 0.5,
            "success": rng.random(FRAMES) < 0.5, "has_action": np.arange(FRAMES) < FRAMES - 1,
            "timestamp": np.arange(FRAMES) * 0.1}


def make_store(path: Path, episodes: int) -> Path:
    store = EpisodeStore.create(path, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras={"front": (8, 8)})
    for i in range(episodes):
        store.add_episode(episode(i))
    return path


def older_index_over_newer_data(tmp_path: Path, copy: str = "meta") -> Path:
    """The issue's case: a backup after 3 episodes, 3 more appended, the backup's ``copy``
    (meta/, or only meta/episode_ends) copied back over the newer data."""
    path = make_store(tmp_path / "s.zarr", 3)
    shutil.copytree(path / copy, tmp_path / "backup")
    store = EpisodeStore.open(path, "a")
    for i in range(3, 6):
        store.add_episode(episode(i))
    shutil.copytree(tmp_path / "backup", path / copy, dirs_exist_ok=True)
    return path


def files(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def assert_intact(path: Path, episodes: int) -> None:
    store = EpisodeStore.open(path)
    assert len(store) == episodes
    assert all(a.shape[0] == episodes * FRAMES for a in store.arrays.values())
    for i in range(episodes):
        got = store.get_episode(i)
        for key, want in episode(i).items():
            np.testing.assert_array_equal(got[key], want, err_msg=f"episode {i} {key}")


def cli(args: list, capsys) -> tuple[int, list[str]]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().out.strip().splitlines()


def test_an_older_index_over_newer_data_keeps_the_episodes_it_does_not_list(tmp_path, capsys):
    path = older_index_over_newer_data(tmp_path)
    before = files(path)
    code, out = cli(["data", "check", path], capsys)
    report = json.loads(out[-1])
    assert code == 1 and not report["ok"] and report["episodes"] == 6
    assert "3 complete episodes (frames 36-71, ending at 48, 60, 72)" in report["problems"][0]
    assert report["fix"].startswith("restore the 3 complete episodes the index does not list")
    assert sorted(report["unlisted_episodes"]) == ["3", "4", "5"]
    assert all("no digest to check it against" in note for note in report["unlisted_episodes"].values())
    assert out[3].startswith("episode 3: ok (complete, but not in the index")
    assert any("--discard-unlisted" in line for line in out)
    for mode in ("r", "a"):  # a reader would see 3 of 6 episodes, an append would delete 3: both refused
        with pytest.raises(StoreError) as refused:
            EpisodeStore.open(path, mode)
        message = str(refused.value)
        assert "\n" not in message and f"robot-rl data check --repair {path}" in message
        assert "--discard-unlisted" in message
    assert files(path) == before  # nothing dropped
    code, out = cli(["data", "check", path, "--repair"], capsys)
    report = json.loads(out[-1])
    assert code == 0 and report["ok"] and out[0].startswith("repaired: restore the 3 complete episodes")
    assert report["unlisted_episodes"]["3"].startswith("restored to the index without a digest to check it against")
    assert_intact(path, 6)
    EpisodeStore.open(path, "a").add_episode(episode(6))  # no warning, nothing dropped
    assert_intact(path, 7)


def test_unlisted_episodes_are_checked_against_the_digests_recorded_for_them(tmp_path):
    path = older_index_over_newer_data(tmp_path, copy="meta/episode_ends")  # the digests of all 6 remain
    report = check_store(path)
    assert not report["ok"] and report["damaged_episodes"] == []
    assert all("match the digest" in note for note in report["unlisted_episodes"].values())
    zarr.open_group(str(path), mode="r+")["data/state"][40] = 7.0  # episode 3's frame, checksum intact
    report = check_store(path, repair=True)  # restored, never dropped: and reported damaged
    assert report["damaged_episodes"] == [3] and "digest" in report["episode_problems"]["3"][0]
    assert report["unlisted_episodes"]["3"] == "restored to the index; damaged: see its problems"
    assert "match the digest" in report["unlisted_episodes"]["4"]
    assert len(EpisodeStore.open(path)) == 6


def test_discarding_the_unlisted_episodes_is_the_users_explicit_choice(tmp_path):
    path = older_index_over_newer_data(tmp_path)
    before = files(path)
    with pytest.raises(InputError, match="give both"):
        check_store(path, discard_unlisted=True)
    assert files(path) == before
    report = check_store(path, repair=True, discard_unlisted=True)
    assert report["ok"] and report["repaired"].startswith("drop the 3 complete episodes the index does not list")
    assert report["unlisted_episodes"] == {}
    assert_intact(path, 3)


def test_a_cut_off_episode_after_unlisted_ones_is_dropped_and_they_are_restored(tmp_path):
    path = older_index_over_newer_data(tmp_path)
    arrays = EpisodeStore.load(path, "a").arrays  # as a writer writes: every chunk, even all-zero ones
    for key, want in episode(6).items():  # then a writer killed 5 frames into the next episode
        array = arrays[key]
        array.resize((6 * FRAMES + 5, *array.shape[1:]))
        array[6 * FRAMES:] = want[:5]
    found = EpisodeStore.load(path).inspect_index()
    assert found.unlisted == 3 and found.frames == 6 * FRAMES
    assert found.fix.endswith("and drop the 5 frames after the last complete episode (no entry commits them)")
    check_store(path, repair=True)
    assert_intact(path, 6)


def test_a_damaged_shard_is_one_line_per_episode_and_file(tmp_path, capsys):
    """Every frame of an image shard unreadable: one line per episode naming the file and frames,
    not one per frame."""
    path = make_store(tmp_path / "s.zarr", 6)  # frames 0-63 in shard 0, 64-71 in shard 1
    shard = path / SHARD0
    data = bytearray(shard.read_bytes())
    index = np.frombuffer(bytes(data[-(64 * 16 + 4):-4]), "<u8").reshape(-1, 2)
    for offset, length in index:  # garble every frame's chunk
        data[int(offset) + int(length) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, out = cli(["data", "check", path], capsys)
    report = json.loads(out[-1])
    assert code == 1 and report["damaged_episodes"] == [0, 1, 2, 3, 4, 5]
    assert report["episode_problems"]["0"] == [f"{SHARD0}: checksum mismatch: the file is garbled (frames 0-11)"]
    assert report["episode_problems"]["5"] == [f"{SHARD0}: checksum mismatch: the file is garbled (frames 60-63)"]
    assert all(len(problems) == 1 for problems in report["episode_problems"].values())
    assert len(out[0]) < 200


class Killed(Exception):
    """Stands for the SIGKILL of a writer at a chosen write."""


def append_killed_at(path: Path, i: int, writes: int) -> None:
    """Append episode ``i``, the writer 'killed' before its ``writes``-th array write (the data
    arrays first, then the per-array digest row, the episode digest row, the index entry)."""
    real, done = zarr.Array.__setitem__, []

    def setitem(array, selection, value):
        if len(done) == writes:
            raise Killed
        done.append(1)
        real(array, selection, value)

    store = EpisodeStore.open(path, "a")
    zarr.Array.__setitem__ = setitem
    try:
        with pytest.raises(Killed):
            store.add_episode(episode(i))
    finally:
        zarr.Array.__setitem__ = real


def test_a_writer_killed_before_recording_the_digests_leaves_an_episode_that_is_dropped_not_refused(tmp_path):
    """Every frame written, the digests not: the commit log's unwritten row says the episode
    was never committed, so the append drops it (as any cut-off episode) instead of refusing."""
    path = make_store(tmp_path / "s.zarr", 2)
    n_arrays = len(EpisodeStore.open(path).arrays)
    append_killed_at(path, 2, n_arrays)  # the frames are in, the digest rows not
    assert len(check_store(path)["unlisted_episodes"]) == 0
    with pytest.warns(UserWarning, match="commit did not finish"):
        store = EpisodeStore.open(path, "a")
    assert len(store) == 2
    store.add_episode(episode(5))
    assert_intact_episodes(path, [0, 1, 5])


def test_a_writer_killed_between_the_digests_and_the_index_entry_has_its_commit_completed(tmp_path):
    """The per-array digests recorded, the index entry not: the frames match them, so the
    commit is completed on the next append; with a frame changed since, the store is refused."""
    path = make_store(tmp_path / "s.zarr", 2)
    n_arrays = len(EpisodeStore.open(path).arrays)
    append_killed_at(path, 2, n_arrays + 1)
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(path, damaged)
    with pytest.warns(UserWarning, match="complete the commit of the episode ending at 36"):
        store = EpisodeStore.open(path, "a")
    assert len(store) == 3
    assert_intact_episodes(path, [0, 1, 2])

    state = zarr.open_array(str(damaged / "data/state"), mode="r+")
    state[30] = state[30] + 1  # a frame of the uncommitted episode changed: no digest vouches for it
    with pytest.raises(StoreError, match="does not list them") as err:
        EpisodeStore.open(damaged, "a")
    assert "\n" not in str(err.value)


def assert_intact_episodes(path: Path, made_from: list[int]) -> None:
    store = EpisodeStore.open(path)
    assert len(store) == len(made_from) and check_store(path)["ok"]
    for i, source in enumerate(made_from):
        got, want = store.get_episode(i), episode(source)
        assert all(np.array_equal(got[k], np.asarray(want[k], dtype=got[k].dtype)) for k in want)

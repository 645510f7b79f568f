"""The episode store: round trips, crash safety, demo loading, and every user-facing error."""

import json
import warnings

import numpy as np
import pytest
import zarr

from robot_rl.commands.cli import main
from robot_rl.data.demos import load_demos
from robot_rl.data.info import FORMAT_ATTRS
from robot_rl.commands.record import record_rollouts
from robot_rl.data.recorder import EpisodeRecorder, transitions
from robot_rl.data.schema import FRAME_FIELDS
from robot_rl.data.store import EpisodeStore, StoreError
from robot_rl.envs import make_env
from robot_rl.rollout import collect_demos
from tests.helpers.common import synthetic_episode  # noqa: E402

FIELDS = {"state": ((5,), np.float32), "action": ((7,), np.float32), "front": ((16, 20, 3), np.uint8),
          "privileged_cube": ((7,), np.float32)}
CAMERAS = {"front": (16, 20)}


def new_store(path, images="lossless") -> EpisodeStore:
    return EpisodeStore.create(path, FIELDS, task="PickCube", robot="panda", control_hz=10, cameras=CAMERAS,
                               images=images)


def assert_episode_equal(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_every_field_and_dtype_round_trips(tmp_path):
    store = new_store(tmp_path / "s.zarr")
    episodes = [synthetic_episode(i) for i in range(4)]
    assert [store.add_episode(e) for e in episodes] == [0, 1, 2, 3]
    again = EpisodeStore.open(tmp_path / "s.zarr")
    assert len(again) == again.n_episodes == 4
    assert list(again.episode_lengths) == [len(e["action"]) for e in episodes]
    for got, want in zip(again, episodes):
        assert_episode_equal(got, want)
    assert_episode_equal(again[-1], episodes[-1])
    start, stop = again.episode_range(2)
    part = again.read(start + 1, stop, ["front"])  # a slice, one field, without loading the rest
    np.testing.assert_array_equal(part["front"], episodes[2]["front"][1:])
    assert again.attrs["task"] == "PickCube" and again.cameras == CAMERAS and again.attrs["control_hz"] == 10
    # the layout other tools read: data/<key> time-first, meta/episode_ends
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert list(root["meta/episode_ends"][:]) == list(np.cumsum([len(e["action"]) for e in episodes]))
    assert root["data/front"].shape[1:] == (16, 20, 3)


def test_jpeg_images_are_close_and_smaller(tmp_path):
    smooth = synthetic_episode(0, frames=4)
    yy, xx = np.mgrid[0:16, 0:20]
    smooth["front"] = np.stack([np.stack([xx * 10, yy * 12, (xx + yy) * 6], -1).astype(np.uint8)] * 4)
    lossy = new_store(tmp_path / "jpeg.zarr", images="jpeg")
    lossy.add_episode(smooth)
    got = EpisodeStore.open(tmp_path / "jpeg.zarr")[0]
    assert np.abs(got["front"].astype(int) - smooth["front"]).mean() < 4
    np.testing.assert_array_equal(got["state"], smooth["state"])  # only images are lossy


def test_a_commit_that_never_happened_is_dropped_with_a_warning(tmp_path):
    store = new_store(tmp_path / "s.zarr")
    first = synthetic_episode(1)
    store.add_episode(first)
    # a writer killed after writing the frames of episode 2 but before its index entry
    partial = synthetic_episode(2)
    for key, array in store.data.arrays():
        n = array.shape[0]
        array.resize((n + 5, *array.shape[1:]))
        array[n:] = partial[key][:5] if len(partial[key]) >= 5 else np.resize(partial[key], (5, *array.shape[1:]))
    reader = EpisodeStore.open(tmp_path / "s.zarr")
    assert len(reader) == 1
    with pytest.warns(UserWarning, match="not completed"):
        writer = EpisodeStore.open(tmp_path / "s.zarr", mode="a")
    assert writer.add_episode(synthetic_episode(3)) == 1
    final = EpisodeStore.open(tmp_path / "s.zarr")
    assert_episode_equal(final[0], first)
    assert_episode_equal(final[1], synthetic_episode(3))


def test_an_index_entry_whose_value_was_never_written_is_dropped(tmp_path):
    store = new_store(tmp_path / "s.zarr")
    store.add_episode(synthetic_episode(1))
    store._ends_array.resize((2,))  # killed between growing the index and writing the entry
    assert len(EpisodeStore.open(tmp_path / "s.zarr")) == 1
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        writer = EpisodeStore.open(tmp_path / "s.zarr", mode="a")
    assert writer.add_episode(synthetic_episode(2)) == 1
    assert_episode_equal(EpisodeStore.open(tmp_path / "s.zarr")[1], synthetic_episode(2))


def test_recorder_frames_hold_the_action_taken_there_and_the_final_observation(tmp_path):
    store = EpisodeStore.create(tmp_path / "r.zarr", {"state": ((2,), np.float32), "action": ((7,), np.float32)},
                                task="PickCube", robot="panda", control_hz=10)
    clock = iter([0.0, 0.1, 0.2, 0.3]).__next__
    rec = EpisodeRecorder(store, clock=clock)
    rec.start({"state": np.array([0, 0], np.float32)})
    rec.step(np.full(7, 0.5), {"state": np.array([1, 1], np.float32)}, 0.0, False, False)
    rec.step(np.full(7, -0.5), {"state": np.array([2, 2], np.float32)}, 1.0, True, False, success=True,
             is_intervention=True)
    assert rec.finish() == 0
    ep = store[0]
    assert ep["state"][:, 0].tolist() == [0, 1, 2]
    assert ep["has_action"].tolist() == [True, True, False]
    assert ep["action"][2].tolist() == [0.0] * 7
    assert ep["reward"].tolist() == [0.0, 1.0, 0.0] and ep["terminated"].tolist() == [False, True, False]
    assert ep["success"].tolist() == [False, False, True] and ep["is_intervention"].tolist() == [False, True, False]
    np.testing.assert_allclose(ep["timestamp"], [0.0, 0.1, 0.2])
    steps = list(transitions(store, 0))
    assert len(steps) == 2 and steps[1][3]["state"].tolist() == [2, 2] and steps[1][4] is True
    with pytest.raises(StoreError, match="start"):
        rec.step(np.zeros(7), {"state": np.zeros(2, np.float32)}, 0, False, False)
    rec.start({"state": np.zeros(2, np.float32)})
    with pytest.raises(StoreError, match="at least one step"):
        rec.finish()


def test_recorded_store_gives_the_learner_exactly_the_in_memory_demos(tmp_path):
    """Same expert, same seeds: the store-loaded transitions are bit-identical to those
    collected in memory, so a store trains the learner exactly as in-memory demos do."""
    record_rollouts(tmp_path / "d.zarr", "PegInsert", 3, noise=0.1, seed=10_000, keep="successes")
    env = make_env("PegInsert")
    from_store, in_memory = [], []
    loaded = load_demos(tmp_path / "d.zarr", env, "PegInsert", from_store.append)
    collected = collect_demos(env.env, env.observation, "PegInsert", 3, in_memory.append, seed=10_000,
                              noise=0.1)
    assert len(from_store) == len(in_memory) > 0
    # each episode's steps and success, for the cycle time: the same from either
    assert loaded["episode_steps"] == collected["episode_steps"] and sum(loaded["episode_steps"]) == len(from_store)
    assert loaded["episode_success"] == collected["episode_success"] == [True] * 3
    for a, b in zip(from_store, in_memory):
        for key in a.obs:
            np.testing.assert_array_equal(a.obs[key], b.obs[key])
            np.testing.assert_array_equal(a.next_obs[key], b.next_obs[key])
        np.testing.assert_array_equal(a.action, np.asarray(b.action, np.float32))
        assert (a.reward, a.terminated, a.truncated, a.is_intervention) == (b.reward, b.terminated, b.truncated,
                                                                            b.is_intervention)


def test_demos_from_a_store_state_each_episode_s_steps_and_success(tmp_path):
    """A failed take in a demo store is loaded and counted as failed (the cycle time leaves it out);
    a held success pose after an episode's end is not part of its steps."""
    record_rollouts(tmp_path / "failed.zarr", "PickCube", 1, noise=1.0, seed=0, keep="failures", hold_after_failure=4)
    record_rollouts(tmp_path / "held.zarr", "PickCube", 1, noise=0.1, seed=10_000, keep="successes",
                    hold_after_success=5)
    env = make_env("PickCube")
    failed = load_demos(tmp_path / "failed.zarr", env, "PickCube", lambda *t: None)
    held = load_demos(tmp_path / "held.zarr", env, "PickCube", lambda *t: None)
    assert failed["episode_success"] == [False] and held["episode_success"] == [True]
    lengths = [int(EpisodeStore.open(tmp_path / name).episode_lengths[0]) for name in ("failed.zarr", "held.zarr")]
    assert failed["episode_steps"] == [lengths[0] - 1 - 4] and held["episode_steps"] == [lengths[1] - 1 - 5]


# ---------------------------------------------------------------------------------- errors
def test_opening_something_that_is_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="not an episode store"):
        EpisodeStore.open(tmp_path)
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w").attrs["x"] = 1
    with pytest.raises(StoreError, match="not a robot_rl episode store"):
        EpisodeStore.open(tmp_path / "other.zarr")


def test_a_schema_version_we_cannot_read(tmp_path):
    new_store(tmp_path / "s.zarr")
    zarr.open_group(str(tmp_path / "s.zarr"), mode="r+").attrs["schema_version"] = 99
    with pytest.raises(StoreError, match="schema version 99"):
        EpisodeStore.open(tmp_path / "s.zarr")


def test_missing_keys(tmp_path):
    new_store(tmp_path / "s.zarr")
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="r+")
    del root["data/reward"]
    with pytest.raises(StoreError, match="missing 'data/reward'"):
        EpisodeStore.open(tmp_path / "s.zarr")
    store = new_store(tmp_path / "t.zarr")
    episode = synthetic_episode(0)
    del episode["success"]
    with pytest.raises(StoreError, match=r"missing fields \['success'\]"):
        store.add_episode(episode)
    with pytest.raises(StoreError, match="no field"):
        store.read(0, 1, ["depth"])


def test_an_episode_index_past_the_end(tmp_path):
    store = new_store(tmp_path / "s.zarr")
    store.add_episode(synthetic_episode(0))
    with pytest.raises(StoreError, match="episode 1 is past the end: the store has 1 episodes"):
        store.get_episode(1)


def test_bad_episodes_and_modes(tmp_path):
    store = new_store(tmp_path / "s.zarr")
    episode = synthetic_episode(0)
    episode["front"] = episode["front"][:, :8]
    with pytest.raises(StoreError, match="shape"):
        store.add_episode(episode)
    with pytest.raises(StoreError, match="already exists"):
        new_store(tmp_path / "s.zarr")
    with pytest.raises(StoreError, match="read-only"):
        EpisodeStore.open(tmp_path / "s.zarr").add_episode(synthetic_episode(1))
    with pytest.raises(StoreError, match="mode"):
        EpisodeStore.open(tmp_path / "s.zarr", mode="w")
    with pytest.raises(StoreError, match="reserved"):
        EpisodeStore.create(tmp_path / "u.zarr", {"action": ((7,), np.float32), "reward": ((), np.float32)},
                            task="PickCube", robot="panda", control_hz=10)
    assert set(FRAME_FIELDS) <= set(store.fields)


def test_a_camera_size_mismatch_with_the_env(tmp_path):
    record_rollouts(tmp_path / "px.zarr", "PickCube", 1, images=True, image_size=(32, 32), cameras=("front", "wrist"))
    env = make_env("PickCube", obs="pixels", image_size=(24, 24))
    with pytest.raises(StoreError, match="32x32 in .* but 24x24 in the env"):
        load_demos(tmp_path / "px.zarr", env, "PickCube", lambda *t: None)
    with pytest.raises(StoreError, match="holds 'PickCube' episodes, not 'PegInsert'"):
        load_demos(tmp_path / "px.zarr", make_env("PegInsert"), "PegInsert", lambda *t: None)


@pytest.mark.integration
def test_record_cli_and_train_from_the_store(tmp_path, capsys):
    out = tmp_path / "demos.zarr"
    assert main(["record", "--task", "PegInsert", "--episodes", "2", "--out", str(out), "--successful-only"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["success_rate"] == 1.0
    assert main(["train", "--task", "PegInsert", "--demos", str(out), "--steps", "20", "--eval-every", "20",
                 "--eval-episodes", "2", "--final-eval-episodes", "2", "--learner", "inline", "--no-progress",
                 "--run-dir", str(tmp_path / "run"), "--agent", "hidden=[32,32]"]) == 0
    out = capsys.readouterr().out
    assert "loaded 2 demonstrations" in out
    assert json.loads(out.strip().splitlines()[-1])["demos"] == 2
    assert main(["record", "--task", "PickCube", "--episodes", "2", "--noise", "1.0", "--failed-only",
                 "--hold-after-failure", "3", "--hold-motion", "0.3", "--hold-rise", "0.5",
                 "--out", str(tmp_path / "fail.zarr")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["successes"] == 0
    assert summary["frames"] == 2 * (100 + 3 + 1)  # the time limit, 3 frames of motion after it, the last frame
    tcp_z = EpisodeStore.open(tmp_path / "fail.zarr").get_episode(0, ["state"])["state"][:, 2]
    assert tcp_z[-1] > tcp_z[-4]  # the arm rose after the take
    assert not EpisodeStore.open(tmp_path / "fail.zarr").read(0, summary["frames"], ["success"])["success"].any()
    with pytest.raises(SystemExit):
        main(["record", "--successful-only", "--failed-only", "--out", str(tmp_path / "x.zarr")])
    assert "not allowed with argument --successful-only" in capsys.readouterr().err
    assert main(["train", "--task", "PegInsert", "--demos", str(tmp_path / "nope.zarr"), "--steps", "5"]) == 2
    assert "no such path" in capsys.readouterr().err


# ----------------------------------------------------------------------------- crash safety
@pytest.mark.faults
def test_sigkill_at_chosen_writes_never_loses_a_completed_episode(tmp_path):
    """A recording process stops after every file it writes until the test says go, so each of
    16 SIGKILLs lands exactly where chosen, whatever the machine's load: among an episode's
    frames, right after the index grew (its entry not yet written), right after a commit, and
    in the middle of the next writer's clean-up. After every kill each episode reported
    committed reads back bit-identical, the store says what the next writer will repair, and
    that writer repairs it and appends."""
    import random
    import sys
    from pathlib import Path

    helpers = Path(__file__).parent / "helpers"
    sys.path.insert(0, str(helpers))
    from record_forever import synthetic_episode
    from write_gate import GatedProcess

    from robot_rl.data import check_store

    path = tmp_path / "crash.zarr"
    rng = random.Random(0)
    kinds = ["frames", "repair", "index grown", "committed"]  # "repair": kill the clean-up of the "frames" kill
    committed = -1
    for round_ in range(16):
        kind = kinds[round_ % 4]
        episodes_first = rng.randint(0, 2)  # episodes to let through before the kill
        kill_at_write = rng.randint(1, 20)  # an episode writes >= 22 files under data/ (a resize, then chunks)
        writer = GatedProcess([str(helpers / "record_forever.py"), str(path)], stderr=open(tmp_path / "err.log", "a"))
        ready, writes, killed = False, 0, False
        for line in writer.lines():
            word, value = line.split()
            if word == "ready":
                ready = True
                continue
            if word == "committed":
                committed, writes, episodes_first = max(committed, int(value)), 0, episodes_first - 1
                continue
            writes += 1
            armed = ready and episodes_first <= 0
            if ((kind == "frames" and armed and value.startswith("data/") and writes >= kill_at_write)
                    or (kind == "repair" and not ready)
                    or (kind == "index grown" and armed and value == "meta/episode_ends/zarr.json")
                    or (kind == "committed" and armed and value.startswith("meta/episode_ends/c/"))):
                writer.kill()
                killed = True
                break
            writer.go()
        assert killed, (round_, kind, "the writer ended without being killed")
        found = EpisodeStore.load(path).inspect_index()
        assert found.problem is None, (round_, kind, found.problem)
        expected = {"frames": "drop", "repair": "drop", "index grown": "complete index entry", "committed": None}[kind]
        assert found.fix is None if expected is None else found.fix.startswith(expected), (round_, kind, found.fix)
        store = EpisodeStore.open(path)
        assert len(store) >= committed + 1, (round_, len(store), committed)
        frames = store.read(0, store.n_frames)  # one read of everything, then episode by episode
        for i in range(len(store)):
            start, stop = store.episode_range(i)
            for key, want in synthetic_episode(i).items():
                np.testing.assert_array_equal(frames[key][start:stop], want, err_msg=f"round {round_} episode {i} {key}")
    assert committed >= 8, committed  # the writers really made progress between kills
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        EpisodeStore.open(path, mode="a")  # the last kill's leftovers cleaned up
    report = check_store(path)
    assert report["ok"] and report["episodes"] >= committed + 1 and report["fix"] is None, report


# ------------------------------------------------------------------------------------ tools
def test_data_tools_info_merge_split_and_video(tmp_path, capsys):
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    store_a, store_b = new_store(a), new_store(b)
    eps = [synthetic_episode(i) for i in range(5)]
    for e in eps[:3]:
        store_a.add_episode(e)
    for e in eps[3:]:
        store_b.add_episode(e)
    assert main(["data", "merge", str(a), str(b), "--out", str(tmp_path / "m.zarr")]) == 0
    merged = EpisodeStore.open(tmp_path / "m.zarr")
    assert len(merged) == 5
    for i in range(5):
        assert_episode_equal(merged[i], eps[i])
    assert main(["data", "split", str(tmp_path / "m.zarr"), "--episodes", "0,3-4", "--out", str(tmp_path / "s.zarr")]) == 0
    part = EpisodeStore.open(tmp_path / "s.zarr")
    assert len(part) == 3
    assert_episode_equal(part[1], eps[3])
    capsys.readouterr()
    assert main(["data", "info", str(tmp_path / "m.zarr"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    flags = [(e["success"].any(), e["is_intervention"][e["has_action"]]) for e in eps]
    steps = [len(e["action"]) - 1 for e in eps]
    assert summary["episodes"] == 5 and summary["frames"] == sum(len(e["action"]) for e in eps)
    assert summary["steps"] == sum(steps) and summary["steps_per_episode"] == {
        "min": min(steps), "median": float(np.median(steps)), "max": max(steps), "mean": pytest.approx(np.mean(steps))}
    assert summary["success_rate"] == pytest.approx(np.mean([s for s, _ in flags]))
    assert summary["successful_episodes"] == sum(s for s, _ in flags)
    assert summary["intervention_share"] == pytest.approx(np.concatenate([i for _, i in flags]).mean())
    assert summary["intervention_steps"] == sum(int(i.sum()) for _, i in flags)
    assert summary["episodes_with_intervention"] == sum(bool(i.any()) for _, i in flags)
    assert summary["cameras"] == {"front": [16, 20]}
    assert main(["data", "export-video", str(a), "--out", str(tmp_path / "v.mp4"), "--episodes", "1"]) == 0
    import imageio.v3 as iio

    video = iio.imread(tmp_path / "v.mp4", plugin="pyav")
    assert video.shape[0] == len(eps[1]["action"]) and video.shape[2] >= 20
    assert main(["data", "view", str(a), "--episodes", "0"]) == 0
    assert (tmp_path / "a.zarr.view.gif").is_file()


def test_data_tool_errors(tmp_path, capsys):
    a = tmp_path / "a.zarr"
    new_store(a).add_episode(synthetic_episode(0))
    assert main(["data", "split", str(a), "--episodes", "0,7", "--out", str(tmp_path / "x.zarr")]) == 2
    assert "episode 7 is past the end" in capsys.readouterr().err
    assert main(["data", "info", str(tmp_path)]) == 2
    assert "not an episode store" in capsys.readouterr().err
    assert main(["data", "export-video", str(a), "--out", str(tmp_path / "v.avi")]) == 2
    assert ".mp4 or .gif" in capsys.readouterr().err
    other = EpisodeStore.create(tmp_path / "o.zarr", {"action": ((7,), np.float32)}, task="PickCube", robot="panda",
                                control_hz=10)
    other.add_episode({k: synthetic_episode(1)[k] for k in ["action", *FRAME_FIELDS]})
    assert main(["data", "merge", str(a), str(tmp_path / "o.zarr"), "--out", str(tmp_path / "m.zarr")]) == 2
    assert "cannot merge" in capsys.readouterr().err
    assert main(["data", "export-video", str(tmp_path / "o.zarr"), "--out", str(tmp_path / "v.mp4")]) == 2
    assert "no cameras" in capsys.readouterr().err


def store_arrays(path) -> list[str]:
    """Every array of a store, found on disk: data/<field> and meta/<name>."""
    return sorted(str(f.parent.relative_to(path)) for f in path.glob("*/*/zarr.json"))


def test_data_info_shows_every_array_and_attribute_of_a_recorded_store(tmp_path, capsys):
    path = tmp_path / "px.zarr"
    record_rollouts(path, "PickCube", 2, noise=0.1, seed=10_000, images=True, image_size=(16, 16))
    arrays = store_arrays(path)
    assert {"data/front", "data/wrist", "data/reward", "data/success", "data/is_intervention",
            "meta/episode_ends"} <= set(arrays)
    assert main(["data", "info", str(path)]) == 0
    text = capsys.readouterr().out
    rows = {cells[0]: cells for cells in map(str.split, text.splitlines()) if cells and cells[0] in arrays}
    assert sorted(rows) == arrays, text  # a row per array, each on its own line
    store = EpisodeStore.open(path)
    for name, (shape, dtype) in store.fields.items():
        assert rows[f"data/{name}"][2:4] == [dtype.name, "x".join(map(str, shape)) or "scalar"], text
    assert rows["data/front"][1] == "camera" and rows["data/reward"][1] == "reward" and rows["meta/episode_ends"][1] == "index"
    # every attribute the store records: its format, task and cameras, and how it was recorded
    for shown in ("robot_rl.episodes schema 1 (Zarr 3)", "integrity crc32c", "task PickCube, robot panda, 10 Hz",
                  "cameras: front 16x16, wrist 16x16 (image codec lossless)"):
        assert shown in text, (shown, text)
    recorded = {k: v for k, v in store.attrs.items() if k not in FORMAT_ATTRS}
    assert "backend" in recorded and "expert_noise" in recorded
    assert all(f"{key}={value}" in text for key, value in recorded.items()), text
    for label in ("episodes", "steps per episode", "success", "interventions", "size"):
        assert any(line.startswith(label + " ") for line in text.splitlines()), (label, text)
    assert not any(line.startswith("{") for line in text.splitlines())  # a summary for people, not JSON

    assert main(["data", "info", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(summary["arrays"]) == arrays
    for name, row in rows.items():  # the JSON holds what the table shows
        entry = summary["arrays"][name]
        assert [entry["role"], entry["dtype"], str(entry["chunk"]), str(entry["shard"] or "-")] == row[1:3] + row[4:6]
        assert entry["bytes_on_disk"] > 0 and entry["codecs"].endswith("crc32c")
    assert summary["arrays"]["data/front"]["shard"] == 64 and summary["arrays"]["data/front"]["chunk"] == 1
    data_group = (path / "data/zarr.json").stat().st_size
    arrays_bytes = sum(a["bytes_on_disk"] for n, a in summary["arrays"].items() if n.startswith("data/"))
    assert arrays_bytes + data_group == summary["bytes_on_disk"]
    assert summary["attrs"] == store.attrs and summary["task"] == "PickCube" and summary["zarr_format"] == 3
    assert summary["episodes"] == 2 and summary["successful_episodes"] == round(2 * summary["success_rate"])
    flat, per = " ".join(text.split()), summary["steps_per_episode"]
    assert f"episodes 2 steps {summary['steps']} (in {summary['frames']} frames" in flat
    assert f"steps per episode min {per['min']}, median {per['median']:g}, max {per['max']}" in flat
    assert f"success {summary['successful_episodes']} of 2 episodes" in flat


def test_data_info_on_a_missing_or_corrupt_store_is_one_line_naming_the_file(tmp_path, capsys):
    garbled = tmp_path / "garbled.zarr"
    garbled.mkdir()
    (garbled / "zarr.json").write_text("{not json")
    (tmp_path / "file.zarr").write_text("")
    cases = {tmp_path / "absent.zarr": "it does not exist", tmp_path / "file.zarr": "a file, not a folder",
             tmp_path: "no zarr.json", garbled / "zarr.json": "not a readable Zarr store"}
    for named, why in cases.items():
        path = named.parent if named.name == "zarr.json" else named
        for json_flag in ([], ["--json"]):
            assert main(["data", "info", str(path), *json_flag]) == 2
            out, err = capsys.readouterr()
            assert out == "" and len(err.strip().splitlines()) == 1, err
            assert err.startswith(f"robot-rl: error: {named}") and why in err, err


def test_held_success_frames_label_by_ground_truth_and_stay_out_of_demos(tmp_path):
    record_rollouts(tmp_path / "h.zarr", "PickCube", 2, noise=0.1, seed=10_000, keep="successes", hold_after_success=5)
    store = EpisodeStore.open(tmp_path / "h.zarr")
    plain = EpisodeStore.open(record_rollouts(tmp_path / "p.zarr", "PickCube", 2, noise=0.1, seed=10_000,
                                            keep="successes")["path"])
    for i in range(2):
        held, ep = store[i], plain[i]
        assert len(held["action"]) == len(ep["action"]) + 5
        assert held["success"][len(ep["action"]) - 1:].all()  # the still arm keeps the cube up
        assert len(list(transitions(store, i))) == len(list(transitions(plain, i)))  # demos end at the success
    assert store.attrs["hold_after_success"] == 5
    moving = EpisodeStore.open(record_rollouts(tmp_path / "m.zarr", "PickCube", 2, noise=0.1, seed=10_000,
                                             keep="successes", hold_after_success=15, hold_motion=0.5)["path"])
    for i in range(2):
        held, ep = moving[i], plain[i]
        hold = held["action"][len(ep["action"]) - 1:-1]  # the actions taken while holding
        assert np.abs(hold[:, :3]).max() > 0.2 and (hold[:, 3:] == 0).all()  # translation only
        z = held["privileged_cube"][:, 2]
        labels = held["success"]
        start_z = z[0]
        np.testing.assert_array_equal(labels[len(ep["action"]):], z[len(ep["action"]):] >= start_z + 0.10)
    going_on = EpisodeStore.open(record_rollouts(tmp_path / "c.zarr", "PickCube", 1, noise=0.1, seed=10_000,
                                               keep="successes", continue_after_success=5)["path"])[0]
    n = len(plain[0]["action"])
    assert len(going_on["action"]) == n + 5
    assert (going_on["action"][n - 1:-1, 6] == 1).all()  # the expert keeps the gripper closed and lifts on
    assert going_on["privileged_cube"][-1, 2] > going_on["privileged_cube"][n - 1, 2]
    to_the_limit = EpisodeStore.open(record_rollouts(tmp_path / "l.zarr", "PickCube", 1, noise=0.1, seed=10_000,
                                                   keep="successes", continue_after_success=10_000)["path"])[0]
    assert len(to_the_limit["action"]) == 100 + 1  # the time limit of PickCube, then the final frame
    with pytest.raises(ValueError, match="not both"):
        record_rollouts(tmp_path / "x.zarr", "PickCube", 1, hold_after_success=2, continue_after_success=2)


def test_a_released_hold_drops_the_object_and_ground_truth_labels_the_fall(tmp_path):
    released = EpisodeStore.open(record_rollouts(tmp_path / "r.zarr", "PickCube", 2, noise=0.1, seed=10_000,
                                               keep="successes", hold_after_success=20, hold_rise=0.5,
                                               hold_release=1.0)["path"])
    for i in range(2):
        ep = released[i]
        n_hold_start = len(ep["action"]) - 21  # the 20 hold actions, then the final frame's
        opened = n_hold_start + np.flatnonzero(ep["action"][n_hold_start:-1, 6] < -0.5)
        assert len(opened) and opened[0] >= n_hold_start + 10  # in the hold's second half, then open for good
        assert (ep["action"][opened[0]:-1, 6] == -1).all()
        z = ep["privileged_cube"][:, 2]
        assert z[-1] < z[opened[0]] - 0.05  # it fell
        np.testing.assert_array_equal(ep["success"][n_hold_start:], z[n_hold_start:] >= z[0] + 0.10)
        assert ep["success"][opened[0]] and not ep["success"][-1]
    with pytest.raises(ValueError, match="share of takes"):
        record_rollouts(tmp_path / "y.zarr", "PickCube", 1, hold_after_success=2, hold_release=1.5)


def test_spread_layouts_take_scenes_that_cover_the_task_evenly(tmp_path):
    from robot_rl.commands.record import spread_reset_seeds
    from robot_rl.sim import make

    order = spread_reset_seeds("PegInsertHard", "mujoco", 10_000, 60)
    assert order[0] == 10_000 and sorted(order) == list(range(10_000, 10_060))  # every reset once, the first first
    env = make("PegInsertHard", "mujoco")
    try:
        def closest_pair_mm(seeds):
            holes = np.array([env.reset(seed=s)[0]["privileged"]["hole"][:2] for s in seeds])
            gaps = np.linalg.norm(holes[:, None] - holes[None], axis=-1) + np.eye(len(holes))
            return 1000 * gaps.min()
        spread, consecutive = closest_pair_mm(order[:10]), closest_pair_mm(range(10_000, 10_010))
        first_holes = [env.reset(seed=s)[0]["privileged"]["hole"] for s in order[:2]]
    finally:
        env.close()
    assert spread > 2 * consecutive, (spread, consecutive)
    # the store's episodes are those scenes, in that order
    store = EpisodeStore.open(record_rollouts(tmp_path / "s.zarr", "PegInsertHard", 2, noise=0.1, seed=10_000,
                                              spread_layouts=60)["path"])
    recorded = [store.get_episode(i, ["privileged_hole"])["privileged_hole"][0] for i in range(2)]
    np.testing.assert_allclose(np.stack(recorded), np.stack(first_holes), atol=1e-6)


@pytest.mark.parametrize("args, says", [
    (["--episodes", "3", "--spread-layouts", "2"], "--spread-layouts N picks the twin's scenes from N resets, at least "
                                                   "--episodes (3) and without --env; got 2"),
    (["--episodes", "1", "--spread-layouts", "5", "--env", "gymnasium:Pendulum-v1", "--env-expert", "m:f"],
     "got 5 with --env gymnasium:Pendulum-v1"),
])
def test_record_refuses_spread_layouts_it_cannot_take(tmp_path, capsys, args, says):
    assert main(["record", "--task", "PegInsertHard", "--out", str(tmp_path / "x.zarr"), *args]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()

"""Injected corruptions for ``robot-rl bench faults`` (the kill loops and the run: ``faults.py``).

Each on a fresh copy: an episode store's index (one entry below its neighbours, an emptied index
chunk), a deleted image shard, garbled image and numeric chunks, a garbled array ``zarr.json``, an
image shard copied over another's place, a store attribute of the wrong type, one camera's shard
swapped with another's (read by a reader of that camera alone), an older ``meta/`` copied over newer
data; a checkpoint's weights overwritten, a NaN in its weights, a truncated replay file, a save cut
short (a leftover ``.tmp`` folder); a full disk (ENOSPC injected) during an append and during a
checkpoint save; an env that hangs in a worker and Ctrl-C to a worker run's process group (from
``faults.py``). What counts as detected: ``faults.py``'s module doc.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from robot_rl.bench.faults import CLI, Child, episodes_equal, synthetic_store, train_args, worker_env_faults


def flip_bytes(path: Path, rng: random.Random, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    lo = len(data) // 4
    for _ in range(count):
        i = rng.randrange(lo, len(data))
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def store_damage(store: Path, rng: random.Random) -> dict:
    """name -> (function damaging a copy of the store, the file it damages)."""
    def index_entry(path: Path) -> Path:
        import zarr

        ends = zarr.open_array(str(path / "meta/episode_ends"), mode="r+")
        ends[ends.shape[0] // 2] = 3  # below its neighbours
        return path / "meta" / "episode_ends"

    def index_chunk(path: Path) -> Path:
        chunk = next(p for p in (path / "meta/episode_ends").rglob("*") if p.is_file() and p.name != "zarr.json")
        chunk.write_bytes(b"")
        return chunk

    def image_shard(path: Path) -> Path:
        shard = sorted(p for p in (path / "data/front").rglob("*") if p.is_file() and p.name != "zarr.json")[0]
        shard.unlink()
        return shard

    def image_chunk(path: Path) -> Path:
        shard = sorted(p for p in (path / "data/wrist").rglob("*") if p.is_file() and p.name != "zarr.json")[0]
        flip_bytes(shard, rng)
        return shard

    def numeric_chunk(path: Path) -> Path:
        chunk = sorted(p for p in (path / "data/state").rglob("*") if p.is_file() and p.name != "zarr.json")[0]
        flip_bytes(chunk, rng)
        return chunk

    def array_metadata(path: Path) -> Path:
        meta = path / "data/action/zarr.json"
        meta.write_text(meta.read_text()[: len(meta.read_text()) // 2])
        return meta

    def image_shard_misplaced(path: Path) -> Path:
        """The tester's: the second image shard of each camera copied over the first (it passes
        its CRC; only the episodes' commit digests tell)."""
        for cam in ("front", "wrist"):
            shards = sorted(p for p in (path / f"data/{cam}").rglob("*") if p.is_file() and p.name != "zarr.json")
            shards[0].write_bytes(shards[1].read_bytes())
        return shards[0]

    def attribute_wrong_type(path: Path) -> Path:
        """The tester's: a store attribute of the wrong type (``control_hz: "ten"``)."""
        import zarr

        zarr.open_group(str(path), mode="r+").attrs["control_hz"] = "ten"
        return path / "zarr.json"

    return {"store_index_entry": index_entry, "store_index_chunk": index_chunk, "store_image_shard_deleted": image_shard,
            "store_image_chunk_garbled": image_chunk, "store_numeric_chunk_garbled": numeric_chunk,
            "store_array_metadata_garbled": array_metadata, "store_image_shard_misplaced": image_shard_misplaced,
            "store_attribute_wrong_type": attribute_wrong_type}


def one_camera_reader_detects_swapped_shards(path: Path) -> tuple[bool, str]:
    """The tester's: camera ``front``'s first shard swapped with ``wrist``'s (each passes its
    CRC), then every episode read as a reader of ``front`` alone reads it (export-video, view,
    classifier train): each read of a swapped episode is one line naming front's shard."""
    from robot_rl.data.store import EpisodeStore
    from robot_rl.errors import UserFacingError

    front, wrist = (sorted(p for p in (path / f"data/{cam}").rglob("*") if p.is_file() and p.name != "zarr.json")[0]
                    for cam in ("front", "wrist"))
    a, b = front.read_bytes(), wrist.read_bytes()
    front.write_bytes(b)
    wrist.write_bytes(a)
    store, refused, said = EpisodeStore.open(path), 0, []
    for i in range(len(store)):
        try:
            store.get_episode(i, ["front"])
        except UserFacingError as err:
            refused += "\n" not in str(err) and str(front.relative_to(path)) in str(err)
            said.append(str(err))
    swapped = sum(1 for i in range(len(store)) if store.episode_range(i)[0] < store.arrays["front"].shards[0])
    return refused == swapped > 0, f"{refused} of the {swapped} swapped episodes refused" + (f": {said[0]}" if said else "")


def older_index_over_newer_data(path: Path, more: int = 3) -> tuple[bool, str, int]:
    """The tester's: a backup of ``meta/``, ``more`` episodes appended, the backup copied back.
    Detected when ``data check`` lists the episodes the index does not, an append refuses in one
    line and ``--repair`` restores them bit-identical; also returns the committed episodes lost."""
    from robot_rl.data import check_store
    from robot_rl.data.store import EpisodeStore, StoreError

    backup = path.parent / f"{path.name}.meta-backup"
    shutil.copytree(path / "meta", backup)
    store = EpisodeStore.open(path, "a")
    before = len(store)
    added = [store.get_episode(i) for i in range(more)]
    for episode in added:
        store.add_episode(episode)
    shutil.copytree(backup, path / "meta", dirs_exist_ok=True)  # the fault
    report = check_store(path)
    listed = not report["ok"] and len(report.get("unlisted_episodes", {})) == more
    try:
        EpisodeStore.open(path, "a")
        refused = False
    except StoreError as err:
        refused = "\n" not in str(err) and "data check --repair" in str(err)
    repaired = check_store(path, repair=True)
    after = EpisodeStore.open(path)
    kept = sum(1 for k, episode in enumerate(added) if before + k < len(after)
               and episodes_equal(after.get_episode(before + k), episode))
    ok = listed and refused and repaired["ok"] and kept == more
    return ok, f"listed by check: {listed}; append refused: {refused}; restored {kept} of {more}", more - kept


def disk_full_error(filename: str) -> OSError:
    import errno

    return OSError(errno.ENOSPC, "No space left on device", filename)


def store_survives_a_full_disk(path: Path) -> tuple[bool, str]:
    """An append that runs out of space mid-episode: the error says so, every committed episode
    stays, and once there is space again the store appends."""
    import warnings

    import zarr

    from robot_rl.data import check_store
    from robot_rl.data.store import EpisodeStore
    from robot_rl.errors import is_disk_full

    store = EpisodeStore.open(path, "a")
    before, episode = len(store), store.get_episode(0)
    real_setitem, writes = zarr.Array.__setitem__, []

    def setitem(array, selection, value):
        if len(writes) == 3:  # some of the episode's arrays are written, then the disk is full
            raise disk_full_error(str(path / "data"))
        writes.append(1)
        real_setitem(array, selection, value)

    zarr.Array.__setitem__ = setitem
    try:
        store.add_episode(episode)
        said = "the append went through"
    except OSError as err:
        said = str(err) if is_disk_full(err) else f"another error: {err!r}"
    finally:
        zarr.Array.__setitem__ = real_setitem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cut-off frames are dropped, with a warning
        after = EpisodeStore.open(path, "a")
        kept = len(after) == before and check_store(path)["ok"]
        after.add_episode(episode)
    appended = len(EpisodeStore.open(path)) == before + 1 and check_store(path)["ok"]
    return "No space left" in said and kept and appended, f"{said}; kept {before} episodes: {kept}; appended after: {appended}"


def checkpoint_survives_a_full_disk(run: Path) -> tuple[bool, str]:
    """A checkpoint save that runs out of space: one line naming it, no half-written folder, the
    newest complete checkpoint still the one a resume finds."""
    from robot_rl.errors import DiskFullError
    from robot_rl.runtime import checkpoint

    newest = checkpoint.latest_checkpoint(run)
    agent = checkpoint.load_agent(newest / "agent.safetensors")
    real_save = checkpoint.save_agent
    checkpoint.save_agent = lambda agent, path: (_ for _ in ()).throw(disk_full_error(str(path)))
    try:
        checkpoint.write_checkpoint(run, "step_999999999", agent, None, {})
        return False, "the save went through"
    except DiskFullError as err:
        message = str(err)
    finally:
        checkpoint.save_agent = real_save
    clean = not any(p.name.startswith("step_999999999") for p in (run / "checkpoints").iterdir())
    same = checkpoint.latest_checkpoint(run) == newest
    return "\n" not in message and clean and same, f"{message}; no partial folder: {clean}; newest still {newest.name}: {same}"


def store_detects(path: Path, damaged: Path) -> tuple[bool, str]:
    """Checked as a user would: ``robot-rl data check`` and reading every episode."""
    from robot_rl.data import check_store
    from robot_rl.data.store import EpisodeStore
    from robot_rl.errors import UserFacingError

    names = (str(damaged), str(damaged.relative_to(path)))
    try:
        report = check_store(path)
        checked = not report["ok"] and any(n in json.dumps(report) for n in names + (str(path),))
    except UserFacingError as err:
        checked = any(n in str(err) for n in names + (str(path),))
    try:
        store = EpisodeStore.open(path)
        for i in range(len(store)):
            store[i]
        read = f"read all {len(store)} episodes without an error"
    except UserFacingError as err:
        read = str(err)
        checked = checked and ("\n" not in read) and any(n in read for n in names + (str(path),))
    return checked, read


def checkpoint_damage(ckpt_root: Path, rng: random.Random) -> dict:
    from safetensors.torch import load_file, save_file

    def weights_overwritten(run: Path) -> Path:
        from safetensors import safe_open

        path = latest_named(run) / "agent.safetensors"
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        tensors = load_file(str(path))
        for key in tensors:
            if key.startswith("model.actor"):
                tensors[key] = tensors[key].clone().fill_(1.0)
        save_file(tensors, str(path), metadata=meta)
        return path

    def weights_nan(run: Path) -> Path:
        from safetensors import safe_open

        from robot_rl.runtime import checkpoint

        ckpt = latest_named(run)
        path = ckpt / "agent.safetensors"
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        tensors = load_file(str(path))
        key = next(k for k in tensors if k.startswith("model.") and tensors[k].is_floating_point())
        tensors[key] = tensors[key].clone()
        tensors[key].view(-1)[0] = float("nan")
        save_file(tensors, str(path), metadata=meta)
        checkpoint.write_manifest(ckpt)  # as a diverged training would have saved it: checksums agree
        return path

    def replay_truncated(run: Path) -> Path:
        path = latest_named(run) / "replay" / "online.npz"
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        return path

    return {"checkpoint_weights_overwritten": weights_overwritten, "checkpoint_weights_nan": weights_nan,
            "checkpoint_replay_truncated": replay_truncated}


def latest_named(run: Path) -> Path:
    root = run / "checkpoints"
    return root / (root / "latest").read_text().strip()


def checkpoint_detects(run: Path, damaged: Path) -> tuple[bool, str]:
    """Checked as ``eval`` / ``train --resume`` would: verify and load the newest checkpoint."""
    from robot_rl.runtime.checkpoint import load_agent, load_replay, verify_checkpoint
    from robot_rl.errors import UserFacingError

    ckpt = latest_named(run)
    try:
        verify_checkpoint(ckpt)
        load_agent(ckpt / "agent.safetensors")
        load_replay(ckpt)
        return False, "loaded without an error"
    except UserFacingError as err:
        message = str(err)
        return (str(damaged) in message or str(ckpt) in message) and "\n" not in message, message


def each_on_a_copy(source: Path, damages: dict, detects, work: Path, suffix: str, results: dict, log) -> None:
    """Each damage (name -> function damaging a folder, returning the file it damaged) on a fresh
    copy of ``source``; ``detects(copy, damaged)`` -> (detected, message) goes into ``results``."""
    for name, damage in damages.items():
        copy = work / f"{name}{suffix}"
        shutil.copytree(source, copy)
        results[name], message = detects(copy, damage(copy))
        log(f"{name}: {'detected' if results[name] else 'MISSED'}: {message}")


def corruptions(work: Path, rng: random.Random, log, quick: bool = False, good_run: Path | None = None) -> dict:
    """``good_run``: a finished training run whose checkpoints the damages copy (the train loop's,
    resumed to its end); None: a small one is trained here."""
    from robot_rl.runtime.checkpoint import latest_checkpoint

    good_store = work / "corrupt-source.zarr"
    synthetic_store(good_store, 12, seed=7)
    results: dict[str, bool] = {}
    each_on_a_copy(good_store, store_damage(good_store, rng), store_detects, work, ".zarr", results, log)

    copy = work / "store_camera_shards_swapped.zarr"
    shutil.copytree(good_store, copy)
    results["store_camera_shards_swapped"], message = one_camera_reader_detects_swapped_shards(copy)
    log(f"store_camera_shards_swapped: {'detected' if results['store_camera_shards_swapped'] else 'MISSED'}: {message}")
    copy = work / "store_older_index.zarr"
    shutil.copytree(good_store, copy)
    results["store_older_index_over_newer_data"], message, lost = older_index_over_newer_data(copy)
    log(f"store_older_index_over_newer_data: {'held' if lost == 0 else 'LOST EPISODES'}: {message}")

    if good_run is None:
        good_run = work / "corrupt-train"
        child = Child(CLI + train_args(good_run, 400, 200))
        if child.finish(1200) != 0:
            raise RuntimeError(f"the small training run failed:\n{child.output()[-2000:]}")
    each_on_a_copy(good_run, checkpoint_damage(good_run, rng), checkpoint_detects, work, "", results, log)

    copy = work / "store_disk_full.zarr"
    shutil.copytree(good_store, copy)
    results["store_disk_full"], message = store_survives_a_full_disk(copy)
    log(f"store_disk_full: {'held' if results['store_disk_full'] else 'MISSED'}: {message}")
    copy = work / "checkpoint_disk_full"
    shutil.copytree(good_run, copy)
    results["checkpoint_disk_full"], message = checkpoint_survives_a_full_disk(copy)
    log(f"checkpoint_disk_full: {'held' if results['checkpoint_disk_full'] else 'MISSED'}: {message}")

    results.update(worker_env_faults(work, log, resume=not quick))

    # a save cut short: a complete-looking folder under the temporary name, newer than the rest
    copy = work / "checkpoint_save_cut_short"
    shutil.copytree(good_run, copy)
    newest = latest_named(copy)
    shutil.copytree(newest, newest.parent / "step_999999999.tmp")
    (newest.parent / "step_999999999.tmp" / "state.json").unlink()
    found = latest_checkpoint(copy)
    results["checkpoint_save_cut_short"] = found is not None and found.name == newest.name
    log(f"checkpoint_save_cut_short: {'passed over' if results['checkpoint_save_cut_short'] else 'MISSED'} "
        f"(latest: {found})")
    return {"corruptions_injected": len(results), "corruptions_detected": sum(results.values()),
            "corruptions": results, "older_index_episodes_lost": lost}

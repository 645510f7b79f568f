"""``robot-rl bench data``: episode-store write/read speed and size, and demo loading time.

Frames are real sim frames (PickCube, front + wrist cameras at 128x128, scripted expert),
rendered once and then cycled, so compression sees what a recording sees. One core: every
thread of the process is pinned to one CPU for the duration. Figures:

* ``write_frames_per_s`` / ``read_frames_per_s``: frames (2 images + state + action + flags)
  per second through ``EpisodeStore.add_episode`` / ``get_episode``, lossless default codec
  (a whole-episode read checks the episode's commit digest: ``digest_ms_per_episode`` and
  ``digest_share_of_read``, its cost against ``read_unverified_frames_per_s``);
* ``compression_ratio``: raw bytes / bytes on disk (lossless); ``lossy_*`` the same with JPEG;
* ``candidates``: the image codecs we chose among, each with write speed and ratio;
* ``load_100_episodes_s``: a 100-episode store into the learner's demo buffer (pixels obs).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from robot_rl.data.demos import load_demos
from robot_rl.data.recorder import flatten_observation, store_fields
from robot_rl.data.schema import episode_digest
from robot_rl.data.store import EpisodeStore

IMAGE_SIZE = (128, 128)
CAMERAS = ("front", "wrist")
FULL = {"source_episodes": 3, "episodes": 100, "episode_len": 20, "candidate_episodes": 20}
QUICK = {"source_episodes": 1, "episodes": 10, "episode_len": 10, "candidate_episodes": 4}


def source_frames(episodes: int) -> tuple[list[dict], object]:
    """Contract observations and actions of real expert episodes, with both cameras."""
    from robot_rl.sim import make
    from robot_rl.sim.experts import make_expert

    env = make("PickCube", images=True, image_size=IMAGE_SIZE, cameras=CAMERAS)
    expert = make_expert("PickCube", noise=0.1, seed=0)
    frames = []
    for i in range(episodes):
        obs, _ = env.reset(seed=i)
        expert.reset()
        while True:
            action = expert(obs)
            frames.append({**flatten_observation(obs), "action": np.asarray(action, np.float32)})
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    return frames, env


def make_episode(frames: list[dict], start: int, length: int, fields: dict) -> dict:
    chosen = [frames[(start + t) % len(frames)] for t in range(length)]
    episode = {k: np.stack([f[k] for f in chosen]).astype(fields[k][1]) for k in fields}
    episode.update(reward=np.zeros(length, np.float32), terminated=np.arange(length) == length - 2,
                   truncated=np.zeros(length, bool), is_intervention=np.zeros(length, bool),
                   success=np.arange(length) == length - 1, has_action=np.arange(length) < length - 1,
                   timestamp=np.arange(length) * 0.1)
    return episode


def write_store(path: Path, episodes: list[dict], fields: dict, cameras: dict, images: str) -> tuple[EpisodeStore, float]:
    store = EpisodeStore.create(path, fields, task="PickCube", robot="panda", control_hz=10, cameras=cameras,
                                images=images)
    t0 = time.perf_counter()
    for episode in episodes:
        store.add_episode(episode)
    return store, time.perf_counter() - t0


def read_seconds(path: Path) -> float:
    store = EpisodeStore.open(path)
    t0 = time.perf_counter()
    for i in range(len(store)):
        store.get_episode(i)
    return time.perf_counter() - t0


def digest_cost(path: Path, n_frames: int) -> dict:
    """What checking each whole episode against its commit digest costs a read: the episodes read
    without the check (``read``), then their digests computed alone."""
    store = EpisodeStore.open(path)
    keys = list(store.arrays)
    t0 = time.perf_counter()
    read = [store.read(*store.episode_range(i), keys) for i in range(len(store))]
    unverified = time.perf_counter() - t0
    t0 = time.perf_counter()
    for episode in read:
        episode_digest(episode)
    hashing = time.perf_counter() - t0
    return {"read_unverified_frames_per_s": round(n_frames / unverified, 1),
            "digest_ms_per_episode": round(1000 * hashing / len(read), 3),
            "digest_share_of_read": round(hashing / unverified, 4)}


def candidate(path: Path, episodes: list[dict], codec, shard: int | None = None) -> dict:
    """Write only the image arrays with one codec (optionally ``shard`` frames per file):
    frames/s and compression ratio."""
    root = zarr.open_group(str(path), mode="w")
    frames = sum(len(e["front"]) for e in episodes)
    shards = (shard, *IMAGE_SIZE, 3) if shard else None
    arrays = {cam: root.create_array(cam, shape=(0, *IMAGE_SIZE, 3), chunks=(1, *IMAGE_SIZE, 3), shards=shards,
                                     dtype=np.uint8, compressors=codec) for cam in CAMERAS}
    t0 = time.perf_counter()
    n = 0
    for e in episodes:
        for cam, array in arrays.items():
            array.resize((n + len(e[cam]), *IMAGE_SIZE, 3))
            array[n:] = e[cam]
        n += len(e["front"])
    seconds = time.perf_counter() - t0
    disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"write_frames_per_s": round(frames / seconds, 1),
            "compression_ratio": round(float(frames * len(CAMERAS) * np.prod(IMAGE_SIZE) * 3 / disk), 2)}


def lerobot_figures(tmp: Path, n_frames: int, store_bytes: int, log) -> dict:
    """The lossless store to LeRobotDataset v3.0 and back, per video codec, and to rosbag2 and
    back: frames/s each way and the output's size over the store's."""
    from robot_rl.data.lerobot import export_lerobot, import_lerobot

    figures: dict = {}
    for codec, prefix in (("lossless", "lerobot"), ("h264", "lerobot_h264")):
        t0 = time.perf_counter()
        exported = export_lerobot(tmp / "lossless.zarr", tmp / f"{prefix}-dataset", video=codec)
        figures[f"export_{prefix}_frames_per_s"] = round(n_frames / (time.perf_counter() - t0), 1)
        t0 = time.perf_counter()
        import_lerobot(tmp / f"{prefix}-dataset", tmp / f"{prefix}-back.zarr")
        figures[f"import_{prefix}_frames_per_s"] = round(n_frames / (time.perf_counter() - t0), 1)
        figures[f"{prefix}_bytes_over_store"] = round(exported["bytes"] / store_bytes, 3)
        log(f"LeRobotDataset ({codec} video): export {figures[f'export_{prefix}_frames_per_s']} frames/s, import "
            f"{figures[f'import_{prefix}_frames_per_s']} frames/s, {figures[f'{prefix}_bytes_over_store']}x the store")
    from robot_rl.data.rosbag import export_rosbag, import_rosbag

    t0 = time.perf_counter()
    exported = export_rosbag(tmp / "lossless.zarr", tmp / "bag")
    figures["export_rosbag2_frames_per_s"] = round(n_frames / (time.perf_counter() - t0), 1)
    t0 = time.perf_counter()
    import_rosbag(tmp / "bag", tmp / "bag-back.zarr")
    figures["import_rosbag2_frames_per_s"] = round(n_frames / (time.perf_counter() - t0), 1)
    figures["rosbag2_bytes_over_store"] = round(exported["bytes"] / store_bytes, 3)
    log(f"rosbag2 (MCAP, raw images): export {figures['export_rosbag2_frames_per_s']} frames/s, import "
        f"{figures['import_rosbag2_frames_per_s']} frames/s, {figures['rosbag2_bytes_over_store']}x the store")
    return figures


@contextlib.contextmanager
def one_core():
    """Pin every thread of this process (Zarr's I/O and codec threads too) to one CPU."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    previous = os.sched_getaffinity(0)
    cpu = {min(previous)}

    def pin(cpus):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), cpus)

    pin(cpu)
    try:
        yield next(iter(cpu))
    finally:
        pin(previous)


def run(quick: bool = False, log=print) -> dict:
    p = QUICK if quick else FULL
    with one_core() as cpu:
        figures = _run(p, log)
    figures["pinned_cpu"] = cpu
    return figures


def _run(p: dict, log) -> dict:
    frames, env = source_frames(p["source_episodes"])
    fields, cameras = store_fields(env.observation_space, env.action_space.shape[0])
    env.close()
    episodes = [make_episode(frames, 7 * i, p["episode_len"], fields) for i in range(p["episodes"])]
    n_frames = sum(len(e["action"]) for e in episodes)
    log(f"{len(frames)} real frames cycled into {len(episodes)} episodes, {n_frames} frames")
    figures: dict = {"frames": n_frames, "cameras": list(CAMERAS), "image_size": list(IMAGE_SIZE)}
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        tmp = Path(tmp)
        store, seconds = write_store(tmp / "lossless.zarr", episodes, fields, cameras, "lossless")
        figures["write_frames_per_s"] = round(n_frames / seconds, 1)
        figures["compression_ratio"] = round(store.nbytes_raw() / store.nbytes_stored(), 2)
        figures["bytes_per_frame"] = round(store.nbytes_stored() / n_frames, 1)
        figures["raw_bytes_per_frame"] = round(store.nbytes_raw() / n_frames, 1)
        figures["read_frames_per_s"] = round(n_frames / read_seconds(tmp / "lossless.zarr"), 1)
        figures.update(digest_cost(tmp / "lossless.zarr", n_frames))
        log(f"lossless: write {figures['write_frames_per_s']} frames/s, read {figures['read_frames_per_s']} "
            f"frames/s, ratio {figures['compression_ratio']}")
        lossy, seconds = write_store(tmp / "jpeg.zarr", episodes, fields, cameras, "jpeg")
        figures["lossy_write_frames_per_s"] = round(n_frames / seconds, 1)
        figures["lossy_compression_ratio"] = round(lossy.nbytes_raw() / lossy.nbytes_stored(), 2)
        figures["lossy_read_frames_per_s"] = round(n_frames / read_seconds(tmp / "jpeg.zarr"), 1)
        got = EpisodeStore.open(tmp / "jpeg.zarr").get_episode(0, ["front"])["front"].astype(np.int16)
        figures["lossy_mean_abs_error"] = round(float(np.abs(got - episodes[0]["front"]).mean()), 3)
        log(f"jpeg: write {figures['lossy_write_frames_per_s']} frames/s, ratio {figures['lossy_compression_ratio']}, "
            f"mean abs error {figures['lossy_mean_abs_error']} (0-255)")
        from robot_rl.envs import make_env, obs_spec
        from robot_rl.replay.buffer import ReplayBuffer

        flat_env = make_env("PickCube", obs="pixels", image_size=IMAGE_SIZE, cameras=CAMERAS)
        buffer = ReplayBuffer(n_frames + 10, obs_spec(flat_env.observation_space), 7)
        t0 = time.perf_counter()
        loaded = load_demos(tmp / "lossless.zarr", flat_env, "PickCube", buffer.add)
        figures["load_100_episodes_s" if p["episodes"] == 100 else f"load_{p['episodes']}_episodes_s"] = round(
            time.perf_counter() - t0, 3)
        flat_env.close()
        log(f"loaded {loaded['episodes']} episodes ({loaded['steps']} transitions) into a demo buffer")
        figures.update(lerobot_figures(tmp, n_frames, store.nbytes_stored(), log))
        cands = {
            "blosc_zstd1_shuffle": [BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")],
            "blosc_lz4_shuffle": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
            "blosc_zstd3_noshuffle": [BloscCodec(cname="zstd", clevel=3, shuffle="noshuffle")],
            "blosc_zstd5_shuffle": [BloscCodec(cname="zstd", clevel=5, shuffle="shuffle")],
        }
        subset = episodes[: p["candidate_episodes"]]
        figures["candidates"] = {name: candidate(tmp / name, subset, codec) for name, codec in cands.items()}
        for name in ("blosc_zstd1_shuffle", "blosc_zstd5_shuffle"):
            figures["candidates"][f"{name}_shard64"] = candidate(tmp / f"{name}-sharded", subset, cands[name], shard=64)
        log(f"image codec candidates: {figures['candidates']}")
    figures["notes"] = [
        "one core: every thread of the process pinned to one CPU (sched_setaffinity); frames = both 128x128 "
        "cameras + state + action + flags",
        "lossless default: Blosc zstd level 1 with byte shuffle, one chunk per frame and camera, 64 frames per "
        "shard file (candidates: the same images written with each codec, per-frame files or 64-frame shards)",
        "real 10 Hz recording needs 10 frames/s per episode stream: write_frames_per_s / 10 is the real-time factor",
        "LeRobotDataset v3.0 (robot-rl data export/import --format lerobot): the lossless store exported and imported "
        "back, lossless video (H.264 RGB, qp 0) and h264 (yuv420p, crf 18); export: parquet + mp4 + meta; import: "
        "into a new store; *_bytes_over_store: the dataset's files over the Zarr store's bytes",
        "rosbag2 (robot-rl data export/import --format rosbag2): MCAP storage, sensor_msgs/Image rgb8 (uncompressed, "
        "as ros2 bag record stores raw images) plus the TCP's standard messages and our own topics, back into a store",
    ]
    return figures

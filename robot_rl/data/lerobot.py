"""Episode stores to and from LeRobotDataset v3.0, the format LeRobot and most shared
manipulation datasets use (parquet frames, mp4 videos, meta/ JSON and parquet; written here
with pyarrow and PyAV, never by hand).

Export (``export_lerobot``): one LeRobot frame per store frame. An episode of L control steps
is L + 1 frames in a store (the last holds the final observation, with no action); all of
them go out, so nothing is lost: the last frame's action is the store's (zeros),
``has_action`` false and ``next.done`` true. Features::

    observation.state                 float32 [n]      the store's state
    observation.images.<camera>       video [H, W, 3]  videos/observation.images.<camera>/chunk-000/file-000.mp4
    observation.privileged.<name>     float32 [...]    the sim's object poses, when the store has them
    action                            float32 [7]      dx dy dz droll dpitch dyaw gripper (robot_rl's contract)
    next.reward                       float32 [1]      the reward of the frame's transition
    next.done                         bool [1]         terminated or truncated (or the final frame)
    is_intervention, success, terminated, truncated, has_action   bool [1]: robot_rl's own flags
    store_timestamp                   float64 [1]      the store's own clock (seconds since the episode began)
    timestamp, frame_index, episode_index, index, task_index     LeRobot's bookkeeping (its timestamp is
                                                       frame_index / fps: where its decoder seeks each frame)

Videos: ``lossless`` (H.264 in RGB, qp 0: frames come back equal), ``h264`` (yuv420p, crf 18,
plays anywhere) or ``av1`` (LeRobot's own default); every episode of a camera back to back in
one file, each episode's span in ``meta/episodes``.

Import (``import_lerobot``): a LeRobotDataset v3.0 into a new store, through a map (YAML) that
names which features are the state, the cameras and the action, and how the action maps onto
robot_rl's 7 (``DatasetMap``). A store exported here needs no map and comes back equal. A
dataset written elsewhere has L frames per episode and no observation after the last action:
the store's final frame repeats the last observation (a terminal transition never reads it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from robot_rl.config_values import read_map_file
from robot_rl.contract import ACTION_DIM
from robot_rl.data.output import written_whole
from robot_rl.data.recorder import PRIVILEGED_PREFIX
from robot_rl.data.store import EpisodeStore, StoreError, store_to_export
from robot_rl.errors import UserFacingError

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
TASKS_PATH = "meta/tasks.parquet"
IMAGE_PREFIX = "observation.images."
PRIVILEGED_FEATURE = "observation.privileged."
FLAGS = ("is_intervention", "success", "terminated", "truncated", "has_action")  # robot_rl's own, kept as features
ACTION_NAMES = ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"]
VIDEO_CODECS = {  # name -> (PyAV encoder, pixel format, options, what LeRobot's info.json calls the codec)
    "lossless": ("libx264rgb", "rgb24", {"qp": "0", "preset": "veryfast"}, "h264"),
    "h264": ("libx264", "yuv420p", {"crf": "18", "preset": "veryfast"}, "h264"),
    "av1": ("libsvtav1", "yuv420p", {"crf": "30", "preset": "12"}, "av1"),
}


class LeRobotError(UserFacingError):
    """A LeRobotDataset that cannot be read or written here; the message names the file."""


# ------------------------------------------------------------------------------------- export
def export_lerobot(store_path: str | Path, out: str | Path, video: str = "lossless") -> dict:
    """The store at ``store_path`` as a LeRobotDataset v3.0 folder ``out`` (new, or an empty
    folder), written aside and renamed into place whole. Returns a summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if video not in VIDEO_CODECS:
        raise LeRobotError(f"video codec {video!r}: choose {', '.join(VIDEO_CODECS)}")
    out = Path(out)
    store = store_to_export(store_path, out, LeRobotError)
    fps = float(store.attrs["control_hz"])
    cameras = list(store.cameras)
    privileged = [k for k in store.fields if k.startswith(PRIVILEGED_PREFIX)]
    task = str(store.attrs.get("task", ""))
    with written_whole(out) as tmp:
        columns: dict[str, list] = {k: [] for k in ("observation.state", "action", "next.reward", "next.done",
                                                    *FLAGS, "store_timestamp", "timestamp", "frame_index", "episode_index", "index",
                                                    "task_index", *(PRIVILEGED_FEATURE + k[len(PRIVILEGED_PREFIX):]
                                                                    for k in privileged))}
        writers = {cam: _VideoWriter(tmp / VIDEO_PATH.format(video_key=IMAGE_PREFIX + cam, chunk_index=0, file_index=0),
                                     fps, video) for cam in cameras}
        episodes, start = [], 0
        pixels: dict[str, list] = {cam: [] for cam in cameras}
        try:
            for e in range(len(store)):
                ep = store[e]
                n = len(ep["reward"])
                has_action = ep["has_action"].astype(bool)
                columns["observation.state"].append(ep["state"].astype(np.float32))
                columns["action"].append(ep["action"].astype(np.float32))  # zeros on the final frame
                columns["next.reward"].append(ep["reward"].astype(np.float32))
                columns["next.done"].append(ep["terminated"] | ep["truncated"] | ~has_action)
                for flag in FLAGS:
                    columns[flag].append(ep[flag].astype(bool))
                for k in privileged:
                    columns[PRIVILEGED_FEATURE + k[len(PRIVILEGED_PREFIX):]].append(ep[k].astype(np.float32))
                columns["store_timestamp"].append(ep["timestamp"].astype(np.float64))
                frame_index = np.arange(n)
                columns["timestamp"].append((frame_index / fps).astype(np.float32))
                columns["frame_index"].append(frame_index)
                columns["episode_index"].append(np.full(n, e))
                columns["index"].append(start + frame_index)
                columns["task_index"].append(np.zeros(n, np.int64))
                spans = {cam: writers[cam].add(ep[cam]) for cam in cameras}
                for cam in cameras:  # as LeRobot samples them: up to 100 frames an episode, every 4th pixel
                    pixels[cam].append(ep[cam][:: max(1, n // 100), ::4, ::4].reshape(-1, 3))
                episodes.append({"episode_index": e, "tasks": [task], "length": n, "data/chunk_index": 0,
                                 "data/file_index": 0, "dataset_from_index": start, "dataset_to_index": start + n,
                                 **{f"videos/{IMAGE_PREFIX}{cam}/{k}": v for cam, span in spans.items()
                                    for k, v in span.items()},
                                 "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
                start += n
        finally:
            for writer in writers.values():
                writer.close()
        arrays = {k: np.concatenate(v) for k, v in columns.items()}
        table = pa.table({k: _arrow_column(v) for k, v in arrays.items()})
        (tmp / "data/chunk-000").mkdir(parents=True)
        pq.write_table(table, tmp / DATA_PATH.format(chunk_index=0, file_index=0))
        (tmp / "meta/episodes/chunk-000").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(episodes), tmp / EPISODES_PATH)
        _write_tasks(tmp / TASKS_PATH, [task])
        features = _features(arrays, store, cameras, fps, video)
        info = {"codebase_version": CODEBASE_VERSION, "robot_type": str(store.attrs.get("robot", "")),
                "total_episodes": len(store), "total_frames": int(start), "total_tasks": 1, "chunks_size": 1000,
                "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": fps,
                "splits": {"train": f"0:{len(store)}"}, "data_path": DATA_PATH,
                "video_path": VIDEO_PATH if cameras else None, "features": features}
        (tmp / "meta/info.json").write_text(json.dumps(info, indent=4))
        (tmp / "meta/stats.json").write_text(json.dumps(_stats(arrays, pixels), indent=1))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"out": str(out), "format": "lerobot", "codebase_version": CODEBASE_VERSION, "episodes": len(store),
            "frames": int(start), "cameras": cameras, "video": video, "bytes": size,
            "store_bytes": store.nbytes_stored()}


class _VideoWriter:
    """One camera's mp4: frames appended episode after episode, each episode's span returned."""

    def __init__(self, path: Path, fps: float, codec: str):
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.fps, self.frames = path, fps, 0
        self.encoder, self.pix_fmt, self.options, _ = VIDEO_CODECS[codec]
        self.container = av.open(str(path), "w")
        self.stream = None

    def add(self, images: np.ndarray) -> dict:
        import av
        from fractions import Fraction

        if self.stream is None:
            h, w = images.shape[1:3]
            self.stream = self.container.add_stream(self.encoder, rate=Fraction(self.fps).limit_denominator(1000),
                                                    options=dict(self.options))
            self.stream.width, self.stream.height, self.stream.pix_fmt = w, h, self.pix_fmt
            self.stream.codec_context.time_base = Fraction(1, 1) / Fraction(self.fps).limit_denominator(1000)
        span = {"chunk_index": 0, "file_index": 0, "from_timestamp": self.frames / self.fps}
        for image in images:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = self.frames
            self.container.mux(self.stream.encode(frame))
            self.frames += 1
        span["to_timestamp"] = self.frames / self.fps
        return span

    def close(self) -> None:
        if self.stream is not None:
            self.container.mux(self.stream.encode(None))
        self.container.close()


def _arrow_column(values: np.ndarray):
    """A column as LeRobot writes it: vectors as fixed-size lists, scalars as they are."""
    import pyarrow as pa

    if values.ndim == 1:
        return pa.array(values)
    flat = pa.array(values.reshape(len(values), -1).ravel())
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def _write_tasks(path: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet: the task strings as the index, task_index a column (the pandas index
    metadata is what makes LeRobot's ``pd.read_parquet`` read the strings as the index)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {"index_columns": ["task"], "column_indexes": [],
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": "task", "field_name": "task", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}]}
    pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), path)


def _features(arrays: dict, store: EpisodeStore, cameras: list[str], fps: float, video: str) -> dict:
    features: dict = {}
    for key, values in arrays.items():
        shape = list(values.shape[1:]) or [1]
        dtype = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int64): "int64",
                 np.dtype(bool): "bool"}[values.dtype]
        names = ACTION_NAMES if key == "action" else None
        features[key] = {"dtype": dtype, "shape": shape, "names": names}
    _, pix_fmt, options, codec_name = VIDEO_CODECS[video]
    for cam in cameras:
        h, w = store.cameras[cam]
        features[IMAGE_PREFIX + cam] = {
            "dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
            "info": {"video.height": h, "video.width": w, "video.codec": codec_name, "video.pix_fmt": pix_fmt,
                     "video.fps": fps, "video.channels": 3, "has_audio": False, "is_depth_map": False}}
    return features


def _stats(arrays: dict, pixels: dict[str, list]) -> dict:
    """meta/stats.json: per feature min, max, mean, std, count and quantiles; a camera's per
    channel in [0, 1], shaped [3, 1, 1], from the sampled ``pixels``."""
    stats = {key: _moments(values.astype(np.float64).reshape(len(values), -1)) for key, values in arrays.items()}
    for cam, sampled in pixels.items():
        s = _moments(np.concatenate(sampled).astype(np.float64) / 255.0)
        stats[IMAGE_PREFIX + cam] = {k: (np.asarray(v).reshape(3, 1, 1).tolist() if k != "count" else v)
                                     for k, v in s.items()}
    return stats


def _moments(x: np.ndarray) -> dict:
    q = np.quantile(x, [0.01, 0.10, 0.50, 0.90, 0.99], axis=0)
    return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(), "std": x.std(0).tolist(),
            "count": [int(len(x))], "q01": q[0].tolist(), "q10": q[1].tolist(), "q50": q[2].tolist(),
            "q90": q[3].tolist(), "q99": q[4].tolist()}


# ------------------------------------------------------------------------------------- import
@dataclasses.dataclass
class ActionMap:
    """How a dataset's action maps onto robot_rl's [dx, dy, dz, droll, dpitch, dyaw, gripper]."""

    feature: str = "action"
    motion: tuple[int | None, ...] = (0, 1, 2, 3, 4, 5)  # for each of our 6 motion dims: their index, or None (0)
    scale: float = 1.0  # their motion units -> ours ([-1, 1] of the cell's step limits)
    gripper: int | None = 6  # their gripper's index, or None (every step "stay")
    # their gripper value for each command (None: theirs is already ours: > 0.5 close, < -0.5 open)
    gripper_values: dict[str, float] | None = None


@dataclasses.dataclass
class DatasetMap:
    """Which features of a LeRobotDataset become a store's fields (a YAML file; see docs/datasets.md)."""

    state: tuple[str, ...] = ("observation.state",)
    cameras: dict[str, str] = dataclasses.field(default_factory=dict)  # our camera name -> their video feature
    action: ActionMap = dataclasses.field(default_factory=ActionMap)
    reward: str = "next.reward"
    done: str = "next.done"
    intervention: str | None = None
    success: str | None = None  # a per-frame success feature; else the done frame of an episode with reward > 0
    task: str | None = None  # the store's task name (default: the dataset's first task string)
    robot: str | None = None


def read_map(path: str | Path) -> DatasetMap:
    """A ``DatasetMap`` from YAML; an unknown key or a wrong shape is one line naming the file."""
    data = read_map_file(path, DatasetMap, LeRobotError)
    action = data.pop("action", None) or {}
    if not isinstance(action, dict) or set(action) - {f.name for f in dataclasses.fields(ActionMap)}:
        raise LeRobotError(f"map {path}: action takes feature, motion, scale, gripper and gripper_values")
    if "state" in data:
        data["state"] = tuple([data["state"]] if isinstance(data["state"], str) else data["state"])
    if "motion" in action:
        action["motion"] = tuple(action["motion"])
    return DatasetMap(**data, action=ActionMap(**action))


def own_export_map(features: dict) -> DatasetMap | None:
    """The map of a dataset ``export_lerobot`` wrote (it carries robot_rl's flags), else None."""
    if (not all(key in features for key in (*FLAGS, "store_timestamp"))
            or features.get("action", {}).get("names") != ACTION_NAMES):
        return None
    cameras = {k[len(IMAGE_PREFIX):]: k for k in features if k.startswith(IMAGE_PREFIX)}
    return DatasetMap(cameras=cameras, intervention="is_intervention", success="success")


def read_info(folder: Path) -> dict:
    info_path = folder / "meta" / "info.json"
    if not info_path.is_file():
        raise LeRobotError(f"{info_path}: no such file: {folder} is not a LeRobotDataset")
    try:
        info = json.loads(info_path.read_text())
    except json.JSONDecodeError as err:
        raise LeRobotError(f"{info_path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise LeRobotError(f"{info_path}: codebase_version {version!r}; this reads LeRobotDataset {CODEBASE_VERSION} "
                           "(convert older datasets with LeRobot's convert_dataset_v21_to_v30)")
    return info


def is_lerobot_dataset(path: str | Path) -> bool:
    return (Path(path) / "meta" / "info.json").is_file()


def import_lerobot(folder: str | Path, out: str | Path, mapping: DatasetMap | str | Path | None = None) -> dict:
    """A LeRobotDataset v3.0 folder into a new store at ``out`` (written aside, renamed whole).
    ``mapping``: a ``DatasetMap`` or its YAML file; None for a dataset ``export_lerobot`` wrote."""
    import pyarrow.parquet as pq

    folder, out = Path(folder), Path(out)
    info = read_info(folder)
    features = info.get("features", {})
    own = own_export_map(features)
    if mapping is None:
        if own is None:
            raise LeRobotError(f"{folder} was not written by robot-rl data export: give a map (--map FILE.yaml) "
                               "naming its state, cameras and action")
        mapping = own
    elif not isinstance(mapping, DatasetMap):
        mapping = read_map(mapping)
    _check_map(mapping, features, folder)
    if out.exists():
        raise StoreError(f"{out} already exists; choose a new path")
    table = _read_data(folder, info)
    episodes = _read_episodes(folder)
    fps = float(info["fps"])
    tasks = pq.read_table(folder / TASKS_PATH).column("task").to_pylist() if (folder / TASKS_PATH).is_file() else []
    task = mapping.task or (tasks[0] if tasks else "unknown")
    columns = {name: _column(table, name) for name in table.column_names}
    state = np.concatenate([columns[k].reshape(len(columns[k]), -1) for k in mapping.state], 1).astype(np.float32)
    action = _map_action(columns[mapping.action.feature], mapping.action, folder)
    privileged = {PRIVILEGED_PREFIX + k[len(PRIVILEGED_FEATURE):]: columns[k].astype(np.float32)
                  for k in features if k.startswith(PRIVILEGED_FEATURE)} if own is not None else {}
    shapes = {cam: tuple(features[feat]["shape"][:2]) for cam, feat in mapping.cameras.items()}
    fields = {"state": ((state.shape[1],), np.dtype(np.float32)), "action": ((ACTION_DIM,), np.dtype(np.float32)),
              **{k: (v.shape[1:], np.dtype(np.float32)) for k, v in privileged.items()},
              **{cam: ((*shape, 3), np.dtype(np.uint8)) for cam, shape in shapes.items()}}
    readers = {cam: _VideoReader(folder, info, feat) for cam, feat in mapping.cameras.items()}
    counts = {"frames_read": 0, "final_frames_repeated": 0}
    with written_whole(out) as tmp:
        store = EpisodeStore.create(tmp, fields, task=task, robot=mapping.robot or str(info.get("robot_type") or ""),
                                    control_hz=fps, cameras=shapes, source="lerobot", lerobot_dataset=str(folder))
        for ep in episodes:
            lo, hi = int(ep["dataset_from_index"]), int(ep["dataset_to_index"])
            images = {cam: readers[cam].episode(ep, hi - lo) for cam in readers}
            frames = _episode_frames(columns, mapping, own is not None, lo, hi, state, action, privileged, images)
            counts["frames_read"] += hi - lo
            counts["final_frames_repeated"] += own is None
            store.add_episode(frames)
    return {"out": str(out), "episodes": len(episodes), "frames": int(EpisodeStore.open(out).n_frames),
            "task": task, "cameras": list(shapes), **counts,
            "note": None if own is not None else "each episode's final frame repeats its last observation "
                                                 "(LeRobotDataset keeps none after the last action)"}


def _check_map(mapping: DatasetMap, features: dict, folder: Path) -> None:
    wanted = [*mapping.state, mapping.action.feature, mapping.reward, mapping.done, *mapping.cameras.values(),
              *(k for k in (mapping.intervention, mapping.success) if k)]
    for name in wanted:
        if name not in features:
            raise LeRobotError(f"{folder / 'meta/info.json'}: the map names feature {name!r}, which the dataset does "
                               f"not have (it has: {', '.join(sorted(features))})")
    for cam, name in mapping.cameras.items():
        if features[name].get("dtype") != "video":
            raise LeRobotError(f"{folder / 'meta/info.json'}: camera {cam!r} maps to {name!r}, a "
                               f"{features[name].get('dtype')} feature; cameras are video features")
    a = mapping.action
    their_dim = int(np.prod(features[a.feature]["shape"]))
    if len(a.motion) != 6:
        raise LeRobotError(f"map: action.motion lists one of their indices (or null) for each of our 6 motion "
                           f"dimensions (dx dy dz droll dpitch dyaw), got {len(a.motion)}")
    used = [i for i in (*a.motion, a.gripper) if i is not None]
    bad = [i for i in used if not 0 <= i < their_dim]
    if bad:
        raise LeRobotError(f"map: action index {bad[0]} is out of range: {a.feature} has {their_dim} dimensions "
                           f"({features[a.feature].get('names')}); an action space that does not map onto an "
                           "end-effector delta [dx dy dz droll dpitch dyaw gripper] cannot be imported")


def _read_data(folder: Path, info: dict):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((folder / "data").glob("chunk-*/file-*.parquet"))
    if not files:
        raise LeRobotError(f"{folder / 'data'}: no parquet frames (data/chunk-XXX/file-XXX.parquet)")
    try:
        table = pa.concat_tables([pq.read_table(f) for f in files])
    except (OSError, pa.ArrowInvalid) as err:
        raise LeRobotError(f"{folder / 'data'}: unreadable parquet ({err})") from None
    if table.num_rows != int(info.get("total_frames", table.num_rows)):
        raise LeRobotError(f"{folder / 'data'}: {table.num_rows} frames, meta/info.json says {info['total_frames']}")
    return table


def _read_episodes(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq

    files = sorted((folder / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise LeRobotError(f"{folder / 'meta/episodes'}: no episode index (meta/episodes/chunk-XXX/file-XXX.parquet)")
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    return sorted(rows, key=lambda r: r["episode_index"])


def _column(table, name: str) -> np.ndarray:
    """A parquet column as numpy: fixed-size lists as [n, d] (d of 1 squeezed)."""
    import pyarrow as pa

    column = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type):
        values = np.asarray(column.flatten().to_numpy(zero_copy_only=False)).reshape(len(column), -1)
        return values[:, 0] if values.shape[1] == 1 else values
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _map_action(theirs: np.ndarray, a: ActionMap, folder: Path) -> np.ndarray:
    theirs = theirs.reshape(len(theirs), -1).astype(np.float32)
    ours = np.zeros((len(theirs), ACTION_DIM), np.float32)
    for dim, index in enumerate(a.motion):
        if index is not None:
            ours[:, dim] = np.clip(theirs[:, index] * a.scale, -1.0, 1.0)
    if a.gripper is not None:
        g = theirs[:, a.gripper]
        if a.gripper_values is None:
            ours[:, 6] = np.clip(g, -1.0, 1.0)
        else:
            values = {k: float(v) for k, v in a.gripper_values.items()}
            if set(values) != {"close", "stay", "open"}:
                raise LeRobotError("map: action.gripper_values names their value for close, stay and open")
            known = np.isin(g, list(values.values()))
            if not known.all():
                raise LeRobotError(f"{folder}: gripper value {g[~known][0]!r} is none of the map's gripper_values "
                                   f"{values}")
            ours[:, 6] = np.select([g == values["close"], g == values["open"]], [1.0, -1.0], 0.0)
    return ours


def _episode_frames(columns: dict, m: DatasetMap, own: bool, lo: int, hi: int, state: np.ndarray,
                    action: np.ndarray, privileged: dict, images: dict) -> dict[str, np.ndarray]:
    """One episode's store frames from dataset rows [lo, hi)."""
    rows = slice(lo, hi)
    if own:  # every frame came from a store, the final observation included
        frames = {"state": state[rows], "action": action[rows], "reward": columns[m.reward][rows].astype(np.float32),
                  **{k: v[rows] for k, v in privileged.items()}, **images,
                  **{flag: columns[flag][rows].astype(bool) for flag in FLAGS}}
        frames["timestamp"] = columns["store_timestamp"][rows].astype(np.float64)
        return frames
    n = hi - lo
    done = columns[m.done][rows].astype(bool)
    reward = columns[m.reward][rows].astype(np.float32)
    succeeded = bool(done[-1] and reward[-1] > 0)
    last = np.zeros(n + 1, bool)
    last[n - 1] = bool(done[-1])
    success = (np.append(columns[m.success][rows].astype(bool), columns[m.success][hi - 1]) if m.success
               else np.append(np.zeros(n, bool), succeeded))
    intervention = (np.append(columns[m.intervention][rows].astype(bool), False) if m.intervention
                    else np.zeros(n + 1, bool))
    repeat = lambda x: np.concatenate([x, x[-1:]])  # noqa: E731 - the final frame repeats the last observation
    return {"state": repeat(state[rows]), "action": np.concatenate([action[rows], np.zeros((1, ACTION_DIM), np.float32)]),
            "reward": np.append(reward, np.float32(0)), "terminated": last & succeeded,
            "truncated": last & ~succeeded, "is_intervention": intervention, "success": success,
            "has_action": np.append(np.ones(n, bool), False), "timestamp": np.append(columns["timestamp"][rows],
                                                                                       columns["timestamp"][hi - 1])
            .astype(np.float64), **{cam: repeat(v) for cam, v in images.items()}}


class _VideoReader:
    """A camera's frames, episode by episode, decoded with PyAV from the spans of meta/episodes."""

    def __init__(self, folder: Path, info: dict, feature: str):
        self.folder, self.info, self.feature = folder, info, feature
        self.fps = float(info["features"][feature].get("info", {}).get("video.fps", info["fps"]))
        self._decoded: dict[Path, np.ndarray] = {}

    def _file(self, ep: dict) -> Path:
        key = f"videos/{self.feature}"
        return self.folder / str(self.info["video_path"]).format(
            video_key=self.feature, chunk_index=int(ep[f"{key}/chunk_index"]), file_index=int(ep[f"{key}/file_index"]))

    def _frames(self, path: Path) -> np.ndarray:
        import av

        if path not in self._decoded:
            if not path.is_file():
                raise LeRobotError(f"{path}: no such video")
            try:
                with av.open(str(path)) as container:
                    self._decoded[path] = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
            except (av.error.FFmpegError, ValueError) as err:
                raise LeRobotError(f"{path}: unreadable video ({err})") from None
        return self._decoded[path]

    def episode(self, ep: dict, n: int) -> np.ndarray:
        path = self._file(ep)
        frames = self._frames(path)
        first = int(round(float(ep[f"videos/{self.feature}/from_timestamp"]) * self.fps))
        if first + n > len(frames):
            raise LeRobotError(f"{path}: {len(frames)} frames, shorter than its parquet frames (episode "
                               f"{ep['episode_index']} needs frames {first}-{first + n - 1})")
        return frames[first:first + n]

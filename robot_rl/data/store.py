"""The episode store: Zarr v3, the one dataset format of the project.

Layout (the diffusion_policy / UMI convention, time first)::

    store.zarr/
      zarr.json                 attributes: schema version, task, robot, control rate, cameras
      data/<key>                one array per field, frames of every episode back to back
      meta/episode_ends         int64[n_episodes]: exclusive end frame of each episode

An episode of L control steps is L + 1 frames: frame t holds the observation at step t, the
action taken there, the reward it earned and the flags of that transition; the last frame
holds the final observation (its action is zero, ``has_action`` is False). So a store
replays into (obs, action, reward, next_obs) transitions with nothing stored twice.

Crash safety: Zarr's local store replaces every file atomically (temporary file + rename),
and an episode is committed by writing ``meta/episode_ends`` *after* all its frames. A
writer killed at any moment leaves frames past the last end (dropped with a warning when
the store is next opened for appending) and, at worst, an index entry whose value was never
written (it reads as the fill value 0 and is dropped). Chunks shared with earlier episodes
(image shards, numeric chunks) are rewritten whole, old or new, never half.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from robot_rl.data.jpeg import JpegCodec  # registers the optional lossy codec with Zarr
from robot_rl.errors import UserFacingError

SCHEMA_VERSION = 1
FORMAT = "robot_rl.episodes"
# Per-frame bookkeeping every store has, besides the observation fields and the action.
FRAME_FIELDS: dict[str, np.dtype] = {
    "reward": np.dtype(np.float32),
    "terminated": np.dtype(bool),
    "truncated": np.dtype(bool),
    "is_intervention": np.dtype(bool),
    "success": np.dtype(bool),  # label per frame: the task is in a success state at this observation
    "has_action": np.dtype(bool),  # False on the final frame of each episode
    "timestamp": np.dtype(np.float64),  # seconds since the episode started
}
IMAGE_SHARD_FRAMES = 64  # frames per image file (one chunk per frame inside); chosen by `bench data`
NUMERIC_CHUNK_FRAMES = 1024  # numeric arrays: an append rewrites at most two small chunks


class StoreError(UserFacingError):
    """The path is not a readable episode store, or a request does not fit it."""


def image_codecs(name: str) -> tuple:
    """(serializer, compressors) for per-frame image chunks: "lossless" (Blosc zstd, byte
    shuffle) or "jpeg"."""
    if name == "lossless":
        return "auto", [BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")]
    if name == "jpeg":
        return JpegCodec(quality=90), None
    raise StoreError(f"unknown image codec {name!r}: use 'lossless' or 'jpeg'")


class EpisodeStore:
    """Create or open a store; ``add_episode``, ``get_episode``, ``len``, iteration, slicing."""

    def __init__(self, group: zarr.Group, path: Path):
        self.group, self.path = group, path
        self.attrs = dict(group.attrs)
        self.data = group["data"]
        self._ends_array = group["meta/episode_ends"]
        self.fields = {k: (tuple(a.shape[1:]), np.dtype(a.dtype)) for k, a in self.data.arrays()}
        self._ends = self._valid_ends()

    # ---- create / open ---------------------------------------------------------------------
    @classmethod
    def create(cls, path, fields: dict[str, tuple[tuple[int, ...], np.dtype]], *, task: str, robot: str,
               control_hz: float, cameras: dict[str, tuple[int, int]] | None = None, images: str = "lossless",
               overwrite: bool = False, **attrs) -> "EpisodeStore":
        """``fields``: observation and action fields, ``{key: (frame_shape, dtype)}``; every key
        named in ``cameras`` is a uint8 [H, W, 3] image stored one frame per chunk."""
        path = Path(path)
        cameras = {k: tuple(int(x) for x in v) for k, v in (cameras or {}).items()}
        if path.exists() and not overwrite:
            raise StoreError(f"{path} already exists; open it to append, or choose a new path")
        if "action" not in fields:
            raise StoreError("an episode store needs an 'action' field")
        clash = set(fields) & set(FRAME_FIELDS)
        if clash:
            raise StoreError(f"fields {sorted(clash)} are reserved for per-frame bookkeeping")
        for cam, (h, w) in cameras.items():
            if cam not in fields or tuple(fields[cam][0]) != (h, w, 3) or np.dtype(fields[cam][1]) != np.uint8:
                raise StoreError(f"camera {cam!r} needs a uint8 field of shape ({h}, {w}, 3)")
        root = zarr.open_group(str(path), mode="w" if overwrite else "w-")
        root.attrs.update({"format": FORMAT, "schema_version": SCHEMA_VERSION, "task": task, "robot": robot,
                           "control_hz": float(control_hz), "cameras": {k: list(v) for k, v in cameras.items()},
                           "image_codec": images, **attrs})
        data = root.create_group("data")
        all_fields = {**{k: (tuple(s), np.dtype(d)) for k, (s, d) in fields.items()},
                      **{k: ((), d) for k, d in FRAME_FIELDS.items()}}
        for key, (shape, dtype) in all_fields.items():
            shards = None
            if key in cameras:
                chunks, shards = (1, *shape), (IMAGE_SHARD_FRAMES, *shape)
                serializer, compressors = image_codecs(images)
            else:
                chunks = (NUMERIC_CHUNK_FRAMES, *shape)
                compressors, serializer = [BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")], "auto"
            data.create_array(key, shape=(0, *shape), chunks=chunks, shards=shards, dtype=dtype, fill_value=0,
                              compressors=compressors, serializer=serializer)
        meta = root.create_group("meta")
        meta.create_array("episode_ends", shape=(0,), chunks=(4096,), dtype=np.int64, fill_value=0,
                          compressors=None)
        return cls(root, path)

    @classmethod
    def open(cls, path, mode: str = "r") -> "EpisodeStore":
        """``mode`` "r" (read only) or "a" (append: frames of an episode cut off by a crash are dropped)."""
        if mode not in ("r", "a"):
            raise StoreError(f"mode must be 'r' or 'a', got {mode!r}")
        path = Path(path)
        if not (path / "zarr.json").is_file():
            raise StoreError(f"{path} is not an episode store (no zarr.json)")
        try:
            root = zarr.open_group(str(path), mode="r" if mode == "r" else "r+")
        except Exception as e:  # noqa: BLE001 - any zarr failure means the same thing to the user
            raise StoreError(f"{path} is not a readable Zarr store: {e}") from e
        attrs = dict(root.attrs)
        if attrs.get("format") != FORMAT:
            raise StoreError(f"{path} is a Zarr store but not a robot_rl episode store (format {attrs.get('format')!r})")
        version = attrs.get("schema_version")
        if version != SCHEMA_VERSION:
            raise StoreError(f"{path} has schema version {version}; this robot_rl reads version {SCHEMA_VERSION}")
        for required in ("data", "meta/episode_ends", "data/action", *(f"data/{k}" for k in FRAME_FIELDS)):
            if required not in root:
                raise StoreError(f"{path} is missing '{required}'")
        store = cls(root, path)
        if mode == "a":
            store._drop_partial()
        return store

    # ---- index --------------------------------------------------------------------------------
    def _valid_ends(self) -> np.ndarray:
        """The committed episode ends: strictly increasing and within the frames written."""
        ends = np.asarray(self._ends_array[:], dtype=np.int64)
        frames = self.data["action"].shape[0]
        valid = len(ends)
        for i, end in enumerate(ends):
            if end <= (ends[i - 1] if i else 0) or end > frames:
                valid = i
                break
        return ends[:valid]

    def _drop_partial(self) -> None:
        committed = int(self._ends[-1]) if len(self._ends) else 0
        extra_frames = any(a.shape[0] != committed for _, a in self.data.arrays())
        if len(self._ends) != self._ends_array.shape[0] or extra_frames:
            warnings.warn(f"{self.path}: dropping an episode that was not completed (a writer stopped mid-episode)",
                          stacklevel=3)
            self._ends_array.resize((len(self._ends),))
            for _, array in self.data.arrays():
                array.resize((committed, *array.shape[1:]))

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def n_episodes(self) -> int:
        return len(self._ends)

    @property
    def n_frames(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def episode_lengths(self) -> np.ndarray:
        """Frames per episode (control steps + 1)."""
        return np.diff(np.concatenate([[0], self._ends]))

    @property
    def cameras(self) -> dict[str, tuple[int, int]]:
        return {k: tuple(v) for k, v in self.attrs.get("cameras", {}).items()}

    def episode_range(self, index: int) -> tuple[int, int]:
        n = len(self._ends)
        if not -n <= index < n:
            raise StoreError(f"episode {index} is past the end: the store has {n} episodes")
        index %= n
        return (int(self._ends[index - 1]) if index else 0), int(self._ends[index])

    # ---- read ---------------------------------------------------------------------------------
    def get_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        start, stop = self.episode_range(index)
        return self.read(start, stop, keys)

    def read(self, start: int, stop: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Frames [start, stop) of the chosen fields (only the chunks they touch are read)."""
        keys = list(self.data.array_keys()) if keys is None else keys
        missing = [k for k in keys if k not in self.data]
        if missing:
            raise StoreError(f"no field {missing} in {self.path}; it has {sorted(self.data.array_keys())}")
        stop = min(stop, self.n_frames)
        return {k: self.data[k][start:stop] for k in keys}

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.get_episode(index)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield self.get_episode(i)

    # ---- write --------------------------------------------------------------------------------
    def add_episode(self, episode: dict[str, np.ndarray]) -> int:
        """Append one complete episode (every field, frames first); returns its index.
        Visible to readers only once this returns."""
        if self.group.read_only:
            raise StoreError(f"{self.path} is open read-only; open it with mode='a' to append")
        frames = self._check_episode(episode)
        start = self.n_frames
        stop = start + frames
        for key, array in self.data.arrays():
            array.resize((stop, *array.shape[1:]))
            array[start:stop] = np.asarray(episode[key], dtype=array.dtype)
        n = len(self._ends)
        self._ends_array.resize((n + 1,))
        self._ends_array[n] = stop  # the commit: written last
        self._ends = np.append(self._ends, stop)
        return n

    def _check_episode(self, episode: dict[str, np.ndarray]) -> int:
        missing = sorted(set(self.fields) - set(episode))
        if missing:
            raise StoreError(f"episode is missing fields {missing}")
        unknown = sorted(set(episode) - set(self.fields))
        if unknown:
            raise StoreError(f"episode has fields {unknown} the store does not have")
        lengths = {k: len(np.asarray(v)) for k, v in episode.items()}
        frames = lengths["action"]
        if frames < 2 or any(n != frames for n in lengths.values()):
            raise StoreError(f"every field needs the same number (>= 2) of frames, got {lengths}")
        for key, (shape, _) in self.fields.items():
            got = tuple(np.asarray(episode[key]).shape[1:])
            if got != shape:
                raise StoreError(f"field {key!r} has frames of shape {got}, the store holds {shape}")
        return frames

    def nbytes_stored(self) -> int:
        """Bytes on disk under data/ (what the frames cost after compression)."""
        return sum(f.stat().st_size for f in (self.path / "data").rglob("*") if f.is_file())

    def nbytes_raw(self) -> int:
        frames = self.n_frames
        return sum(frames * math.prod(shape) * dtype.itemsize for shape, dtype in self.fields.values())

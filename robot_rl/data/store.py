"""The episode store: Zarr v3, the one dataset format of the project.

Layout (the diffusion_policy / UMI convention, time first)::

    store.zarr/
      zarr.json                 attributes: schema version, task, robot, control rate, cameras
      data/<key>                one array per field, frames of every episode back to back
      meta/episode_ends         int64[n_episodes]: exclusive end frame of each episode
      meta/episode_digests      uint64[n, 2]: (end frame, BLAKE2b-64 of the episode's frames), one per
                                commit, written just before its index entry (stores made before it: none)
      meta/array_digests        uint64[n, 1 + n_arrays]: (end frame, then BLAKE2b-64 of each array's frames
                                of the episode, in the order of its ``arrays`` attribute), written with the
                                episode digest, so a reader of some arrays checks just those (stores made
                                before it: none; a reader of some arrays checks the whole episode instead)

The attributes in zarr.json follow one schema (``schema.ATTRIBUTES``), checked when a store is
created or opened (one line naming the file and the attribute) and reported by ``data check``.

An episode of L control steps is L + 1 frames: frame t holds the observation at step t, the
action taken there, the reward it earned and the flags of that transition; the last frame
holds the final observation (its action is zero, ``has_action`` is False, and only there).
So a store replays into (obs, action, reward, next_obs) transitions with nothing stored twice.

Crash safety: Zarr's local store replaces every file atomically (temporary file + rename),
and an episode is committed by writing ``meta/episode_ends`` *after* all its frames. A
writer killed at any moment leaves every committed episode readable; what it cut off is
cleaned up when the store is next opened for appending (index.py says exactly what, and
refuses an index that does not match the frames instead of guessing).

Integrity (stores made since the ``integrity`` attribute): every chunk ends in a CRC-32C
checksum and every chunk of written frames is on disk (Zarr's ``write_empty_chunks``), so a
garbled chunk fails its checksum and a missing one is damage rather than zeros. Reads check
the chunks they touch; ``robot-rl data check`` (check.py) verifies a whole store. Older
stores still open: a missing chunk there reads as zeros, as Zarr has it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec

from robot_rl.data import chunks
from robot_rl.data.index import IndexPlan, plan
from robot_rl.data.jpeg import JpegCodec  # registers the optional lossy codec with Zarr
from robot_rl.data.output import remove, written_whole
from robot_rl.data.schema import (
    ARRAY_DIGESTS, DIGESTS, FORMAT, FRAME_FIELDS, IMAGE_SHARD_FRAMES, INDEX_CHUNK, INTEGRITY, MOVED,
    NUMERIC_CHUNK_FRAMES, SCHEMA_VERSION, WRITE_EVERY_CHUNK, attribute_problems, episode_digest, kind_of,
)
from robot_rl.errors import UserFacingError


class StoreError(UserFacingError):
    """The path is not a readable episode store, or a request does not fit it."""


class DamagedStoreError(StoreError):
    """A chunk file of the store is missing or unreadable (``where``: which, in short)."""

    def __init__(self, store: Path, damage: chunks.Damage, units: tuple[str, str] = ("frame", "frames")):
        first, last = damage.start, damage.stop - 1
        span = f"{units[0]} {first}" if first == last else f"{units[1]} {first}-{last}"
        self.where = f"{damage.file.relative_to(store)}: {damage.why} ({span})"
        super().__init__(_damaged(damage.file, f"{damage.why} ({span})", store))


def image_codecs(name: str) -> tuple:
    """(serializer, compressors) for per-frame image chunks: "lossless" (Blosc zstd, byte
    shuffle) or "jpeg"; both end in a CRC-32C checksum."""
    if name == "lossless":
        return "auto", [BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"), Crc32cCodec()]
    if name == "jpeg":
        return JpegCodec(quality=90), [Crc32cCodec()]
    raise StoreError(f"unknown image codec {name!r}: use 'lossless' or 'jpeg'")


class EpisodeStore:
    """Create or open a store; ``add_episode``, ``get_episode``, ``len``, iteration, slicing."""

    def __init__(self, group: zarr.Group, path: Path):
        """The store's arrays, loaded without judging its index (``open`` does that)."""
        self.group, self.path = group, Path(path)
        self.attrs = dict(group.attrs)
        self.every_chunk_written = self.attrs.get("integrity") == INTEGRITY
        self.data = group["data"]
        # the index before the frames: a writer appending meanwhile grows the frames first
        self._ends_array = self._array("meta/episode_ends")
        self._entries = self._read_entries()
        self.arrays = {name: self._array(f"data/{name}")
                       for name in sorted(p.name for p in (self.path / "data").iterdir() if p.is_dir())}
        self.fields = {k: (tuple(a.shape[1:]), np.dtype(a.dtype)) for k, a in self.arrays.items()}
        self._digests_array = self._array(DIGESTS) if (self.path / DIGESTS / "zarr.json").is_file() else None
        self._digests: dict[int, int] | None = None  # end frame -> digest, read when first needed
        has_array_digests = (self.path / ARRAY_DIGESTS / "zarr.json").is_file()
        self._array_digests_array = self._array(ARRAY_DIGESTS) if has_array_digests else None
        self._array_digests: dict[int, dict[str, int]] | None = None  # end frame -> {array: digest}
        self.attribute_problems = attribute_problems(self.attrs, self.fields)  # open refuses, data check reports
        self._ends = np.zeros(0, np.int64)
        self._judged = False  # the index was checked (open) or made here (create): appending is safe

    # ---- create / open ---------------------------------------------------------------------
    @classmethod
    def create(cls, path, fields: dict[str, tuple[tuple[int, ...], np.dtype]], *, task: str, robot: str,
               control_hz: float, cameras: dict[str, tuple[int, int]] | None = None, images: str = "lossless",
               overwrite: bool = False, **attrs) -> "EpisodeStore":
        """``fields``: observation and action fields, ``{key: (frame_shape, dtype)}``; every key
        named in ``cameras`` is a uint8 [H, W, 3] image stored one frame per chunk. The empty
        store appears at ``path`` whole (made aside, then renamed)."""
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
        image_codecs(images)
        if isinstance(control_hz, numbers.Real) and not isinstance(control_hz, bool):
            control_hz = float(control_hz)  # numpy's numbers too
        attributes = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "integrity": INTEGRITY, "task": task,
                      "robot": robot, "control_hz": control_hz, "cameras": {k: list(v) for k, v in cameras.items()},
                      "image_codec": images, **attrs}
        wrong = attribute_problems(attributes)
        if wrong:
            raise StoreError(f"{path}: {wrong[0]}")
        if overwrite:
            remove(path)
        with written_whole(path) as tmp:
            root = zarr.open_group(str(tmp), mode="w-")
            root.attrs.update(attributes)
            data = root.create_group("data")
            all_fields = {**{k: (tuple(s), np.dtype(d)) for k, (s, d) in fields.items()},
                          **{k: ((), d) for k, d in FRAME_FIELDS.items()}}
            for key, (shape, dtype) in all_fields.items():
                shards = None
                if key in cameras:
                    chunk_shape, shards = (1, *shape), (IMAGE_SHARD_FRAMES, *shape)
                    serializer, compressors = image_codecs(images)
                else:
                    chunk_shape, serializer = (NUMERIC_CHUNK_FRAMES, *shape), "auto"
                    compressors = [BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"), Crc32cCodec()]
                data.create_array(key, shape=(0, *shape), chunks=chunk_shape, shards=shards, dtype=dtype,
                                  fill_value=0, compressors=compressors, serializer=serializer)
            meta = root.create_group("meta")
            meta.create_array("episode_ends", shape=(0,), chunks=(INDEX_CHUNK,), dtype=np.int64, fill_value=0,
                              compressors=[Crc32cCodec()])
            meta.create_array("episode_digests", shape=(0, 2), chunks=(INDEX_CHUNK, 2), dtype=np.uint64,
                              fill_value=0, compressors=[Crc32cCodec()])
            columns = 1 + len(all_fields)
            meta.create_array("array_digests", shape=(0, columns), chunks=(INDEX_CHUNK, columns), dtype=np.uint64,
                              fill_value=0, compressors=[Crc32cCodec()], attributes={"arrays": sorted(all_fields)})
        store = cls(zarr.open_group(str(path), mode="r+"), path)
        store._judged = True
        return store

    @classmethod
    def load(cls, path, mode: str = "r") -> "EpisodeStore":
        """The store at ``path`` with its index not yet judged (``inspect_index``): for tools
        that look into a damaged store. Everyone else uses ``open``."""
        if mode not in ("r", "a"):
            raise StoreError(f"mode must be 'r' or 'a', got {mode!r}")
        path = Path(path)
        if not (path / "zarr.json").is_file():
            why = "no zarr.json" if path.is_dir() else "a file, not a folder" if path.exists() else "it does not exist"
            raise StoreError(f"{path} is not an episode store ({why})")
        try:
            root = zarr.open_group(str(path), mode="r" if mode == "r" else "r+")
        except Exception as e:  # noqa: BLE001 - any zarr failure means the same thing to the user
            raise StoreError(f"{path / 'zarr.json'}: not a readable Zarr store ({chunks.brief(e)})") from e
        attrs = dict(root.attrs)
        if attrs.get("format") != FORMAT:
            raise StoreError(f"{path} is a Zarr store but not a robot_rl episode store (format {attrs.get('format')!r})")
        version = attrs.get("schema_version")
        if type(version) is not int:  # "1", 1.0 or true is not the version: the file was edited by hand
            found = f"is {version!r} ({kind_of(version)})" if "schema_version" in attrs else "is missing"
            raise StoreError(f"{path / 'zarr.json'}: attribute 'schema_version' {found}; this robot_rl reads "
                             f"version {SCHEMA_VERSION}, an integer")
        if version != SCHEMA_VERSION:
            raise StoreError(f"{path / 'zarr.json'}: has schema version {version}; this robot_rl reads version "
                             f"{SCHEMA_VERSION}")
        for required in ("data", "meta", "meta/episode_ends", "data/action", *(f"data/{k}" for k in FRAME_FIELDS)):
            if not (path / required / "zarr.json").is_file():
                raise StoreError(f"{path} is missing '{required}'")
        for group in ("data", "meta"):
            try:
                root[group]
            except Exception as e:  # noqa: BLE001
                why = f"unreadable group metadata ({chunks.brief(e)})"
                raise StoreError(_damaged(path / group / "zarr.json", why)) from e
        return cls(root, path)

    @classmethod
    def open(cls, path, mode: str = "r") -> "EpisodeStore":
        """``mode`` "r" (read only) or "a" (append). Either refuses a store whose index does not
        match its frames, changing nothing; "a" cleans up what a writer killed mid-episode left."""
        store = cls.load(path, mode)
        if store.attribute_problems:
            more = len(store.attribute_problems) - 1
            raise StoreError(f"{store.path / 'zarr.json'}: {store.attribute_problems[0]}"
                             + (f" (and {more} more: `robot-rl data check {store.path}` lists them)" if more else ""))
        found = store.inspect_index()
        if found.problem:
            fix = (f"run `robot-rl data check --repair {store.path}`" if found.fix else
                   f"`robot-rl data check {store.path}` shows what is damaged; restore it from a backup")
            if found.unlisted:  # the user's choice: never dropped unasked
                fix += " to restore them to the index (or add --discard-unlisted to drop them)"
            raise StoreError(f"{store.path}: {found.problem}; nothing was changed: {fix}")
        if mode == "a":
            store._check_append_files(found.frames)  # before anything is changed
        if mode == "a" and found.fix:
            warnings.warn(f"{store.path}: {found.fix}", stacklevel=2)
            store.apply(found)
        store._ends, store._judged = found.ends, True
        return store

    def _check_append_files(self, frames: int) -> None:
        """Refuse to append when a file the next episode would rewrite (every array's last,
        partly filled chunk or shard, holding committed frames) is missing or unreadable: the
        append would overwrite the evidence, and restoring that file from a backup afterwards
        would take the appended episode with it."""
        if not frames:
            return
        for key, array in self.arrays.items():
            per_file = array.metadata.chunk_grid.chunk_shape[0]
            if frames % per_file == 0:
                continue  # the last file is full: the next episode starts a new one
            start = frames // per_file * per_file
            chunk = chunks.chunks_of(array, self.path / "data" / key, start, frames)[0]
            damage = chunks.missing(array, chunk, self.every_chunk_written) or chunks.undecodable(array, chunk)
            if damage:
                raise DamagedStoreError(self.path, chunks.Damage(damage[0].file, damage[0].start, damage[0].stop,
                                                                 f"{damage[0].why}; appending would rewrite this file, "
                                                                 "so nothing was appended"))

    # ---- index --------------------------------------------------------------------------------
    def inspect_index(self, discard_unlisted: bool = False) -> IndexPlan:
        """The stored index judged against the frames (index.py), nothing changed;
        ``discard_unlisted``: a fix that drops complete episodes the index does not list."""
        lengths = {k: a.shape[0] for k, a in self.arrays.items()}
        held = min(lengths.values())
        entries = self._entries
        claimed = max((int(e) for e in entries if 0 < e <= held), default=0) if not isinstance(entries, str) else 0
        try:
            flags = self._read(self.arrays["has_action"], self.path / "data/has_action", 0, held, verify_until=claimed)
        except StoreError as e:
            flags = getattr(e, "where", str(e))
        last_commit = self._last_commit()
        found = plan(entries, self._ends_array.shape[0], lengths, flags, discard_unlisted, last_commit)
        if found.completes_commit:  # only if its frames are the ones whose digests were recorded
            start, stop = (int(e) for e in found.ends[-2:]) if len(found.ends) > 1 else (0, int(found.ends[-1]))
            try:
                frames = {k: self._read(a, self.path / "data" / k, start, stop) for k, a in self.arrays.items()}
                intact = not self.digest_mismatch(start, stop, frames)
            except StoreError:
                intact = False
            if not intact:
                found = plan(entries, self._ends_array.shape[0], lengths, flags, discard_unlisted)
        if found.problem and found.fix and found.frames > claimed:  # a rebuild trusts flags past the stored index
            try:
                self._read(self.arrays["has_action"], self.path / "data/has_action", claimed, found.frames)
            except StoreError as e:
                why = getattr(e, "where", str(e))
                return IndexPlan(found.ends[:0], problem=f"{found.problem}; it cannot be rebuilt ({why})")
        return found

    def apply(self, found: IndexPlan) -> None:
        """Make the store what ``found`` says (the index first, then the frames past its end)."""
        if self.group.read_only:
            raise StoreError(f"{self.path} is open read-only; open it with mode='a' to change it")
        stored = None if isinstance(self._entries, str) else self._entries
        if stored is None or not np.array_equal(stored, found.ends):
            if self._ends_array.shape[0] != len(found.ends):
                self._ends_array.resize((len(found.ends),))
            if len(found.ends):
                self._ends_array[:] = found.ends
            self._entries = found.ends.copy()
        for array in self.arrays.values():
            if array.shape[0] > found.frames:
                array.resize((found.frames, *array.shape[1:]))
        log = self._commit_log
        if found.unfinished_commit and log is not None and log.shape[0]:
            log.resize((log.shape[0] - 1, log.shape[1]))
            self._digests = self._array_digests = None  # read again when needed
        self._ends = found.ends

    @property
    def _commit_log(self) -> zarr.Array | None:
        """The digest array whose row ``add_episode`` grows before an episode's frames and writes
        after them (index.py: a last row never written is a commit that did not finish)."""
        return self._array_digests_array if self._array_digests_array is not None else self._digests_array

    def _last_commit(self) -> int | None:
        """The end frame the commit log's last row names (0: never written), None without a log."""
        log = self._commit_log
        if log is None or log.shape[0] == 0:
            return None
        n = log.shape[0]
        folder = self.path / (ARRAY_DIGESTS if log is self._array_digests_array else DIGESTS)
        try:
            return int(self._read(log, folder, n - 1, n, verify_until=n - 1, units=("entry", "entries"))[0][0])
        except StoreError:
            return None

    def _read_entries(self) -> np.ndarray | str:
        """The stored index, or why it cannot be read (its last entry may be missing: a writer
        killed between growing the index and writing the entry)."""
        n = self._ends_array.shape[0]
        try:
            return self._read(self._ends_array, self.path / "meta/episode_ends", 0, n, verify_until=n - 1,
                              units=("entry", "entries"))
        except StoreError as e:
            return getattr(e, "where", str(e))

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
        """Episode ``index`` (the fields ``keys``, default all), checked against the digests
        recorded when it was committed (``verify_digest``; stores made before digests: not checked)."""
        start, stop = self.episode_range(index)
        episode = self.read(start, stop, keys)
        self.verify_digest(index % len(self._ends), episode)
        return episode

    def recorded_digest(self, end: int) -> int | None:
        """The digest committed with the episode ending at frame ``end``, or None (none recorded)."""
        if self._digests_array is None:
            return None
        if self._digests is None:
            n = self._digests_array.shape[0]  # its last entry may be unwritten (a writer killed after growing it)
            pairs = self._read(self._digests_array, self.path / DIGESTS, 0, n, verify_until=n - 1,
                               units=("entry", "entries"))
            self._digests = {int(e): int(d) for e, d in pairs}  # a later entry for the same end wins
        return self._digests.get(int(end))

    def recorded_array_digests(self, end: int) -> dict[str, int] | None:
        """The per-array digests committed with the episode ending at frame ``end``, or None."""
        if self._array_digests_array is None:
            return None
        if self._array_digests is None:
            array, folder = self._array_digests_array, self.path / ARRAY_DIGESTS
            names = array.attrs.get("arrays")
            if (not isinstance(names, list) or len(names) + 1 != array.shape[1]
                    or sorted(map(str, names)) != sorted(self.arrays)):
                raise StoreError(_damaged(folder / "zarr.json", "its 'arrays' attribute does not name the store's "
                                                                "arrays, one per column"))
            n = array.shape[0]  # as in recorded_digest: its last row may be unwritten
            rows = self._read(array, folder, 0, n, verify_until=n - 1, units=("entry", "entries"))
            self._array_digests = {int(row[0]): dict(zip(names, map(int, row[1:]))) for row in rows}  # the later wins
        return self._array_digests.get(int(end))

    @property
    def has_digests(self) -> bool:
        """Whether the store records a digest per committed episode (stores made before it do not)."""
        return self._digests_array is not None

    @property
    def has_array_digests(self) -> bool:
        """Whether the store also records a digest per array of each episode (older stores do not)."""
        return self._array_digests_array is not None

    def digest_mismatch(self, start: int, stop: int, episode: dict[str, np.ndarray]) -> list[str]:
        """The files (relative to the store) of ``episode``'s arrays (frames [start, stop), some or
        all fields) whose frames differ from the digests recorded at its commit, one entry per array;
        [] when they match or nothing was recorded. A store with whole-episode digests only is
        checked whole: ``episode`` must then hold every field."""
        per_array = self.recorded_array_digests(stop)
        if per_array is not None:
            return [", ".join(str(c.file.relative_to(self.path))
                              for c in chunks.chunks_of(self.arrays[k], self.path / "data" / k, start, stop))
                    for k in sorted(episode) if k in per_array and episode_digest({k: episode[k]}) != per_array[k]]
        if self.digest_matches(stop, episode):
            return []
        return ["data (which array's files: not known, this store records a digest per episode, not per array)"]

    def digest_matches(self, end: int, episode: dict[str, np.ndarray]) -> bool:
        """``episode`` (every field, read whole) is the one committed ending at frame ``end``, or
        no digest was recorded for it."""
        want = self.recorded_digest(end)
        return want is None or episode_digest(episode) == want

    def verify_digest(self, index: int, episode: dict[str, np.ndarray]) -> None:
        """Raise StoreError, naming the files, unless ``episode`` (fields of episode ``index``) has
        the digests recorded at its commit. Where only a whole-episode digest was recorded, the
        fields not given are read to check it."""
        start, stop = self.episode_range(index)
        rest = [k for k in self.arrays if k not in episode]
        if rest and self.recorded_array_digests(stop) is None and self.recorded_digest(stop) is not None:
            episode = {**episode, **self.read(start, stop, rest)}
        moved = self.digest_mismatch(start, stop, episode)
        if moved:
            raise StoreError(f"{self.path}: episode {index} (frames {start}-{stop - 1}): {' and '.join(moved)}: "
                             f"{MOVED}; `robot-rl data check {self.path}` lists the damaged episodes")

    def read(self, start: int, stop: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Frames [start, stop) of the chosen fields (only the chunks they touch are read, and
        checked: a missing or damaged one is a StoreError naming its file)."""
        keys = list(self.arrays) if keys is None else keys
        missing = [k for k in keys if k not in self.arrays]
        if missing:
            raise StoreError(f"no field {missing} in {self.path}; it has {sorted(self.arrays)}")
        stop = min(stop, self.n_frames)
        return {k: self._read(self.arrays[k], self.path / "data" / k, start, stop) for k in keys}

    def _read(self, array: zarr.Array, folder: Path, start: int, stop: int, verify_until: int | None = None,
              units: tuple[str, str] = ("frame", "frames")) -> np.ndarray:
        """``array[start:stop]``; the chunks of items before ``verify_until`` (default: all) must be
        on disk. A missing or damaged chunk raises DamagedStoreError naming its file."""
        for chunk in chunks.chunks_of(array, folder, start, stop if verify_until is None else min(stop, verify_until)):
            damage = chunks.missing(array, chunk, self.every_chunk_written)
            if damage:
                raise DamagedStoreError(self.path, damage[0], units)
        try:
            return array[start:stop]
        except Exception as e:  # noqa: BLE001 - a codec failing on a chunk: find and name the file
            for chunk in chunks.chunks_of(array, folder, start, stop):
                damage = chunks.undecodable(array, chunk)
                if damage:
                    raise DamagedStoreError(self.path, damage[0], units) from e
            raise StoreError(_damaged(folder, f"{units[1]} {start}-{stop - 1} cannot be read ({chunks.brief(e)})",
                                      self.path)) from e

    def _array(self, key: str) -> zarr.Array:
        file = self.path / key / "zarr.json"
        if not file.is_file():
            raise StoreError(_damaged(file, "missing (the array's metadata)"))
        try:
            array = self.group[key]
        except Exception as e:  # noqa: BLE001 - garbled JSON, unknown codec, ...: the file is damaged
            raise StoreError(_damaged(file, f"unreadable array metadata ({chunks.brief(e)})")) from e
        if not isinstance(array, zarr.Array):
            raise StoreError(_damaged(file, "a group where an array belongs"))
        return array.with_config(WRITE_EVERY_CHUNK)

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
        if not self._judged:
            raise StoreError(f"{self.path} was loaded without checking its index; open it with "
                             "EpisodeStore.open(path, mode='a') to append")
        frames = self._check_episode(episode)
        start = self.n_frames
        stop = start + frames
        log = self._commit_log
        if log is not None:  # the commit begins: a row that reads end 0 until the frames are in (index.py)
            logged = log.shape[0]
            log.resize((logged + 1, log.shape[1]))
        for key, array in self.arrays.items():
            array.resize((stop, *array.shape[1:]))
            array[start:stop] = np.asarray(episode[key], dtype=array.dtype)
        # the digests before the commit: a digest without its entry commits nothing
        lossy = self.attrs.get("image_codec") == "jpeg"  # its frames are what was stored, not what was given
        stored = {k: a[start:stop] if lossy and k in self.cameras else np.asarray(episode[k], dtype=a.dtype)
                  for k, a in self.arrays.items()} if self.has_digests or self.has_array_digests else {}
        if self._array_digests_array is not None:
            self.recorded_array_digests(stop)  # the columns' names, checked
            names = self._array_digests_array.attrs["arrays"]
            row = {k: episode_digest({k: stored[k]}) for k in names}
            self._write_row(self._array_digests_array, [stop, *row.values()], logged)  # the log
            self._array_digests[stop] = row
        if self._digests_array is not None:
            digest = episode_digest(stored)
            self._write_row(self._digests_array, [stop, digest], logged if log is self._digests_array else None)
            if self._digests is not None:
                self._digests[stop] = digest
        n = len(self._ends)
        self._ends_array.resize((n + 1,))
        self._ends_array[n] = stop  # the commit: written last
        self._ends = np.append(self._ends, stop)
        self._entries = self._ends.copy()
        return n

    @staticmethod
    def _write_row(array: zarr.Array, values: list[int], row: int | None = None) -> None:
        """Write ``values`` at ``row`` (a row grown before), or as a new last row."""
        if row is None:
            row = array.shape[0]
            array.resize((row + 1, array.shape[1]))
        array[row] = np.array(values, np.uint64)

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
        has_action = np.asarray(episode["has_action"], bool)
        if not has_action[:-1].all() or has_action[-1]:
            raise StoreError("has_action must be True on every frame of an episode but the last (the final "
                             "observation), and False there")
        return frames

    def nbytes_stored(self) -> int:
        """Bytes on disk under data/ (what the frames cost after compression)."""
        return sum(f.stat().st_size for f in (self.path / "data").rglob("*") if f.is_file())

    def nbytes_raw(self) -> int:
        frames = self.n_frames
        return sum(frames * math.prod(shape) * dtype.itemsize for shape, dtype in self.fields.values())


def _damaged(file: Path, what: str, store: Path | None = None) -> str:
    """One line naming the damaged file and the way on: ``data check`` for chunks (it lists the
    episodes they hold), a backup for metadata (without it nothing of the array can be read)."""
    way_on = f"`robot-rl data check {store}` lists what it affects" if store else "restore this file from a backup"
    return f"{file}: {what}; the store is damaged: {way_on}"


def store_to_export(store_path, out: Path, error) -> "EpisodeStore":
    """The store an export reads, once its target ``out`` is known to be new or an empty folder
    (then removed, for the export to rename its output into place); ``error``: the format's
    error type, for one line naming the path."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise error(f"{out} exists and is not an empty folder: export into a new one")
    store = EpisodeStore.open(store_path)
    if not len(store):
        raise error(f"{store_path} holds no episodes: nothing to export")
    if out.exists():
        out.rmdir()
    return store


"""``robot-rl data info``: everything an episode store holds, as a dict (``--json``) and as text.

The dict keeps the keys scripts have read since the first ``data info`` (``episodes``,
``frames``, ``steps``, ``mean_length`` / ``min_length`` / ``max_length`` in frames,
``success_rate``, ``intervention_share``, ``fields``, ``bytes_on_disk``, ``raw_bytes``, the
store's ``task``, ``robot``, ``control_hz``, ``cameras``, ``image_codec``, ``integrity``) and
adds what the text shows besides: ``steps_per_episode``, ``successful_episodes``,
``intervention_steps``, ``episodes_with_intervention``, the store's format and every one of
its attributes (``attrs``), and ``arrays``: one entry per array of the store.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from robot_rl.data.schema import ARRAY_DIGESTS, DIGESTS, FRAME_FIELDS
from robot_rl.data.store import EpisodeStore

INDEX = "meta/episode_ends"
# the store's own attributes: shown in the header, the others under "recorded with"
FORMAT_ATTRS = ("format", "schema_version", "integrity", "task", "robot", "control_hz", "cameras", "image_codec")


def info(path: str | Path) -> dict:
    """Everything ``robot-rl data info`` shows about the store at ``path``."""
    store = EpisodeStore.open(path)
    return {"path": str(path), **_metadata(store), **_episodes(store), **_sizes(store)}


def _metadata(store: EpisodeStore) -> dict:
    attrs = store.attrs
    return {
        "task": attrs.get("task"), "robot": attrs.get("robot"), "control_hz": attrs.get("control_hz"),
        "cameras": {k: list(v) for k, v in store.cameras.items()}, "image_codec": attrs.get("image_codec"),
        "integrity": attrs.get("integrity"), "format": attrs.get("format"),
        "schema_version": attrs.get("schema_version"), "zarr_format": store.group.metadata.zarr_format,
        "attrs": attrs,
    }


def _episodes(store: EpisodeStore) -> dict:
    """Counts, lengths, success and interventions of the committed episodes."""
    n = len(store)
    frames = store.episode_lengths
    keys = ["success", "is_intervention", "has_action"]
    flags = store.read(0, store.n_frames, keys) if n else None
    if store.has_array_digests:  # each episode's flags against their digests (older stores: data check does it)
        for i in range(n):
            start, stop = store.episode_range(i)
            store.verify_digest(i, {k: flags[k][start:stop] for k in keys})
    successes, intervened = [], []
    for i in range(n):
        start, stop = store.episode_range(i)
        successes.append(bool(flags["success"][start:stop].any()))
        intervened.append(bool(flags["is_intervention"][start:stop][flags["has_action"][start:stop]].any()))
    steps = int(flags["has_action"].sum()) if n else 0
    intervention_steps = int(flags["is_intervention"][flags["has_action"]].sum()) if n else 0
    per_episode = frames - 1  # control steps: each episode also holds its final observation
    return {
        "episodes": n, "frames": store.n_frames, "steps": steps,
        "mean_length": float(frames.mean()) if n else 0.0,
        "min_length": int(frames.min()) if n else 0, "max_length": int(frames.max()) if n else 0,
        "steps_per_episode": {"min": int(per_episode.min()), "median": float(np.median(per_episode)),
                              "max": int(per_episode.max()), "mean": float(per_episode.mean())} if n else None,
        "success_rate": float(np.mean(successes)) if n else 0.0, "successful_episodes": int(sum(successes)),
        "intervention_share": intervention_steps / steps if steps else 0.0,
        "intervention_steps": intervention_steps, "episodes_with_intervention": int(sum(intervened)),
    }


def _sizes(store: EpisodeStore) -> dict:
    arrays = {f"data/{name}": _array_row(store, name, array, store.n_frames) for name, array in store.arrays.items()}
    arrays[INDEX] = _array_row(store, INDEX, store.group[INDEX], len(store))
    if store.has_digests:
        digests = store.group[DIGESTS]
        arrays[DIGESTS] = _array_row(store, DIGESTS, digests, digests.shape[0])
    if store.has_array_digests:
        digests = store.group[ARRAY_DIGESTS]
        arrays[ARRAY_DIGESTS] = _array_row(store, ARRAY_DIGESTS, digests, digests.shape[0])
    return {
        "fields": {k: [list(s), np.dtype(d).name] for k, (s, d) in store.fields.items() if k not in FRAME_FIELDS},
        "arrays": arrays, "bytes_on_disk": store.nbytes_stored(), "raw_bytes": store.nbytes_raw(),
    }


def _array_row(store: EpisodeStore, name: str, array, length: int) -> dict:
    """One array: what it is, its layout (frames per chunk and per file, codecs) and its bytes."""
    shape = tuple(array.shape[1:])
    folder = store.path / (name if name.startswith("meta/") else f"data/{name}")
    return {
        "role": _role(store, name), "dtype": np.dtype(array.dtype).name, "shape": list(shape), "length": length,
        "chunk": int(array.chunks[0]), "shard": int(array.shards[0]) if array.shards else None,
        "codecs": _codecs(array),
        "bytes_on_disk": sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()),
        "raw_bytes": length * math.prod(shape) * np.dtype(array.dtype).itemsize,
    }


def _role(store: EpisodeStore, name: str) -> str:
    if name == INDEX:
        return "index"
    if name in (DIGESTS, ARRAY_DIGESTS):
        return "digests"
    if name in store.cameras:
        return "camera"
    if name == "action":
        return "action"
    if name in FRAME_FIELDS:  # the per-frame bookkeeping every store has
        return {"reward": "reward", "timestamp": "time"}.get(name, "flag")
    return "observation"


def _codecs(array) -> str:
    """``blosc zstd:3 shuffle + crc32c``: the serializer when it is more than plain bytes, then the
    compressors, in the order they run on write."""
    chain = [] if array.serializer.to_dict()["name"] == "bytes" else [array.serializer]
    return " + ".join(_codec(c.to_dict()) for c in [*chain, *array.compressors]) or "none"


def _codec(spec: dict) -> str:
    name, config = spec["name"], spec.get("configuration", {})
    if name == "blosc":
        return f"blosc {config['cname']}:{config['clevel']} {config['shuffle']}"
    shown = {k: v for k, v in config.items() if k not in ("typesize", "blocksize", "endian")}
    return " ".join([name, *(f"{k}={v}" for k, v in shown.items())])


# ---- text -----------------------------------------------------------------------------------
def info_text(summary: dict) -> str:
    """What ``robot-rl data info`` prints: the store, its episodes, then a table of its arrays."""
    return "\n".join([*_header(summary), "", *_episode_lines(summary), "", *_array_table(summary)])


def _header(s: dict) -> list[str]:
    cameras = ", ".join(f"{k} {h}x{w}" for k, (h, w) in s["cameras"].items())
    lines = [f"{s['path']}: {s['format']} schema {s['schema_version']} (Zarr {s['zarr_format']}), "
             f"integrity {s['integrity'] or 'none (an older store)'}",
             f"task {s['task']}, robot {s['robot']}, {s['control_hz']:g} Hz",
             f"cameras: {cameras} (image codec {s['image_codec']})" if cameras else "cameras: none"]
    recorded = {k: v for k, v in s["attrs"].items() if k not in FORMAT_ATTRS}
    if recorded:
        lines.append("recorded with: " + ", ".join(f"{k}={v}" for k, v in recorded.items()))
    return lines


def _episode_lines(s: dict) -> list[str]:
    n, steps = s["episodes"], s["steps"]
    rows = [("episodes", str(n)),
            ("steps", f"{steps} (in {s['frames']} frames: each episode also holds its final observation)")]
    if s["steps_per_episode"]:
        per = s["steps_per_episode"]
        rows.append(("steps per episode", f"min {per['min']}, median {per['median']:g}, max {per['max']} "
                                          f"(mean {per['mean']:.1f})"))
    rows += [("success", f"{s['successful_episodes']} of {n} episodes ({_percent(s['success_rate'])})"),
             ("interventions", f"{s['intervention_steps']} of {steps} steps ({_percent(s['intervention_share'])}), "
                               f"in {s['episodes_with_intervention']} of {n} episodes"),
             ("size", f"{_bytes(s['bytes_on_disk'])} on disk (data/), {_bytes(s['raw_bytes'])} raw"
                      f"{_ratio(s['raw_bytes'], s['bytes_on_disk'])}")]
    width = max(len(label) for label, _ in rows)
    return [f"{label:<{width}}  {value}" for label, value in rows]


def _array_table(s: dict) -> list[str]:
    head = ("array", "role", "dtype", "per frame", "chunk", "shard", "codecs", "on disk", "raw")
    rows = [(name, a["role"], a["dtype"], _shape(a["shape"]), str(a["chunk"]), str(a["shard"] or "-"), a["codecs"],
             _bytes(a["bytes_on_disk"]), _bytes(a["raw_bytes"])) for name, a in s["arrays"].items()]
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    right = {4, 5, 7, 8}  # numbers line up on the right
    return [" ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            .rstrip() for row in (head, *rows)] + ["(chunk, shard: frames per chunk and per file; per frame: the "
                                                   "shape of one frame's value)"]


def _shape(shape: list[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def _ratio(raw: int, stored: int) -> str:
    return f", {raw / stored:.2f}x compression" if raw and stored else ""


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            break
    return f"{size:.1f} {unit}"

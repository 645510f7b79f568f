"""What an episode store is made of, independent of reading and writing one (store.py): its
format name and schema version, the per-frame bookkeeping fields, the chunking, where its
digests live, and the schema of the attributes in its zarr.json (``ATTRIBUTES``, checked by
``attribute_problems`` when a store is created or opened and reported by ``data check``);
``episode_digest``, the digest that ties an episode's frames to their commit. The layout and
the crash-safety and integrity rules: store.py's module doc.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

SCHEMA_VERSION = 1
FORMAT = "robot_rl.episodes"
INTEGRITY = "crc32c"  # attrs["integrity"]: every chunk checksummed, every chunk of written frames on disk
# Per-frame bookkeeping every store has, besides the observation fields and the action.
FRAME_FIELDS: dict[str, np.dtype] = {
    "reward": np.dtype(np.float32),
    "terminated": np.dtype(bool),
    "truncated": np.dtype(bool),
    "is_intervention": np.dtype(bool),
    "success": np.dtype(bool),  # label per frame: the task is in a success state at this observation
    "has_action": np.dtype(bool),  # False on the final frame of each episode, and only there
    "timestamp": np.dtype(np.float64),  # seconds since the episode started
}
IMAGE_SHARD_FRAMES = 64  # frames per image file (one chunk per frame inside); chosen by `bench data`
NUMERIC_CHUNK_FRAMES = 1024  # numeric arrays: an append rewrites at most two small chunks
INDEX_CHUNK = 4096
WRITE_EVERY_CHUNK = {"write_empty_chunks": True}  # an all-zero chunk is written too, so a missing one is damage
# meta/episode_digests: (end frame, digest) per committed episode, written just before its index entry.
# A chunk's checksum says its bytes are intact, not that they are in their place: a chunk file copied
# over another passes it. The digest ties every frame of every array to its episode.
DIGESTS = "meta/episode_digests"
# meta/array_digests: (end frame, one digest per array) per committed episode, written with the episode's
# digest; its "arrays" attribute names the columns. A reader of some arrays checks those alone.
ARRAY_DIGESTS = "meta/array_digests"
MOVED = ("its frames do not match the digest recorded when the episode was committed: a chunk holds other frames "
         "than its own (copied or moved from elsewhere)")


def _is_size(value) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value))


def _is_rate(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


# zarr.json's attributes after format and schema_version (checked first: without them nothing can be read):
# name -> (required, the check, what it must be). Other attributes (how a store was recorded) are free.
ATTRIBUTES = {
    "integrity": (False, lambda v: v == INTEGRITY,
                  f"{INTEGRITY!r} (every chunk checksummed), or absent (an older store)"),
    "task": (True, lambda v: isinstance(v, str), "a string (the task's name)"),
    "robot": (True, lambda v: isinstance(v, str), "a string (the robot's name)"),
    "control_hz": (True, _is_rate, "a number above 0 (the control rate in Hz)"),
    "cameras": (True, lambda v: isinstance(v, dict) and all(_is_size(size) for size in v.values()),
                "a mapping of camera name to [height, width], positive integers"),
    "image_codec": (True, lambda v: isinstance(v, str) and v in ("lossless", "jpeg"), "'lossless' or 'jpeg'"),
}


def kind_of(value) -> str:
    """What a JSON value is, in words: "a string", "a list", ..."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "a mapping", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def attribute_problems(attrs: dict, fields: dict | None = None) -> list[str]:
    """What in a store's attributes breaks ``ATTRIBUTES`` (one line each, naming the attribute);
    with ``fields`` (``{name: (frame_shape, dtype)}``) also each camera without its image array."""
    found = []
    for name, (required, ok, must) in ATTRIBUTES.items():
        if name not in attrs:
            if required:
                found.append(f"attribute {name!r} is missing; it must be {must}")
            continue
        value = attrs[name]
        if not ok(value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            found.append(f"attribute {name!r} is {shown} ({kind_of(value)}); it must be {must}")
    cameras = attrs.get("cameras")
    if fields is not None and isinstance(cameras, dict) and all(_is_size(v) for v in cameras.values()):
        for cam, (h, w) in cameras.items():
            shape, dtype = fields.get(cam, (None, None))
            if shape != (h, w, 3) or dtype != np.uint8:
                held = f"data/{cam} holds {dtype} frames of shape {shape}" if shape else f"there is no data/{cam}"
                found.append(f"attribute 'cameras' names {cam!r} at {h}x{w}, but {held}; a camera is a uint8 "
                             f"array of shape ({h}, {w}, 3)")
    return found


def episode_digest(episode: dict[str, np.ndarray]) -> int:
    """A 64-bit BLAKE2b digest of an episode's frames: every field in name order, its dtype,
    shape and bytes."""
    h = hashlib.blake2b(digest_size=8)
    for key in sorted(episode):
        value = np.ascontiguousarray(episode[key])
        h.update(f"{key}:{value.dtype.str}:{value.shape}".encode())
        h.update(value.data)
    return int.from_bytes(h.digest(), "little")

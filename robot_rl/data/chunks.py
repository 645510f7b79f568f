"""Where an array's frames lie on disk, and whether they are all there and readable.

Zarr reads a chunk that is not on disk (or a frame missing from a shard) as the fill value,
without a word. A store that writes every chunk of its frames (``integrity`` in store.py)
treats that as damage, so readers check the chunks a read touches before trusting it. The
functions here answer with the file, the frames and what is wrong; the store turns that into
the one-line error a user sees, ``data check`` into its per-episode report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ShardingCodec
from zarr.codecs.sharding import ShardingCodecIndexLocation

NOT_STORED = 2**64 - 1  # a shard index entry (offset, length) of a chunk the shard does not hold


@dataclass(frozen=True)
class Chunk:
    """One file of an array (a chunk, or a shard of chunks) and the frames [start, stop) of it asked for."""

    file: Path
    start: int
    stop: int


@dataclass(frozen=True)
class Damage:
    """Frames [start, stop) of ``file`` are missing or unreadable, for the reason ``why``."""

    file: Path
    start: int
    stop: int
    why: str


def chunks_of(array: zarr.Array, folder: Path, start: int, stop: int) -> list[Chunk]:
    """The files holding frames [start, stop) of the array stored under ``folder``."""
    per_file = array.metadata.chunk_grid.chunk_shape[0]  # the shard length for sharded arrays
    found = []
    for i in range(start // per_file, -(-stop // per_file)):
        key = array.metadata.encode_chunk_key((i,) + (0,) * (array.ndim - 1))
        found.append(Chunk(folder / key, max(start, i * per_file), min(stop, (i + 1) * per_file)))
    return found


def missing(array: zarr.Array, chunk: Chunk, every_chunk_written: bool) -> list[Damage]:
    """The chunk's frames that are not on disk. A file that is empty or shorter than its shard
    index is always damage; a missing file, or frames missing from a shard's index, are damage
    when the store writes every chunk (elsewhere Zarr rightly reads them as the fill value)."""
    whole = [chunk.file, chunk.start, chunk.stop]
    if not chunk.file.is_file():
        return [Damage(*whole, "missing")] if every_chunk_written else []
    size = chunk.file.stat().st_size
    if size == 0:
        return [Damage(*whole, "empty file")]
    sharding = _sharding(array)
    if sharding is None:
        return []
    per_shard = tuple(s // c for s, c in zip(array.metadata.chunk_grid.chunk_shape, sharding.chunk_shape))
    index_bytes = 16 * math.prod(per_shard) + 4 * any(isinstance(c, Crc32cCodec) for c in sharding.index_codecs)
    if size < index_bytes:
        return [Damage(*whole, f"truncated ({size} bytes, shorter than its index)")]
    split_in_time_only = all(n == 1 for n in per_shard[1:])
    if not (every_chunk_written and split_in_time_only and sharding.index_location == ShardingCodecIndexLocation.end):
        return []  # frames are checked one by one only in the layout this project writes
    with chunk.file.open("rb") as f:
        f.seek(size - index_bytes)
        entries = np.frombuffer(f.read(16 * per_shard[0]), "<u8").reshape(-1, 2)
    inner = sharding.chunk_shape[0]
    shard_start = chunk.start // array.metadata.chunk_grid.chunk_shape[0] * array.metadata.chunk_grid.chunk_shape[0]
    first, stop = (chunk.start - shard_start) // inner, -(-(chunk.stop - shard_start) // inner)
    absent = [i for i in range(first, stop) if entries[i, 0] == NOT_STORED]
    return [Damage(chunk.file, max(chunk.start, shard_start + i * inner), min(chunk.stop, shard_start + (i + 1) * inner),
                   "not in the shard") for i in absent]


def undecodable(array: zarr.Array, chunk: Chunk) -> list[Damage]:
    """The chunk's frames that cannot be decoded (a checksum that does not match, a garbled
    compressed stream). A shard is narrowed down to its unreadable inner chunks."""
    why = _decode_error(array, chunk.start, chunk.stop)
    if why is None:
        return []
    sharding = _sharding(array)
    inner = sharding.chunk_shape[0] if sharding else chunk.stop - chunk.start
    if inner >= chunk.stop - chunk.start:
        return [Damage(chunk.file, chunk.start, chunk.stop, why)]
    found = []
    for lo in range(chunk.start - chunk.start % inner, chunk.stop, inner):
        lo, hi = max(lo, chunk.start), min(lo + inner, chunk.stop)
        why_here = _decode_error(array, lo, hi)
        if why_here:
            found.append(Damage(chunk.file, lo, hi, why_here))
    return found or [Damage(chunk.file, chunk.start, chunk.stop, why)]


def brief(error: BaseException) -> str:
    """An exception as a short single line."""
    text = " ".join(str(error).split()) or type(error).__name__
    if "checksum do not match" in text:
        return "checksum mismatch: the file is garbled"
    return text if len(text) <= 160 else text[:157] + "..."


def _decode_error(array: zarr.Array, start: int, stop: int) -> str | None:
    try:
        array[start:stop]
    except Exception as e:  # noqa: BLE001 - whatever the codec raises, the file is damaged
        return brief(e)
    return None


def _sharding(array: zarr.Array) -> ShardingCodec | None:
    codec = array.metadata.codecs[0]
    return codec if isinstance(codec, ShardingCodec) else None

"""``robot-rl data check STORE [--repair]``: verify every chunk of every committed episode.

``check_store`` reads the whole store chunk by chunk: the index against the has_action flags
(index.py), then every file of every array over the committed frames, present (in stores that
write every chunk) and decoding (checksums, compressed streams), then every intact episode
against the digest recorded when it was committed (a chunk in another's place passes its own
checksum, not that). It reports per episode.
``repair=True`` applies only what is provable: it drops frames no index entry commits and
rebuilds an index that does not match the frames from the flags, and restores to the index
complete episodes after its last entry that it does not list (``discard_unlisted=True``: drops
them instead, the user's choice); a damaged chunk is left as it is (restore it from a backup,
or split the good episodes out), and no committed episode is ever dropped unasked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data import chunks
from robot_rl.data.schema import INTEGRITY, MOVED
from robot_rl.data.store import EpisodeStore
from robot_rl.data.tools import format_episodes
from robot_rl.errors import InputError


def check_store(path: str | Path, repair: bool = False, discard_unlisted: bool = False) -> dict:
    """A report of the store at ``path``::

        {"path", "ok": every committed episode verified and the index usable as it is,
         "integrity": "crc32c" or None (an older store: no checksums, missing chunks read as zeros),
         "episode_digests": whether the store records a digest per episode (older stores do not),
         "episodes": n, "damaged_episodes": [i, ...], "episode_problems": {"i": ["file: what", ...]},
         "problems": [what is wrong beyond single episodes: the index, frames outside any episode],
         "fix": what `--repair` (or, where it is automatic, the next open for appending) changes, or None,
         "repaired": what this call changed (repair=True), or None,
         "hint": the way out when episodes are damaged, or None,
         "unlisted_episodes": {"i": what of episode i, complete but not in the stored index (restored
                               when repair=True), whether a digest vouches for it}}

    Raises StoreError (one line naming the file) only when the store cannot be opened at all."""
    path = Path(path)
    if discard_unlisted and not repair:
        raise InputError("--discard-unlisted chooses what --repair does: give both")
    store = EpisodeStore.load(path, "a" if repair else "r")
    found = store.inspect_index(discard_unlisted)
    unlisted = range(len(found.ends) - found.unlisted, len(found.ends))  # complete, not in the stored index
    repaired = None
    if repair and found.fix:
        store.apply(found)
        repaired = found.fix
        store = EpisodeStore.load(path, "r")
        found = store.inspect_index()
    usable = found.problem is None or found.fix is not None
    ends = found.ends
    span = found.frames if usable else min(a.shape[0] for a in store.arrays.values())
    problems = [f"index: {found.problem}"] if found.problem else []
    problems += [f"zarr.json: {problem}" for problem in store.attribute_problems]
    per_episode: dict[int, list[str]] = {}
    outside: dict[str, list[tuple[int, int]]] = {}  # damage in no episode: "file: why" -> frame ranges
    for key, array in store.arrays.items():
        folder = store.path / "data" / key
        in_episodes: dict[int, dict[str, list[tuple[int, int]]]] = {}  # one line per episode, file and why
        for chunk in chunks.chunks_of(array, folder, 0, min(span, array.shape[0])):
            for damage in (chunks.missing(array, chunk, store.every_chunk_written)
                           or chunks.undecodable(array, chunk)):
                text = f"{damage.file.relative_to(store.path)}: {damage.why}"
                hit = _episodes_in(ends, damage.start, damage.stop)
                for i in hit:
                    first, last = (int(ends[i - 1]) if i else 0), int(ends[i])
                    in_episodes.setdefault(i, {}).setdefault(text, []).append(
                        (max(damage.start, first), min(damage.stop, last)))
                if not hit:
                    outside.setdefault(text, []).append((damage.start, damage.stop))
        for i, texts in in_episodes.items():
            per_episode.setdefault(i, []).extend(f"{text} ({_frames(spans)})" for text, spans in texts.items())
    problems += [f"{text} ({_frames(spans)})" for text, spans in outside.items()]
    if store.has_digests:  # each intact episode against the digest of its commit
        for i in range(len(ends)):
            if i in per_episode:
                continue
            start, stop = (int(ends[i - 1]) if i else 0), int(ends[i])
            frames = {k: store._read(a, store.path / "data" / k, start, stop) for k, a in store.arrays.items()}
            moved = store.digest_mismatch(start, stop, frames)
            if moved:
                per_episode[i] = [f"{files}: {MOVED}" for files in moved]
    damaged = sorted(per_episode)
    unlisted_notes = {str(i): _unlisted_note(store, int(ends[i]), i in per_episode, bool(repaired)) for i in unlisted}
    good = [i for i in range(len(ends)) if i not in per_episode]
    hint = None
    if damaged:
        hint = "restore the damaged files from a backup"
        if good:
            hint += (f", or keep the good episodes: robot-rl data split {path} --episodes {format_episodes(good)} "
                     "--out NEW")
    return {"path": str(path), "ok": not problems and not damaged,
            "integrity": INTEGRITY if store.every_chunk_written else None,
            "episode_digests": store.has_digests, "episodes": len(ends), "damaged_episodes": damaged,
            "episode_problems": {str(i): per_episode[i] for i in damaged}, "problems": problems,
            "fix": found.fix, "repaired": repaired, "hint": hint, "unlisted_episodes": unlisted_notes}


def _unlisted_note(store: EpisodeStore, end: int, damaged: bool, restored: bool) -> str:
    """What ``check`` says of a complete episode the stored index did not list."""
    said = "restored to the index" if restored else "complete, but not in the index (--repair restores it)"
    if damaged:
        return f"{said}; damaged: see its problems"
    if store.recorded_digest(end) is None:
        return f"{said}{' without a' if restored else '; no'} digest to check it against (none was recorded for it)"
    return f"{said}; its frames match the digest recorded when it was committed"


def _frames(spans: list[tuple[int, int]]) -> str:
    """Frame ranges [start, stop) as "frames 3-9, 12" (touching ranges merged)."""
    merged: list[list[int]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    parts = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in merged]
    return f"frame{'s' if len(parts) > 1 or merged[0][1] - merged[0][0] > 1 else ''} {', '.join(parts)}"


def _episodes_in(ends: np.ndarray, start: int, stop: int) -> list[int]:
    """Indices of the episodes holding any of frames [start, stop)."""
    first = int(np.searchsorted(ends, start, side="right"))
    last = int(np.searchsorted(ends, stop - 1, side="right"))
    return list(range(first, min(last + 1, len(ends))))

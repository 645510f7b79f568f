"""The episode index (``meta/episode_ends``) checked against the frames it indexes.

Two records say where episodes end: the index, and the ``has_action`` flag of every frame
(False only on an episode's last frame). ``add_episode`` writes all frames first, then grows
the index by one entry, then writes that entry. A writer killed at any moment therefore
leaves one of two things after an index that agrees with the flags, and nothing else:

* frames after the last committed end (an episode cut off mid-write): provably uncommitted,
  they are dropped when the store is next opened for appending;
* a last index entry that was grown but never written (it reads as the fill value 0): every
  frame of its episode was written before the index grew, so the entry is completed from the
  flags (or dropped, when no frames follow the last end).

A store with digests also logs each commit: ``add_episode`` grows the commit log (the digest
array: per array where the store has one) by a row before it writes the frames, and writes the
row (the episode's end and digests) after them. So one complete episode after the index is
also what a writer killed mid-commit leaves, and the log's last row says which: unwritten (it
reads end 0), the digests were never recorded and the episode never committed, so it is
dropped; naming that episode's end, with its frames matching the digests, only its index
entry is missing and the commit is completed.

Any other complete episodes after the index's last entry are never dropped: a writer stops
inside one episode, so more than that (an older ``meta/`` copied over newer data) means the
index is behind. The store is refused, and ``robot-rl data check --repair`` restores them to the index
(``--discard-unlisted``: drops them, when that is what the user chooses). Only frames after the
last complete episode, which no writer ever committed, are dropped without asking.

Anything else is damage, and the store is refused: nothing is ever dropped on a guess. Then
``robot-rl data check --repair`` rebuilds the index from the flags, which it only does when
they show at least as many complete episodes as the index has entries (the index's length,
like its entries, is written only after the frames it counts), or when every entry the index
holds ends one of the complete episodes (an entry repeated: fewer episodes than entries, none
of them lost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class IndexPlan:
    """What the store holds once the plan is applied, and what applying it changes."""

    ends: np.ndarray  # exclusive end frame of every episode
    problem: str | None = None  # why the stored index cannot be used as it is (the store is refused)
    fix: str | None = None  # what applying the plan changes on disk, in words; None: nothing (or no fix)
    unlisted: int = 0  # the last ``unlisted`` of ``ends``: complete episodes the stored index does not list
    unfinished_commit: bool = False  # the commit log's last row was never written: applying the plan drops it
    completes_commit: bool = False  # the last of ``ends`` is a commit whose index entry alone is missing

    @property
    def frames(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0


def complete_episode_ends(has_action: np.ndarray) -> np.ndarray:
    """Ends of the well-formed episodes (>= 2 frames, only the last without an action) from
    frame 0 on, up to the first frame that breaks the pattern."""
    ends = np.flatnonzero(~np.asarray(has_action, bool)) + 1
    too_short = np.flatnonzero(np.diff(ends, prepend=0) < 2)
    return ends[: too_short[0] if len(too_short) else len(ends)].astype(np.int64)


def plan(entries: np.ndarray | str, n_entries: int, lengths: dict[str, int], has_action: np.ndarray | str,
         discard_unlisted: bool = False, last_commit: int | None = None) -> IndexPlan:
    """``entries``: the stored index, or why it cannot be read; ``n_entries``: its length;
    ``lengths``: frames of every data array; ``has_action``: the flags of the frames every
    array holds, or why they cannot be read; ``discard_unlisted``: the fix drops complete
    episodes the index does not list instead of restoring them (the user's choice);
    ``last_commit``: the end frame the commit log's last row names (0: the row was never
    written), None without a log."""
    held, longest = min(lengths.values()), max(lengths.values())
    empty = np.zeros(0, np.int64)
    if isinstance(has_action, str):
        return IndexPlan(empty, problem=has_action)
    complete = complete_episode_ends(has_action)
    if isinstance(entries, str):
        problem = entries
    else:
        entries = np.asarray(entries, np.int64)
        unwritten = n_entries > 0 and entries[-1] == 0
        head = entries[:-1] if unwritten else entries
        problem = _disagreement(head, lengths, complete)
        if problem is None:
            last = int(head[-1]) if len(head) else 0
            extra = complete[len(head):]
            if not unwritten and last_commit == 0 and len(extra) <= 1:  # a commit began and never recorded its digests
                cut = longest - last
                return IndexPlan(head, unfinished_commit=True,
                                 fix=f"drop {cut} frames of an episode whose commit did not finish (a writer stopped "
                                     "before recording its digests) and the commit log's unwritten row" if cut else
                                     "drop the commit log's unwritten last row (a writer stopped before the frames)")
            if not unwritten and len(extra) == 1 and last_commit == int(extra[0]):
                fix = [f"complete the commit of the episode ending at {last_commit}: its digests were recorded, its "
                       "index entry was not"]
                tail = longest - last_commit
                if tail:
                    fix.append(f"drop the {tail} frames after it (no entry commits them)")
                return IndexPlan(complete[: len(head) + 1], fix=" and ".join(fix), completes_commit=True)
            if not unwritten and len(complete) == len(head):
                cut = longest - last
                return IndexPlan(head, fix=f"drop {cut} frames of an episode that was not completed (a writer stopped "
                                           f"mid-episode)" if cut else None)
            if not unwritten:
                return _with_unlisted(head, complete, longest, None, [], discard_unlisted)
            if longest == last:
                return IndexPlan(head, fix=f"drop index entry {n_entries - 1}: it was never written and no frames follow")
            if len(complete) > len(head) and complete[len(head)] == held == longest:
                return IndexPlan(complete[:n_entries], fix=f"complete index entry {n_entries - 1}: every frame of its "
                                                           "episode was written, the entry was not")
            problem = (f"index entry {n_entries - 1} was never written, and the {longest - last} frames after the last "
                       "committed episode are not one complete episode")
    if len(complete) >= n_entries:
        rebuild = f"rebuild the index of {n_entries} episodes from the has_action flags"
        return _with_unlisted(complete[:n_entries], complete, longest, problem, [rebuild], discard_unlisted)
    if not isinstance(entries, str):
        named = sorted({int(e) for e in entries if e})
        if named and set(named) <= set(complete.tolist()):  # every entry ends a complete episode: some repeat
            keep = complete[complete <= named[-1]]
            return _with_unlisted(keep, complete, longest, problem,
                                  [f"rebuild the index from the has_action flags: its {n_entries} entries name only "
                                   f"{len(named)} episode ends, each a complete episode (a repeated entry is an "
                                   f"episode of no frames); keep those {len(keep)} episodes"], discard_unlisted)
    return IndexPlan(empty, problem=f"{problem}; the has_action flags show only {len(complete)} complete episodes "
                                    f"for its {n_entries} entries, so it cannot be rebuilt")


def _with_unlisted(listed: np.ndarray, complete: np.ndarray, longest: int, problem: str | None, fix: list[str],
                   discard: bool) -> IndexPlan:
    """The plan for index ``listed`` (the first ends of ``complete``) followed by the complete
    episodes it does not list: they are restored (``discard``: dropped), and the frames after
    the last complete episode, which no writer committed, dropped."""
    extra = complete[len(listed):]
    tail = longest - (int(complete[-1]) if len(complete) else 0)
    if len(extra):
        start = int(listed[-1]) if len(listed) else 0
        episodes = f"{len(extra)} complete episode{'s' if len(extra) > 1 else ''}"
        span = f"frames {start}-{int(extra[-1]) - 1}, ending at {', '.join(str(int(e)) for e in extra)}"
        said = (f"{episodes} ({span}) follow the index's {len(listed)} episodes and the index does not list them "
                "(an older meta/ over newer data?)")
        problem = f"{problem}; {said}" if problem else said
        what = "drop" if discard else "restore"
        fix = [*fix, f"{what} the {episodes} the index does not list ({span})" + ("" if discard else " to the index")]
    if tail:
        fix = [*fix, f"drop the {tail} frames after the last complete episode (no entry commits them)"]
    return IndexPlan(listed if discard else complete, problem=problem, fix=" and ".join(fix) or None,
                     unlisted=0 if discard else len(extra))


def _disagreement(ends: np.ndarray, lengths: dict[str, int], complete: np.ndarray) -> str | None:
    """Why index entries ``ends`` do not match the frames, or None."""
    shortest = min(lengths, key=lengths.get)
    for i, end in enumerate(int(e) for e in ends):
        before = int(ends[i - 1]) if i else 0
        if end < before + 2:
            return f"index entry {i} is {end}, not above the end before it ({before}) by a whole episode"
        if end > lengths[shortest]:
            return f"index entry {i} is {end}, but data/{shortest} holds only {lengths[shortest]} frames"
        if i >= len(complete) or complete[i] != end:
            flags = f"end episode {i} at {complete[i]}" if i < len(complete) else f"show no complete episode {i}"
            return f"index entry {i} is {end}, but the has_action flags {flags}"
    return None

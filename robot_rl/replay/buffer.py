"""Memory-lean replay buffers for SAC/RLPD: each observation is stored once, images as uint8.

Storage is a ring of ``capacity`` observation slots. The transition starting at slot ``i``
has its observation in slot ``i`` and its next observation in slot ``i + 1`` (mod capacity),
so a continuing episode reuses the previous next-observation instead of storing it again:
an episode of L steps uses L + 1 slots. ``valid[i]`` says whether slot ``i`` currently starts
a complete transition; overwriting a slot invalidates every transition that referenced it.

``MixedReplay.sample(..., staging=BatchStaging(...))`` gathers a batch straight into reusable
host tensors (pinned when the learner's device is CUDA, so the copy to the device is
asynchronous); images stay uint8 all the way to the device.

With a frozen image backbone the camera keys hold its cached float16 feature maps instead of
images: ``features`` names that encoder (its sha), ``MixedReplay.encode`` turns incoming frames
into features, and a saved buffer of one encoder's features never loads for another.

Files are plain ``.npz`` archives (no pickle); metadata, including the sampling RNG state,
is a JSON string stored in a 0-d unicode array.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch

from robot_rl.contract import Transition
from robot_rl.errors import InputError
from robot_rl.geometry import end_pose_offset
from robot_rl.replay.relabel import GoalLayout, relabel

_FORMAT_VERSION = 1
END_POSE, END_POSE_MASK = "end_pose", "end_pose_mask"  # a batch's keys with ``sample(end_pose=True)``
_SCALARS = ("reward", "terminated", "truncated", "is_intervention", "valid")


def _normalize_spec(obs_spec: dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    if not obs_spec:
        raise InputError("obs_spec must name at least one observation key")
    return {str(k): (tuple(int(d) for d in shape), np.dtype(dtype)) for k, (shape, dtype) in obs_spec.items()}


def spec_to_json(obs_spec: dict) -> dict[str, list]:
    """An observation spec ``{key: (shape, dtype)}`` as plain JSON values: ``{key: [[dims], "<f4"]}``."""
    return {k: [list(shape), dtype.str] for k, (shape, dtype) in _normalize_spec(obs_spec).items()}


def spec_from_json(data: dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The inverse of ``spec_to_json``."""
    return _normalize_spec(data)


def _atomic_write(path, write) -> None:
    """Call ``write(file)`` on a temporary file next to ``path``, then rename it into place."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class ReplayBuffer:
    """Ring buffer of transitions with shared obs/next_obs slots and n-step sampling."""

    def __init__(self, capacity: int, obs_spec: dict, action_dim: int, seed: int | None = None,
                 features: str | None = None):
        if capacity < 2:
            raise InputError(f"capacity must be >= 2 (one transition needs two slots), got {capacity}")
        if action_dim < 1:
            raise InputError(f"action_dim must be >= 1, got {action_dim}")
        self.capacity = int(capacity)
        self.action_dim = int(action_dim)
        self.obs_spec = _normalize_spec(obs_spec)
        self.features = features  # the sha of the frozen encoder whose features the camera keys hold
        self._obs = {k: np.zeros((self.capacity, *shape), dtype) for k, (shape, dtype) in self.obs_spec.items()}
        self._action = np.zeros((self.capacity, self.action_dim), np.float32)
        self._reward = np.zeros(self.capacity, np.float32)
        self._terminated = np.zeros(self.capacity, bool)
        self._truncated = np.zeros(self.capacity, bool)
        self._is_intervention = np.zeros(self.capacity, bool)
        self._valid = np.zeros(self.capacity, bool)
        self._rng = np.random.default_rng(seed)
        self._cursor = 0  # slot of the current obs (episode open) or the next fresh slot
        self._episode_open = False
        self._slots_written = 0
        self._goal: GoalLayout | None = None  # where the goal lies in the state (``set_goal_layout``)

    def set_goal_layout(self, layout: GoalLayout | None) -> None:
        """Where the goal lies in the stored state, for hindsight goals (``sample``'s ``hindsight``).
        A setting of the run, not of the stored data: not saved with the buffer."""
        if layout is not None and layout.key not in self.obs_spec:
            raise InputError(f"goal relabelling reads observation key {layout.key!r}, which this buffer lacks "
                             f"(its keys: {sorted(self.obs_spec)})")
        self._goal = layout

    # ----------------------------------------------------------------- adding
    def _check_obs(self, obs: dict, name: str) -> None:
        for key, (shape, dtype) in self.obs_spec.items():
            if key not in obs:
                raise InputError(f"{name} is missing key {key!r} (expected keys {sorted(self.obs_spec)})")
            value = np.asarray(obs[key])
            if value.shape != shape:
                raise InputError(f"{name}[{key!r}] has shape {value.shape}, expected {shape}")
            if dtype == np.uint8 and value.dtype != np.uint8:
                raise InputError(f"{name}[{key!r}] has dtype {value.dtype}, expected uint8 (images are stored as uint8)")
        extra = sorted(set(obs) - set(self.obs_spec))
        if extra:
            raise InputError(f"{name} has unexpected keys {extra} (expected keys {sorted(self.obs_spec)})")

    def _write_slot(self, slot: int, obs: dict) -> None:
        for key, store in self._obs.items():
            store[slot] = obs[key]
        # Transitions starting here (obs) or one slot earlier (next_obs) are now stale.
        self._valid[slot] = False
        self._valid[slot - 1] = False
        self._slots_written += 1

    def add(self, transition: Transition) -> None:
        """Store one transition; its ``obs`` is only written when it starts a new episode."""
        obs, action, reward, next_obs, terminated, truncated, is_intervention = transition
        self._check_obs(obs, "obs")
        self._check_obs(next_obs, "next_obs")
        action = np.asarray(action, dtype=np.float32)
        if action.shape != (self.action_dim,):
            raise InputError(f"action has shape {action.shape}, expected ({self.action_dim},)")
        if not np.all(np.isfinite(action)):
            raise InputError(f"action has non-finite values at indices {np.flatnonzero(~np.isfinite(action)).tolist()}")
        if not np.isfinite(reward):
            raise InputError(f"reward must be finite, got {reward}")
        slot = self._cursor
        if not self._episode_open:
            self._write_slot(slot, obs)
        nxt = (slot + 1) % self.capacity
        self._write_slot(nxt, next_obs)
        self._action[slot] = action
        self._reward[slot] = reward
        self._terminated[slot] = bool(terminated)
        self._truncated[slot] = bool(truncated)
        self._is_intervention[slot] = bool(is_intervention)
        self._valid[slot] = True
        done = bool(terminated) or bool(truncated)
        self._episode_open = not done
        self._cursor = (nxt + 1) % self.capacity if done else nxt

    def end_policy_stretch(self, penalty: float) -> bool:
        """A human takes over the open episode: its last transition, if the policy acted in it,
        becomes the end of the policy's stretch (RLIF): its reward lowered by ``penalty`` and no
        bootstrap past it, so the value of what the policy did is not the human's success after.
        The episode stays open (the human's transitions join on). Returns whether it applied."""
        last = (self._cursor - 1) % self.capacity
        if not self._episode_open or not self._valid[last] or self._is_intervention[last]:
            return False
        self._reward[last] -= penalty
        self._terminated[last] = True
        return True

    @property
    def episode_open(self) -> bool:
        """Whether the next ``add`` continues an episode (its obs is the last next_obs stored)."""
        return self._episode_open

    def close_episode(self) -> None:
        """End the open episode here: its last transition is marked truncated (it still
        bootstraps from its next observation) and the next ``add`` starts a new episode. For
        when the episode stops without the env saying so: an env reset on resume, or the end
        of a human's takeover in the demo buffer. A no-op when no episode is open."""
        if not self._episode_open:
            return
        self._truncated[(self._cursor - 1) % self.capacity] = True
        self._episode_open = False
        self._cursor = (self._cursor + 1) % self.capacity

    def recompute(self, key: str, compute, chunk: int = 1024) -> None:
        """Rewrite ``key`` at every written slot from the slot's other keys (``compute``: a batch of
        stored observations -> that key's values), in chunks of ``chunk`` slots: for a key derived
        from the others whose function has changed (``MixedReplay.keep_derived``)."""
        if key not in self._obs:
            raise InputError(f"this buffer stores no key {key!r} (its keys: {sorted(self.obs_spec)})")
        used = min(self._slots_written, self.capacity)
        for start in range(0, used, chunk):
            rows = slice(start, min(start + chunk, used))
            self._obs[key][rows] = compute({k: v[rows] for k, v in self._obs.items() if k != key})

    def set_key(self, key: str, spec: tuple | None) -> None:
        """Store ``key`` from now on (``spec``: (shape, dtype), zeros until written or recomputed),
        or, with ``spec`` None, no longer."""
        if spec is None:
            self.obs_spec.pop(key, None)
            self._obs.pop(key, None)
        elif key not in self._obs:
            (self.obs_spec[key],) = _normalize_spec({key: spec}).values()
            shape, dtype = self.obs_spec[key]
            self._obs[key] = np.zeros((self.capacity, *shape), dtype)

    # --------------------------------------------------------------- sampling
    def __len__(self) -> int:
        return int(np.count_nonzero(self._valid))

    def sample(self, batch_size: int, n_step: int = 1, discount: float = 0.97, out: dict | None = None,
               hindsight: float = 0.0, end_pose: bool = False) -> dict:
        """Uniformly sample ``batch_size`` transitions with n-step returns (stopping at episode ends).
        With ``out`` (arrays shaped like a batch, e.g. ``BatchStaging`` rows) the batch is written
        into it and ``out`` is returned; otherwise new arrays. ``hindsight`` > 0: that share of the
        transitions get a goal their episode reached later (HER's "future" strategy,
        ``replay/relabel.py``; needs ``set_goal_layout``), their reward and end recomputed for it.
        ``end_pose``: each row also gets where its episode's TCP ended relative to its own
        (``END_POSE``, ``geometry.end_pose_offset`` of the ``state`` key) and whether that end was a
        success, paid and ending the episode (``END_POSE_MASK`` 1; 0: failed, cut short or still
        running, the row's end pose then meaningless)."""
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        if n_step < 1:
            raise InputError(f"n_step must be >= 1, got {n_step}")
        starts = np.flatnonzero(self._valid)
        if starts.size == 0:
            raise InputError("cannot sample from an empty replay buffer (add transitions first)")
        idx = starts[self._rng.integers(0, starts.size, size=batch_size)]
        reward = self._reward[idx].astype(np.float32)
        steps = np.ones(batch_size, np.int64)
        last = idx.copy()  # slot of the last transition included in the n-step window
        terminal = self._terminated[idx].copy()
        alive = ~(terminal | self._truncated[idx])
        for j in range(1, n_step):
            cand = (last + 1) % self.capacity
            take = alive & self._valid[cand]
            reward += np.where(take, discount**j * self._reward[cand], 0.0).astype(np.float32)
            steps += take
            last = np.where(take, cand, last)
            terminal = np.where(take, self._terminated[cand], terminal)
            alive = take & ~(self._terminated[cand] | self._truncated[cand])
        next_slot = (last + 1) % self.capacity
        bootstrap = np.where(terminal, 0.0, float(discount) ** steps).astype(np.float32)
        hindsight = self._hindsight(idx, n_step, discount, hindsight) if hindsight > 0 else None
        if hindsight is not None:
            rows, _, _, new_reward, new_bootstrap = hindsight
            reward[rows], bootstrap[rows] = new_reward, new_bootstrap
        if out is None:
            out = {
                "obs": {k: v[idx] for k, v in self._obs.items()},
                "action": self._action[idx],
                "reward": reward,
                "next_obs": {k: v[next_slot] for k, v in self._obs.items()},
                "bootstrap": bootstrap,
                "is_intervention": self._is_intervention[idx],
            }
        else:
            for k, v in self._obs.items():  # gathered straight into the caller's arrays: no temporaries
                np.take(v, idx, axis=0, out=out["obs"][k])
                np.take(v, next_slot, axis=0, out=out["next_obs"][k])
            np.take(self._action, idx, axis=0, out=out["action"])
            np.take(self._is_intervention, idx, out=out["is_intervention"])
            out["reward"][:] = reward
            out["bootstrap"][:] = bootstrap
        if hindsight is not None:
            rows, state, next_state, _, _ = hindsight
            out["obs"][self._goal.key][rows] = state
            out["next_obs"][self._goal.key][rows] = next_state
        if end_pose:
            pose, succeeded = self._end_pose(idx)
            if END_POSE in out:
                out[END_POSE][:], out[END_POSE_MASK][:] = pose, succeeded
            else:
                out[END_POSE], out[END_POSE_MASK] = pose, succeeded
        return out

    def _episode_last(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For transitions ``idx``: the slot of their episode's last transition so far, and how
        many transitions lead there from each (itself included)."""
        count = np.ones(idx.size, np.int64)
        cur, alive = idx.copy(), ~(self._terminated[idx] | self._truncated[idx])
        while alive.any():  # only the sampled rows' flags: never the whole ring's, per batch
            cand = (cur + 1) % self.capacity
            take = alive & self._valid[cand]
            count += take
            cur = np.where(take, cand, cur)
            alive = take & ~(self._terminated[cand] | self._truncated[cand])
        return cur, count

    def _end_pose(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``sample``'s ``end_pose``: (offsets [B, 4], success mask [B] float32)."""
        if "state" not in self._obs:
            raise InputError(f"the end pose is read from the robot state, and this buffer has no 'state' key "
                             f"(its keys: {sorted(self._obs)})")
        last, _ = self._episode_last(idx)
        succeeded = self._terminated[last] & (self._reward[last] > 0)
        states = self._obs["state"]
        return end_pose_offset(states[idx], states[(last + 1) % self.capacity]), succeeded.astype(np.float32)

    def _hindsight(self, idx: np.ndarray, n_step: int, discount: float, fraction: float):
        """For a ``fraction`` of the sampled transitions ``idx``: ``(rows, state,
        next_state, reward, bootstrap)`` with the goal of a later step of the same episode (the
        achieved goal after a transition drawn uniformly from this one to the episode's last)."""
        if self._goal is None:
            raise InputError("goal relabelling needs a goal layout (an env map's goal:), and this buffer has none")
        if n_step != 1:
            raise InputError(f"goal relabelling works on one-step transitions, got n_step {n_step}")
        rows = np.flatnonzero(self._rng.random(idx.size) < fraction)
        if rows.size == 0:
            return None
        start = idx[rows]
        _, remaining = self._episode_last(start)  # transitions from this one to the episode's last (so far)
        future = (start + (self._rng.random(rows.size) * remaining).astype(np.int64)) % self.capacity
        states = self._obs[self._goal.key]
        goal = self._goal.achieved_of(states[(future + 1) % self.capacity])
        state, next_state, reward, success = relabel(self._goal, states[start], states[(start + 1) % self.capacity],
                                                     goal)
        return rows, state, next_state, reward, np.where(success, 0.0, float(discount)).astype(np.float32)

    # -------------------------------------------------------------- accounting
    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {f"obs__{k}": v for k, v in self._obs.items()}
        arrays["action"] = self._action
        arrays.update({name: getattr(self, f"_{name}") for name in _SCALARS})
        return arrays

    def nbytes(self) -> int:
        """Bytes of all preallocated storage."""
        return int(sum(a.nbytes for a in self._arrays().values()))

    def bytes_per_transition(self) -> float:
        """Storage bytes per sampleable transition in the filled part (slots used / transitions); 0.0 if empty."""
        n = len(self)
        if n == 0:
            return 0.0
        used = min(self._slots_written, self.capacity)
        return used * (self.nbytes() / self.capacity) / n

    # ----------------------------------------------------------- persistence
    def _meta(self) -> dict:
        return {
            "version": _FORMAT_VERSION,
            "capacity": self.capacity,
            "action_dim": self.action_dim,
            "obs_spec": spec_to_json(self.obs_spec),
            "rng_state": self._rng.bit_generator.state,
            "cursor": self._cursor,
            "episode_open": self._episode_open,
            "slots_written": self._slots_written,
            "features": self.features,
        }

    def save(self, path) -> None:
        """Write the buffer (filled slots, cursor, RNG state) to one ``.npz`` file, atomically.
        The ring fills from slot 0, so the used part is a prefix; unused capacity is not written."""
        used = min(self._slots_written, self.capacity)
        arrays = {name: a[:used] for name, a in self._arrays().items()}
        arrays["meta"] = np.array(json.dumps(self._meta()))
        _atomic_write(path, lambda f: np.savez(f, allow_pickle=False, **arrays))

    @classmethod
    def load(cls, path, features: str | None = None) -> "ReplayBuffer":
        """A saved buffer; ``features``: the sha of the frozen encoder the caller reads features of
        (None: images), which must be the one the buffer's features came from."""
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("version") != _FORMAT_VERSION:
                raise InputError(f"{path}: unsupported replay format version {meta.get('version')}")
            if meta.get("features") != features:
                raise FeatureMismatch(f"replay {path} holds {_what(meta.get('features'))}, but this agent reads "
                                      f"{_what(features)}: start a new run (or resume with the run's own encoder)")
            buf = cls(meta["capacity"], spec_from_json(meta["obs_spec"]), meta["action_dim"], features=features)
            for name, target in buf._arrays().items():
                loaded = data[name]
                if (loaded.shape[1:] != target.shape[1:] or len(loaded) > len(target)
                        or len(loaded) != min(meta["slots_written"], meta["capacity"]) or loaded.dtype != target.dtype):
                    raise InputError(f"{path}: array {name!r} is {loaded.dtype}{loaded.shape}, "
                                     f"expected {target.dtype}{target.shape}")
                target[: len(loaded)] = loaded
        rng_state = meta["rng_state"]
        buf._rng = np.random.Generator(getattr(np.random, rng_state["bit_generator"])())
        buf._rng.bit_generator.state = rng_state
        buf._cursor, buf._episode_open = meta["cursor"], meta["episode_open"]
        buf._slots_written = meta["slots_written"]
        return buf


class FeatureMismatch(ValueError):
    """A saved replay whose camera keys hold another encoder's features (or images, or features)."""


def _what(features: str | None) -> str:
    return f"features of frozen encoder {features[:12]}" if features else "camera images"


class BatchStaging:
    """Reusable host tensors that ``MixedReplay.sample`` gathers batches into: one allocation
    instead of fresh arrays per batch, images as uint8, and page-locked (pinned) memory when
    ``device`` is CUDA so ``tensor.to(device, non_blocking=True)`` overlaps with the GPU's work.

    ``slots`` batches rotate. On CUDA a slot is refilled only after the copies made from it
    have run (an event recorded when the next batch is sampled, i.e. after the caller moved the
    previous batch to the device); a batch must therefore be moved to the device before the
    next ``sample``, which is what the learner does. On CPU the tensors are plain and reused."""

    def __init__(self, obs_spec: dict, action_dim: int, batch_size: int, device: str | torch.device = "cpu",
                 slots: int = 2, end_pose: bool = False):
        if slots < 1:
            raise InputError(f"slots must be >= 1, got {slots}")
        self.obs_spec, self.batch_size = _normalize_spec(obs_spec), int(batch_size)
        self.device = torch.device(device)
        pin = self.device.type == "cuda"
        empty = lambda shape, dtype: torch.empty(shape, dtype=dtype, pin_memory=pin)  # noqa: E731
        obs = lambda: {k: empty((batch_size, *shape), torch.from_numpy(np.zeros(0, dtype)).dtype)  # noqa: E731
                       for k, (shape, dtype) in self.obs_spec.items()}
        self._tensors = [{
            "obs": obs(), "next_obs": obs(),
            "action": empty((batch_size, action_dim), torch.float32),
            "reward": empty((batch_size,), torch.float32),
            "bootstrap": empty((batch_size,), torch.float32),
            "is_intervention": empty((batch_size,), torch.bool),
            "is_demo": empty((batch_size,), torch.bool),
            **({END_POSE: empty((batch_size, 4), torch.float32), END_POSE_MASK: empty((batch_size,), torch.float32)}
               if end_pose else {}),
        } for _ in range(slots)]
        self._events = [torch.cuda.Event() if pin else None for _ in range(slots)]
        self._current = -1

    def next_slot(self) -> dict:
        """The host tensors of the next slot, free to be overwritten."""
        if self._current >= 0 and self._events[self._current] is not None:
            self._events[self._current].record()  # after the copies of the batch handed out last
        self._current = (self._current + 1) % len(self._tensors)
        if self._events[self._current] is not None:
            self._events[self._current].synchronize()  # its own copies, one or more batches ago, are done
        return self._tensors[self._current]


def _rows(tensors: dict, start: int, stop: int) -> dict:
    """Numpy views of rows [start, stop) of a batch of host tensors (writing them writes the tensors)."""
    return {k: _rows(v, start, stop) if isinstance(v, dict) else v[start:stop].numpy() for k, v in tensors.items()}


class MixedReplay:
    """RLPD symmetric sampling: each batch is demo_fraction from the demo buffer and the rest from the online buffer."""

    def __init__(self, online: ReplayBuffer, demo: ReplayBuffer, demo_fraction: float = 0.5, encode=None,
                 takeover_penalty: float = 0.0):
        if not 0.0 <= demo_fraction <= 1.0:
            raise InputError(f"demo_fraction must be within [0, 1], got {demo_fraction}")
        self.online, self.demo, self.demo_fraction = online, demo, float(demo_fraction)
        self.takeover_penalty = takeover_penalty
        # observation -> what the buffers store (a frozen backbone's cached features), or None
        self.encode = encode
        self.goal_relabel = 0.0  # share of each batch with hindsight goals (``set_goal_relabel``)
        self.end_pose = False  # batches carry each row's episode's end pose (``ReplayBuffer.sample``)
        self._last_next = None  # the last next_obs encoded: a continuing episode's obs, encoded once

    @property
    def takeover_penalty(self) -> float:
        """> 0: a takeover ends the policy's stretch with this penalty (``ReplayBuffer.end_policy_stretch``)."""
        return self._takeover_penalty

    @takeover_penalty.setter
    def takeover_penalty(self, penalty: float) -> None:
        if not (np.isfinite(penalty) and penalty >= 0):
            raise InputError(f"takeover_penalty must be a finite number >= 0, got {penalty}")
        self._takeover_penalty = float(penalty)

    def add(self, transition: Transition) -> None:
        """Add to the online buffer; human interventions are also kept as demonstrations. A
        takeover that ends mid-episode closes its stretch in the demo buffer (truncated there),
        so the human's next takeover starts a new one instead of joining on to it. With a
        takeover penalty, the policy's transition before a takeover ends the policy's stretch."""
        human = transition.is_intervention
        if human and self.takeover_penalty > 0:
            self.online.end_policy_stretch(self.takeover_penalty)
        if self.encode is not None:
            continuing = self.online.episode_open and (not human or self.demo.episode_open)
            obs = self._last_next if continuing and self._last_next is not None else self.encode(transition.obs)
            transition = transition._replace(obs=obs, next_obs=self.encode(transition.next_obs))
            self._last_next = transition.next_obs
        self.online.add(transition)
        if human:
            self.demo.add(transition)
        else:
            self.demo.close_episode()

    def set_goal_relabel(self, layout: GoalLayout | None, fraction: float) -> None:
        """``fraction`` of each batch's rows from either buffer with hindsight goals
        (``ReplayBuffer.sample``'s ``hindsight``); 0: none, the layout may then be None."""
        if not (np.isfinite(fraction) and 0.0 <= fraction <= 1.0):
            raise InputError(f"goal_relabel must be a share within [0, 1], got {fraction}")
        if fraction > 0 and layout is None:
            raise InputError("goal relabelling needs a goal layout (an env map's goal:)")
        for buf in (self.online, self.demo):
            buf.set_goal_layout(layout)
        self.goal_relabel = float(fraction)

    def keep_derived(self, key: str, spec: tuple | None, compute=None) -> None:
        """Keep ``key`` (``spec``: (shape, dtype)) in both buffers as ``compute`` gives it from a
        batch of the other stored keys, recomputed now at every stored slot; new observations get
        it from ``encode``. ``spec`` None: keep it no more."""
        for buf in (self.online, self.demo):
            buf.set_key(key, spec)
            if spec is not None:
                buf.recompute(key, compute)

    def close_episodes(self) -> None:
        """Close the episode open in either buffer (e.g. on resume: the env starts afresh)."""
        self.online.close_episode()
        self.demo.close_episode()

    def add_demo(self, transition: Transition) -> None:
        """Add a demonstration's transition to the demo buffer (not flagged as an intervention)."""
        if self.encode is not None:
            transition = transition._replace(obs=self.encode(transition.obs), next_obs=self.encode(transition.next_obs))
        self.demo.add(transition._replace(is_intervention=False))

    def sample(self, batch_size: int, n_step: int = 1, discount: float = 0.97,
               staging: BatchStaging | None = None) -> dict:
        """Demo rows first (``round(batch_size * demo_fraction)``), falling back to whichever buffer is non-empty.
        With ``staging`` the batch is gathered into its next slot and comes as host tensors."""
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        if staging is not None and staging.batch_size != batch_size:
            raise InputError(f"batch_size {batch_size} does not match the staging's {staging.batch_size}")
        if len(self.demo) == 0:
            n_demo = 0
        elif len(self.online) == 0:
            n_demo = batch_size
        else:
            n_demo = round(batch_size * self.demo_fraction)
        if staging is not None:
            tensors = staging.next_slot()
            for buf, start, stop in ((self.demo, 0, n_demo), (self.online, n_demo, batch_size)):
                if stop > start:
                    buf.sample(stop - start, n_step, discount, out=_rows(tensors, start, stop),
                               hindsight=self.goal_relabel, end_pose=self.end_pose)
            tensors["is_demo"].copy_(torch.arange(batch_size) < n_demo)
            return tensors
        parts = [(buf.sample(n, n_step, discount, hindsight=self.goal_relabel, end_pose=self.end_pose), n) for buf, n in
                 ((self.demo, n_demo), (self.online, batch_size - n_demo)) if n > 0]
        batch = {
            key: ({k: np.concatenate([p[key][k] for p, _ in parts]) for k in parts[0][0][key]}
                  if key in ("obs", "next_obs") else np.concatenate([p[key] for p, _ in parts]))
            for key in parts[0][0]
        }
        batch["is_demo"] = np.arange(batch_size) < n_demo
        return batch

    def save(self, directory) -> None:
        os.makedirs(directory, exist_ok=True)
        self.online.save(os.path.join(directory, "online.npz"))
        self.demo.save(os.path.join(directory, "demo.npz"))
        meta = json.dumps({"demo_fraction": self.demo_fraction}).encode()
        _atomic_write(os.path.join(directory, "mixed.json"), lambda f: f.write(meta))

    @classmethod
    def load(cls, directory, features: str | None = None) -> "MixedReplay":
        with open(os.path.join(directory, "mixed.json")) as f:
            meta = json.load(f)
        return cls(ReplayBuffer.load(os.path.join(directory, "online.npz"), features),
                   ReplayBuffer.load(os.path.join(directory, "demo.npz"), features), meta["demo_fraction"])

"""Recording episodes into an ``EpisodeStore``, transport-free.

The same recorder serves the sim (``robot-rl record``), the ROS 2 recorder node and teleop
sessions: feed it contract observations (``{"state", "images": {cam}, "privileged": {name}}``)
and actions; an episode reaches the store only in ``finish()``, whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import gymnasium as gym
import numpy as np

from robot_rl.contract import Transition
from robot_rl.data.store import EpisodeStore, StoreError

PRIVILEGED_PREFIX = "privileged_"


def store_fields(observation_space: gym.spaces.Dict, action_dim: int) -> tuple[dict, dict]:
    """(fields, cameras) of a store for a contract observation space."""
    spaces = observation_space.spaces
    fields = {"state": (spaces["state"].shape, np.dtype(np.float32)), "action": ((action_dim,), np.dtype(np.float32))}
    cameras = {}
    if "images" in spaces:
        for cam, space in spaces["images"].spaces.items():
            fields[cam] = (space.shape, np.dtype(np.uint8))
            cameras[cam] = tuple(space.shape[:2])
    if "privileged" in spaces:
        for name, space in spaces["privileged"].spaces.items():
            fields[PRIVILEGED_PREFIX + name] = (space.shape, np.dtype(np.float32))
    return fields, cameras


def flatten_observation(obs: dict) -> dict[str, np.ndarray]:
    """Contract observation -> store fields of one frame."""
    frame = {"state": obs["state"]}
    frame.update(obs.get("images", {}))
    frame.update({PRIVILEGED_PREFIX + k: v for k, v in obs.get("privileged", {}).items()})
    return frame


def observation_at(episode: dict[str, np.ndarray], t: int, cameras) -> dict:
    """Store frame ``t`` of an episode -> contract observation."""
    obs: dict = {"state": episode["state"][t]}
    if cameras:
        obs["images"] = {cam: episode[cam][t] for cam in cameras}
    privileged = {k[len(PRIVILEGED_PREFIX):]: v[t] for k, v in episode.items() if k.startswith(PRIVILEGED_PREFIX)}
    if privileged:
        obs["privileged"] = privileged
    return obs


class EpisodeRecorder:
    """``start(obs)``, ``step(...)`` per control step, then ``finish()`` (commit) or ``discard()``."""

    def __init__(self, store: EpisodeStore, clock: Callable[[], float] = time.monotonic):
        self.store, self.clock = store, clock
        self._frames: list[dict] | None = None
        self._t0 = 0.0

    @property
    def recording(self) -> bool:
        return self._frames is not None

    @property
    def steps(self) -> int:
        """Steps of the episode being recorded (0: none)."""
        return len(self._frames) - 1 if self._frames else 0

    def start(self, obs: dict) -> None:
        if self.recording:
            raise StoreError("an episode is already being recorded; finish() or discard() it first")
        self._t0 = self.clock()
        self._frames = [self._frame(obs, success=False, now=self._t0)]

    def step(self, action: np.ndarray, obs: dict, reward: float, terminated: bool, truncated: bool,
             success: bool = False, is_intervention: bool = False) -> None:
        """The action taken at the last observation, and what it led to."""
        if not self.recording:
            raise StoreError("start(obs) an episode before recording steps")
        last = self._frames[-1]
        last.update(action=np.asarray(action, np.float32), reward=np.float32(reward), terminated=bool(terminated),
                    truncated=bool(truncated), is_intervention=bool(is_intervention), has_action=True)
        self._frames.append(self._frame(obs, success=success, now=self.clock()))

    def finish(self) -> int:
        """Commit the episode; returns its index in the store."""
        if not self.recording or len(self._frames) < 2:
            raise StoreError("nothing to commit: an episode needs at least one step")
        frames, self._frames = self._frames, None
        episode = {key: np.stack([f[key] for f in frames]) for key in frames[0]}
        return self.store.add_episode(episode)

    def discard(self) -> None:
        self._frames = None

    def _frame(self, obs: dict, success: bool, now: float) -> dict:
        action_dim = self.store.fields["action"][0][0]
        frame = {k: np.asarray(v) for k, v in flatten_observation(obs).items()}
        frame.update(action=np.zeros(action_dim, np.float32), reward=np.float32(0), terminated=False, truncated=False,
                     is_intervention=False, success=bool(success), has_action=False,
                     timestamp=np.float64(now - self._t0))
        return frame


def transitions(store: EpisodeStore, index: int) -> Iterator[Transition]:
    """The transitions of one episode, observations as contract dicts, up to the first terminal or truncated transition (frames
    recorded after it, e.g. a held success pose for the classifier, are not part of the MDP)."""
    episode = store.get_episode(index)
    cameras = list(store.cameras)
    for t in np.flatnonzero(episode["has_action"]):
        terminated, truncated = bool(episode["terminated"][t]), bool(episode["truncated"][t])
        yield Transition(observation_at(episode, t, cameras), episode["action"][t], float(episode["reward"][t]),
                         observation_at(episode, t + 1, cameras), terminated, truncated,
                         bool(episode["is_intervention"][t]))
        if terminated or truncated:
            return

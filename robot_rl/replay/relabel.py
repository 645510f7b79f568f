"""Hindsight goal relabelling (HER's "future" strategy) for goal-conditioned envs.

A goal-conditioned env (panda-gym, Fetch) puts the goal in the observation and pays success
when what the agent moves (the *achieved* goal) comes within ``within`` of it. An episode that
missed its goal still reached wherever its object ended up: with the goal replaced by a place
the same episode reached later, the same transitions become successes the critic can learn
from (Andrychowicz et al., 2017). ``GoalLayout`` says where the goal and the achieved goal lie
in the state vector (an env map's ``goal:`` key, ``foreign/mapping.py``), which numbers are
computed from the goal (``relative``: the goal minus another part, as a map's ``differences``
give it), and the reward the env pays on success and failure; ``relabel`` rewrites a batch's
states for new goals. ``ReplayBuffer.sample`` draws the new goals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from robot_rl.errors import InputError


@dataclass(frozen=True)
class GoalLayout:
    desired: tuple[int, ...]  # state indices holding the goal
    achieved: tuple[int, ...]  # state indices holding what must reach it (the same size)
    # (indices, other, sign): state[indices] = sign * (goal - state[other]) -- numbers derived from the goal
    relative: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...] = ()
    within: float = 0.05  # success: Euclidean distance between achieved and goal below this
    reward_success: float = 0.0  # the env's reward at a success step (panda-gym's: 0)
    reward_failure: float = -1.0  # ... and at any other step (panda-gym's: -1)
    key: str = "state"  # the observation key of the state vector

    def __post_init__(self):
        if not self.desired or len(self.desired) != len(self.achieved):
            raise InputError(f"goal: the goal has {len(self.desired)} numbers and the achieved goal "
                             f"{len(self.achieved)}; they must be the same, non-zero size")
        if not (np.isfinite(self.within) and self.within > 0):
            raise InputError(f"goal: within must be a distance > 0, got {self.within}")
        for indices, other, sign in self.relative:
            if len(indices) != len(self.desired) or len(other) != len(self.desired) or sign not in (1, -1):
                raise InputError(f"goal: a relative part {indices} must have the goal's size, with sign +1 or -1")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "GoalLayout":
        relative = tuple((tuple(int(i) for i in ind), tuple(int(i) for i in oth), int(sign))
                         for ind, oth, sign in data.get("relative", ()))
        return cls(desired=tuple(int(i) for i in data["desired"]), achieved=tuple(int(i) for i in data["achieved"]),
                   relative=relative, within=float(data["within"]), reward_success=float(data["reward_success"]),
                   reward_failure=float(data["reward_failure"]), key=str(data.get("key", "state")))

    def achieved_of(self, states: np.ndarray) -> np.ndarray:
        return states[..., list(self.achieved)]

    def success(self, achieved: np.ndarray, goal: np.ndarray) -> np.ndarray:
        return np.linalg.norm(achieved - goal, axis=-1) < self.within

    def with_goal(self, states: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """``states`` (rows) with ``goal`` (a row each) in place of theirs, and every number computed
        from the goal recomputed."""
        out = np.array(states, copy=True)
        out[:, list(self.desired)] = goal
        for indices, other, sign in self.relative:
            out[:, list(indices)] = sign * (goal - states[:, list(other)])
        return out


def relabel(layout: GoalLayout, state: np.ndarray, next_state: np.ndarray, goal: np.ndarray):
    """Rows of (state, next_state) given new goals: ``(state', next_state', reward, success)``, where
    success is the next state's achieved goal within reach of the new goal (a terminal step)."""
    success = layout.success(layout.achieved_of(next_state), goal)
    reward = np.where(success, layout.reward_success, layout.reward_failure).astype(np.float32)
    return layout.with_goal(state, goal), layout.with_goal(next_state, goal), reward, success

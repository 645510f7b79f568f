"""The simulated human: a scripted expert watching the policy, who takes over when it stalls
or heads for failure, for a bounded number of steps, as an operator with a SpaceMouse does.

What it watches is the task's ``progress`` (0 = start, 1 = solved; the sim's object poses,
what a person judges by eye). It steps in when

- the policy stalls: the episode's best progress has not grown by ``min_gain`` for
  ``patience`` steps, or
- the policy heads for failure: progress fell more than ``drop`` below the episode's best
  (the cube dropped or knocked away, the peg pulled out),

or, with ``guard``, before the policy does what the task's expert judges unsafe (``unsafe(obs)``:
a peg going down onto the block off the hole's axis, which a real Franka's collision reflex
would stop; an operator watching the arm stops it first, as HIL-SERL's do),

and then drives (the expert resumes from the scene as it is, with a little noise of its own).
The episode's first takeover is a correction: it hands back once the scene is back on track,
as an operator lets go of the SpaceMouse once the robot is where it should be (the progress
has passed the best the policy had reached before the takeover, by ``min_gain``), after at
least ``min_takeover_steps`` and at most ``takeover_steps`` steps. A policy that needs the
human again in the same episode has shown it cannot do this part yet: later takeovers drive
the whole ``takeover_steps``. At most ``max_takeovers`` per episode. ``eagerness`` in
(0, 1] sets how soon: patience = ``base_patience / eagerness`` steps and drop =
``0.1 + 0.3 * (1 - eagerness)``. After a takeover it watches afresh (the progress so far is
the new baseline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robot_rl.errors import InputError


@dataclass
class SimulatedHumanConfig:
    eagerness: float = 0.5
    takeover_steps: int = 15  # the longest takeover
    min_takeover_steps: int = 3  # the shortest: a correction, not a nudge
    max_takeovers: int = 3
    base_patience: int = 6
    min_gain: float = 0.02
    noise: float = 0.05  # the human's own imprecision (expert noise)
    guard: bool = False  # also step in before a move the task's expert judges unsafe

    def validate(self) -> None:
        if not 0.0 < self.eagerness <= 1.0:
            raise InputError(f"eagerness must lie in (0, 1], got {self.eagerness}")
        if self.takeover_steps < 1 or self.max_takeovers < 0 or self.base_patience < 1:
            raise InputError("takeover_steps and base_patience must be >= 1, max_takeovers >= 0")
        if not 1 <= self.min_takeover_steps <= self.takeover_steps:
            raise InputError(f"min_takeover_steps must lie in [1, takeover_steps={self.takeover_steps}], "
                             f"got {self.min_takeover_steps}")

    @property
    def patience(self) -> int:
        return max(1, round(self.base_patience / self.eagerness))

    @property
    def drop(self) -> float:
        return 0.1 + 0.3 * (1.0 - self.eagerness)


class SimulatedHuman:
    """``human(obs)`` -> the human's action while it intervenes, else None. Call ``reset()``
    at each episode start. ``obs`` is the env's raw observation (with ``privileged``).

    ``expert``: instead of the twin task's scripted expert, any with ``progress(obs)``,
    ``resume(obs)`` and ``expert(obs)`` (a Gymnasium env's scripted policy that says its progress,
    ``foreign.env.ScriptedExpert``); ``succeeded()``: the episode has succeeded, so the human
    stands by (an env that runs on after success)."""

    def __init__(self, task: str, config: SimulatedHumanConfig | None = None, seed: int | None = None,
                 expert=None, succeeded: Callable[[], bool] | None = None):
        from robot_rl.sim.experts import check_expert, check_guard, make_expert

        self.config = config or SimulatedHumanConfig()
        self.config.validate()
        if expert is None:
            check_expert(task, "the simulated human")
            if self.config.guard:
                check_guard(task)
            expert = make_expert(task, noise=self.config.noise, seed=seed)
        if self.config.guard and not callable(getattr(expert, "unsafe", None)):
            raise InputError(f"the simulated human's guard needs an expert that judges moves, unsafe(obs); "
                             f"{type(expert).__name__} has none")
        self.expert, self.succeeded = expert, succeeded
        self.reset()

    def reset(self) -> None:
        self.best = -1.0
        self.since_gain = 0
        self.left = 0  # steps left in the current takeover, at most
        self.driven = 0  # steps driven in the current takeover
        self.back_on_track = 0.0  # the progress at which the current takeover hands back
        self.takeovers = 0
        self.reason = ""

    @property
    def intervening(self) -> bool:
        return self.left > 0

    def _trigger(self, progress: float) -> str:
        cfg = self.config
        if progress > self.best + cfg.min_gain:
            self.best, self.since_gain = progress, 0
        else:
            self.since_gain += 1
        if self.best - progress > cfg.drop:
            return f"progress fell from {self.best:.2f} to {progress:.2f}"
        if self.since_gain >= cfg.patience:
            return f"no progress for {self.since_gain} steps"
        return ""

    def __call__(self, obs: dict) -> np.ndarray | None:
        if self.succeeded is not None and self.succeeded():
            self.left = 0  # the task is done: hands off
            return None
        progress = self.expert.progress(obs)
        if not self.intervening:
            reason = self._trigger(progress)
            if not reason and self.config.guard:
                reason = self.expert.unsafe(obs)
            if not reason or self.takeovers >= self.config.max_takeovers:
                return None
            self.takeovers += 1
            self.left, self.driven, self.reason = self.config.takeover_steps, 0, reason
            # a correction hands back on track; a second takeover in the episode drives it through
            self.back_on_track = self.best + self.config.min_gain if self.takeovers == 1 else float("inf")
            self.expert.resume(obs)
        elif self.driven >= self.config.min_takeover_steps and progress >= self.back_on_track:
            self._hand_back(progress)  # the scene is back where the policy had it: its turn again
            return None
        action = self.expert(obs)
        self.left -= 1
        self.driven += 1
        if not self.left:  # the longest takeover is over: hand back
            self._hand_back(progress)
        return action

    def _hand_back(self, progress: float) -> None:
        """Judge the policy afresh from here."""
        self.left = 0
        self.best, self.since_gain = progress, 0


class ScriptedOperator:
    """The simulated human on a Gymnasium env of your own (``robot-rl train --env`` with
    ``--env-expert``): its scripted policy drives, but nothing measures the task's progress the
    way the twin's experts do, so this operator watches the clock. Once an episode has run
    ``patience`` steps without ending, it takes over for ``takeover_steps`` steps, at most
    ``max_takeovers`` times an episode, the next one ``patience`` steps after it hands back.
    ``patience`` is an eighth of the episode's time limit divided by the eagerness (gym_hil's
    100 steps at eagerness 0.5: 25 steps). ``expert_action()`` is the scripted policy's action
    for the current observation, in the policy's action space (``MappedEnv.expert_action``).
    ``succeeded()`` (``MappedEnv.succeeded``): the episode has reached success; from then on the
    operator stands by, as a person does once the task is done (a takeover under way hands back),
    so an env that runs on to its time limit after success is not taken over in its last steps."""

    def __init__(self, expert_action, episode_limit: int, config: SimulatedHumanConfig | None = None,
                 succeeded: Callable[[], bool] | None = None):
        self.config = config or SimulatedHumanConfig()
        self.config.validate()
        self.expert_action, self.succeeded = expert_action, succeeded
        self.patience = max(1, round(max(int(episode_limit or 100), 8) / 8 / self.config.eagerness))
        self.reset()

    def reset(self) -> None:
        self.steps, self.left, self.driven, self.takeovers = 0, 0, 0, 0
        self.next_at, self.reason = self.patience, ""

    @property
    def intervening(self) -> bool:
        return self.left > 0

    def __call__(self, obs: dict) -> np.ndarray | None:
        self.steps += 1
        if self.succeeded is not None and self.succeeded():
            self.left = 0  # the task is done: hands off
            return None
        if not self.left:
            if self.takeovers >= self.config.max_takeovers or self.steps <= self.next_at:
                return None
            self.takeovers += 1
            self.left, self.driven = self.config.takeover_steps, 0
            self.reason = f"no success after {self.steps - 1} steps"
        self.left -= 1
        self.driven += 1
        if not self.left:
            self.next_at = self.steps + self.patience
        return self.expert_action()

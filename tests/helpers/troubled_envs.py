"""``Reach-v0`` (tests/helpers/foreign_envs.py) with trouble on cue, for tests/test_run_hardening.py:
registered on import as ``robot_rl_test/Troubled-v0``.

``hang_at_reset=N``: this env's N-th reset blocks (on an Event nothing sets; after ``SAFETY_S``, a
failsafe, it raises), as an env whose simulator or robot stopped answering. ``nan_at_step=N``: from step N of each episode the
observation's ``agent`` holds NaN. ``signal_name`` (SIGTERM, SIGINT) is sent to ``signal_to``
(``self``: this process, ``parent``, ``group``: its process group, as Ctrl-C in a terminal) at
reset ``signal_at_reset`` (before any hang) or at step ``signal_at_step``, and the env goes on.
"""

import os
import signal
import threading

import gymnasium as gym
import numpy as np

from foreign_envs import Reach

SAFETY_S = 120.0  # an upper bound against a test that would hang for good, never reached when all is well


class Troubled(Reach):
    def __init__(self, hang_at_reset: int = 0, nan_at_step: int = 0, signal_name: str = "", signal_to: str = "self",
                 signal_at_reset: int = 0, signal_at_step: int = 0):
        super().__init__()
        self.hang_at_reset, self.nan_at_step = hang_at_reset, nan_at_step
        self.signal_name, self.signal_to = signal_name, signal_to
        self.signal_at_reset, self.signal_at_step = signal_at_reset, signal_at_step
        self.resets = 0

    def _signal(self) -> None:
        sig = getattr(signal, self.signal_name)
        if self.signal_to == "group":
            os.killpg(os.getpgrp(), sig)
        else:
            os.kill(os.getppid() if self.signal_to == "parent" else os.getpid(), sig)

    def _obs(self):
        obs = super()._obs()
        if self.nan_at_step and getattr(self, "t", 0) >= self.nan_at_step:
            obs["agent"] = np.full_like(obs["agent"], np.nan)
        return obs

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        if self.signal_name and self.resets == self.signal_at_reset:
            self._signal()
        if self.resets == self.hang_at_reset:
            threading.Event().wait(SAFETY_S)  # nothing sets it: only a limit or a stop ends the wait
            raise RuntimeError(f"Troubled: still hung after {SAFETY_S:.0f} s, nothing stopped it")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        out = super().step(action)
        if self.signal_name and self.t == self.signal_at_step:
            self._signal()
        return out


gym.register("robot_rl_test/Troubled-v0", entry_point=Troubled, max_episode_steps=40)

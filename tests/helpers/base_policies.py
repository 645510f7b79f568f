"""Base policies for tests/test_base_policy.py, as a lab's ``module:function`` would be: importable
in this process and in a worker of another interpreter (the worker's working folder is the
repository's root, as the tests run)."""

from __future__ import annotations

import os

import numpy as np

HORIZON = 4
ACTION_DIM = 7
resets = 0


def chunked(obs: dict) -> np.ndarray:
    """A chunk of HORIZON actions, a fixed function of the state and of the front image: action i of
    the chunk is the first one scaled by (1 - 0.2 i)."""
    state = np.asarray(obs["state"], np.float64)
    first = np.tanh(state[:ACTION_DIM] + obs["front"].mean() / 255.0)
    return np.stack([first * (1 - 0.2 * i) for i in range(HORIZON)]).astype(np.float32)


def _reset() -> None:
    global resets
    resets += 1


chunked.reset = _reset


def one_action(obs: dict) -> np.ndarray:
    return np.full(ACTION_DIM, 0.5, np.float32)


def too_narrow(obs: dict) -> np.ndarray:
    return np.zeros(ACTION_DIM - 2, np.float32)


def dies_on_the_third_query(obs: dict) -> np.ndarray:
    """Answers twice, then its process ends as a crashed policy server's would."""
    dies_on_the_third_query.calls += 1
    if dies_on_the_third_query.calls == 3:
        print("base policy: out of memory", flush=True)
        os._exit(3)
    return chunked(obs)


dies_on_the_third_query.calls = 0

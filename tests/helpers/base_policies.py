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
    """A chunk of HORIZON actions, a fixed function of the state and of the front image (when there
    is one): action i of the chunk is the first one scaled by (1 - 0.2 i)."""
    state = np.asarray(obs["state"], np.float64)
    first = np.tanh(state[:ACTION_DIM] + (obs["front"].mean() / 255.0 if "front" in obs else 0.0))
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


class MiscalibratedPicker:
    """A deliberately weak base for PickCube's state observations: the twin's scripted picker,
    noiseless, that sees the cube ``OFFSET_M`` off where it is (a camera calibrated badly), so it
    often closes on an edge of the cube or beside it. The flat state is the robot's state, then the
    cube's pose (7), then the cube's position relative to the TCP (3)."""

    OFFSET_M = np.array([0.0, 0.03, 0.0])

    def __init__(self):
        from sim.experts import PickCubeExpert

        self.expert = PickCubeExpert(noise=0.0)

    def reset(self) -> None:
        self.expert.reset()

    def __call__(self, obs: dict) -> np.ndarray:
        state = np.asarray(obs["state"], np.float64)
        robot, cube = state[:-10], state[-10:-3].copy()
        cube[:3] += self.OFFSET_M
        return self.expert({"state": robot.astype(np.float32), "privileged": {"cube": cube.astype(np.float32)}})


def dies_after(obs: dict) -> np.ndarray:
    """``MiscalibratedPicker``'s actions until its process has answered ``ROBOT_RL_TEST_BASE_DIES_AFTER``
    queries (unset: never), then the process ends as a crashed policy server's would."""
    dies_after.calls += 1
    if dies_after.calls > int(os.environ.get("ROBOT_RL_TEST_BASE_DIES_AFTER") or 1 << 30):
        print("base policy server: CUDA error: an illegal memory access", flush=True)
        os._exit(3)
    if dies_after.picker is None:
        dies_after.picker = MiscalibratedPicker()
    return dies_after.picker(obs)


dies_after.calls, dies_after.picker = 0, None

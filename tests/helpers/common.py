"""Helpers the tests share, each written once."""

import contextlib
import socket
import time

import numpy as np


def free_port() -> int:
    """A TCP port free on loopback now (the server that takes it binds 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line_error(err: str, *needles: str) -> str:
    """``err`` (a command's stderr) is one ``robot-rl: error:`` line, without a traceback, naming
    every one of ``needles``; returns the line."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("robot-rl: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def wait_until(condition, what: str, timeout_s: float = 60.0, poll_s: float = 0.01) -> None:
    """Until ``condition()`` holds; the bound is a failsafe against a hang, not a time assertion."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout_s:.0f} s")
        time.sleep(poll_s)


def synthetic_episode(seed: int, frames: int | None = None, *, state_dim: int = 5,
                      cameras: dict | None = None, smooth_cameras: dict | None = None,
                      privileged: tuple[str, ...] = ("cube",), lengths: tuple[int, int] = (3, 12)) -> dict:
    """A random episode, the same for the same arguments: ``frames`` frames (else a seeded number
    in ``lengths``), ``cameras`` ``{name: (h, w)}`` of random uint8 pixels (default front 16x20),
    ``smooth_cameras`` of a gradient (compressible), a 7-number pose per ``privileged`` object."""
    rng = np.random.default_rng(seed)
    n = frames or int(rng.integers(*lengths))
    episode = {"state": rng.normal(size=(n, state_dim)).astype(np.float32),
               "action": rng.uniform(-1, 1, (n, 7)).astype(np.float32)}
    for name, (h, w) in (cameras if cameras is not None else {"front": (16, 20)}).items():
        episode[name] = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    for name, (h, w) in (smooth_cameras or {}).items():
        episode[name] = np.broadcast_to(np.arange(h, dtype=np.uint8)[None, :, None, None] + seed % 7, (n, h, w, 3)).copy()
    for name in privileged:
        episode[f"privileged_{name}"] = rng.normal(size=(n, 7)).astype(np.float32)
    episode.update(reward=rng.normal(size=n).astype(np.float32), terminated=rng.random(n) < 0.5,
                   truncated=rng.random(n) < 0.5, is_intervention=rng.random(n) < 0.5,
                   success=rng.random(n) < 0.5, has_action=np.arange(n) < n - 1,
                   timestamp=np.cumsum(rng.random(n)))
    return episode


@contextlib.contextmanager
def franky_sim_lock(tmp_path_factory):
    """franky-sim serves a 1 kHz robot in real time: two servers at once on 2 cores starve each
    other (connection timeouts, a robot clock that stops), so the tests that start one take turns
    across the xdist workers: an exclusive lock on a file in the run's shared temporary root,
    held while the server runs (a wait on the lock, not on a clock)."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if root.name.startswith("popen-gw"):  # an xdist worker's <root>/popen-gwN: the workers share <root>
        root = root.parent
    with open(root / "franky-sim.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def realtime_allowed() -> bool:
    """Whether this user may put threads under SCHED_FIFO at the control path's priority."""
    import os
    import resource

    from robot_rl.runtime.priority import REALTIME_PRIORITY

    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft >= REALTIME_PRIORITY


def thread_policies(pid: int) -> set[int]:
    """The scheduling policies of process ``pid``'s threads."""
    import os

    policies = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            policies.add(os.sched_getscheduler(int(tid)))
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    return policies


def press_the_peg_onto_the_block(env, steps: int = 10):
    """PegInsertHard: over the hole block's wall (4 cm from the hole's centre along its x axis),
    then straight down onto it, the target below the wall's top; yields each step's result."""
    from robot_rl import contract
    from robot_rl.geometry import quat_to_matrix

    obs, _ = env.reset(seed=0)
    s = contract.STATE_SLICES
    hole = obs["privileged"]["hole"]
    over_wall = hole[:3] + quat_to_matrix(hole[3:7]) @ np.array([0.04, 0.0, 0.0])
    for _ in range(12):
        action = np.zeros(7, np.float32)
        action[:2] = np.clip((over_wall[:2] - obs["state"][s["tcp_pos"]][:2]) / env.unwrapped.limits.max_translation_m,
                             -1, 1)
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["reflex"] and not terminated, "moving in free space is no collision"
    for _ in range(steps):
        result = env.step(np.array([0, 0, -1, 0, 0, 0, 0], np.float32))
        yield result
        if result[2] or result[3]:
            return

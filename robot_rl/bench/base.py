"""``robot-rl bench base``: what a frozen base policy costs the control loop (issue 46): each query's
latency and each control step's, p50 / p99, in this process and through a worker of an interpreter
(``--base-python``; here this one, so the difference is the worker's own hop), with action chunks
played whole (receding, ``every`` = K) and with ACT's temporal ensembling (a query every step).

The base is ``chunk_policy`` below: an ACT-sized stand-in in numpy alone (so a worker needs
nothing else), reading the arm's state and two 64x64 cameras (a 4x4-pooled view of each through
a linear layer, a 2-layer MLP of 512) and answering a chunk of 10 actions.
"""

from __future__ import annotations

import sys

import numpy as np

HORIZON = 10
ACTION_DIM = 7
SPEC = "robot_rl.bench.base:chunk_policy"
FULL = dict(steps=400)
QUICK = dict(steps=60)
_rng = np.random.default_rng(0)
_W_IN = _rng.normal(0, 0.02, (20 + 2 * 16 * 16 * 3, 512)).astype(np.float32)
_W_HIDDEN = _rng.normal(0, 0.05, (512, 512)).astype(np.float32)
_W_OUT = _rng.normal(0, 0.05, (512, HORIZON * ACTION_DIM)).astype(np.float32)


def chunk_policy(obs: dict) -> np.ndarray:
    """State [20] and front / wrist uint8 [64, 64, 3] -> a chunk [HORIZON, ACTION_DIM] in [-1, 1]."""
    views = [obs[cam].reshape(16, 4, 16, 4, 3).mean((1, 3)).ravel() / 255.0 for cam in ("front", "wrist")]
    x = np.concatenate([np.asarray(obs["state"], np.float32)[:20], *views]).astype(np.float32)
    h = np.maximum(x @ _W_IN, 0)
    h = np.maximum(h @ _W_HIDDEN, 0)
    return np.tanh(h @ _W_OUT).reshape(HORIZON, ACTION_DIM)


def observations(n: int) -> list[dict]:
    rng = np.random.default_rng(1)
    return [{"state": rng.normal(size=20).astype(np.float32),
             "front": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
             "wrist": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)} for _ in range(n)]


def measure(base, steps: int, **chunking) -> dict:
    from robot_rl.base_policy import ActionChunks

    chunks = ActionChunks(base, ACTION_DIM, **chunking)
    obs = observations(32)
    chunks.reset()
    for t in range(20):  # warm-up: first calls, the worker's imports
        chunks(obs[t % len(obs)])
    chunks.query_ms.clear()
    chunks.step_ms.clear()
    for t in range(steps):
        chunks(obs[t % len(obs)])
    return chunks.latency()


def run(quick: bool = False, log=print) -> dict:
    from robot_rl.base_policy import FunctionBase, WorkerBase

    p = QUICK if quick else FULL
    figures: dict = {"base_horizon": HORIZON, "control_steps": p["steps"]}
    for where in ("in_process", "worker"):
        base = FunctionBase(SPEC) if where == "in_process" else WorkerBase(sys.executable, SPEC)
        try:
            for name, chunking in (("receding", dict(mode="receding")), ("ensemble", dict(every=1, mode="ensemble"))):
                got = measure(base, p["steps"], **chunking)
                log(f"{where}, {name}: query p50 {got['base_query_ms_p50']} ms, p99 {got['base_query_ms_p99']} ms; "
                    f"control step p50 {got['base_step_ms_p50']} ms, p99 {got['base_step_ms_p99']} ms")
                for key in ("base_query_ms_p50", "base_query_ms_p99", "base_step_ms_p50", "base_step_ms_p99"):
                    figures[f"{key}_{where}_{name}"] = got[key]
                figures[f"base_queries_{where}_{name}"] = got["base_queries"]
        finally:
            base.close()
    figures["worker_hop_ms_p50"] = round(figures["base_query_ms_p50_worker_ensemble"]
                                         - figures["base_query_ms_p50_in_process_ensemble"], 3)
    figures["notes"] = [
        f"base: {SPEC}, an ACT-sized stand-in in numpy (state + two 64x64 cameras -> a chunk of {HORIZON} "
        f"actions of {ACTION_DIM}); the worker is this interpreter (--base-python), frames over pipes",
        "receding: one query per chunk (every = K), the other steps play the chunk; ensemble: a query every step, "
        "ACT's temporal ensembling over the chunks covering it; a control step's figure includes its query",
        "worker_hop_ms_p50: the worker's query p50 minus in process (ensemble rows), the cost of the pipes and frames",
    ]
    return figures

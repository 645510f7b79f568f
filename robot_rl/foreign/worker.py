"""A Gymnasium env in a process of another Python interpreter (``robot-rl train --env-python``), or
(``worker.py --base module:function``) a base policy there (``--base-python``: ``serve_base``).

This file is run as a script by that interpreter (``python worker.py``), so it imports nothing of
robot_rl: only the standard library, numpy and gymnasium (and the env's own package, through
``gym.make``). The parent (``robot_rl/foreign/client.py``) imports the frame functions and the
observation flattening from here, so both sides speak one format.

The format, never pickle: each frame is two little-endian uint32 lengths, a UTF-8 JSON header of
that first length and a payload of raw array bytes of the second. The header's ``arrays`` list
names each array with its dtype (numbers and booleans only), shape and byte range in the payload.
Nested Dict observations are flattened to ``outer/inner`` keys.

Arguments: the env id, gym.make's keywords as JSON, the scripted policy (``module:function`` or
empty) and a setup function (the same, called once with the unwrapped env, or empty).

The worker ignores SIGINT (Ctrl-C in a terminal reaches the whole process group): its parent
stops it, after saving what it has. Requests (header ``op``): ``reset`` (``seed``), ``step`` (array ``action``), ``expert`` (the
scripted policy's action for the last observation), ``close``. Each reply carries ``ok`` and
either the result or ``error`` (the exception as one line). The first reply, before any request,
describes the env: its spaces, its time limit and the versions, or the error that stopped it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import signal
import struct
import sys
import traceback

import numpy as np

LENGTHS = struct.Struct("<II")
NUMBER_KINDS = "biuf"  # bool, signed, unsigned, float: the only dtypes a frame may carry


class FrameError(RuntimeError):
    """A frame that is not in the format (or a stream that ended inside one)."""


def write_frame(stream, header: dict, arrays: dict | None = None) -> None:
    listed, chunks, offset = [], [], 0
    for name, value in (arrays or {}).items():
        arr = np.ascontiguousarray(value)
        if arr.dtype.kind not in NUMBER_KINDS:
            raise FrameError(f"array {name!r} has dtype {arr.dtype}; frames carry numbers and booleans only")
        data = arr.tobytes()
        listed.append([name, arr.dtype.str, list(arr.shape), offset, len(data)])
        chunks.append(data)
        offset += len(data)
    head = json.dumps({**header, "arrays": listed}).encode()
    stream.write(LENGTHS.pack(len(head), offset) + head + b"".join(chunks))
    stream.flush()


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) < n:
        raise EOFError(f"the stream ended after {0 if data is None else len(data)} of {n} bytes")
    return data


def read_frame(stream) -> tuple[dict, dict]:
    """(header, {name: array}); EOFError when the stream has ended."""
    head_len, payload_len = LENGTHS.unpack(_read_exact(stream, LENGTHS.size))
    header = json.loads(_read_exact(stream, head_len))
    payload = _read_exact(stream, payload_len) if payload_len else b""
    arrays = {}
    for name, dtype, shape, offset, nbytes in header.pop("arrays", []):
        dt = np.dtype(dtype)
        if dt.kind not in NUMBER_KINDS or offset + nbytes > payload_len:
            raise FrameError(f"array {name!r}: dtype {dtype} or its bytes do not fit the frame")
        arrays[name] = np.frombuffer(payload, dt, count=nbytes // max(dt.itemsize, 1), offset=offset).reshape(shape)
    return header, arrays


# ---------------------------------------------------------------------------- spaces and observations
def describe_space(space) -> dict:
    """A gymnasium space as JSON: Box, Dict (nested), Discrete, MultiDiscrete, MultiBinary, else its repr."""
    kind = type(space).__name__
    if kind == "Dict":
        return {"type": "Dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}
    if kind == "Box":
        out = {"type": "Box", "shape": list(space.shape), "dtype": np.dtype(space.dtype).str}
        for bound in ("low", "high"):  # one number when uniform (JSON's Infinity stands for inf)
            values = np.asarray(getattr(space, bound), np.float64).ravel()
            out[bound] = float(values[0]) if values.size and np.all(values == values[0]) else values.tolist()
        return out
    if kind == "Discrete":
        return {"type": "Discrete", "n": int(space.n)}
    return {"type": kind, "repr": repr(space)}


def flatten_obs(obs, prefix: str = "") -> dict:
    """A (nested) dict observation as ``{"a/b": array}``; a plain array is ``{"obs": array}``."""
    if isinstance(obs, dict):
        out = {}
        for key, value in obs.items():
            out.update(flatten_obs(value, f"{prefix}{key}/"))
        return out
    return {prefix[:-1] if prefix else "obs": np.asarray(obs)}


def json_info(info: dict) -> dict:
    """The info's numbers, booleans and strings (top level); arrays and objects stay behind."""
    out = {}
    for key, value in info.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in NUMBER_KINDS:
            value = value.item()
        if isinstance(value, (bool, int, float, str)):
            out[str(key)] = value
    return out


def control_hz(env) -> float | None:
    """The env's step rate, as its metadata states it (``render_fps``), if it does."""
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return float(fps) if isinstance(fps, (int, float)) and fps > 0 else None


def load_function(spec: str):
    """``module:function`` or ``path/to/file.py:function`` -> the function (the worker's working folder
    is on the path). A function of two parameters is called with the unwrapped env as the second
    (``call_policy``): a scripted policy may read the simulator, as the twin's experts do."""
    module, _, name = spec.rpartition(":")
    if not module or not name:
        raise ValueError(f"a scripted policy is named module:function or file.py:function, got {spec!r}")
    if module.endswith(".py"):
        if not os.path.isfile(module):
            raise FileNotFoundError(f"no such file {module}")
        found = importlib.util.spec_from_file_location(os.path.basename(module)[:-3], module)
        target = importlib.util.module_from_spec(found)
        found.loader.exec_module(target)
    else:
        target = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target


def call_policy(policy, obs, env):
    """``policy(obs)``, or ``policy(obs, env.unwrapped)`` for a policy that takes two arguments."""
    import inspect

    try:
        params = [p for p in inspect.signature(policy).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    action = policy(obs, env.unwrapped) if len(params) >= 2 else policy(obs)
    return np.asarray(action, np.float64)


def has_progress(policy) -> bool:
    """A scripted policy may also say how far the task has come: ``policy.progress(obs)`` in [0, 1]
    (as the twin's experts do), for a simulated human that judges progress, not the clock."""
    return policy is not None and callable(getattr(policy, "progress", None))


def call_progress(policy, obs, env) -> float:
    value = float(call_policy(policy.progress, obs, env).reshape(-1)[0])
    if not np.isfinite(value):
        raise ValueError(f"the scripted policy's progress(obs) is {value}, not a finite number")
    return value


# ---------------------------------------------------------------------------- the worker
def make_env(env_id: str, kwargs: dict):
    """``gym.make``; an id ``module:Name-v0`` imports the module first (gymnasium's own syntax), and
    an id ``namespace/Name-v0`` not yet registered imports a package of the namespace's name
    (``gym_hil/PandaPickCubeBase-v0`` registers on ``import gym_hil``)."""
    import gymnasium as gym

    namespace = env_id.split(":")[-1].split("/")[0] if "/" in env_id.split(":")[-1] else None
    if ":" not in env_id and namespace and env_id not in gym.registry:
        try:
            importlib.import_module(namespace)
        except ImportError:
            pass  # gym.make names the unknown id
    return gym.make(env_id, **kwargs)


def seed_globals(seed: int) -> None:
    """Some envs draw from numpy's and Python's global generators (gym_hil places its cube with
    ``np.random``): a seeded reset seeds them too, so a seed gives one episode."""
    np.random.seed(seed % 2**32)
    random.seed(seed)


def serve(env_id: str, kwargs: dict, expert_spec: str | None, setup_spec: str | None, inp, out) -> None:
    import gymnasium as gym

    stage = "make"
    try:
        env = make_env(env_id, kwargs)
        stage = "setup"
        if setup_spec:
            load_function(setup_spec)(env.unwrapped)
        stage = "expert"
        expert = load_function(expert_spec) if expert_spec else None
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        refuse_start(out, stage, exc)
        return
    limit = env.spec.max_episode_steps if env.spec is not None else None
    write_frame(out, {"ok": True, "observation_space": describe_space(env.observation_space),
                      "action_space": describe_space(env.action_space), "max_episode_steps": limit,
                      "expert_progress": has_progress(expert),
                      "control_hz": control_hz(env),
                      "gymnasium": gym.__version__, "numpy": np.__version__, "python": sys.version.split()[0]})
    last = None

    def handle(op: str, header: dict, arrays: dict) -> None:
        nonlocal last
        if op == "reset":
            seed = header.get("seed")
            if seed is not None:
                seed_globals(int(seed))
            last, info = env.reset(seed=seed)
            if expert is not None and hasattr(expert, "reset"):
                expert.reset()
            write_frame(out, {"ok": True, "info": json_info(info)}, flatten_obs(last))
        elif op == "step":
            last, reward, terminated, truncated, info = env.step(arrays["action"])
            write_frame(out, {"ok": True, "reward": float(reward), "terminated": bool(terminated),
                              "truncated": bool(truncated), "info": json_info(info)}, flatten_obs(last))
        elif op == "expert":
            if expert is None:
                raise RuntimeError("no scripted policy was given")
            write_frame(out, {"ok": True}, {"action": call_policy(expert, last, env)})
        elif op == "progress":
            if not has_progress(expert):
                raise RuntimeError("the scripted policy has no progress(obs)")
            write_frame(out, {"ok": True, "progress": call_progress(expert, last, env)})
        else:
            raise ValueError(f"unknown request {op!r}")

    answer_requests(inp, out, handle)


def refuse_start(out, stage: str, exc: Exception) -> None:
    """The first reply of a worker that could not start: where (``stage``) and the error as one line."""
    write_frame(out, {"ok": False, "stage": stage, "error_type": type(exc).__name__,
                      "error": (str(exc).splitlines() or [""])[0]})


def answer_requests(inp, out, handle) -> None:
    """Until ``close`` or the end of the input: each request to ``handle(op, header, arrays)``, which
    writes its reply; an exception it raises is the reply ``ok: false`` with the error as one line
    (the parent raises it, naming what the worker serves)."""
    while True:
        try:
            header, arrays = read_frame(inp)
        except EOFError:
            return
        op = header.get("op")
        if op == "close":
            write_frame(out, {"ok": True})
            return
        try:
            handle(op, header, arrays)
        except Exception as exc:  # noqa: BLE001 - one line to the parent
            lines = traceback.format_exception_only(type(exc), exc)
            write_frame(out, {"ok": False, "error": lines[-1].strip()})


# ---------------------------------------------------------------------------- a base policy's worker
def load_base(spec: str, argument: str | None = None):
    """A base policy: ``load_function``'s, and when that names a class, an instance of its own (a
    stateful base: each env that queries it holds one, so training and evaluation never share one),
    made with ``argument`` when given (a LeRobot policy's folder: ``lerobot_base.py``)."""
    policy = load_function(spec)
    if not isinstance(policy, type):
        return policy
    return policy() if argument is None else policy(argument)


def call_base(policy, obs: dict) -> np.ndarray:
    """A base policy's answer as float32 ``[K, A]`` (an action ``[A]`` is a chunk of one)."""
    chunk = np.asarray(policy(obs), np.float32)
    if chunk.ndim == 1:
        chunk = chunk[None]
    if chunk.ndim != 2 or chunk.shape[0] < 1:
        raise ValueError(f"a base policy returns an action [A] or a chunk [K, A], got shape {list(chunk.shape)}")
    return chunk


def serve_base(spec: str, inp, out, argument: str | None = None) -> None:
    """A base policy (``module:function`` or ``module:Class``, observation dict -> action or chunk; its ``reset`` attribute,
    if any, called at each episode's start) behind requests ``query`` (arrays: the observation) and
    ``reset``. It imports only numpy and the policy's own packages (a LeRobot venv's)."""
    try:
        policy = load_base(spec, argument)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        refuse_start(out, "load", exc)
        return
    write_frame(out, {"ok": True, "numpy": np.__version__, "python": sys.version.split()[0]})

    def handle(op: str, header: dict, arrays: dict) -> None:
        if op == "reset":
            if callable(getattr(policy, "reset", None)):
                policy.reset()
            write_frame(out, {"ok": True})
        elif op == "query":
            write_frame(out, {"ok": True}, {"chunk": call_base(policy, arrays)})
        else:
            raise ValueError(f"unknown request {op!r}")

    answer_requests(inp, out, handle)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    sys.path[0] = os.getcwd()  # scripted policies resolve from the working folder, as with python -m
    # the frames own the real stdout; anything the env prints goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(0), "rb")
    if sys.argv[1] == "--base":  # a base policy's worker (robot_rl/base_policy.py)
        serve_base(sys.argv[2], inp, out, sys.argv[3] if len(sys.argv) > 3 else None)
    else:
        env_id, kwargs = sys.argv[1], json.loads(sys.argv[2])
        serve(env_id, kwargs, (sys.argv[3] or None), (sys.argv[4] or None), inp, out)
    out.flush()
    os._exit(0)  # skip interpreter teardown: some envs' renderers fail in it headless


if __name__ == "__main__":
    main()

"""A frozen base policy, the policy a lab already has, that residual RL practises on top of
(issue 46), and the action chunks it answers with.

Sources (``open_base``):

- ``module:function`` (or ``path/file.py:function``): the function maps the flat observation
  (``state`` float32 and each camera's uint8 ``[H, W, 3]`` image) to an action ``[A]`` or a
  chunk of the next K actions ``[K, A]``, in the contract's [-1, 1]; its ``reset`` attribute, if
  it has one, is called at each episode's start. A ``module:Class`` (a stateful base) gives each env
that queries it an instance of its own: training and evaluation never share one. In this process (``FunctionBase``) or, with a
  ``python`` (``--base-python``: a LeRobot venv's interpreter, whose torch ours cannot share), in
  a worker process of that interpreter (``WorkerBase``: ``foreign/worker.py --base``, arrays and
  JSON over pipes, never pickle). The two give the same actions.
- a run folder of ours (``CheckpointBase``): its newest checkpoint's deterministic policy, one
  action per query.

``ActionChunks`` turns the chunks into one action per control step. It queries the base every
``every`` steps (at most the chunk's length K: the newest chunk must still cover the step) and
plays either the newest chunk (``receding``: with ``every`` = K each chunk is played whole) or,
ACT's temporal ensembling (``ensemble``), the average of what every chunk still covering the
step predicted for it, weighted ``exp(-m i)`` with i = 0 the oldest prediction. It records each
query's latency and each control step's (``latency``).

``BaseActionEnv`` puts the base into a run: around the cell (contract observations) it asks the
chunks for the base's action at every observation, at reset and after each step, and hands it on
under ``base_action`` (clipped to [-1, 1]); ``FlatObservation`` appends it to the state, so the
residual policy (``agents/sac.py``, ``base_action_dim``) sees it and acts
clip(base + residual_scale * residual) on every action dimension. What the cell executes, the
human's action included, is what the replay stores: demonstrations need no mapping, only the
base's action at each of their observations (``label``). ``make_base_env`` builds it and checks
the base against the run (its action width, its chunk's length, a checkpoint's observations)
before any work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import gymnasium as gym
import numpy as np

from robot_rl.contract import Transition
from robot_rl.errors import InputError, TrainingError
from robot_rl.foreign import worker
from robot_rl.foreign.client import EnvWorkerError, WorkerProcess

MODES = ("receding", "ensemble")
ENSEMBLE_M = 0.01  # ACT's temporal-ensembling weight exp(-m i), i = 0 the oldest prediction


class BasePolicy(Protocol):
    """What ``ActionChunks`` asks of a base: ``query`` an observation for a float32 ``[K, A]`` chunk."""

    def reset(self) -> None: ...

    def query(self, obs: dict) -> np.ndarray: ...

    def close(self) -> None: ...


class FunctionBase:
    """``module:function`` called in this process."""

    def __init__(self, spec: str):
        self.spec = spec
        try:
            self.policy = worker.load_base(spec)
        except Exception as exc:  # noqa: BLE001 - a user's module: its error as one line
            raise InputError(f"--base-policy {spec}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}") from None

    def reset(self) -> None:
        if callable(getattr(self.policy, "reset", None)):
            self.policy.reset()

    def query(self, obs: dict) -> np.ndarray:
        return worker.call_base(self.policy, obs)

    def close(self) -> None:
        pass


class WorkerBase(WorkerProcess):
    """``module:function`` (or ``module:Class``, made with ``argument`` when given) in a worker
    process of another interpreter ``python``; ``name``: what errors call it (default ``spec``)."""

    def __init__(self, python: str, spec: str, timeout_s: float | None = None, argument: str | None = None,
                 name: str | None = None):
        self.spec = name or spec
        super().__init__(python, ["--base", spec] + ([argument] if argument is not None else []),
                         f"base policy {self.spec}", "--base-python", timeout_s)
        hello = self._hello("base policy's worker", "its worker needs numpy, and the policy's own packages")
        if not hello.get("ok"):
            self.close()
            raise InputError(f"--base-policy {self.spec} (in {python}): {hello.get('error_type', 'Error')}: "
                             f"{hello.get('error', '')}")

    def reset(self) -> None:
        self._request("reset")

    def query(self, obs: dict) -> np.ndarray:
        arrays = {key: np.asarray(value) for key, value in obs.items()}
        return np.asarray(self._request("query", arrays)["arrays"]["chunk"], np.float32)


class CheckpointBase:
    """A run folder of ours: its newest checkpoint's deterministic policy, one action per query."""

    def __init__(self, run: str | Path, device: str = "cpu"):
        from robot_rl.runtime.checkpoint import CheckpointError, load_agent, resolve_checkpoint

        try:
            ckpt = resolve_checkpoint(Path(run))
            self.agent = load_agent(ckpt / "agent.safetensors", with_optimizers=False, device=device)
        except (CheckpointError, OSError) as err:
            raise InputError(f"--base-policy {run}: {err}") from None
        self.spec = str(ckpt)

    def reset(self) -> None:
        pass

    def query(self, obs: dict) -> np.ndarray:
        return self.agent.act(obs, deterministic=True)[None].astype(np.float32)

    def close(self) -> None:
        pass


LEROBOT_BASE = Path(__file__).parent / "foreign" / "lerobot_base.py"  # run by a LeRobot venv's interpreter


BASE_MAP_KEYS = ("cameras", "state", "action", "action_scale", "action_offset", "resize", "task")


def read_base_map(path: str | Path) -> dict:
    """A LeRobot policy's map (``--base-map FILE.yaml``, every key optional)::

        cameras: {front: observation.images.top}   # the run's camera: the policy's image key
        resize: true                               # the run's images resized to the policy's size (default: refused)
        state: [0, 1, 2, 3, 4, 5, 6, 13]           # the run's state numbers, in order, that make the policy's state
        action: [0, 1, 2, 3, 4, 5, 6]              # per run action dimension, the policy's action index
        action_scale: [0.02, 0.02, 0.02, 0.1, 0.1, 0.1, 1]  # the policy's value = run action x scale + offset:
        action_offset: 0                           #   one number or one per run action dimension
        task: pick up the red cube                 # the language instruction a VLA reads (default: "")

    checked here (the file, its keys, their types: one ``InputError`` line naming the file) and
    against the policy in its worker when it loads (``foreign/lerobot_base.py``)."""
    from robot_rl.foreign.mapping import read_yaml_map

    path = Path(path)
    data = read_yaml_map(path, "base map", BASE_MAP_KEYS, InputError, missing=InputError)
    cameras = data.get("cameras", {})
    if not isinstance(cameras, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in cameras.items()):
        raise InputError(f"base map {path}: cameras maps the run's camera names to the policy's image keys, "
                         f"e.g. {{front: observation.images.top}}")
    for key in ("state", "action"):
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and value
                                      and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)):
            raise InputError(f"base map {path}: {key} is a list of indices (integers >= 0), got {value!r}")
    for key in ("action_scale", "action_offset"):
        value = data.get(key)
        numbers = value if isinstance(value, list) else [value]
        if value is not None and not (numbers and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                      and np.isfinite(x) for x in numbers)):
            raise InputError(f"base map {path}: {key} is one number or a list of numbers, got {value!r}")
    scale = data.get("action_scale")
    if scale is not None and 0 in (scale if isinstance(scale, list) else [scale]):
        raise InputError(f"base map {path}: action_scale 0 maps every run action to one value of the policy's")
    if "resize" in data and not isinstance(data["resize"], bool):
        raise InputError(f"base map {path}: resize is true or false, got {data['resize']!r}")
    if "task" in data and not isinstance(data["task"], str):
        raise InputError(f"base map {path}: task is the policy's language instruction (text), got {data['task']!r}")
    return data


def is_lerobot_policy(folder: Path) -> bool:
    """A LeRobot pretrained-policy folder: its ``config.json`` and ``model.safetensors``."""
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def open_base(source: str, python: str | None = None, timeout_s: float | None = None,
              base_map: str | None = None) -> BasePolicy:
    """The base ``source`` names: a LeRobot pretrained-policy folder (in a worker of ``python``, a
    LeRobot venv's: ``foreign/lerobot_base.py``; ``base_map``: its map, ``read_base_map``), a run
    folder of ours, or ``module:function`` (in a worker of ``python`` when given, else in this process)."""
    if Path(source).is_dir() and is_lerobot_policy(Path(source)):
        if python is None:
            raise InputError(f"--base-policy {source} is a LeRobot policy: give --base-python, the Python of a "
                             "venv with LeRobot (its torch cannot share ours)")
        argument = {"folder": str(Path(source).resolve()), "map": read_base_map(base_map) if base_map else {}}
        return WorkerBase(python, f"{LEROBOT_BASE}:LeRobotBase", timeout_s, json.dumps(argument), source)
    if base_map is not None:
        raise InputError(f"--base-map maps a LeRobot policy's inputs; {source} is not a LeRobot policy folder "
                         "(config.json and model.safetensors)")
    if Path(source).is_dir():
        if python is not None:
            raise InputError(f"--base-python serves a module:function; {source} is a run folder, which runs here")
        return CheckpointBase(source)
    if ":" not in source:
        raise InputError(f"--base-policy {source}: neither a run folder nor module:function")
    return WorkerBase(python, source, timeout_s) if python is not None else FunctionBase(source)


class ActionChunks:
    """One action per control step from a base that answers with chunks (see the module's doc)."""

    def __init__(self, base: BasePolicy, action_dim: int, every: int | None = None, mode: str = "receding",
                 m: float = ENSEMBLE_M):
        if mode not in MODES:
            raise InputError(f"--base-mode must be one of {list(MODES)}, got {mode!r}")
        if every is not None and every < 1:
            raise InputError(f"--base-every must be at least 1, got {every}")
        self.base, self.action_dim, self.every, self.mode, self.m = base, action_dim, every, mode, m
        self.horizon: int | None = None  # K, known from the first chunk
        self.query_ms: list[float] = []
        self.step_ms: list[float] = []
        self._chunks: list[tuple[int, np.ndarray]] = []  # (the step it was queried at, the chunk), oldest first
        self._t = 0

    def reset(self) -> None:
        self.base.reset()
        self._chunks, self._t = [], 0

    def _query(self, obs: dict) -> np.ndarray:
        start = time.perf_counter()
        chunk = self.base.query(obs)
        self.query_ms.append((time.perf_counter() - start) * 1e3)
        if chunk.ndim == 2 and not np.isfinite(chunk).all():
            raise TrainingError(f"the base policy {getattr(self.base, 'spec', '')} answered with NaN or an infinity "
                                f"at control step {self._t} of its episode")
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim:
            raise InputError(f"the base policy's actions are {chunk.shape[-1]} wide; the env's are {self.action_dim}")
        if self.horizon is None:
            self.horizon = len(chunk)
            self.every = self.every or self.horizon
            if self.every > self.horizon:
                raise InputError(f"--base-every {self.every} is above the base policy's horizon: its chunks hold "
                                 f"{self.horizon} actions")
        elif len(chunk) != self.horizon:
            raise InputError(f"the base policy's chunks changed length from {self.horizon} to {len(chunk)}")
        return chunk

    def __call__(self, obs: dict) -> np.ndarray:
        """The base's action for this control step (float32 ``[A]``)."""
        start = time.perf_counter()
        t = self._t
        if not self._chunks or t - self._chunks[-1][0] >= self.every:
            self._chunks.append((t, self._query(obs)))
        self._chunks = [(t0, chunk) for t0, chunk in self._chunks if t - t0 < len(chunk)]  # those covering t
        if self.mode == "receding":
            t0, chunk = self._chunks[-1]
            action = chunk[t - t0]
        else:
            predictions = np.stack([chunk[t - t0] for t0, chunk in self._chunks])
            weights = np.exp(-self.m * np.arange(len(predictions)))
            action = (weights[:, None] * predictions).sum(0) / weights.sum()
        self._t += 1
        self.step_ms.append((time.perf_counter() - start) * 1e3)
        return np.asarray(action, np.float32)

    def latency(self) -> dict:
        """p50 / p99 in ms of the base's queries and of the control steps (a step that queried included), to 4
        significant digits: a step that plays its chunk takes well under a microsecond on a fast CPU."""
        def pct(values, q):
            return float(f"{np.percentile(values, q):.4g}") if values else None

        return {"base_query_ms_p50": pct(self.query_ms, 50), "base_query_ms_p99": pct(self.query_ms, 99),
                "base_step_ms_p50": pct(self.step_ms, 50), "base_step_ms_p99": pct(self.step_ms, 99),
                "base_queries": len(self.query_ms), "base_steps": len(self.step_ms), "base_horizon": self.horizon,
                "base_every": self.every, "base_mode": self.mode}


class BaseActionEnv(gym.Wrapper):
    """The cell with the base policy's action for each observation, under ``base_action`` (see the
    module's doc). ``observe``: raw observation -> what the base reads (the run's flat observation)."""

    def __init__(self, env: gym.Env, chunks: ActionChunks, observe: Callable[[dict], dict]):
        super().__init__(env)
        self.chunks, self.observe = chunks, observe
        width = env.action_space.shape[0]
        self.observation_space = gym.spaces.Dict({**env.observation_space.spaces,
                                                  "base_action": gym.spaces.Box(-1.0, 1.0, (width,), np.float32)})

    def base_action(self, raw: dict) -> np.ndarray:
        return np.clip(self.chunks(self.observe(raw)), -1.0, 1.0)

    def reset(self, **kwargs):
        raw, info = self.env.reset(**kwargs)
        self.chunks.reset()
        return {**raw, "base_action": self.base_action(raw)}, info

    def step(self, action):
        raw, reward, terminated, truncated, info = self.env.step(action)
        return {**raw, "base_action": self.base_action(raw)}, reward, terminated, truncated, info

    def label(self, episode: Iterable[Transition]) -> Iterator[Transition]:
        """One recorded episode's transitions (in order) with the base's action at each observation,
        queried as a run would have: reset, then once per observation."""
        self.chunks.reset()
        previous = None
        for transition in episode:
            obs = previous if previous is not None else {**transition.obs, "base_action": self.base_action(transition.obs)}
            next_obs = {**transition.next_obs, "base_action": self.base_action(transition.next_obs)}
            previous = next_obs
            yield transition._replace(obs=obs, next_obs=next_obs)

    def latency(self) -> dict:
        return self.chunks.latency()

    def close(self) -> None:
        try:
            self.chunks.base.close()
        finally:
            super().close()


def make_base_env(cell: gym.Env, obs: str, cameras, source: str, python: str | None = None, every: int | None = None,
                  mode: str = "receding", timeout_s: float | None = None, probe_seed: int | None = 0,
                  base_map: str | None = None) -> BaseActionEnv:
    """``cell`` with the base ``source`` (``open_base``) reading the run's flat observations
    (``obs``, ``cameras``). With ``probe_seed`` one reset checks the base against the run before
    any work: its action's width, its chunk's length against ``every``. The base is closed if
    anything fails."""
    from robot_rl.envs import FlatObservation

    flat = FlatObservation(cell, obs, cameras)
    base = open_base(source, python, timeout_s, base_map)
    try:
        if isinstance(base, CheckpointBase):
            from robot_rl.runtime.checkpoint import CheckpointError, check_compatible

            try:
                check_compatible(base.agent.config, flat, Path(base.spec))
            except CheckpointError as err:
                raise InputError(f"--base-policy {source}: {err}") from None
        wrapped = BaseActionEnv(cell, ActionChunks(base, cell.action_space.shape[0], every, mode), flat.observation)
        if probe_seed is not None:
            try:
                wrapped.reset(seed=probe_seed)
            except EnvWorkerError as err:  # the base refused the run's observation: before any work
                raise InputError(str(err)) from None
        return wrapped
    except BaseException:
        base.close()
        raise


def with_base_policy(cfg, cell):
    """``cell`` as it is, or with ``cfg.base_policy`` beside it (``base_policy.make_base_env``)."""
    if not getattr(cfg, "base_policy", None):
        return cell
    try:
        return make_base_env(cell, cfg.obs, cfg.cameras, cfg.base_policy, cfg.base_python, cfg.base_every,
                             cfg.base_mode, getattr(cfg, "env_timeout_s", 0) or None, base_map=cfg.base_map)
    except BaseException:
        cell.close()
        raise

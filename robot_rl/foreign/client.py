"""A foreign Gymnasium env behind one small interface, in this process (``LocalEnv``) or in a
worker process of another Python interpreter (``WorkerEnv``, ``robot-rl train --env-python``).

Both give flattened observations (``{"a/b": array}``, ``worker.flatten_obs``), the info's plain
values (``worker.json_info``) and the spaces as ``worker.describe_space`` describes them, so a
map checked against one holds for the other, and one seed gives the same episode either way.

A reset, step or scripted action that takes longer than ``timeout_s`` is an ``EnvTimeout``; while
one waits, ``on_wait(what, waited_s)`` is called about every ``POLL_S`` (progress lines, a stop:
it may raise ``StopWaiting`` to abandon the call). A worker is stopped on either. In this process
the limit and the hook run from SIGALRM, in the main thread only: they interrupt an env that
blocks in Python code or in a system call (a lock, an Event, a read), but one stuck inside a C
extension only once that returns: run such an env in a worker (``--env-python``).
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from robot_rl.errors import InputError, TrainingError
from robot_rl.foreign import worker
from robot_rl.foreign.worker import describe_space, flatten_obs, json_info, read_frame, write_frame

WORKER = Path(worker.__file__)
STDERR_LINES = 20  # kept from a worker's stderr, for the error when it dies
POLL_S = 0.25  # how often an env call that waits checks its limit and calls on_wait


class EnvWorkerError(TrainingError):
    """The env's worker process died or failed a request."""


class EnvTimeout(EnvWorkerError):
    """An env's reset, step or scripted action that took longer than its limit."""


class StopWaiting(BaseException):
    """Raised by an ``on_wait`` hook to abandon an env call that waits (a stop was asked for). A
    BaseException, so that an env's own ``except Exception`` does not swallow it in this process."""


class _Overdue(BaseException):
    """SIGALRM's word that an in-process env call passed its limit."""


def _timeout_error(env_id: str, during: str, limit: float, stopped: str) -> EnvTimeout:
    return EnvTimeout(f"env {env_id}: its {during} did not return within {limit:g} s (--env-timeout-s), so the env "
                      f"hangs or is far too slow; {stopped}")


class Watched:
    """A limit on each env call (``timeout_s``, None: none) and the hook called while one waits."""

    timeout_s: float | None = None
    on_wait: Callable[[str, float], None] | None = None


def _start_error(env_id: str, expert: str | None, stage: str, kind: str, message: str) -> InputError:
    """A foreign env that cannot be made (``stage`` make) or its scripted policy that cannot be
    loaded (``expert``), as one line."""
    text = f"{kind}: {message}"
    if stage == "expert":
        return InputError(f"--env-expert {expert}: {text}")
    if stage == "setup":
        return InputError(f"--env {env_id}: the env map's setup function failed: {text}")
    if kind in ("NameNotFound", "NamespaceNotFound", "VersionNotFound", "UnregisteredEnv"):
        return InputError(f"--env {env_id}: unknown Gymnasium env id ({message}); an id a package registers on "
                          f"import can be given as package:{env_id.split(':')[-1]}")
    return InputError(f"--env {env_id}: gym.make failed: {text}")


class LocalEnv(Watched):
    """The env made in this process."""

    def __init__(self, env_id: str, kwargs: dict, expert: str | None = None, setup: str | None = None,
                 timeout_s: float | None = None):
        self.env_id, self.timeout_s = env_id, timeout_s
        stage = "make"
        try:
            self.env = worker.make_env(env_id, dict(kwargs))
            stage = "setup"
            if setup:
                worker.load_function(setup)(self.env.unwrapped)
            stage = "expert"
            self.expert = worker.load_function(expert) if expert else None
        except Exception as exc:  # noqa: BLE001 - a foreign env's own errors, as one line
            raise _start_error(env_id, expert, stage, type(exc).__name__, (str(exc).splitlines() or [""])[0]) from None
        self.has_progress = worker.has_progress(self.expert)
        self.observation_space = describe_space(self.env.observation_space)
        self.action_space = describe_space(self.env.action_space)
        self.max_episode_steps = self.env.spec.max_episode_steps if self.env.spec is not None else None
        self.control_hz = worker.control_hz(self.env)
        self._last = None

    def _watched(self, during: str, call: Callable):
        """``call()`` under the limit and the hook, ticked by SIGALRM (the main thread only)."""
        if (self.timeout_s is None and self.on_wait is None) or threading.current_thread() is not threading.main_thread():
            return call()
        start, armed = time.monotonic(), True

        def tick(signum, frame) -> None:
            if not armed:  # a tick that was due as the call returned
                return
            waited = time.monotonic() - start
            if self.timeout_s is not None and waited >= self.timeout_s:
                raise _Overdue
            if self.on_wait is not None:
                self.on_wait(during, waited)

        previous = signal.signal(signal.SIGALRM, tick)
        first = POLL_S if self.timeout_s is None else min(POLL_S, self.timeout_s)
        signal.setitimer(signal.ITIMER_REAL, first, POLL_S)
        try:
            return call()
        except _Overdue:
            raise _timeout_error(self.env_id, during, self.timeout_s, "its call was abandoned") from None
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def reset(self, seed: int | None = None) -> tuple[dict, dict]:
        if seed is not None:
            worker.seed_globals(int(seed))
        self._last, info = self._watched("reset", lambda: self.env.reset(seed=seed))
        if self.expert is not None and hasattr(self.expert, "reset"):
            self.expert.reset()
        return flatten_obs(self._last), json_info(info)

    def step(self, action: np.ndarray):
        self._last, reward, terminated, truncated, info = self._watched("step", lambda: self.env.step(action))
        return flatten_obs(self._last), float(reward), bool(terminated), bool(truncated), json_info(info)

    def expert_action(self) -> np.ndarray:
        return self._watched("scripted action", lambda: worker.call_policy(self.expert, self._last, self.env))

    def expert_progress(self) -> float:
        return self._watched("scripted progress", lambda: worker.call_progress(self.expert, self._last, self.env))

    def close(self) -> None:
        self.env.close()


class WorkerProcess(Watched):
    """A script of ours (``worker.py``) run by another interpreter ``python``, spoken to over its
    stdin and stdout in ``worker``'s frames, one reply per request. Its death is one
    ``EnvWorkerError`` naming ``what`` it serves and the last lines of its stderr: a read of a dead
    process's stdout ends at once, so nothing waits. A request that passes ``timeout_s`` stops it."""

    def __init__(self, python: str, args: list[str], what: str, option: str, timeout_s: float | None = None):
        self.python, self.what, self.option, self.timeout_s = python, what, option, timeout_s
        self._pending: str | None = None  # a request sent and not answered: its worker is busy or hung
        if not Path(python).is_file() or not os.access(python, os.X_OK):
            raise InputError(f"{option} {python}: not an executable file")
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), PYTHONUNBUFFERED="1")
        try:
            self.proc = subprocess.Popen([python, str(WORKER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env)
        except OSError as exc:
            raise InputError(f"{option} {python}: does not start ({exc.strerror or exc})") from None
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._stderr_done = threading.Event()
        threading.Thread(target=self._drain_stderr, daemon=True, name="worker-stderr").start()

    def _hello(self, kind: str, needs: str) -> dict:
        """The worker's first reply (what it serves, or why it could not start); ``kind`` names the
        worker and ``needs`` what its interpreter must have, for the error when that fails."""
        try:
            return self._reply("start")
        except EnvWorkerError as exc:
            self.close()
            missing = [name for name in ("gymnasium", "numpy") if f"No module named '{name}'" in str(exc)]
            if missing:
                raise InputError(f"{self.option} {self.python} lacks {missing[0]} ({needs})") from None
            raise InputError(f"{self.option} {self.python}: the {kind} did not start: {exc}") from None

    def _drain_stderr(self) -> None:
        for raw in iter(self.proc.stderr.readline, b""):
            self.stderr.append(raw.decode(errors="replace").rstrip())
        self._stderr_done.set()

    def _died(self, during: str) -> EnvWorkerError:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # its stdout closed but it lives on: stop it
            self.proc.kill()
            code = self.proc.wait()
        self._stderr_done.wait(timeout=10)  # the pipe ends with the process
        tail = [line for line in self.stderr if line.strip()][-3:]
        said = " | ".join(tail) if tail else "nothing on stderr"
        return EnvWorkerError(f"{self.what}: its worker process ({self.python}) died during {during} "
                              f"(exit code {code}); its stderr ended: {said}")

    def _overdue(self, during: str) -> EnvTimeout:
        return EnvTimeout(f"{self.what}: its {during} did not return within {self.timeout_s:g} s; its worker process "
                          f"({self.python}) was stopped")

    def _await(self, during: str) -> None:
        """Until the worker's reply starts (one reply per request: none waits in the read buffer),
        under the limit and the hook. A worker that passes the limit is stopped."""
        start = time.monotonic()
        while True:
            waited = time.monotonic() - start
            if self.timeout_s is not None and waited >= self.timeout_s:
                self._kill()
                raise self._overdue(during) from None
            left = POLL_S if self.timeout_s is None else min(POLL_S, self.timeout_s - waited)
            if select.select([self.proc.stdout], [], [], left)[0]:
                return
            if self.on_wait is not None:
                self.on_wait(during, time.monotonic() - start)

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _reply(self, during: str) -> dict:
        try:
            if during != "start" and (self.timeout_s is not None or self.on_wait is not None):
                self._await(during)
            header, arrays = read_frame(self.proc.stdout)
        except (EOFError, OSError, ValueError):
            raise self._died(during) from None
        header["arrays"] = arrays
        return header

    def _request(self, op: str, arrays: dict | None = None, during: str | None = None, **fields) -> dict:
        during = during or op
        try:
            write_frame(self.proc.stdin, {"op": op, **fields}, arrays)
        except (BrokenPipeError, OSError, ValueError):
            raise self._died(during) from None
        self._pending = during
        reply = self._reply(during)
        self._pending = None
        if not reply.get("ok"):
            raise EnvWorkerError(f"{self.what} failed {op} in its worker: {reply.get('error')}")
        return reply

    def close(self) -> None:
        if self._pending is not None:  # abandoned mid-call: it would not answer a close
            self._kill()
        if self.proc.poll() is None:
            try:
                write_frame(self.proc.stdin, {"op": "close"})
                self.proc.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class WorkerEnv(WorkerProcess):
    """The env in a worker process of ``python`` (``worker.py`` run as a script)."""

    def __init__(self, python: str, env_id: str, kwargs: dict, expert: str | None = None, setup: str | None = None,
                 timeout_s: float | None = None):
        self.env_id = env_id
        super().__init__(python, [env_id, json.dumps(kwargs), expert or "", setup or ""], f"env {env_id}",
                         "--env-python", timeout_s)
        hello = self._hello("env worker", "its env worker needs gymnasium and numpy, and the env's own package")
        if not hello.get("ok"):
            self.close()
            raise _start_error(env_id, expert, hello.get("stage", "make"), hello.get("error_type", "Error"),
                               hello.get("error", ""))
        self.observation_space, self.action_space = hello["observation_space"], hello["action_space"]
        self.max_episode_steps, self.control_hz = hello.get("max_episode_steps"), hello.get("control_hz")
        self.has_progress = bool(hello.get("expert_progress"))

    def _overdue(self, during: str) -> EnvTimeout:
        return _timeout_error(self.env_id, during, self.timeout_s, f"its worker process ({self.python}) was stopped")

    def reset(self, seed: int | None = None) -> tuple[dict, dict]:
        reply = self._request("reset", seed=seed)
        return reply["arrays"], reply["info"]

    def step(self, action: np.ndarray):
        reply = self._request("step", {"action": np.asarray(action)})
        return reply["arrays"], reply["reward"], reply["terminated"], reply["truncated"], reply["info"]

    def expert_action(self) -> np.ndarray:
        return self._request("expert", during="scripted action")["arrays"]["action"]

    def expert_progress(self) -> float:
        return float(self._request("progress", during="scripted progress")["progress"])


def open_env(env_id: str, kwargs: dict, python: str | None = None, expert: str | None = None,
             setup: str | None = None, timeout_s: float | None = None):
    """The env in this process (``python`` None) or in a worker of ``python``; ``setup``
    (``module:function``) is called once with the unwrapped env, in its interpreter. ``timeout_s``:
    the limit on each reset, step and scripted action (None: none; making the env has none)."""
    if python is None:
        return LocalEnv(env_id, kwargs, expert, setup, timeout_s)
    return WorkerEnv(python, env_id, kwargs, expert, setup, timeout_s)


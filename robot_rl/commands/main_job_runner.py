"""How the main job (main_job.py) runs its stages: each stage's ``robot-rl`` commands in child
processes with their output passed through (a "still running" line after each silent
``PROGRESS_EVERY_S``), a stop signal passed on to them once (a training checkpoints and stops), a
child that outlives a killed job told to stop (Linux), and the job's record (``main_job.json``)
written whole after each finished stage.

Stages that need nothing from each other may run side by side (``Stage.side_by_side``: a run of
them is one group), one on each of two cores: their commands get one torch thread each
(``SIDE_BY_SIDE_THREADS``), always, so a stage computes the same whether its partner runs beside it
or has finished already (two thread pools on two cores collapse: docs/CALIBRATION.md), and their
lines are prefixed with the stage's name.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from robot_rl.errors import UserFacingError

JOB_FILE = "main_job.json"
JOB_FORMAT = 1
PROGRESS_EVERY_S = float(os.environ.get("PROGRESS_EVERY", "20"))  # a "still running" line after this long silent
SIDE_BY_SIDE_THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # a side-by-side stage's commands


class MainJobError(UserFacingError):
    """A main job that cannot start or go on: one line (exit 2), nothing changed."""


class StageFailed(UserFacingError):
    """A stage's command failed (its output is above); the finished stages are kept."""


class JobStopped(Exception):
    """SIGINT / SIGTERM: the running command was told and has stopped (a training checkpoints)."""

    def __init__(self, signum: int, run: Path):
        super().__init__(signum)
        self.signum, self.run = signum, run


@dataclass
class Stage:
    name: str  # its key in main_job.json
    title: Callable[["MainJob"], str]  # what the stage line says
    expected: Callable[["MainJob"], str]
    run: Callable[["MainJob"], None]
    verify: Callable[["MainJob"], None]  # raises MainJobError naming the output that does not verify
    outputs: tuple[str, ...] = ()  # removed before the stage starts again (a training stage resumes instead)
    side_by_side: bool = False  # runs beside the neighbouring side-by-side stages (it needs nothing from them)


@dataclass
class _Running:
    """The stage a thread of the job is running (the job runs two side by side at most)."""

    number: int
    title: str
    started: float
    prefix: str = ""  # before each of its commands' lines when it runs beside another
    env: dict = field(default_factory=dict)  # for its commands


class StageRunner:
    """A job's stages run in order, each from its ``robot_rl`` commands; ``record`` (its JSON file,
    ``JOB_FILE`` in ``run``) keeps the finished ones. A subclass sets ``stages``."""

    stages: list[Stage]

    def __init__(self, run: Path, record: dict, log: Callable[[str], None] = print):
        self.run, self.record, self.log = run, record, log
        self.started = time.monotonic()
        self.stop_signal: int | None = None
        self._children: list[subprocess.Popen] = []
        self._running = threading.local()
        self._log_lock = threading.Lock()
        self._beside_failed = threading.Event()  # a side-by-side stage failed: its partner starts nothing new

    @property
    def current(self) -> _Running:
        """The stage this thread runs."""
        return getattr(self._running, "stage", None) or _Running(0, "start", self.started)

    @property
    def stage_started(self) -> float:
        return self.current.started

    def save_record(self) -> None:
        tmp = self.run / f".{JOB_FILE}.tmp"
        tmp.write_text(json.dumps(self.record, indent=1) + "\n")
        os.replace(tmp, self.run / JOB_FILE)

    # ---------------------------------------------------------- running commands
    def robot_rl(self, *args: str, env: dict | None = None) -> str:
        """``robot-rl ARGS`` in a child process, its output passed through (a "still running" line
        after each PROGRESS_EVERY_S without one); returns its last line. A failure raises
        StageFailed, a stop signal JobStopped once the child has stopped."""
        stage = self.current
        if self.stop_signal is not None:  # stopped between two commands: the next one never starts
            raise JobStopped(self.stop_signal, self.run)
        if self._beside_failed.is_set():
            raise StageFailed(f"stage {stage.number} of {len(self.stages)} ({stage.title}) stopped: the stage beside "
                              f"it failed (its output is above); go on with robot-rl main --resume {self.run}")
        self._say(f"$ robot-rl {' '.join(args)}", stage)
        lines: queue.Queue = queue.Queue()
        proc = subprocess.Popen([sys.executable, "-m", "robot_rl.commands.cli", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **stage.env, **(env or {})},
                                start_new_session=True, preexec_fn=_stop_with_parent)
        self._children.append(proc)
        threading.Thread(target=_pass_lines, args=(proc, lines), daemon=True).start()
        last = ""
        try:
            while (line := self._next_line(lines, stage)) is not None:
                self._say(line, stage)
                last = line
            code = proc.wait()
        finally:
            self._children.remove(proc)
        if self.stop_signal is not None:
            raise JobStopped(self.stop_signal, self.run)
        if code != 0:
            raise StageFailed(f"stage {stage.number} of {len(self.stages)} ({stage.title}) failed: "
                              f"robot-rl {args[0]} exited with status {code} (its output is above); the stages "
                              f"before are kept: go on with robot-rl main --resume {self.run}")
        return last

    def _say(self, line: str, stage: _Running) -> None:
        with self._log_lock:
            self.log(stage.prefix + line)

    def _next_line(self, lines: queue.Queue, stage: _Running) -> str | None:
        """The child's next line (None at its end), a "still running" line after each silent stretch."""
        while True:
            try:
                return lines.get(timeout=PROGRESS_EVERY_S)
            except queue.Empty:
                self._say(f"   ... still running: {stage.title} ({clock(time.monotonic() - stage.started)} "
                          f"in this stage, job time {clock(time.monotonic() - self.started)})", stage)

    def stop(self, signum: int, frame=None) -> None:
        """SIGINT / SIGTERM: tell the running commands once (a training checkpoints and stops)."""
        self.stop_signal = signum
        self.stop_children(signum)

    def stop_children(self, signum: int) -> None:
        for proc in list(self._children):
            if proc.poll() is None:
                proc.send_signal(signum)

    # ---------------------------------------------------------- the stages in order
    def groups(self) -> list[list[tuple[int, Stage]]]:
        """The stages in order as (number, stage), a run of side-by-side stages one group."""
        groups: list[list[tuple[int, Stage]]] = []
        for k, stage in enumerate(self.stages, start=1):
            if stage.side_by_side and groups and groups[-1][-1][1].side_by_side:
                groups[-1].append((k, stage))
            else:
                groups.append([(k, stage)])
        return groups

    def run_stages(self) -> None:
        for group in self.groups():
            todo = [(k, stage) for k, stage in group if stage.name not in self.record["stages"]]
            if len(group) == 1:
                for k, stage in todo:
                    self._run_stage(k, stage, _Running(k, stage.title(self), time.monotonic()))
            elif todo:
                self._run_side_by_side(todo, group)

    def _run_stage(self, k: int, stage: Stage, running: _Running, beside: str = "") -> None:
        self._running.stage = running
        self._say(f"== stage {k} of {len(self.stages)}: {running.title} ({beside}expected {stage.expected(self)}; "
                  f"job time {clock(running.started - self.started)}) ==", running)
        for name in stage.outputs:  # what an earlier attempt left half-written
            remove_path(self.run / name)
        stage.run(self)
        with self._log_lock:
            self.record["stages"][stage.name] = {"wall_s": round(time.monotonic() - running.started, 1),
                                                 "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            if running.env:
                self.record["stages"][stage.name]["side_by_side"] = [s.name for _, s in self._group_of(stage)]
            self.save_record()

    def _group_of(self, stage: Stage) -> list[tuple[int, Stage]]:
        return next(group for group in self.groups() if any(s is stage for _, s in group))

    def _run_side_by_side(self, todo: list[tuple[int, Stage]], group: list[tuple[int, Stage]]) -> None:
        """The group's unfinished stages, each in a thread of its own with one torch thread; the
        first failure (or stop) stops the others and is raised once they have stopped."""
        numbers = " and ".join(str(k) for k, _ in group)
        errors: list[BaseException] = []

        def run(k: int, stage: Stage) -> None:
            running = _Running(k, stage.title(self), time.monotonic(), f"[{stage.name}] ", dict(SIDE_BY_SIDE_THREADS))
            try:
                self._run_stage(k, stage, running, f"side by side: stages {numbers}, one torch thread each; ")
            except BaseException as err:  # noqa: BLE001 - raised again in the job's own thread
                with self._log_lock:
                    first = not errors
                    errors.append(err)
                if first:
                    self._beside_failed.set()
                    self.stop_children(signal.SIGTERM)

        threads = [threading.Thread(target=run, args=(k, stage), daemon=True) for k, stage in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._running.stage = None
        self._beside_failed.clear()
        if errors:  # a stop signal's JobStopped before the failures it caused
            raise next((e for e in errors if isinstance(e, JobStopped)), errors[0])

    @property
    def wall_s(self) -> float:
        """The stages' wall time in all (each stage's last attempt; side-by-side stages the longest of them)."""
        stages = self.record["stages"]
        return sum(max((stages[s.name]["wall_s"] for _, s in group if s.name in stages), default=0.0)
                   for group in self.groups())


def _pass_lines(proc: subprocess.Popen, lines: queue.Queue) -> None:
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _stop_with_parent() -> None:
    """In the child: SIGTERM when the main job's process dies (a kill -9 of it), so that no
    training goes on unseen; it checkpoints and stops as on any SIGTERM (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"


def about_minutes(seconds: float) -> str:
    return f"about {max(1, int(-(-seconds // 60)))} min"


def remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def write_json_result(path: Path, line: str) -> None:
    """A command's last line, its JSON result, kept in ``path``."""
    try:
        json.loads(line)
    except json.JSONDecodeError:
        raise StageFailed(f"expected a JSON result as the last line for {path}, got {line!r}") from None
    path.write_text(line + "\n")

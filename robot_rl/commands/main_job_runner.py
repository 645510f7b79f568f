"""How the main job (main_job.py) runs its stages: each stage's ``robot-rl`` commands in child
processes with their output passed through (a "still running" line after each silent
``PROGRESS_EVERY_S``), a stop signal passed on to them once (a training checkpoints and stops), a
child that outlives a killed job told to stop (Linux), and the job's record (``main_job.json``)
written whole after each finished stage.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from robot_rl.errors import UserFacingError

JOB_FILE = "main_job.json"
JOB_FORMAT = 1
PROGRESS_EVERY_S = float(os.environ.get("PROGRESS_EVERY", "20"))  # a "still running" line after this long silent


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


class StageRunner:
    """A job's stages run in order, each from its ``robot_rl`` commands; ``record`` (its JSON file,
    ``JOB_FILE`` in ``run``) keeps the finished ones. A subclass sets ``stages``."""

    stages: list[Stage]

    def __init__(self, run: Path, record: dict, log: Callable[[str], None] = print):
        self.run, self.record, self.log = run, record, log
        self.started = time.monotonic()
        self.stop_signal: int | None = None
        self._children: list[subprocess.Popen] = []
        self.stage_number, self.stage_title, self.stage_started = 0, "start", self.started

    def save_record(self) -> None:
        tmp = self.run / f".{JOB_FILE}.tmp"
        tmp.write_text(json.dumps(self.record, indent=1) + "\n")
        os.replace(tmp, self.run / JOB_FILE)

    # ---------------------------------------------------------- running commands
    def robot_rl(self, *args: str, env: dict | None = None) -> str:
        """``robot-rl ARGS`` in a child process, its output passed through (a "still running" line
        after each PROGRESS_EVERY_S without one); returns its last line. A failure raises
        StageFailed, a stop signal JobStopped once the child has stopped."""
        self.log(f"$ robot-rl {' '.join(args)}")
        lines: queue.Queue = queue.Queue()
        proc = subprocess.Popen([sys.executable, "-m", "robot_rl.commands.cli", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                                start_new_session=True, preexec_fn=_stop_with_parent)
        self._children.append(proc)
        threading.Thread(target=_pass_lines, args=(proc, lines), daemon=True).start()
        last = ""
        try:
            while (line := self._next_line(lines)) is not None:
                self.log(line)
                last = line
            code = proc.wait()
        finally:
            self._children.remove(proc)
        if self.stop_signal is not None:
            raise JobStopped(self.stop_signal, self.run)
        if code != 0:
            raise StageFailed(f"stage {self.stage_number} of {len(self.stages)} ({self.stage_title}) failed: "
                              f"robot-rl {args[0]} exited with status {code} (its output is above); the stages "
                              f"before are kept: go on with robot-rl main --resume {self.run}")
        return last

    def _next_line(self, lines: queue.Queue) -> str | None:
        """The child's next line (None at its end), a "still running" line after each silent stretch."""
        while True:
            try:
                return lines.get(timeout=PROGRESS_EVERY_S)
            except queue.Empty:
                self.log(f"   ... still running: {self.stage_title} ({clock(time.monotonic() - self.stage_started)} "
                         f"in this stage, job time {clock(time.monotonic() - self.started)})")

    def stop(self, signum: int, frame=None) -> None:
        """SIGINT / SIGTERM: tell the running commands once (a training checkpoints and stops)."""
        self.stop_signal = signum
        for proc in list(self._children):
            if proc.poll() is None:
                proc.send_signal(signum)

    # ---------------------------------------------------------- the stages in order
    def run_stages(self) -> None:
        done = self.record["stages"]
        for k, stage in enumerate(self.stages, start=1):
            if stage.name in done:
                continue
            self.stage_number, self.stage_title, self.stage_started = k, stage.title(self), time.monotonic()
            self.log(f"== stage {k} of {len(self.stages)}: {self.stage_title} (expected {stage.expected(self)}; job "
                     f"time {clock(self.stage_started - self.started)}) ==")
            for name in stage.outputs:  # what an earlier attempt left half-written
                remove_path(self.run / name)
            stage.run(self)
            done[stage.name] = {"wall_s": round(time.monotonic() - self.stage_started, 1),
                                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            self.save_record()

    @property
    def wall_s(self) -> float:
        """The stages' wall time in all (each stage's last attempt)."""
        return sum(s["wall_s"] for s in self.record["stages"].values())


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

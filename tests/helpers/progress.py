"""A pytest plugin: a progress line every ``--progress-every`` seconds (default 20; 0: never)
for the whole run, so that a run whose output goes to a file (a CI log) shows where it is:

    [tests 4:20] 123/432 done, 0 failed, running tests/test_train.py::test_resume (95 s)

The line goes to a duplicate of the real standard output taken in ``pytest_configure`` (when
pytest's own capture is suspended, as its faulthandler plugin does), so it passes by the
capture of a running test: capsys and capfd never see it. A run shorter than the interval
prints nothing. The thread that writes it stops when the session finishes, before pytest's
summary; nothing is written after that. Under pytest-xdist the controller writes it (the workers
report each test's start and end to it) and names every test running, each with its time:

    [tests 4:20] 123/432 done, 0 failed, running tests/test_a.py::test_x (95 s), tests/test_b.py::test_y (3 s)

tests/conftest.py loads it; elsewhere: ``pytest -p tests.helpers.progress``. It has to be
loaded before pytest configures its plugins (from the command line or an initial conftest.py,
as here): a conftest found later is configured while a test's output is captured.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

THREAD_NAME = "robot-rl-progress"
DEFAULT_EVERY_S = 20.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--progress-every", type=float, default=DEFAULT_EVERY_S, metavar="SECONDS",
                     help=f"write a progress line to the real standard output every SECONDS during the run "
                          f"(default {DEFAULT_EVERY_S:g}; 0: never)")


def pytest_configure(config: pytest.Config) -> None:
    every = config.getoption("progress_every")
    if not every or every <= 0 or hasattr(config, "workerinput"):  # an xdist worker: its controller writes it
        return
    try:
        fd = os.dup(1)  # pytest's capture is suspended while plugins are configured: this is the real one
    except OSError:  # no standard output at all
        return
    config.pluginmanager.register(Progress(every, fd), "robot-rl-progress")


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts tests as pytest reports them; a daemon thread writes the line."""

    def __init__(self, every_s: float, fd: int):
        self.every_s, self.fd = every_s, fd
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.started = time.monotonic()
        self.total: int | None = None  # None while collecting
        self.done = 0
        self.failed: set[str] = set()
        self.running: dict[str, float] = {}  # nodeid -> since, in the order they started
        self.thread = threading.Thread(target=self._beat, name=THREAD_NAME, daemon=True)

    # ------------------------------------------------------------------ pytest hooks
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.monotonic()
        self.thread.start()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        with self.lock:
            self.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list) -> None:
        """Under pytest-xdist the controller collects nothing itself: a worker's collection is the run's."""
        with self.lock:
            self.total = len(ids)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            with self.lock:
                self.failed.add(report.nodeid)
                if report.when not in ("setup", "call", "teardown"):  # an xdist worker crashed in it: no logfinish
                    self.done += self.running.pop(report.nodeid, None) is not None

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        with self.lock:
            self.done += 1
            self.running.pop(nodeid, None)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.stop()  # before the terminal reporter's summary (it prints after every plain sessionfinish)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.stop()
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    # ------------------------------------------------------------------------ the line
    def line(self) -> str:
        now = time.monotonic()
        with self.lock:
            head = f"[tests {clock_text(now - self.started)}]"
            if self.total is None:
                return f"{head} collecting"
            text = f"{head} {self.done}/{self.total} done, {len(self.failed)} failed"
            if self.running:
                text += ", running " + ", ".join(f"{nodeid} ({int(now - since)} s)"
                                                 for nodeid, since in self.running.items())
            return text

    def _beat(self) -> None:
        after_last = None  # the file's offset after our last line (a file; None for a pipe or a terminal)
        while not self.stopped.wait(self.every_s):
            text = self.line() + "\n"
            with self.lock:
                if self.stopped.is_set() or self.fd < 0:
                    return
                try:
                    if after_last is None or _offset(self.fd) != after_last:
                        text = "\n" + text  # on a line of its own, not glued to a line of dots
                    os.write(self.fd, text.encode("utf-8", "replace"))
                except OSError:  # standard output closed or full: progress is not worth failing the run
                    return
                after_last = _offset(self.fd)

    def stop(self) -> None:
        with self.lock:  # after this, no line is written (the thread checks under the same lock)
            self.stopped.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(10)


def _offset(fd: int) -> int | None:
    try:
        return os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:  # a pipe or a terminal
        return None

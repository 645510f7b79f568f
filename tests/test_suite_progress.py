"""The test run's progress line (tests/helpers/progress.py): a pytest run whose output goes to a
file shows, every --progress-every seconds, how far it is and which test is running, without
touching what the tests themselves capture, and writes nothing once the session has finished."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The inner run's tests. The last one waits, with a bounded number of checks, until the
# progress line naming it has reached the log file; the log is what a CI log would be.
INNER_TESTS = '''
import pathlib
import time

LOG = pathlib.Path(__file__).with_name("log.txt")  # the inner run's output


def wait_for_line(text):
    for _ in range(3000):  # a failsafe only: at --progress-every 0.2 the line comes within a second
        if text in LOG.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"no progress line with {text!r} in the log")


def test_passes():
    pass


def test_fails():
    assert False


def test_waits_for_its_progress_line(capfd):
    print("what the test printed")
    wait_for_line("running test_inner.py::test_waits_for_its_progress_line")
    assert capfd.readouterr().out == "what the test printed\\n"  # the progress line went past the capture
'''

# After the session has finished (the summary is being written), the progress thread is gone.
INNER_CONFTEST = '''
import pathlib
import threading


def pytest_terminal_summary(config):
    alive = [t.name for t in threading.enumerate() if t.name == "robot-rl-progress"]
    pathlib.Path("threads-at-summary.txt").write_text(repr(alive))
'''


def run_inner(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess, str]:
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the inner run's own rootdir, not the repository's
    log = tmp_path / "log.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        result = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.helpers.progress", "-p", "no:cacheprovider",
                                 "-q", f"--basetemp={tmp_path / 'basetemp'}", *options, "test_inner.py"],
                                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    return result, log.read_text()


def test_a_run_logged_to_a_file_shows_its_progress_and_stops_at_its_end(tmp_path):
    result, log = run_inner(tmp_path, "--progress-every", "0.2")
    assert result.returncode == 1, log  # one test fails
    lines = log.splitlines()
    progress = [line for line in lines if line.startswith("[tests ")]
    assert progress, log
    # while the last test waits: how many are done and failed, which one runs and for how long
    mine = [line for line in progress if "running test_inner.py::test_waits_for_its_progress_line (" in line]
    assert mine and all(" 2/3 done, 1 failed, running " in line for line in mine), progress
    assert re.fullmatch(r"\[tests \d+:\d\d\] 2/3 done, 1 failed, running \S+ \(\d+ s\)", mine[0]), mine[0]
    assert not any("[tests " in line[1:] for line in lines)  # on a line of its own, never glued to pytest's dots
    # the summary comes after the last progress line, and the thread had stopped before it
    summary = next(i for i, line in enumerate(lines) if "1 failed, 2 passed" in line)
    assert all(not line.startswith("[tests ") for line in lines[summary:]), log
    assert (tmp_path / "threads-at-summary.txt").read_text() == "[]"


def test_a_run_shorter_than_the_interval_prints_no_progress_and_0_turns_it_off(tmp_path):
    for every in ("3600", "0"):
        result, log = run_inner(tmp_path, "--progress-every", every, "-k", "not waits")
        assert result.returncode == 1 and "1 failed, 1 passed" in log, log
        assert "[tests " not in log
        assert (tmp_path / "threads-at-summary.txt").read_text() == "[]"


def test_the_suite_has_the_progress_line(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("tests.helpers.progress")  # tests/conftest.py loads it


@pytest.mark.integration  # pytest-xdist's workers take seconds to start
def test_a_parallel_run_shows_its_progress_from_the_controller(tmp_path):
    """Under pytest-xdist (scripts/test.sh: 2 workers) the controller writes the line: the workers
    report each test's start and end to it, the total comes from their collection."""
    result, log = run_inner(tmp_path, "--progress-every", "0.2", "-n", "2")
    assert result.returncode == 1 and "1 failed, 2 passed" in log, log
    progress = [line for line in log.splitlines() if line.startswith("[tests ")]
    test = r"test_inner\.py::\w+ \(\d+ s\)"  # each test running, on either worker, with its time
    assert all(re.fullmatch(rf"\[tests \d+:\d\d\] (collecting|[0-3]/3 done, [01] failed(, running {test}(, {test})*)?)",
                            line) for line in progress), progress
    assert any("running test_inner.py::test_waits_for_its_progress_line (" in line for line in progress), log
    assert (tmp_path / "threads-at-summary.txt").read_text() == "[]"


def test_the_longest_tests_run_first_and_each_named_exists(request):
    """tests/conftest.py's LONGEST_FIRST: each test it names is there, and a run collects them
    first, longest first."""
    conftest = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))
    for nodeid in conftest.LONGEST_FIRST:
        path, name = nodeid.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{nodeid}: no such test (tests/conftest.py names it)"
    names = [item.nodeid.split("[", 1)[0] for item in request.session.items]
    longest = [name for name in names if name in conftest.LONGEST_FIRST]
    assert names[:len(longest)] == sorted(longest, key=lambda name: -conftest.LONGEST_FIRST[name])

"""The test run leaves nothing outside pytest's temporary folder (tests/conftest.py): temporary
files and ROS 2's logs go there, and a run that leaves files in the repository or a robot_rl
temporary folder behind ends with an error that names them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import ros
from tests.helpers.ros import free_domain_id

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]

INNER_TESTS = '''
import os
import pathlib
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_tidy():
    with tempfile.TemporaryDirectory(prefix="robot-rl-launch-"):
        pass


def test_untidy():
    tempfile.mkdtemp(prefix="robot-rl-launch-")
    (REPO / "runs").mkdir()
    (REPO / "runs" / "metrics.json").write_text("{}")
    (REPO / "demos.zarr").mkdir()
    (REPO / "demos.zarr" / "zarr.json").write_text("{}")
'''


def test_temporary_files_and_ros_logs_are_in_pytests_folder(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    assert Path(tempfile.gettempdir()).is_relative_to(base)
    for name in ("TMPDIR", "ROS_HOME", "ROS_LOG_DIR"):  # what the session fixture sets for every subprocess
        assert Path(os.environ[name]).is_relative_to(base), name
    assert len(os.path.join(tempfile.gettempdir(), ".org.chromium.Chromium.XXXXXX", "SingletonSocket")) < 108
    for name, value in {"ROS_DOMAIN_ID": str(free_domain_id())}.items():  # a node started without its own: ours
        assert os.environ[name] == value, name


def test_each_xdist_worker_of_a_run_has_its_own_ros_domain(monkeypatch):
    """tests/helpers/ros.py: two workers running ROS tests at once never share a domain, whatever
    the run's id; without workers, the process id picks one. Always in 100..199."""
    monkeypatch.setattr(ros, "XDIST_WORKER", None)
    assert free_domain_id() == 100 + os.getpid() % 100
    for count in (2, 3, 8):
        for run in range(50):
            domains = set()
            for worker in range(count):
                monkeypatch.setattr(ros, "XDIST_WORKER", (worker, count, f"{run:032x}"))
                domains.add(free_domain_id())
            assert len(domains) == count and all(100 <= d <= 199 for d in domains), (count, run, domains)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_run_that_leaves_files_behind_ends_with_an_error_naming_them(tmp_path):
    repo = tmp_path / "repo"  # a repository with the suite's conftest.py, as this one
    (repo / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "conftest.py", repo / "tests" / "conftest.py")
    (repo / "tests" / "test_inner.py").write_text(INNER_TESTS)
    (repo / ".gitignore").write_text("runs/\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # tests.helpers.progress, which the conftest loads
    env.pop("ROBOT_RL_TEST_ARTIFACTS", None)

    def inner(*args: str) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               f"--basetemp={tmp_path / 'basetemp'}", *args, "tests"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr

    # in one process, and on two pytest-xdist workers as scripts/test.sh runs it (the controller
    # checks the repository, each worker its own temporary folder)
    for parallel in ([], ["-n", "2"]):
        code, out = inner(*parallel, "-k", "tidy and not untidy")
        assert code == 0 and "1 passed" in out and "left files behind" not in out, out
        code, out = inner(*parallel)
        assert code == 1 and "2 passed, 1 error" in out, out
        assert "the test run left files behind" in out
        assert "new files in the repository" in out and "demos.zarr/" in out and "runs/" in out
        assert "temporary folders that robot_rl did not remove" in out and "robot-rl-launch-" in out
        shutil.rmtree(repo / "runs")
        shutil.rmtree(repo / "demos.zarr")

import os
import subprocess
import tempfile
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

# a progress line every 20 s on the real standard output (--progress-every SECONDS; 0: never)
pytest_plugins = ["tests.helpers.progress"]

ROOT = Path(__file__).resolve().parents[1]
# what robot_rl names its temporary folders: robot-rl-launch-*, robot-rl-faults-*, bench-*, robot_rl-layers-*
OUR_TEMP_PREFIXES = ("robot-rl-", "robot_rl-", "bench-")
# in the repository, made by Python and pytest themselves, never by a test
REPO_NOISE = ("__pycache__", ".pytest_cache", ".venv")


def _repo_untracked() -> set[str] | None:
    """Untracked and ignored paths of the repository (git's short form), or None without git."""
    try:
        out = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--ignored", "-z"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    paths = {entry[3:] for entry in out.stdout.split("\0") if entry[:3] in ("?? ", "!! ")}
    kept = os.environ.get("ROBOT_RL_TEST_ARTIFACTS")  # what the tests are asked to keep, maybe in the repository
    kept_path = Path(kept).resolve() if kept else None
    return {p for p in paths
            if not any(part in REPO_NOISE or part.endswith(".egg-info") or part.startswith(".venv-")
                       for part in Path(p).parts)
            and not (kept_path and _nested((ROOT / p).resolve(), kept_path))}


def _nested(a: Path, b: Path) -> bool:
    return a.is_relative_to(b) or b.is_relative_to(a)


def _ours(folder: Path) -> set[str]:
    try:
        return {p.name for p in folder.iterdir() if p.name.startswith(OUR_TEMP_PREFIXES)}
    except OSError:
        return set()


@pytest.fixture(scope="session", autouse=True)
def files_stay_in_pytests_temporary_folder(tmp_path_factory, request):
    """The whole run's temporary files go to one folder under pytest's basetemp: TMPDIR (which
    every subprocess inherits) and ``tempfile.tempdir`` point there, and so do ROS 2's logs
    (ROS_HOME, ROS_LOG_DIR; by default ~/.ros/log). At the end, the run fails with an error if
    it left files behind: new untracked or ignored files in the repository, or one of robot_rl's
    temporary folders (a launcher's ``robot-rl-launch-*``, a bench's ``bench-*``, ...) that its
    maker did not remove (only when no test failed: a failed test may have killed its maker).
    Such a folder appearing in the real temporary folder is a warning: another robot-rl on
    this machine may have made it."""
    real_temp = Path(tempfile.gettempdir())
    folder = tmp_path_factory.mktemp("tmp", numbered=False)  # <basetemp>/tmp: short, for unix socket paths
    variables = {"TMPDIR": str(folder), "ROS_HOME": str(folder / "ros"), "ROS_LOG_DIR": str(folder / "ros" / "log")}
    saved_env = {name: os.environ.get(name) for name in variables}
    saved_tempdir = tempfile.tempdir
    temp_before, repo_before = _ours(real_temp), _repo_untracked()
    os.environ.update(variables)
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = saved_tempdir
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    problems = []
    repo_after = _repo_untracked()
    if repo_before is not None and repo_after is not None and repo_after - repo_before:
        problems.append(f"new files in the repository {ROOT}: {', '.join(sorted(repo_after - repo_before))}")
    left = _ours(folder)
    if left and not request.session.testsfailed:  # a failed test may have killed a launcher: no surprise then
        problems.append(f"temporary folders that robot_rl did not remove, in {folder}: {', '.join(sorted(left))}")
    appeared = _ours(real_temp) - temp_before
    if appeared:  # from this run despite TMPDIR, or from another robot-rl on this machine: cannot tell which
        warnings.warn(f"appeared in {real_temp} during the test run: {', '.join(sorted(appeared))} (from a "
                      "subprocess started without TMPDIR, or from another robot-rl running on this machine)")
    if problems:
        pytest.fail("the test run left files behind:\n  " + "\n  ".join(problems), pytrace=False)

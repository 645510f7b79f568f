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
# The longest tests, with their seconds in full runs alone on a 2-core AMD EPYC (AVX2; 2026-11-29:
# the fourteen slowest from `.ci/run` of 6b1a8dc, the rest from the run before it; a Xeon takes
# about 0.6x): they run first, longest first,
# so that under pytest-xdist (scripts/test.sh runs 2 workers, `--dist load --maxschedchunk 1`: one
# test at a time to whichever worker is free) no worker ends the run alone on one of them. A test
# not named here keeps its place; one renamed or removed here only loses its head start
# (tests/test_suite_progress.py checks that each one named exists).
LONGEST_FIRST = {
    "tests/test_frozen.py::test_pixels_through_a_frozen_encoder_learn_past_a_weak_clone_and_keep_a_strong_one": 468,
    "tests/test_train.py::test_rl_lifts_a_hard_task_well_past_its_clone": 405,
    "tests/test_base_policy_train.py::test_the_residual_lifts_a_weak_scripted_base": 332,
    "tests/test_bench.py::test_ros_bench_quick_gives_every_figure": 209,
    "tests/test_foreign_env.py::test_learns_a_foreign_env_in_a_worker": 207,
    "tests/test_bench.py::test_faults_bench_kills_and_corrupts_without_losing_anything": 191,
    "tests/test_main_job.py::test_a_main_job_stopped_in_its_first_round_goes_on_from_there": 170,
    "tests/test_bench.py::test_hil_bench_quick_gives_every_figure": 125,
    "tests/test_bench.py::test_classifier_bench_quick_gives_every_figure": 90,
    "tests/test_ros_stack.py::test_sim_stack_trains_and_survives_a_learner_restart": 59,
    "tests/test_train.py::test_one_seed_gives_one_run_whatever_the_learner_timing": 55,
    "tests/test_so101_stack.py::test_the_so101_sim_stack_runs_the_expert_over_the_simulated_bus": 51,
    "tests/test_ros_stack.py::test_two_robots_feed_one_learner": 46,
    "tests/test_so101_stack.py::test_the_so101_sim_stack_grades_a_checkpoint_alone": 45,
    "tests/test_launch.py::test_robot_rl_launch_runs_the_sim_stack": 45,
    "tests/test_franka.py::test_the_franka_sim_stack_runs_three_episodes_end_to_end": 38,
    "tests/test_foreign_env.py::test_train_record_and_eval_on_a_foreign_env_in_a_worker": 36,
    "tests/test_console_browser.py::test_console_in_a_browser_drives_the_sim_stack_and_every_button_lands": 33,
    "tests/test_data.py::test_sigkill_at_chosen_writes_never_loses_a_completed_episode": 26,
}
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


def _worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (the controller and a plain run are not)."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker tells tests/helpers/ros.py which worker of the run it is (its ROS 2
    domain). With two or more workers, each (and each process it starts) computes on one OpenMP
    thread (torch, NumPy's BLAS) unless OMP_NUM_THREADS says otherwise: N workers of 2 threads each
    on N cores fight over them (a torch-heavy unit test took 64 s instead of 5)."""
    if _worker(config):
        from tests.helpers import ros

        worker = config.workerinput
        count = int(worker["workercount"])
        ros.XDIST_WORKER = (int(worker["workerid"].removeprefix("gw")), count, worker["testrunuid"])
        if count > 1:  # before any test module imports torch or NumPy
            os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """LONGEST_FIRST's tests to the front, longest first; the others keep their order (a stable
    sort: every xdist worker collects the same order, as xdist requires)."""
    items.sort(key=lambda item: -LONGEST_FIRST.get(item.nodeid.split("[", 1)[0], 0))


REPO_BEFORE = pytest.StashKey[set]()
REPO_PROBLEM = pytest.StashKey[str]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """The repository's untracked and ignored files before the run, in the process that sees
    the whole run: a plain run's, or pytest-xdist's controller (never a worker, which cannot tell
    its own new files from another worker's)."""
    if not _worker(session.config):
        before = _repo_untracked()
        if before is not None:
            session.config.stash[REPO_BEFORE] = before


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """New untracked or ignored files in the repository after the run fail it (the summary says
    which: pytest_terminal_summary)."""
    config = session.config
    if _worker(config) or REPO_BEFORE not in config.stash:
        return
    after = _repo_untracked()
    new = after - config.stash[REPO_BEFORE] if after is not None else set()
    if new:
        config.stash[REPO_PROBLEM] = f"new files in the repository {ROOT}: {', '.join(sorted(new))}"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if REPO_PROBLEM in config.stash:
        terminalreporter.section("files left behind", sep="=", red=True, bold=True)
        terminalreporter.line(f"the test run left files behind:\n  {config.stash[REPO_PROBLEM]}", red=True)


@pytest.fixture(scope="session", autouse=True)
def files_stay_in_pytests_temporary_folder(tmp_path_factory, request):
    """The whole run's temporary files go to one folder under pytest's basetemp (each pytest-xdist
    worker's own): TMPDIR (which every subprocess inherits) and ``tempfile.tempdir`` point there,
    and so do ROS 2's logs (ROS_HOME, ROS_LOG_DIR; by default ~/.ros/log). ROS_DOMAIN_ID is this
    process's private domain (tests/helpers/ros.py), for any node started without its own. At the
    end, the run fails with an error if it left one of robot_rl's temporary folders behind (a
    launcher's ``robot-rl-launch-*``, a bench's ``bench-*``, ...) that its maker did not remove
    (only when no test of this process failed: a failed test may have killed its maker); new
    files in the repository fail it too (pytest_sessionfinish). Such a folder appearing in the
    real temporary folder is a warning: another robot-rl on this machine may have made it."""
    from tests.helpers.ros import free_domain_id

    real_temp = Path(tempfile.gettempdir())
    folder = tmp_path_factory.mktemp("tmp", numbered=False)  # <basetemp>/tmp: short, for unix socket paths
    variables = {"TMPDIR": str(folder), "ROS_HOME": str(folder / "ros"), "ROS_LOG_DIR": str(folder / "ros" / "log"),
                 "ROS_DOMAIN_ID": str(free_domain_id())}
    saved_env = {name: os.environ.get(name) for name in variables}
    saved_tempdir = tempfile.tempdir
    temp_before = _ours(real_temp)
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
    appeared = _ours(real_temp) - temp_before
    if appeared:  # from this run despite TMPDIR, or from another robot-rl on this machine: cannot tell which
        warnings.warn(f"appeared in {real_temp} during the test run: {', '.join(sorted(appeared))} (from a "
                      "subprocess started without TMPDIR, or from another robot-rl running on this machine)")
    left = _ours(folder)
    if left and not request.session.testsfailed:  # a failed test may have killed a launcher: no surprise then
        pytest.fail(f"the test run left files behind:\n  temporary folders that robot_rl did not remove, in {folder}: "
                    f"{', '.join(sorted(left))}", pytrace=False)


@pytest.fixture(scope="module")
def franky_sim_turn(tmp_path_factory):
    """A module's turn with franky-sim (``franky_sim_lock``): held while its servers run."""
    from tests.helpers.common import franky_sim_lock

    with franky_sim_lock(tmp_path_factory):
        yield

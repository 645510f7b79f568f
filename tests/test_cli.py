import csv
import json
import os
import subprocess
import sys

import imageio.v3 as iio
import pytest

from robot_rl.commands.cli import main


def test_sim_run_writes_run_folder_with_what_the_expert_did(tmp_path, capsys):
    assert main(["sim", "run", "--task", "PickCube", "--episodes", "4", "--noise", "0.5", "--image-size", "32",
                 "--out", str(tmp_path)]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    (row,) = summary["results"]
    # the same expert on the same episodes, played here: the summary reports what it did
    from robot_rl.sim import make
    from robot_rl.sim.experts import make_expert, run_episode

    env, expert = make("PickCube"), make_expert("PickCube", noise=0.5, seed=0)
    played = [run_episode(env, expert, seed=i) for i in range(4)]
    env.close()
    successes = [r["success"] for r in played]
    assert any(successes) and not all(successes), "noise 0.5 should give both outcomes on these seeds"
    assert row["task"] == "PickCube" and row["episodes"] == 4
    assert row["success_rate"] == sum(successes) / 4
    assert row["mean_steps"] == sum(r["steps"] for r in played) / 4
    with open(run_dir / "success.csv", newline="") as f:
        (csv_row,) = list(csv.DictReader(f))
    assert csv_row == {k: str(v) for k, v in row.items()}
    frames = iio.imread(run_dir / "PickCube_mujoco.gif", index=None)
    assert frames.shape[1:] == (32, 64, 3) and len(frames) > 5


def test_unknown_task_is_a_clean_error(capsys):
    assert main(["sim", "run", "--task", "Juggle"]) == 2
    assert "available tasks: PegInsert, PegInsertHard, PickCube, PickCubeHard, PickCubeSO101, PushCube" in capsys.readouterr().err


def test_unknown_backend_and_benchmark(capsys):
    assert main(["sim", "run", "--backend", "gazebo"]) == 2
    assert "available backends" in capsys.readouterr().err
    assert main(["bench", "nope"]) == 2
    assert "available: base, classifier, console, data, faults, hil, learner, learning, ros, sim" in capsys.readouterr().err


@pytest.mark.parametrize("bug", [KeyError("state"), ValueError("operands could not be broadcast"),
                                 TypeError("'NoneType' object is not subscriptable")])
def test_a_bug_in_a_command_shows_its_traceback_not_a_user_error_line(monkeypatch, capsys, bug):
    """Only the project's own errors (and a path that is not there) are one line and exit 2: a
    KeyError or ValueError that no check of ours raised is a bug, and propagates with its traceback."""
    from robot_rl.commands import cli

    def broken(args):
        raise bug

    monkeypatch.setattr(cli, "_cmd_sim_tasks", broken)
    with pytest.raises(type(bug)):
        main(["sim", "tasks"])
    assert "robot-rl: error" not in capsys.readouterr().err


def test_our_input_errors_are_one_line_and_exit_2(monkeypatch, capsys):
    from robot_rl.commands import cli
    from robot_rl.errors import InputError, MissingFileError

    for error in (InputError("--episodes must be at least 1"), MissingFileError("demo store x.zarr: no such path")):
        monkeypatch.setattr(cli, "_cmd_sim_tasks", lambda args, error=error: (_ for _ in ()).throw(error))
        assert main(["sim", "tasks"]) == 2
        assert capsys.readouterr().err == f"robot-rl: error: {error}\n"


def test_bench_help_lists_every_benchmark_with_what_it_measures(capsys):
    from robot_rl.bench import BENCHMARKS

    with pytest.raises(SystemExit) as done:
        main(["bench", "--help"])
    assert done.value.code == 0
    lines = [line.split(None, 1) for line in capsys.readouterr().out.splitlines()]
    for name, entry in BENCHMARKS.items():
        assert entry.summary and "\n" not in entry.summary, name
        assert [name, entry.summary] in lines, f"bench --help has no line '{name}  {entry.summary}'"


def assert_every_task_described_in_full(out: str, columns: int) -> None:
    from robot_rl.sim import TASKS

    flat = " ".join(out.split())
    for name, cls in TASKS.items():
        description = " ".join((cls.__doc__ or "").split())  # the whole docstring, whitespace-normalised
        assert description and cls.description() == description, name
        assert f"{name} {description}" in flat, f"sim tasks cuts {name}'s description:\n{out}"
    assert all(len(line) <= columns for line in out.splitlines()), f"wider than {columns} columns:\n{out}"


def test_sim_tasks_wraps_every_description_in_full_at_any_width(monkeypatch, capsys):
    for columns in (40, 80, 300):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert main(["sim", "tasks"]) == 0
        assert_every_task_described_in_full(capsys.readouterr().out, columns)


def test_console_script_lists_tasks():
    exe = os.path.join(os.path.dirname(sys.executable), "robot-rl")
    env = {**os.environ, "COLUMNS": "60"}  # a pipe, not a terminal, and narrow
    out = subprocess.run([exe, "sim", "tasks"], capture_output=True, text=True, timeout=120, check=True, env=env)
    assert_every_task_described_in_full(out.stdout, 60)
    assert "backends: mujoco, pybullet" in out.stdout


def test_train_help_prints_every_fields_help_as_written(capsys):
    """argparse formats help text with %: a field whose help says '90 %' must print as written,
    not argparse's internals (and not fail)."""
    import dataclasses

    from robot_rl.config import TrainConfig

    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "option_strings" not in out
    with_percent = [f for f in dataclasses.fields(TrainConfig) if "%" in f.metadata.get("help", "")]
    assert with_percent, "no TrainConfig help holds a '%' any more: this test checks nothing"
    for f in with_percent:
        assert " ".join(f.metadata["help"].split()) in out, f.name


def test_importing_robot_rl_shortens_torch_s_thread_spin_unless_told():
    """Spinning OpenMP threads stall each other when another process holds a core (the classifier's
    training 6x slower beside other jobs): robot_rl sets a short spin before torch loads, and a
    user's own choice stands."""
    probe = "import os, robot_rl, torch; print(os.environ['GOMP_SPINCOUNT'])"
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "10000"
    env["GOMP_SPINCOUNT"] = "300000"
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "300000"

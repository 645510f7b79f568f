import json
import os
import subprocess
import sys

import imageio.v3 as iio

from robot_rl.commands.cli import main


def test_sim_run_writes_run_folder(tmp_path, capsys):
    assert main(["sim", "run", "--task", "PickCube", "--episodes", "2", "--image-size", "32", "--out", str(tmp_path)]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    (row,) = summary["results"]
    assert row["task"] == "PickCube" and row["episodes"] == 2 and 0 <= row["success_rate"] <= 1
    frames = iio.imread(run_dir / "PickCube_mujoco.gif", index=None)
    assert frames.shape[1:] == (32, 64, 3) and len(frames) > 5
    assert (run_dir / "success.csv").read_text().startswith("backend,task")


def test_unknown_task_is_a_clean_error(capsys):
    assert main(["sim", "run", "--task", "Juggle"]) == 2
    assert "available tasks: PegInsert, PickCube" in capsys.readouterr().err


def test_unknown_backend_and_benchmark(capsys):
    assert main(["sim", "run", "--backend", "gazebo"]) == 2
    assert "available backends" in capsys.readouterr().err
    assert main(["bench", "nope"]) == 2
    assert "available: classifier, data, faults, hil, learner, learning, ros, sim" in capsys.readouterr().err


def test_console_script_lists_tasks():
    exe = os.path.join(os.path.dirname(sys.executable), "robot-rl")
    out = subprocess.run([exe, "sim", "tasks"], capture_output=True, text=True, timeout=120, check=True)
    assert "PickCube" in out.stdout and "PegInsert" in out.stdout

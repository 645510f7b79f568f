"""Bad input is one line on stderr and exit status 2, before any work: the main job's variables
(checked before its set-up), `robot-rl train` and `robot-rl session` options, a simulated human
on a task without a scripted expert, a reward classifier that does not fit the run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_main_sh(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    """scripts/main.sh (and the progress.sh it sources) copied into a folder of their own, so that
    a value that got past the checks fails at once (no setup.sh there) instead of starting the job."""
    scripts = tmp_path / "clone" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("main.sh", "progress.sh"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": os.environ.get("TMPDIR", str(tmp_path)),
           **variables}
    return subprocess.run(["bash", str(scripts / "main.sh")], env=env, capture_output=True, text=True, timeout=60)


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1, f"not one line: {text!r}"
    return text


@pytest.mark.parametrize("variables, says", [
    ({"HUMAN": "x"}, "HUMAN=x must be a number in [0, 1]"),
    ({"HUMAN": "2"}, "HUMAN=2 must be a number in [0, 1]"),
    ({"HUMAN": "-0.5"}, "HUMAN=-0.5 must be a number in [0, 1]"),
    ({"TASK": "Unknown"}, "TASK=Unknown is not a sim task; the sim tasks: PickCube PegInsert PegInsertHard PushCube"),
    ({"OBS": "rgb"}, "OBS=rgb must be pixels or state"),
    ({"STEPS": "0"}, "STEPS=0 must be a whole number >= 1"),
    ({"STEPS": "-5"}, "STEPS=-5 must be a whole number >= 1"),
    ({"STEPS": "1.5"}, "STEPS=1.5 must be a whole number >= 1"),
    ({"STEPS": "1"}, "STEPS=1 is too few"),
    ({"CLASSIFIER_STEPS": "many"}, "CLASSIFIER_STEPS=many must be a whole number >= 1"),
    ({"STACK": "ros", "HUMAN": "0.5"}, "the ROS 2 stack (STACK=ros) trains without a simulated human"),
    ({"STACK": "k8s"}, "STACK=k8s must be ros or unset"),
])
def test_the_main_job_refuses_a_bad_variable_in_one_line_before_its_set_up(tmp_path, variables, says):
    done = run_main_sh(tmp_path, **variables)
    assert done.returncode == 2, done
    assert done.stdout == ""  # no "== stage 1 of n: set-up" line: nothing was started
    assert one_line(done.stderr).startswith("main.sh: ") and says in done.stderr
    assert not (tmp_path / "clone" / "runs").exists()


@pytest.mark.parametrize("variables, stages", [
    ({}, 8),
    ({"TASK": "PegInsert", "HUMAN": "0", "OBS": "state", "STEPS": "2"}, 7),
    ({"HUMAN": "1"}, 8),
    ({"HUMAN": ".25", "OBS": "pixels"}, 8),
    ({"STACK": "ros"}, 6),  # no simulated human there: HUMAN defaults to 0
    ({"STACK": "ros", "HUMAN": "0.0", "STEPS": "1"}, 6),
])
def test_the_main_job_takes_good_values_on_to_its_set_up(tmp_path, variables, stages):
    done = run_main_sh(tmp_path, **variables)
    assert done.stdout.startswith(f"== stage 1 of {stages}: set-up"), done
    assert "main.sh:" not in done.stderr  # it went on, and failed only for want of setup.sh in the copy
    assert done.returncode != 0


def test_the_main_jobs_task_list_is_the_packages():
    """main.sh checks TASK before its set-up, without the package: its list and each task's classifier
    cameras, failed takes' noise, training length and whether corrections are cloned must stay the
    package's."""
    from robot_rl.sim.tasks import TASKS

    script = (ROOT / "scripts" / "main.sh").read_text()
    listed = re.search(r'^SIM_TASKS="([^"]*)"', script, re.M).group(1).split()
    cases = dict(re.findall(r'^  (\w+)\) CLASSIFIER_CAMERAS="([^"]*)"', script, re.M))  # each task's cameras
    assert sorted(listed) == sorted(cases) == sorted(TASKS)
    assert {name: tuple(cameras.split()) for name, cameras in cases.items()} == \
        {name: task.classifier_cameras for name, task in TASKS.items()}
    noises = dict(re.findall(r'^  (\w+)\) CLASSIFIER_CAMERAS=.* FAILURE_NOISE=([0-9.]+)', script, re.M))
    default = float(re.search(r"^FAILURE_NOISE=([0-9.]+)", script, re.M).group(1))
    assert {name: float(noises.get(name, default)) for name in TASKS} == \
        {name: task.failed_takes_noise for name, task in TASKS.items()}
    for variable, attribute, kind in (("TASK_STEPS", "main_job_steps", int),
                                      ("INTERVENTION_BC", "clone_corrections", lambda v: bool(int(v)))):
        given = dict(re.findall(rf'^  (\w+)\) CLASSIFIER_CAMERAS=.* {variable}=([0-9]+)', script, re.M))
        default = re.search(rf"^{variable}=([0-9]+)", script, re.M).group(1)
        assert {name: kind(given.get(name, default)) for name in TASKS} == \
            {name: getattr(task, attribute) for name, task in TASKS.items()}, variable


def test_the_main_jobs_exploration_is_the_packages():
    """main.sh passes HUMAN_IN_THE_LOOP_EXPLORATION as --agent flags: the two must stay equal."""
    from robot_rl.agents.sac import HUMAN_IN_THE_LOOP_EXPLORATION

    script = (ROOT / "scripts" / "main.sh").read_text()
    flags = re.search(r"^RECIPE=\((.*)\)$", script, re.M).group(1)
    given = dict(pair.split("=") for pair in re.findall(r"--agent (\S+)", flags))
    assert {key: float(value) for key, value in given.items()} == HUMAN_IN_THE_LOOP_EXPLORATION


@pytest.mark.parametrize("command", ["train", "session"])
def test_a_simulated_human_out_of_range_is_one_line_before_any_work(tmp_path, capsys, command):
    run = tmp_path / "run"
    assert main([command, "--simulated-human", "2", "--run-dir", str(run)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "[0, 1]" in err and "got 2.0" in err
    assert not run.exists()


@pytest.mark.parametrize("penalty", ["-1", "nan"])
def test_a_bad_takeover_penalty_is_one_line_before_any_work(tmp_path, capsys, penalty):
    run = tmp_path / "run"
    assert main(["train", "--takeover-penalty", penalty, "--run-dir", str(run)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "takeover_penalty must be a finite number >= 0" in err and f"got {float(penalty)}" in err
    assert not run.exists()


@pytest.mark.parametrize("command", ["train", "session"])
def test_a_simulated_human_on_a_task_without_a_scripted_expert_is_one_line_before_any_work(tmp_path, capsys,
                                                                                          monkeypatch, command):
    from robot_rl.sim import experts

    monkeypatch.delitem(experts.EXPERTS, "PegInsertHard")  # a (hard) sim task without a scripted expert
    run = tmp_path / "run"
    assert main([command, "--task", "PegInsertHard", "--simulated-human", "0.5", "--run-dir", str(run)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "task 'PegInsertHard' has none; the tasks with one: PegInsert, PickCube, PushCube" in err
    assert "simulated human" in err
    assert not run.exists()


def test_the_simulated_human_refuses_a_cell_task_file_without_a_scripted_expert():
    from robot_rl.sim.experts import NoExpertError
    from robot_rl.teleop.simulated_human import SimulatedHuman

    with pytest.raises(NoExpertError, match="task 'pick_cube_franka' has none; the tasks with one: PegInsert, "
                                            "PegInsertHard, PickCube, PushCube"):
        SimulatedHuman("pick_cube_franka")


@pytest.mark.ros
def test_the_teleop_node_refuses_a_simulated_human_without_a_scripted_expert_in_one_line():
    pytest.importorskip("rclpy")
    from tests.helpers.ros import free_domain_id, ros_environment

    done = subprocess.run([sys.executable, "-m", "robot_rl.teleop.teleop_node", "--ros-args", "-p", "devices:=[]",
                           "-p", "console:=false", "-p", "simulated_human:=0.5", "-p", "task:=pick_cube_franka"],
                          env=ros_environment(free_domain_id()), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "task 'pick_cube_franka' has none" in one_line(done.stderr)


def _classifier(path: Path, image_size=(48, 48), cameras=("front",), task=None) -> str:
    from robot_rl.reward.classifier import Calibration, ClassifierConfig, SuccessClassifier, save_classifier

    model = SuccessClassifier(ClassifierConfig(cameras=cameras, image_size=image_size, hidden=(32,), features=16,
                                               task=task))
    save_classifier(path, model, Calibration(threshold=0.5, target_fpr=0.01))
    return str(path)


def test_a_reward_classifier_of_another_image_size_is_one_line_before_any_work(tmp_path, capsys):
    clf, run = _classifier(tmp_path / "clf"), tmp_path / "run"
    assert main(["train", "--obs", "pixels", "--image-size", "64", "--reward-classifier", clf, "--demos", "2",
                 "--run-dir", str(run)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "was trained on 48x48 frames, the run renders 64x64: use --image-size 48 48" in err
    assert not run.exists()  # nothing recorded, no run folder


def test_a_reward_classifier_on_a_camera_the_twin_lacks_is_one_line_before_any_work(tmp_path, capsys):
    clf, run = _classifier(tmp_path / "clf", (64, 64), ("front", "top")), tmp_path / "run"
    assert main(["train", "--obs", "state", "--reward-classifier", clf, "--run-dir", str(run)]) == 2
    assert "reads camera 'top', which the twin does not render" in one_line(capsys.readouterr().err)
    assert not run.exists()


def test_a_reward_classifier_of_another_tasks_takes_is_one_line_before_any_work(tmp_path, capsys):
    """PegInsertHard's classifier reads the wrist camera alone; PushCube's success is the cube on its
    mark, which it never learned to see."""
    clf, run = _classifier(tmp_path / "clf", (64, 64), ("wrist",), task="PegInsertHard"), tmp_path / "run"
    assert main(["train", "--task", "PushCube", "--obs", "state", "--reward-classifier", clf,
                 "--run-dir", str(run)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "was trained on task PegInsertHard's takes (cameras wrist), and this run trains PushCube" in err
    assert not run.exists()


def test_a_misspelled_hard_task_is_one_line_with_the_name_it_resembles(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--task", "PegInsertHrd", "--run-dir", str(run)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "unknown task 'PegInsertHrd' (did you mean PegInsertHard?); available tasks: PegInsert, PegInsertHard" in err
    assert not run.exists()


def test_a_state_run_renders_the_classifiers_cameras_at_its_own_size(tmp_path):
    from robot_rl.agent_setup import check_reward_classifier
    from robot_rl.config import TrainConfig

    check_reward_classifier(TrainConfig(obs="state", image_size=(64, 64), reward_classifier=_classifier(tmp_path)))
    check_reward_classifier(TrainConfig(obs="pixels", image_size=(48, 48), reward_classifier=_classifier(tmp_path)))

"""Bad input is one line on stderr and exit status 2, before any work: `robot-rl train` and
`robot-rl session` options, a simulated human on a task without a scripted expert, a reward
classifier that does not fit the run (the main job's: tests/test_main_job.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from robot_rl.commands.cli import main


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1, f"not one line: {text!r}"
    return text


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
    assert "task 'PegInsertHard' has none; the tasks with one: PegInsert, PickCube, PickCubeHard, PickCubeSO101, PushCube" in err
    assert "simulated human" in err
    assert not run.exists()


def test_the_simulated_human_refuses_a_cell_task_file_without_a_scripted_expert():
    from robot_rl.sim.experts import NoExpertError
    from robot_rl.teleop.simulated_human import SimulatedHuman

    with pytest.raises(NoExpertError, match="task 'pick_cube_franka' has none; the tasks with one: PegInsert, "
                                            "PegInsertHard, PickCube, PickCubeHard, PickCubeSO101, PushCube"):
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

"""`robot-rl main` (robot_rl/commands/main_job.py) and its wrapper scripts/main.sh: the stages a
config gives, bad input and bad resumes as one line (exit 2, nothing changed), and a real main job
stopped during its first training round and resumed from there."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.commands.cli import main
from tests.helpers.common import one_line_error

ROOT = Path(__file__).resolve().parents[1]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def plan(capsys, *args: str) -> list[str]:
    assert main(["main", "--plan", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_plan_lists_each_configs_stages_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("robot_rl.commands.main_job.cpu_has_bf16", lambda: False)
    hard = plan(capsys)  # the default task: PegInsertHard, where the clone gets at most half
    assert [line.split(":")[0] for line in hard] == [f"stage {k} of 7" for k in range(1, 8)]
    assert "train round 1: PegInsertHard from pixels for 15000 env steps" in hard[3]  # of its 20,000
    assert "(SAC/RLPD, UTD 1, feature_augment_pad=0, discount=0.9, residual penalty 0)" in hard[3]  # PegInsertHard's own main-job settings
    assert "train it (2000 steps)" in hard[1] and "train it (300 steps)" in plan(capsys, "--classifier-steps", "300")[1]
    monkeypatch.setattr("robot_rl.commands.main_job.cpu_has_bf16", lambda: True)  # a CPU with bf16 units
    assert "(SAC/RLPD, UTD 1, feature_augment_pad=0, discount=0.9, autocast_bf16=true, residual penalty 0)" in plan(capsys)[3]
    assert "autocast_bf16" not in plan(capsys, "--task", "PickCube")[3]  # a task not measured in bf16
    assert "simulated human (eagerness 0.5)" in hard[3]
    assert "(behaviour cloning on the demonstrations, and their end poses)" in hard[2]  # bc_goal
    assert "cameras at 64x64" in hard[0] and "cameras at 96x96" in plan(capsys, "--image-size", "96")[0]
    assert "64x64, scenes spread over the task's variation)" in hard[0]  # PegInsertHard's demonstrations
    assert "spread" not in plan(capsys, "--demo-layouts", "seeds")[0]
    pixels = plan(capsys, "--task", "PickCube")
    assert "train round 1: PickCube from pixels for 6000 env steps" in pixels[3]
    assert "(SAC/RLPD, UTD 2, critic_actor_ratio=2)" in pixels[3]  # PickCube's own main-job setting
    assert "(behaviour cloning on the demonstrations)" in pixels[2]  # PickCube's encoder: bc
    assert "spread" not in pixels[0] and "spread" in plan(capsys, "--task", "PickCube", "--demo-layouts", "spread")[0]
    clutter = plan(capsys, "--task", "PickCubeHard")  # the second hard task: its own steps and encoder
    assert "train round 1: PickCubeHard from pixels for 15000 env steps" in clutter[3]
    assert "reward (SAC/RLPD, UTD 1, discount=0.9, autocast_bf16=true) and a simulated human" in clutter[3]  # its own
    assert "and their end poses" in clutter[2]
    assert "demonstrations and the classifier's successful takes" in clutter[2]  # more scenes of where the cube lies
    assert "and the success classifier's 40 takes" in clutter[0]  # recorded first: the encoder reads them
    assert "train the success classifier (2000 steps)" in clutter[1]
    assert "successful takes" not in hard[2]
    assert "its corrections cloned into the base" in clutter[3]  # PickCubeHard's: they widen its base
    assert "cloned" not in hard[3]  # PegInsertHard's stay in the demo buffer (cloned, they ruin its base)
    state = plan(capsys, "--task", "PegInsertHard", "--obs", "state", "--human", "0")
    assert len(state) == 6 and not any("encoder" in line for line in state)
    assert "PegInsertHard from state for 15000 env steps" in state[2]  # the task's main_job_steps: 20,000
    assert "reward (SAC/RLPD, UTD 1, feature_augment_pad=0, discount=0.9, residual penalty 0) (expected" in state[2]  # its own settings
    assert "simulated human" not in state[2]
    ros = plan(capsys, "--stack", "ros", "--steps", "300")  # through ROS the default task is PickCube
    assert len(ros) == 5 and "train through the ROS 2 stack sim_train (300 env steps" in ros[2]
    assert "sim_train (8000 env steps" in plan(capsys, "--stack", "ros")[2]  # PickCube's main_job_steps
    so101 = plan(capsys, "--task", "PickCubeSO101", "--stack", "ros", "--human", "0.5")
    assert "train through the ROS 2 stack so101_sim (10000 env steps" in so101[2]
    assert "simulated human (eagerness 0.5, its corrections cloned into the base)" in so101[2]
    assert list(tmp_path.iterdir()) == []


def recording_job(run, **settings):
    """A main job in ``run`` whose robot-rl commands are recorded (in the list returned with it),
    not run."""
    from robot_rl.commands import main_job_start
    from robot_rl.config import MainJobConfig

    run.mkdir()
    job = main_job_start.new_job(MainJobConfig(run_dir=str(run), **settings), log=lambda line: None)
    calls = []
    job.robot_rl = lambda *args, **kwargs: calls.append(args)
    return job, calls


def test_the_image_size_reaches_every_command_that_renders_or_reads_frames(tmp_path):
    """--image-size 96: the demonstrations, the classifier's takes, the training round and the
    policy's rollouts all at 96x96 (a store at one size and a policy at another would fail minutes in)."""
    from robot_rl.commands import main_job

    job, calls = recording_job(tmp_path / "job", image_size=96)
    main_job.record_demos(job)
    main_job.record_classifier_takes(job)
    main_job.train_round_1(job)
    main_job._rollouts(job, "rollouts.zarr", 1)
    assert [args[:2] for args in calls] == [("record", "--task")] * 3 + [("train", "--task"), ("record", "--task")]
    assert all(args[args.index("--image-size") + 1] == "96" for args in calls)


def test_the_encoder_reads_the_classifiers_successful_takes_where_the_task_says(tmp_path):
    """PickCubeHard's encoder learns where the cube lies from the demonstrations and the
    classifier's successful takes (recorded before it, in stage 1); PegInsertHard's from the
    demonstrations alone."""
    from robot_rl.commands import main_job

    for task, takes in (("PickCubeHard", True), ("PegInsertHard", False)):
        job, calls = recording_job(tmp_path / task, task=task)
        main_job.record_demos_and_takes(job)  # the takes in stage 1 where the encoder reads them
        assert [args[args.index("--out") + 1] for args in calls] == [job.path("demos.zarr")] + [
            job.path(name) for name in main_job.TAKES] * takes
        outputs = {stage.name: stage.outputs for stage in job.stages}
        assert ("classifier_successes.zarr" in outputs["record"]) == takes
        assert ("classifier_successes.zarr" in outputs["classifier"]) != takes
        calls.clear()
        main_job.pretrain_image_encoder(job)
        (args,) = calls
        data = [args[i + 1] for i, word in enumerate(args) if word == "--data"]
        assert data == [job.path("demos.zarr")] + [job.path("classifier_successes.zarr")] * takes


def test_the_tasks_own_settings_reach_round_1_and_the_users_extra_arguments_win(tmp_path):
    """PegInsertHard trains at the discount 0.9 (its own main-job setting); a lab's `--agent
    discount=0.97` after `--` comes later on the command line, so `robot-rl train` takes that."""
    from robot_rl.commands import main_job
    from robot_rl.config_values import parse_key_values

    def round_1_agent(train_args: tuple[str, ...]) -> dict:
        job, calls = recording_job(tmp_path / f"job{len(train_args)}", train_args=train_args)
        main_job.train_round_1(job)
        (args,) = calls
        return parse_key_values([args[i + 1] for i, word in enumerate(args) if word == "--agent"], "--agent")

    assert round_1_agent(())["discount"] == 0.9
    assert round_1_agent(("--agent", "discount=0.97"))["discount"] == 0.97


def test_the_tasks_residual_penalty_reaches_round_1_and_the_users_wins(tmp_path):
    """PegInsertHard trains without the pull toward its cloned base (`--residual-penalty 0`, its own
    main-job option); PickCube keeps train's default; a lab's `-- --residual-penalty 0.1` is parsed
    last by `robot-rl train`, so it wins."""
    import argparse

    from robot_rl.commands import main_job
    from robot_rl.config import TrainConfig
    from robot_rl.config_cli import add_config_options, config_overrides

    parser = argparse.ArgumentParser()
    add_config_options(parser, TrainConfig)

    def round_1_penalty(name: str, **settings) -> float | None:
        job, calls = recording_job(tmp_path / name, **settings)
        main_job.train_round_1(job)
        (args,) = calls
        return config_overrides(parser.parse_args(list(args[1:])), TrainConfig).get("residual_penalty")

    assert round_1_penalty("hard") == 0.0
    assert round_1_penalty("lab", train_args=("--residual-penalty", "0.1")) == 0.1
    assert round_1_penalty("pick", task="PickCube") is None  # train's default, 0.1


@pytest.mark.parametrize("args, says", [
    (["--human", "2"], "--human 2.0 must be a number in [0, 1]"),
    (["--human", "-0.5"], "--human -0.5 must be a number in [0, 1]"),
    (["--task", "Unknown"], "unknown task 'Unknown'; available tasks: PegInsert, PegInsertHard, PickCube, PickCubeHard, PickCubeSO101, PushCube"),
    (["--steps", "1"], "--steps 1 is too few: round 1 trains 3/4 of them"),
    (["--steps", "0"], "--steps 0 is too few"),
    (["--classifier-steps", "0"], "--classifier-steps must be a whole number >= 1, got 0"),
    (["--demos", "-3"], "--demos must be a whole number >= 1, got -3"),
    (["--eval-every", "0"], "--eval-every must be a whole number >= 1, got 0"),
    (["--image-size", "8"], "--image-size must be a whole number of pixels in [32, 256], got 8"),
    (["--stack", "ros", "--image-size", "96"], "--image-size 96: the ROS 2 stack's cameras (--stack ros) give 64x64"),
    (["--stack", "ros", "--human", "0.5"], "--human 0.5: the ROS 2 stack of PickCube (sim_train) trains without a "
                                           "simulated human"),
    (["--stack", "ros", "--obs", "pixels"], "--obs pixels: the ROS 2 stack (--stack ros) trains the state policy"),
    (["--stack", "ros", "--", "--seed", "1"], "with --stack ros the extra arguments go to the sim_train stack: stack "
                                              "arguments are written name:=value, got '--seed'"),
    (["--task", "PickCubeSO101", "--stack", "ros", "--", "sed:=1"], "with --stack ros the extra arguments go to the "
                                                                    "so101_sim stack: stack so101_sim has no argument 'sed'"),
])
def test_a_bad_option_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    assert main(["main", *args]) == 2
    assert says in one_line_error(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_that_is_not_empty_is_not_started_in(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert main(["main", "--run-dir", str(run)]) == 2
    assert f"--run-dir {run} exists and is not empty: go on with robot-rl main --resume {run}" in \
        one_line_error(capsys.readouterr().err)
    assert snapshot(run) == {"notes.txt": b"mine"}


def a_main_job_folder(tmp_path: Path, **changes) -> Path:
    """The record of a main job that finished no stage (as `robot-rl main` writes it first)."""
    import robot_rl

    run = tmp_path / "job"
    run.mkdir()
    record = {"format": 1, "robot_rl": robot_rl.__version__, "config": {"task": "PickCube", "steps": 400},
              "stages": {}, **changes}
    (run / "main_job.json").write_text(json.dumps(record))
    return run


@pytest.mark.parametrize("make, says", [
    (lambda tmp: tmp / "nowhere", "no such folder"),
    (lambda tmp: tmp, "not a main job's run folder (no main_job.json; robot-rl main makes it)"),
    (lambda tmp: a_main_job_folder(tmp, robot_rl="0.0.1"), "made by robot_rl 0.0.1 (record format 1); this is robot_rl"),
    (lambda tmp: a_main_job_folder(tmp, format=7), "(record format 7)"),
    (lambda tmp: a_main_job_folder(tmp, config={"task": "PickCube", "stepz": 4}), "unknown key 'stepz' (did you mean 'steps'?)"),
    (lambda tmp: a_main_job_folder(tmp, config={"task": "PickCube", "human": 3}), "must be a number in [0, 1]"),
    (lambda tmp: a_main_job_folder(tmp, stages={"report": {"wall_s": 1}}), "a stage is recorded finished after one "
                                                                          "that is not"),
    (lambda tmp: a_main_job_folder(tmp, stages={n: {"wall_s": 1} for n in ("record", "classifier", "encoder", "check")}),
     "a stage is recorded finished after one that is not"),
    (lambda tmp: a_main_job_folder(tmp, stages={n: {"wall_s": 1} for n in ("classifier", "encoder")}),
     "a stage is recorded finished after one that is not"),
    (lambda tmp: a_main_job_folder(tmp, stages={"deploy": {"wall_s": 1}}), "names stages this job does not have (deploy)"),
    (lambda tmp: a_main_job_folder(tmp, stages={"record": {"wall_s": 1}}), "demos.zarr: it is not there; it is an output "
                                                                          "of a finished stage"),
])
def test_a_bad_resume_is_one_line_and_changes_nothing(tmp_path, capsys, make, says):
    run = make(tmp_path)
    before = snapshot(tmp_path)
    assert main(["main", "--resume", str(run)]) == 2
    assert says in one_line_error(capsys.readouterr().err)
    assert snapshot(tmp_path) == before


def test_side_by_side_stages_may_have_finished_in_either_order(tmp_path, monkeypatch):
    """The classifier's stage and the encoder's run side by side: a job stopped with the encoder's
    finished and the classifier's not goes on from the classifier's (its finished stages verified)."""
    from robot_rl.commands import main_job, main_job_start

    verified = []
    for name in ("verify_demos", "verify_encoder"):
        monkeypatch.setattr(main_job, name, lambda job, name=name: verified.append(name))
    run = a_main_job_folder(tmp_path, stages={n: {"wall_s": 1} for n in ("record", "encoder")})
    lines = []
    job = main_job_start.resume(run, log=lines.append)
    assert lines == [f"resuming {run}: stages 1, 3 finished and verified; going on from stage 2 of 7"]
    assert verified == ["verify_demos", "verify_encoder"]
    assert [[stage.name for _, stage in group] for group in job.groups()] == [
        ["record"], ["classifier", "encoder"], ["round1"], ["check"], ["round2"], ["report"]]


def test_a_damaged_record_is_one_line_naming_it(tmp_path, capsys):
    run = a_main_job_folder(tmp_path)
    (run / "main_job.json").write_text('{"format": 1, "stag')
    assert main(["main", "--resume", str(run)]) == 2
    assert f"{run / 'main_job.json'} is damaged" in one_line_error(capsys.readouterr().err)


def test_resume_takes_no_other_options(tmp_path, capsys):
    run = a_main_job_folder(tmp_path)
    assert main(["main", "--resume", str(run), "--steps", "800", "--", "--seed", "3"]) == 2
    assert "it takes no other options (got --steps, TRAIN_ARGS)" in one_line_error(capsys.readouterr().err)


# ------------------------------------------------------------------ scripts/main.sh
def run_main_sh(tmp_path: Path, *args: str, echo: bool = False, **variables: str) -> subprocess.CompletedProcess:
    """scripts/main.sh in a copy of the repository's scripts whose set-up does nothing and whose
    robot-rl is the real one asked for its --plan: what the variables become, and nothing runs
    (``echo``: a robot-rl that prints its arguments instead)."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("main.sh", "progress.sh"):
        shutil.copy(ROOT / "scripts" / name, clone / "scripts" / name)
    (clone / "scripts" / "setup.sh").write_text("")
    (clone / ".venv" / "bin").mkdir(parents=True)
    robot_rl = clone / ".venv" / "bin" / "robot-rl"
    robot_rl.write_text('#!/bin/sh\necho "$@"\n' if echo else
                        f'#!/bin/sh\nshift\nexec "{sys.executable}" -m robot_rl.commands.cli main --plan "$@"\n')
    robot_rl.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": os.environ.get("TMPDIR", str(tmp_path)),
           **variables}
    return subprocess.run(["bash", str(clone / "scripts" / "main.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("variables, extra, stages, says", [
    ({}, "--seed 3", 7, "PegInsertHard from pixels for 15000 env steps"),
    ({"TASK": "PickCube"}, "--seed 3", 7, "PickCube from pixels for 6000 env steps"),
    ({"TASK": "PegInsert", "HUMAN": "0", "OBS": "state", "STEPS": "2"}, "--seed 3", 6,
     "PegInsert from state for 1 env steps"),
    ({"HUMAN": ".25", "CLASSIFIER_STEPS": "300"}, "--seed 3", 7, "eagerness 0.25"),
    ({"STACK": "ros", "STEPS": "1"}, "seed:=3", 5, "train through the ROS 2 stack sim_train (1 env steps"),
])
def test_main_sh_gives_its_variables_to_robot_rl_main(tmp_path, variables, extra, stages, says):
    done = run_main_sh(tmp_path, *extra.split(), **variables)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("== set-up: .venv/")
    assert lines[-1].startswith(f"stage {stages} of {stages}: ") and says in done.stdout


def test_main_sh_takes_its_extra_arguments_with_or_without_a_leading_double_dash(tmp_path):
    """`main.sh -- --seed 3` is `main.sh --seed 3`: one `--` reaches robot-rl main, not two (a
    second one would become an argument of robot-rl train)."""
    argvs = []
    for args in (("--seed", "3"), ("--", "--seed", "3")):
        done = run_main_sh(tmp_path / str(len(argvs)), *args, STACK="ros", echo=True)
        assert done.returncode == 0, done.stderr
        argvs.append(done.stdout.splitlines()[-1])
    assert argvs[0] == argvs[1] == "main --stack ros -- --seed 3"


@pytest.mark.parametrize("variables, says", [
    ({"HUMAN": "2"}, "--human 2.0 must be a number in [0, 1]"),
    ({"HUMAN": "x"}, "argument --human: invalid float value: 'x'"),
    ({"TASK": "Unknown"}, "unknown task 'Unknown'"),
    ({"STEPS": "1.5"}, "argument --steps: invalid int value: '1.5'"),
    ({"STACK": "k8s"}, "argument --stack: invalid choice: 'k8s'"),
    ({"DEMO_LAYOUTS": "grid"}, "argument --demo-layouts: invalid choice: 'grid'"),
    ({"DEMO_LAYOUTS": "spread", "STACK": "ros", "TASK": "PickCubeSO101"},
     "--demo-layouts spread picks the twin's scenes; PickCubeSO101's demonstrations are recorded through so101_sim"),
])
def test_main_sh_refuses_a_bad_variable_before_any_stage(tmp_path, variables, says):
    done = run_main_sh(tmp_path, **variables)
    assert done.returncode == 2
    assert says in done.stderr.splitlines()[-1]
    assert "stage 1" not in done.stdout


# ------------------------------------------------------------------ a real job, stopped and resumed
TINY = ["--steps", "200", "--demos", "3", "--takes", "3", "--classifier-steps", "30", "--encoder-steps", "20",
        "--rollout-episodes", "2", "--eval-episodes", "2", "--final-eval-episodes", "4"]
TINY_TRAIN = ["--", "--eval-every", "100", "--checkpoint-every", "50", "--pretrain-steps", "50",
              "--critic-warmup-steps", "50", "--utd", "1"]


def robot_rl_main(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "robot_rl.commands.cli", "main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.integration
def test_a_main_job_stopped_in_its_first_round_goes_on_from_there(tmp_path):
    run = tmp_path / "job"
    job = robot_rl_main(*TINY, "--run-dir", str(run), *TINY_TRAIN)
    seen = []
    for line in job.stdout:  # waits on the job's own lines, not on a clock
        seen.append(line)
        if line.startswith("checkpoint step_") and any(s.startswith("== stage 4 of 7") for s in seen):
            job.send_signal(signal.SIGTERM)
            break
    out, err = job.communicate(timeout=600)
    assert job.returncode == 128 + signal.SIGTERM, "".join(seen) + out + err
    assert f"go on with robot-rl main --resume {run}" in err
    record = json.loads((run / "main_job.json").read_text())
    assert sorted(record["stages"]) == ["classifier", "encoder", "record"]  # round 1 was cut off
    assert record["stages"]["encoder"]["side_by_side"] == ["classifier", "encoder"]
    assert record["machine"]["cores"] >= 1 and record["machine"]["torch_cpu_capability"]  # what the wall times mean
    assert (run / "checkpoints").is_dir()

    resumed = robot_rl_main("--resume", str(run))
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, out + err
    assert f"resuming {run}: stages 1-3 finished and verified; going on from stage 4 of 7" in out
    assert "== stage 1 of 7" not in out and "== stage 4 of 7" in out
    assert f"resuming {run} from step_" in out  # round 1 went on from its checkpoint, not from the start
    record = json.loads((run / "main_job.json").read_text())
    assert sorted(record["stages"]) == sorted(["record", "classifier", "encoder", "round1", "check", "round2", "report"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 200 and summary["final"] is not None and summary["job_wall_s"] > 0
    assert (run / "report.md").is_file()

    # finished: nothing to do; each finished stage's outputs are verified before anything runs
    assert main(["main", "--resume", str(run)]) == 0
    damaged = tmp_path / "damaged"
    shutil.copytree(run, damaged)
    weights = damaged / "classifier" / "classifier.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    record = json.loads((damaged / "main_job.json").read_text())
    del record["stages"]["report"]
    (damaged / "main_job.json").write_text(json.dumps(record))
    before = snapshot(damaged)
    done = subprocess.run([sys.executable, "-m", "robot_rl.commands.cli", "main", "--resume", str(damaged)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert f"{damaged / 'classifier'}: does not load" in one_line_error(done.stderr)
    assert snapshot(damaged) == before


def test_every_tasks_main_job_settings_are_ones_the_commands_take():
    """A task's own main-job settings reach `robot-rl train --agent` and `encoder pretrain
    --objective`: a misspelt one would fail a job minutes in, so every task's is checked here."""
    import dataclasses

    from robot_rl.agents.settings import SACConfig
    from robot_rl.commands.encoder import OBJECTIVES
    from robot_rl.sim.tasks import TASKS

    settings = {f.name for f in dataclasses.fields(SACConfig)}
    for name, task in TASKS.items():
        assert task.main_job_encoder in OBJECTIVES and task.main_job_encoder in ("bc", "bc_goal"), name
        assert task.main_job_utd > 0, name  # what `robot-rl train --utd` takes
        assert task.main_job_residual_penalty is None or task.main_job_residual_penalty >= 0, name
        for setting in task.main_job_agent:
            key, _, value = setting.partition("=")
            assert key in settings and value, (name, setting)
    assert TASKS["PegInsertHard"].main_job_encoder == "bc_goal" and TASKS["PickCube"].main_job_encoder == "bc"


# ------------------------------------------------------------------ stages side by side
class _Commands:
    """Stands in for the child processes: records each command's environment, exits 0 at once."""

    def __init__(self, monkeypatch):
        from robot_rl.commands import main_job_runner

        self.envs = []
        commands = self

        class Done:
            stdout, returncode = iter(()), 0

            def __init__(self, args, env, **kwargs):
                commands.envs.append(env)

            def wait(self):
                return 0

            def poll(self):
                return 0

        monkeypatch.setattr(main_job_runner.subprocess, "Popen", Done)


def _runner(tmp_path, stages):
    from robot_rl.commands.main_job_runner import StageRunner

    class Job(StageRunner):
        pass

    job = Job(tmp_path, {"stages": {}}, log=lambda line: None)
    job.stages = stages
    return job


def _stage(name, run, side_by_side=False):
    from robot_rl.commands.main_job_runner import Stage

    return Stage(name, lambda j: name, lambda j: "soon", run, lambda j: None, side_by_side=side_by_side)


def test_side_by_side_stages_run_at_once_with_one_torch_thread_each_and_record_it(tmp_path, monkeypatch):
    import threading

    commands = _Commands(monkeypatch)
    started = {name: threading.Event() for name in ("a", "b")}

    def meets(me, other):  # each waits for the other to have started: they run at once, or fail
        def run(job):
            started[me].set()
            assert started[other].wait(60), f"stage {other} did not run beside stage {me}"
            job.robot_rl("--version")
        return run

    order = []
    job = _runner(tmp_path, [_stage("first", lambda j: order.append("first")), _stage("a", meets("a", "b"), True),
                             _stage("b", meets("b", "a"), True), _stage("last", lambda j: j.robot_rl("--version"))])
    job.run_stages()
    assert [env.get("OMP_NUM_THREADS") for env in commands.envs[:2]] == ["1", "1"]
    assert commands.envs[2].get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")  # alone: as the job's
    record = json.loads((tmp_path / "main_job.json").read_text())["stages"]
    assert record["a"]["side_by_side"] == record["b"]["side_by_side"] == ["a", "b"] and "side_by_side" not in record["last"]
    assert job.wall_s == pytest.approx(sum(record[n]["wall_s"] for n in ("first", "last")) +
                                       max(record["a"]["wall_s"], record["b"]["wall_s"]))


def test_a_failed_stage_stops_the_one_beside_it_and_is_the_error_raised(tmp_path, monkeypatch):
    from robot_rl.commands.main_job_runner import StageFailed

    commands = _Commands(monkeypatch)

    def fails(job):
        raise StageFailed("stage 1 of 3 (a) failed: robot-rl record exited with status 1")

    def goes_on(job):
        assert job._beside_failed.wait(60)
        job.robot_rl("--version")  # what it would have run next

    job = _runner(tmp_path, [_stage("a", fails, True), _stage("b", goes_on, True), _stage("c", goes_on)])
    with pytest.raises(StageFailed, match=r"\(a\) failed"):
        job.run_stages()
    assert commands.envs == [] and not (tmp_path / "main_job.json").exists()  # b started nothing; c never ran


def test_a_job_stopped_between_two_commands_starts_no_other(tmp_path, monkeypatch):
    from robot_rl.commands.main_job_runner import JobStopped

    commands = _Commands(monkeypatch)

    def two_commands(job):
        job.robot_rl("--version")
        job.stop(signal.SIGTERM)  # the signal comes while no command runs
        job.robot_rl("--version")

    job = _runner(tmp_path, [_stage("a", two_commands)])
    with pytest.raises(JobStopped):
        job.run_stages()
    assert len(commands.envs) == 1

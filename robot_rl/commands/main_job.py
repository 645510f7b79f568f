"""``robot-rl main``: the main job, the whole pipeline a lab runs on its robot, on the sim twin.

It trains on what a real cell sees (front + wrist cameras and the arm's own state; the sim's
object poses only grade the result), with a simulated human in the loop. Read it top to bottom
as the stage table (docs/training.md, "The main job"); each stage is a function of the job
that runs ``robot-rl`` commands (each printed as it starts, so a lab can run the same on its
cell) and writes its outputs into the run folder:

1. ``record_demos_and_takes``: 20 demonstrations with images (an SO-101 trained through
   ``so101_sim`` records them through that stack) -> ``demos.zarr``; where the encoder reads
   them (PickCubeHard), the classifier's takes too (stage 2 records them otherwise).
2. ``train_success_classifier``: its data first, 20 successful takes, each then carrying the
   object about and up through the workspace (half of them letting go of it), and 20 failed
   takes, each then moving the arm about without it (``classifier_successes.zarr``,
   ``classifier_failures.zarr``); then the classifier, calibrated for 1 % false positives on
   held-out episodes, the reward firing on 2 positive frames in a row -> ``classifier/``.
3. ``pretrain_image_encoder`` (pixels only): the frozen backbone, behaviour cloning on the
   demonstrations, on a hard task also their end poses, and where the task says so on the
   classifier's successful takes too (one fixed objective per task, the same encoder on any
   machine) -> ``encoder/``. Stages 2 and 3 need nothing from each other: they run side by side,
   one on each core (one torch thread each).
4. ``train_round_1``: SAC/RLPD for 3/4 of the env steps with the classifier's reward, never the
   sim's ground truth, and the simulated human, whose takeovers are flagged and learned from (in
   bf16 where the task says so and the CPU has bf16 units) -> checkpoints in the run folder.
5. ``check_classifier_on_the_policy``: the classifier on the round-1 policy's own rollouts;
   above its false-positive target it is retrained with those hard negatives ->
   ``classifier_round1_on_the_trained_policy.json`` (and ``classifier_round2/``).
6. ``train_round_2``: on to the last env step with the classifier of that moment, then the
   grade by ground truth (50 episodes, the run's one final figure) -> ``summary.json``.
7. ``measure_and_report``: the classifier on the final policy's rollouts, and ``report.md``.

With ``--stack ros`` stages 4-6 are one training through the ROS 2 stack (``sim_train``; for an
SO-101 task ``so101_sim``: its simulated arm on a serial pty, a simulated human in the loop with
``--human``) and a grade (``eval.json``, on the twin; for so101_sim also ``eval_stack.json``, the
policy alone through the stack it trained in). ``main_job.json`` in the run folder keeps the config, the version and each
finished stage, so ``robot-rl main --resume RUN`` verifies the finished stages' outputs and
continues from the first stage not finished (a training stage from its newest checkpoint).
How a stage's commands run (child processes, progress lines, a stop signal passed on, the
record written whole): main_job_runner.py; starting a job and resuming one (its record read and
its finished stages verified first): main_job_start.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from robot_rl.agents.settings import HUMAN_IN_THE_LOOP_EXPLORATION
from robot_rl.commands.main_job_runner import (
    JOB_FILE, MainJobError, Stage, StageRunner, about_minutes, remove_path, write_json_result,
)
from robot_rl.config import MainJobConfig
from robot_rl.errors import UserFacingError
from robot_rl.runtime.device import cpu_has_bf16

POLICY_CAMERAS = ("front", "wrist")  # what the pixel policy reads, as on a real cell
TARGET_FPR = 0.01  # the classifier's calibration target (classifier train's --target-fpr default)
TAKES = ("classifier_successes.zarr", "classifier_failures.zarr")  # the classifier's takes
SEEDS = {"demos": 10000, "successes": 100, "failures": 200, "rollouts_round1": 300, "rollouts_final": 400}
STEP_MS = {"state": 70, "pixels": 70}  # a training env step with its updates (UTD 2) and evaluations, 2 CPU cores


# ------------------------------------------------------------------ the job
class MainJob(StageRunner):
    """One main job: its config, its task and its stages, run by ``StageRunner`` (main_job_runner.py)."""

    def __init__(self, cfg: MainJobConfig, run: Path, record: dict, log: Callable[[str], None] = print):
        from robot_rl.sim import get_task

        super().__init__(run, record, log)
        self.cfg = cfg
        self.task = get_task(cfg.task_name)
        if cfg.stack == "ros" and cfg.eagerness > 0 and self.ros_stack != "so101_sim":
            raise MainJobError(f"--human {cfg.human}: the ROS 2 stack of {cfg.task_name} ({self.ros_stack}) trains "
                               "without a simulated human (an SO-101 task's, so101_sim, has one); leave it unset or 0")
        if cfg.stack == "ros":
            self.check_stack_arguments()
        self.demo_layouts = cfg.demo_layouts or self.task.main_job_demo_layouts
        if self.demo_layouts == "spread" and self.demos_through_the_stack:
            raise MainJobError(f"--demo-layouts spread picks the twin's scenes; {cfg.task_name}'s demonstrations are "
                               f"recorded through {self.ros_stack} as its cell resets them: leave it unset")
        self.steps = cfg.steps or self.task.main_job_steps
        self.round1 = self.steps * 3 // 4
        # bf16 where the task's pixel job was measured so and the CPU has bf16 units (decided once)
        self.bf16 = self.task.main_job_bf16 and cfg.stack == "sim" and cfg.observation == "pixels" and cpu_has_bf16()
        self.stages = stages_of(self)

    @property
    def encoder_reads_takes(self) -> bool:
        """The pixel job's encoder pretrains on the classifier's successful takes too (the task says)."""
        return self.task.main_job_encoder_takes and self.cfg.observation == "pixels" and self.cfg.stack != "ros"

    @property
    def demos_through_the_stack(self) -> bool:
        """The SO-101 trained through so101_sim records its demonstrations there too."""
        return self.cfg.stack == "ros" and self.ros_stack == "so101_sim"

    @property
    def ros_stack(self) -> str:
        """The ROS 2 stack the job trains through with ``--stack ros``: the robot's twin cell."""
        return "so101_sim" if self.task.robot == "so101" else "sim_train"

    def check_stack_arguments(self) -> None:
        """With --stack ros the extra arguments are the training stack's NAME:=VALUE: one it does not
        take is one line now, not a failed training stage minutes in."""
        from robot_rl.runtime.launcher import LaunchError, parse_overrides, resolve

        try:
            resolve(self.ros_stack, parse_overrides(list(self.cfg.train_args)))
        except LaunchError as e:
            raise MainJobError(f"with --stack ros the extra arguments go to the {self.ros_stack} stack: {e}") from e

    def path(self, name: str) -> str:
        return str(self.run / name)

    @property
    def own_settings(self) -> list[str]:
        """The task's own ``train --agent`` KEY=VALUE settings, where measured to pay, and bf16."""
        return list(self.task.main_job_agent) + (["autocast_bf16=true"] if self.bf16 else [])

    @property
    def own_train_args(self) -> list[str]:
        """The task's own ``robot-rl train`` options beyond its agent settings, where measured to pay."""
        penalty = self.task.main_job_residual_penalty
        return [] if penalty is None else ["--residual-penalty", f"{penalty:g}"]

    @property
    def classifier_cameras(self) -> tuple[str, ...]:
        return tuple(self.task.classifier_cameras)

    @property
    def rollout_cameras(self) -> tuple[str, ...]:
        """The policy's rollouts render what the policy reads and what the classifier reads."""
        return POLICY_CAMERAS + tuple(c for c in self.classifier_cameras if c not in POLICY_CAMERAS)

    @property
    def classifier(self) -> str:
        """The reward's classifier of this moment: round 2 may have retrained it."""
        return self.path(self.record.get("classifier", "classifier"))


# ------------------------------------------------------------------ stage 1: the demonstrations
def record_demos_and_takes(job: MainJob) -> None:
    """The demonstrations, and where the encoder reads them the classifier's takes (stage 3 needs
    them then; else stage 2 records them, beside the encoder's pretraining)."""
    record_demos(job)
    if job.encoder_reads_takes:
        record_classifier_takes(job)


def verify_demos_and_takes(job: MainJob) -> None:
    verify_demos(job)
    if job.encoder_reads_takes:
        verify_takes(job)


def verify_takes(job: MainJob) -> None:
    for name in TAKES:
        verify_store(job, name, job.cfg.takes)


def record_demos(job: MainJob) -> None:
    """In: the task and its scripted expert. Out: demos.zarr (the policy's cameras, at --image-size).
    On the plain twin, whatever contact the job's train arguments ask of the twin it trains on:
    recorded on the twin with the reflex and a 15 N bound, the clone fell from 0.45 to 0.15 and
    0.25 on seeds 0 and 1 (docs/CALIBRATION.md, "PegInsertHard under the reflex at 15 N")."""
    cfg = job.cfg
    if job.demos_through_the_stack:
        record_demos_through_the_stack(job)
    else:  # seed 10000 and noise 0.1: with the scenes from consecutive resets, the takes `train --demos 20` collects
        job.robot_rl("record", "--task", cfg.task_name, "--episodes", str(cfg.demos), "--noise", "0.1", "--seed",
                     str(SEEDS["demos"]), "--successful-only", "--images", "--image-size", str(cfg.image_size),
                     "--cameras", *POLICY_CAMERAS, "--out", job.path("demos.zarr"),
                     *(["--spread-layouts", str(10 * cfg.demos)] if job.demo_layouts == "spread" else []))


def record_classifier_takes(job: MainJob) -> None:
    """In: the task and its scripted expert. Out: the classifier's successful and failed takes (its
    cameras, at --image-size)."""
    cfg, task = job.cfg, job.cfg.task_name
    takes = ["--images", "--image-size", str(cfg.image_size), "--cameras", *job.classifier_cameras,
             "--episodes", str(cfg.takes), "--hold-motion", "0.4", "--hold-rise", "0.3"]
    job.robot_rl("record", "--task", task, "--noise", "0.1", "--seed", str(SEEDS["successes"]), "--successful-only",
                 *takes, "--hold-after-success", "30", "--hold-release", "0.5",
                 "--out", job.path("classifier_successes.zarr"))
    job.robot_rl("record", "--task", task, "--noise", str(job.task.failed_takes_noise), "--seed",
                 str(SEEDS["failures"]), "--failed-only", *takes, "--hold-after-failure", "20",
                 "--out", job.path("classifier_failures.zarr"))


def record_demos_through_the_stack(job: MainJob) -> None:
    """The demonstrations recorded where the policy will act, as a lab records its own on its
    cell: the task's expert (noise 0.1, its successes kept) through so101_sim, whose states carry
    the servo bus's timing and load readings; a clone of the twin's demonstrations met other
    states there (docs/CALIBRATION.md, "The SO-101 through its ROS 2 stack") -> demos.zarr."""
    cfg, folder = job.cfg, job.run / "demos_stack"
    job.robot_rl("launch", job.ros_stack, f"task:={cfg.task_name}", "policy:=expert", "simulated_human:=0",
                 f"episodes:={cfg.demos}", "actor.keep:=successes", f"cameras:=[{','.join(POLICY_CAMERAS)}]",
                 f"seed:={SEEDS['demos']}", f"run_dir:={folder}", env=_ros_env())
    (folder / "online.zarr").rename(job.path("demos.zarr"))
    remove_path(folder)  # the stack's pty link, calibration, logs and its idle learner's checkpoints


def verify_demos(job: MainJob) -> None:
    verify_store(job, "demos.zarr", job.cfg.demos)


# ------------------------------------------------------------------ stage 2: the reward
def train_success_classifier(job: MainJob) -> None:
    """In: the task (and the classifier's takes where stage 1 recorded them). Out: the takes, and
    classifier/ (weights, calibration, report.json)."""
    if not job.encoder_reads_takes:
        record_classifier_takes(job)
    job.robot_rl("classifier", "train", "--data", job.path("classifier_successes.zarr"),
                 "--data", job.path("classifier_failures.zarr"), "--steps", str(job.cfg.classifier_steps),
                 "--consecutive", "2", "--target-fpr", str(TARGET_FPR), "--out", job.path("classifier"))


def verify_takes_and_classifier(job: MainJob) -> None:
    if not job.encoder_reads_takes:
        verify_takes(job)
    verify_classifier(job)


def verify_classifier(job: MainJob, name: str = "classifier") -> None:
    from robot_rl.reward.classifier import load_classifier

    _verified(job, name, lambda: load_classifier(job.path(name)))


# ------------------------------------------------------------------ stage 3: the image encoder
def pretrain_image_encoder(job: MainJob) -> None:
    """In: demos.zarr (and, where the task says, the classifier's successful takes). Out: encoder/
    (the frozen backbone the pixel policy's features come from)."""
    # one fixed objective per task, the same choice on any machine: behaviour cloning (the backbone
    # of the pixel runs that reached 0.94-0.98), with the take's end pose as a second target where
    # the task says so (docs/CALIBRATION.md); a probe's ranking of near-equal held-out losses
    # flipped between machines and does not predict the policy's success
    takes = ["--data", job.path("classifier_successes.zarr")] if job.encoder_reads_takes else []
    job.robot_rl("encoder", "pretrain", "--data", job.path("demos.zarr"), *takes, "--objective", job.task.main_job_encoder,
                 "--steps", str(job.cfg.encoder_steps), "--probe-steps", "500", "--out", job.path("encoder"))


def verify_encoder(job: MainJob) -> None:
    from robot_rl.agents.frozen import FrozenEncoder

    _verified(job, "encoder", lambda: FrozenEncoder.load(job.path("encoder")))


# ------------------------------------------------------------------ stages 4-6: training
def train_round_1(job: MainJob) -> None:
    """In: demos.zarr, classifier/, encoder/. Out: the run's checkpoints at env step 3/4 of
    the steps. A round cut off earlier goes on from its newest checkpoint."""
    if _newest_checkpoint(job) is not None:
        job.robot_rl("train", "--resume", str(job.run), "--steps", str(job.round1))
        return
    _remove_all_but_finished_outputs(job)  # a start cut off before its first checkpoint
    cfg = job.cfg
    observation = ["--obs", "state"] if cfg.observation == "state" else [
        "--obs", "pixels", "--frozen-encoder", job.path("encoder"), "--image-size", str(cfg.image_size)]
    recipe = [f"{k}={v:g}" for k, v in HUMAN_IN_THE_LOOP_EXPLORATION.items()]  # the package's, never copied
    job.robot_rl("train", "--task", cfg.task_name, *observation, "--demos", job.path("demos.zarr"),
                 "--reward-classifier", job.path("classifier"), "--simulated-human", f"{cfg.eagerness:g}",
                 "--intervention-bc-steps", "1" if job.task.clone_corrections else "0",
                 *[word for setting in recipe + job.own_settings for word in ("--agent", setting)],
                 "--utd", f"{job.task.main_job_utd:g}", *job.own_train_args, "--steps", str(job.round1),
                 "--eval-episodes", str(cfg.eval_episodes), "--eval-every", str(cfg.eval_every),
                 "--final-eval-episodes", str(cfg.eval_episodes), "--run-dir", str(job.run), *cfg.train_args)


def verify_round(job: MainJob, steps: int) -> None:
    from robot_rl.runtime.checkpoint import CheckpointError, read_state, verify_checkpoint

    ckpt = _newest_checkpoint(job)
    if ckpt is None:
        raise _damaged(job, job.path("checkpoints"), "no checkpoint")
    try:
        verify_checkpoint(ckpt)
        at = int(read_state(ckpt).get("env_steps", 0))
    except (CheckpointError, OSError, ValueError) as err:
        raise _damaged(job, str(ckpt), str(err)) from None
    if at < steps:
        raise _damaged(job, str(ckpt), f"it is at env step {at}, the stage ended at {steps}")


def check_classifier_on_the_policy(job: MainJob) -> None:
    """In: the round-1 policy, classifier/. Out: its rollouts, the classifier's figures on them
    and, above the false-positive target, classifier_round2/ retrained with the hard negatives."""
    rollouts = _rollouts(job, "policy_rollouts_round1.zarr", SEEDS["rollouts_round1"])
    figures = job.path("classifier_round1_on_the_trained_policy.json")
    write_json_result(Path(figures), job.robot_rl("classifier", "eval", "--classifier", job.path("classifier"),
                                            "--data", rollouts))
    fpr = json.loads(Path(figures).read_text())["fpr"]
    job.record["classifier"] = "classifier"
    if fpr <= TARGET_FPR:
        job.log(f"the classifier's false-positive rate on the policy's rollouts ({fpr:.4f}) is within its target "
                f"({TARGET_FPR}): round 2 keeps it")
        return
    job.log(f"the classifier's false-positive rate on the policy's rollouts ({fpr:.4f}) is above its target "
            f"({TARGET_FPR}): retraining with them")
    write_json_result(Path(job.path("classifier_round2_validation.json")), job.robot_rl(
        "classifier", "hard-negatives", "--classifier", job.path("classifier"), "--rollouts", rollouts,
        "--out", job.path("hard_negatives.zarr"), "--retrain", job.path("classifier_round2")))
    if (job.run / "classifier_round2" / "classifier.safetensors").is_file():
        job.record["classifier"] = "classifier_round2"


def verify_check(job: MainJob) -> None:
    verify_store(job, "policy_rollouts_round1.zarr", job.cfg.rollout_episodes)
    _read_json(job, "classifier_round1_on_the_trained_policy.json")
    if job.record.get("classifier", "classifier") != "classifier":
        verify_classifier(job, job.record["classifier"])


def train_round_2(job: MainJob) -> None:
    """In: the round-1 run, the classifier of this moment. Out: the run trained to the last env
    step, graded by ground truth (summary.json's final). Cut off, it goes on from its newest
    checkpoint."""
    job.robot_rl("train", "--resume", str(job.run), "--steps", str(job.steps), "--reward-classifier", job.classifier,
                 "--final-eval-episodes", str(job.cfg.final_eval_episodes))


def verify_final(job: MainJob) -> None:
    verify_round(job, job.steps)
    summary = _read_json(job, "summary.json")
    if summary.get("final") is None:
        raise _damaged(job, job.path("summary.json"), "it has no final figure")


def _ros_env() -> dict:
    """A stack's nodes discover each other on this machine only, unless the caller's environment says otherwise."""
    return {"ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")}


def train_through_ros(job: MainJob) -> None:
    """In: demos.zarr, classifier/. Out: the run trained through the ROS 2 stack: arm, cameras,
    actor, learner and recorder as separate nodes over DDS (loopback), in real time at 10 Hz."""
    if (job.run / "checkpoints").exists():
        raise MainJobError(f"{job.run}: the ROS 2 stack's training was cut off; it starts again only in a new "
                           "run: robot-rl main --stack ros (nothing was changed)")
    cfg = job.cfg
    # the SO-101's stack: its simulated arm on a serial pty, driven by the arm node's so101 backend,
    # with a simulated human in the loop
    human = []
    if job.ros_stack == "so101_sim":
        human = [f"simulated_human:={cfg.eagerness:g}"]
        if cfg.eagerness > 0:  # the human-in-the-loop recipe, as round 1 on the twin takes it (the package's)
            recipe = f"[{','.join(f'{k}={v:g}' for k, v in HUMAN_IN_THE_LOOP_EXPLORATION.items())}]"
            human += [f"learner.agent:={recipe}", f"actor.agent:={recipe}",
                      f"learner.intervention_bc_steps:={1 if job.task.clone_corrections else 0}"]
    job.robot_rl("launch", job.ros_stack, f"task:={cfg.task_name}", f"cameras:=[{','.join(job.classifier_cameras)}]",
                 f"demo_store:={job.path('demos.zarr')}", f"reward_classifier:={job.path('classifier')}",
                 f"env_steps:={job.steps}", f"run_dir:={job.run}", *human, *cfg.train_args, env=_ros_env())


def grade_by_ground_truth(job: MainJob) -> None:
    """In: the ROS-trained run. Out: eval.json, the final policy over 50 episodes by ground truth on
    the twin; for the SO-101 also eval_stack.json, the same policy alone through its stack."""
    write_json_result(Path(job.path("eval.json")), job.robot_rl("eval", "--checkpoint", str(job.run), "--episodes",
                                                          str(job.cfg.final_eval_episodes)))
    if job.ros_stack == "so101_sim":
        grade_through_the_stack(job)


def grade_through_the_stack(job: MainJob) -> None:
    """The final policy alone (frozen, deterministic, no human) for final_eval_episodes episodes
    through so101_sim, where it was trained: the arm node's servo bus, its timing and its load
    readings, which the twin of ``robot-rl eval`` only approximates. Out: eval_stack.json."""
    cfg, grade = job.cfg, job.run / "grade"
    job.robot_rl("launch", job.ros_stack, f"task:={cfg.task_name}", f"cameras:=[{','.join(job.classifier_cameras)}]",
                 "policy:=checkpoint", f"checkpoint:={job.run}", "simulated_human:=0",
                 f"episodes:={cfg.final_eval_episodes}", f"run_dir:={grade}", env=_ros_env())
    episodes = json.loads((grade / "actor_summary.json").read_text())["episode_log"]
    solved = sum(bool(e["ground_truth_solved"]) for e in episodes)
    write_json_result(Path(job.path("eval_stack.json")), json.dumps(
        {"stack": job.ros_stack, "checkpoint": str(job.run), "policy": "deterministic", "episodes": len(episodes),
         "successes": solved, "success_rate": solved / max(1, len(episodes))}))


def verify_grade(job: MainJob) -> None:
    _read_json(job, "eval.json")
    if job.ros_stack == "so101_sim":
        _read_json(job, "eval_stack.json")


# ------------------------------------------------------------------ stage 7: the report
def measure_and_report(job: MainJob) -> None:
    """In: the final policy, the classifier of this moment. Out: its figures on the policy's
    rollouts and report.md (curves, both rounds' classifier figures)."""
    rollouts = _rollouts(job, "policy_rollouts.zarr", SEEDS["rollouts_final"])
    write_json_result(Path(job.path("classifier_on_the_trained_policy.json")),
                job.robot_rl("classifier", "eval", "--classifier", job.classifier, "--data", rollouts))
    wall = [] if job.cfg.stack == "ros" else ["--job-wall-s", f"{job.wall_s + time.monotonic() - job.stage_started:.1f}"]
    job.robot_rl("report", str(job.run), *wall)


def verify_report(job: MainJob) -> None:
    verify_store(job, "policy_rollouts.zarr", job.cfg.rollout_episodes)
    _read_json(job, "classifier_on_the_trained_policy.json")
    if not (job.run / "report.md").is_file():
        raise _damaged(job, job.path("report.md"), "it is not there")


def stages_of(job: MainJob) -> list[Stage]:
    """The job's stages in order: the table of the module's doc."""
    cloned = ", its corrections cloned into the base" if job.task.clone_corrections else ""
    # the encoder's pretraining needs stage 1's stores alone, the classifier nothing of the policy's:
    # side by side, one on each core (measured: docs/CALIBRATION.md)
    beside = job.cfg.stack != "ros" and job.cfg.observation == "pixels"
    takes_first = job.encoder_reads_takes  # stage 3 reads the classifier's takes: stage 1 records them
    cfg, human = job.cfg, (f" and a simulated human (eagerness {job.cfg.eagerness:g}{cloned})" if job.cfg.eagerness else "")
    recipe = f", UTD {job.task.main_job_utd:g}" + "".join(f", {setting}" for setting in job.own_settings) + (
        "" if job.task.main_job_residual_penalty is None else f", residual penalty {job.task.main_job_residual_penalty:g}")
    stages = [
        Stage("record", lambda j: f"record {cfg.demos} demonstrations" + (
                                      f" through {j.ros_stack}" if j.demos_through_the_stack else "") +
                                  f" (scripted expert, cameras at {cfg.image_size}x{cfg.image_size}" +
                                  (", scenes spread over the task's variation)" if j.demo_layouts == "spread" else ")") +
                                  (f", and the success classifier's {2 * cfg.takes} takes" if takes_first else ""),
              lambda j: ("about 2 min" if j.demos_through_the_stack else "under 1 min" if not takes_first
                         else "about 1 min"), record_demos_and_takes, verify_demos_and_takes,
              ("demos.zarr", "demos_stack") + (TAKES if takes_first else ())),
        Stage("classifier", lambda j: ("train the success classifier" if takes_first else
                                       f"record the success classifier's {2 * cfg.takes} takes (scripted expert), "
                                       "train it") + f" ({cfg.classifier_steps} steps) and calibrate it for 1% false "
                                                     "positives",
              lambda j: about_minutes((0 if takes_first else 45) + cfg.classifier_steps * (0.05 if beside else 0.035)),
              train_success_classifier, verify_takes_and_classifier,
              (() if takes_first else TAKES) + ("classifier",), side_by_side=beside),
    ]
    if cfg.stack == "ros":
        return stages + [
            # so101_sim observes a whole period after each command (observe_after_command): a step takes the
            # period plus the actor's latency, about 130 ms
            Stage("train_ros", lambda j: f"train through the ROS 2 stack {j.ros_stack} ({j.steps} env steps in real "
                                         f"time at 10 Hz; arm, cameras, actor, learner, recorder{human})",
                  lambda j: about_minutes(j.steps * (0.13 if j.ros_stack == "so101_sim" else 0.1) + 120),
                  train_through_ros, lambda j: verify_round(j, j.steps)),
            Stage("grade", lambda j: f"grade the final policy by ground truth ({cfg.final_eval_episodes} episodes: the "
                                     "run's final figure, eval.json" + (
                                         "; and alone through the stack, eval_stack.json"
                                         if j.ros_stack == "so101_sim" else "") + ")",
                  lambda j: "about 2 min" + (" (about 6 more through the stack)" if j.ros_stack == "so101_sim" else ""),
                  grade_by_ground_truth, verify_grade, ("eval.json", "eval_stack.json", "grade")),
            Stage("report", lambda j: f"measure the classifier on the final policy's rollouts ({cfg.rollout_episodes} "
                                      "episodes) and write report.md", lambda j: "about 1 min", measure_and_report,
                  verify_report, ("policy_rollouts.zarr", "classifier_on_the_trained_policy.json")),
        ]
    if cfg.observation == "pixels":
        stages.append(Stage("encoder", lambda j: "pretrain the frozen image encoder (behaviour cloning on the "
                                                 "demonstrations" + (" and the classifier's successful takes"
                                                                     if j.encoder_reads_takes else "") +
                                                 (", and their end poses" if j.task.main_job_encoder == "bc_goal"
                                                  else "") + ")",
                            lambda j: about_minutes(10 + cfg.encoder_steps * 0.17), pretrain_image_encoder,
                            verify_encoder, ("encoder",), side_by_side=True))
    ms = STEP_MS[cfg.observation] * max(job.task.main_job_utd, 1.0) / 2  # the learner sets the pace
    ms *= 0.75 if job.bf16 else 1.0  # bf16: 26 ms a step (PegInsertHard)
    return stages + [
        Stage("round1", lambda j: f"train round 1: {cfg.task_name} from {cfg.observation} for {j.round1} env steps with the "
                                  f"classifier's reward (SAC/RLPD{recipe}){human}",
              lambda j: about_minutes(j.round1 * ms / 1000), train_round_1, lambda j: verify_round(j, j.round1)),
        Stage("check", lambda j: f"check the classifier on the round-1 policy's own rollouts ({cfg.rollout_episodes} "
                                 "episodes); retrain it above 1% false positives",
              lambda j: "about 1 min (2 more if it retrains)", check_classifier_on_the_policy, verify_check,
              ("policy_rollouts_round1.zarr", "classifier_round1_on_the_trained_policy.json", "hard_negatives.zarr",
               "classifier_round2", "classifier_round2_validation.json")),
        Stage("round2", lambda j: f"train round 2 to {j.steps} env steps, then grade by ground truth "
                                  f"({cfg.final_eval_episodes} episodes: the run's final figure)",
              lambda j: about_minutes((j.steps - j.round1) * ms / 1000 + 30), train_round_2, verify_final),
        Stage("report", lambda j: f"measure the classifier on the final policy's rollouts ({cfg.rollout_episodes} "
                                  "episodes) and write report.md", lambda j: "about 1 min", measure_and_report,
              verify_report, ("policy_rollouts.zarr", "classifier_on_the_trained_policy.json")),
    ]


# ------------------------------------------------------------------ outputs and their checks
def _rollouts(job: MainJob, name: str, seed: int) -> str:
    """The policy's own rollouts (not cut at success), with the cameras the classifier reads."""
    job.robot_rl("record", "--task", job.cfg.task_name, "--policy", str(job.run), "--episodes",
                 str(job.cfg.rollout_episodes), "--seed", str(seed), "--images", "--image-size",
                 str(job.cfg.image_size), "--cameras", *job.rollout_cameras, "--continue-after-success", "100",
                 "--out", job.path(name))
    return job.path(name)


def _damaged(job: MainJob, path: str, why: str) -> MainJobError:
    return MainJobError(f"{path}: {why}; it is an output of a finished stage of the main job {job.run}, so "
                        "nothing was changed: restore it, or start a new main job")


def _verified(job: MainJob, name: str, load: Callable[[], object]) -> None:
    try:
        load()
    except (UserFacingError, OSError, ValueError, KeyError, RuntimeError) as err:
        raise _damaged(job, job.path(name), f"does not load ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None


def verify_store(job: MainJob, name: str, episodes: int) -> None:
    from robot_rl.data.check import check_store

    path = job.run / name
    if not path.exists():
        raise _damaged(job, str(path), "it is not there")
    try:
        report = check_store(path)
    except UserFacingError as err:
        raise _damaged(job, str(path), str(err)) from None
    if not report["ok"]:
        problems = [*report["problems"], *(p for ps in report["episode_problems"].values() for p in ps)]
        raise _damaged(job, str(path), f"robot-rl data check finds it damaged ({problems[0] if problems else 'see data check'})")
    if report["episodes"] != episodes:
        raise _damaged(job, str(path), f"it holds {report['episodes']} episodes, the stage recorded {episodes}")


def _read_json(job: MainJob, name: str) -> dict:
    path = job.run / name
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise _damaged(job, str(path), "it is not there") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _damaged(job, str(path), f"it does not read as JSON ({err})") from None
    if not isinstance(value, dict):
        raise _damaged(job, str(path), "it is not a JSON object")
    return value


def _newest_checkpoint(job: MainJob) -> Path | None:
    from robot_rl.runtime.checkpoint import latest_checkpoint

    return latest_checkpoint(job.run, log=job.log) if (job.run / "checkpoints").is_dir() else None


def _remove_all_but_finished_outputs(job: MainJob) -> None:
    """Before a training round starts afresh: what a start cut off before its first checkpoint
    left (its config.json, logs), never a finished stage's outputs."""
    keep = {JOB_FILE}
    for stage in job.stages:
        if stage.name in job.record["stages"]:
            keep.update(stage.outputs)
    for path in job.run.iterdir():
        if path.name not in keep:
            remove_path(path)

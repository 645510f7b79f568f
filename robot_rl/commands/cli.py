"""The ``robot-rl`` command."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
import time
from pathlib import Path

from robot_rl.config import TrainConfig
from robot_rl.config_cli import add_config_options
from robot_rl.errors import InputError, MissingFileError, UserFacingError, is_disk_full


def _cmd_sim_tasks(args) -> int:
    from robot_rl.sim import BACKENDS, TASKS

    width = max(map(len, TASKS)) + 2
    for name, cls in TASKS.items():
        print(_wrapped(cls.description(), first=f"{name:<{width}}", indent=width))
    print(f"backends: {', '.join(BACKENDS)}")
    return 0


def _wrapped(text: str, first: str, indent: int) -> str:
    """``text`` after ``first``, wrapped to the terminal's width (COLUMNS, else 80 when not a
    terminal), continuation lines indented: never cut."""
    columns = max(shutil.get_terminal_size().columns, indent + 20)
    return textwrap.fill(text, width=columns, initial_indent=first, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False)


def _cmd_sim_run(args) -> int:
    from robot_rl.commands.expert_run import ExpertRunConfig, run
    from robot_rl.sim import BACKENDS, UnknownBackendError, get_task

    for task in args.task:
        get_task(task)  # fail before any work, with the list of tasks
    for backend in args.backend:
        if backend not in BACKENDS:
            raise UnknownBackendError(f"unknown backend {backend!r}; available backends: {', '.join(BACKENDS)}")
    if args.episodes < 1:
        raise InputError("--episodes must be at least 1")
    cfg = ExpertRunConfig(
        tasks=tuple(args.task), backends=tuple(args.backend), episodes=args.episodes, noise=args.noise,
        seed=args.seed, gif=not args.no_gif, image_size=args.image_size, out=args.out,
    )
    run(cfg)
    return 0


def _cmd_bench(args) -> int:
    from robot_rl.bench import run_benchmark

    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    from robot_rl.runtime.device import machine

    figures = {**run_benchmark(args.name, quick=args.quick, log=log, device=args.device), "machine": machine()}
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0


def _train_overrides(args) -> dict:
    """The TrainConfig fields given: ``--config FILE.yaml``'s, then the options' on top."""
    from robot_rl.config_cli import config_overrides, merge_overrides
    from robot_rl.config_values import read_config_file

    given = config_overrides(args, TrainConfig)
    return merge_overrides(read_config_file(args.config, TrainConfig), given) if args.config else given


def _cmd_train(args) -> int:
    from robot_rl.sim import get_task
    from robot_rl.commands.train import TrainingInterrupted, train

    overrides = _train_overrides(args)
    if "task" in overrides:
        get_task(overrides["task"])
    log = lambda message: print(message, flush=True)  # noqa: E731
    try:
        if args.resume:  # the run's own config; only what is given changes it
            summary = train(None, resume=args.resume, log=log, overrides=overrides)
        else:
            summary = train(TrainConfig(**overrides), log=log)
    except TrainingInterrupted as stopped:
        print(f"robot-rl: {stopped}", file=sys.stderr, flush=True)
        return 128 + stopped.signum
    brief = {k: v for k, v in summary.items() if k not in ("evals", "episode_interventions", "per_1000_steps")}
    print(json.dumps(brief))
    return 0


def _cmd_record(args) -> int:
    import dataclasses

    from robot_rl.commands.record import record_rollouts
    from robot_rl.config import RecordConfig
    from robot_rl.config_cli import config_overrides
    from robot_rl.sim import get_task

    cfg = RecordConfig(**config_overrides(args, RecordConfig))
    get_task(cfg.task)
    try:
        summary = record_rollouts(args.out, **dataclasses.asdict(cfg), on_episode=lambda index, success: print(
            f"record: episode {index} committed ({'success' if success else 'failure'})", file=sys.stderr, flush=True))
    except KeyboardInterrupt:  # the committed episodes stay in the store; the one cut off never reads as one
        print(f"robot-rl: interrupted: {args.out} keeps the {_committed(args.out)} episodes committed before",
              file=sys.stderr)
        return 130
    except OSError as e:
        if not is_disk_full(e):
            raise
        print(f"robot-rl: disk full: {args.out} keeps the {_committed(args.out)} episodes committed before "
              f"({e.strerror}), intact and appendable once there is space (robot-rl data check {args.out})",
              file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


def _committed(store: str) -> int:
    """Episodes committed in the store at ``store`` (0 if there is none yet)."""
    from robot_rl.data.store import EpisodeStore

    return len(EpisodeStore.open(store)) if Path(store).exists() else 0


def _cmd_classifier(args) -> int:
    from robot_rl.reward.training import evaluate_classifier, train_classifier

    if args.classifier_command == "eval":
        print(json.dumps(evaluate_classifier(args.classifier, args.data, device=args.device)["metrics"]))
        return 0
    if args.classifier_command == "hard-negatives":
        from robot_rl.reward.hard_negatives import mine_hard_negatives, retrain_with

        if args.retrain_steps is not None and args.retrain_steps < 1:
            raise InputError(f"--retrain-steps must be >= 1, got {args.retrain_steps}")
        summary = mine_hard_negatives(args.classifier, args.rollouts, args.out, device=args.device)
        print(json.dumps(summary))
        if args.retrain:
            if not summary["kept_episodes"]:
                print("no false positives in the rollouts: nothing to retrain with")
                return 0
            print(json.dumps(retrain_with(args.classifier, args.out, args.retrain, steps=args.retrain_steps,
                                          fine_tune=args.fine_tune, device=args.device)["validation"]))
        return 0

    if args.pretrained and not Path(args.pretrained).is_file():
        raise MissingFileError(f"--pretrained {args.pretrained}: no such file (weights are only read from a local file)")
    if args.consecutive < 1:
        raise InputError("--consecutive must be >= 1")
    report = train_classifier(args.data, args.out, cameras=tuple(args.cameras) if args.cameras else None,
                              steps=args.steps, batch_size=args.batch_size, target_fpr=args.target_fpr,
                              min_threshold=args.min_threshold,
                              consecutive=args.consecutive, val_fraction=args.val_fraction, seed=args.seed,
                              encoder=args.encoder, pretrained_path=args.pretrained,
                              freeze_backbone=args.freeze_backbone, device=args.device)
    print(json.dumps(report["validation"]))
    return 0


def _cmd_main(args) -> int:
    from robot_rl.commands.main_job_start import print_plan, run_main_job
    from robot_rl.commands.main_job_runner import JobStopped, StageFailed
    from robot_rl.config import MainJobConfig
    from robot_rl.config_cli import config_overrides

    given = config_overrides(args, MainJobConfig)
    if args.resume and given:
        names = ", ".join(f"--{k.replace('_', '-')}" if k != "train_args" else "TRAIN_ARGS" for k in given)
        raise InputError(f"--resume goes on with the run's own main job (its main_job.json); it takes no other "
                         f"options (got {names})")
    log = lambda message: print(message, flush=True)  # noqa: E731
    if args.plan:
        print_plan(None if args.resume else MainJobConfig(**given), resume_run=args.resume, log=log)
        return 0
    try:
        run_main_job(None if args.resume else MainJobConfig(**given), resume_run=args.resume, log=log)
    except StageFailed as failed:
        print(f"robot-rl main: {failed}", file=sys.stderr, flush=True)
        return 1
    except JobStopped as stopped:
        print(f"robot-rl main: stopped by signal {stopped.signum}; the finished stages are kept, and a training "
              f"checkpointed: go on with robot-rl main --resume {stopped.run}", file=sys.stderr, flush=True)
        return 128 + stopped.signum
    return 0


def _cmd_report(args) -> int:
    from robot_rl.commands.report import write_report

    if args.job_wall_s is not None and not args.job_wall_s >= 0:
        raise InputError(f"--job-wall-s is a duration in seconds (>= 0), got {args.job_wall_s}")
    print(write_report(args.run, args.job_wall_s))
    return 0


def _cmd_launch(args) -> int:
    from robot_rl.runtime.launcher import LaunchError, launch, load_stacks

    if args.list or not args.stack:
        for name, stack in load_stacks().items():
            print(f"{name}: {stack.get('description', '')}")
            for key, value in (stack.get("args") or {}).items():
                print(f"    {key}:={value}")
        if not args.list:
            raise LaunchError("name a stack to launch (robot-rl launch --list shows them)")
        return 0
    return launch(args.stack, args.args)


def _cmd_session(args) -> int:
    """The session stack with the command line's choices as stack arguments. The console's
    token reaches the teleop node through its environment only (never a ROS parameter): the
    given one (--console-token or ROBOT_RL_CONSOLE_TOKEN; required off loopback) or a new one,
    the same across the teleop node's restarts."""
    import os

    from robot_rl.runtime.launcher import launch
    from robot_rl.sim import get_task

    get_task(args.task)
    if args.steps < 0 or args.episodes < 0:
        raise InputError(f"--steps and --episodes count (0: no limit), got {args.steps} and {args.episodes}")
    if not 0.0 <= args.simulated_human <= 1.0:
        raise InputError(f"--simulated-human is an eagerness in [0, 1], got {args.simulated_human}")
    if args.simulated_human > 0:
        from robot_rl.sim.experts import check_expert

        check_expert(args.task, "the simulated human (--simulated-human)")
    if not args.human_noise >= 0.0:
        raise InputError(f"--human-noise is a standard deviation (>= 0), got {args.human_noise}")
    from robot_rl.teleop.console import CONSOLE_TOKEN_ENV, console_token

    given = args.console_token or os.environ.get(CONSOLE_TOKEN_ENV, "")
    token = console_token(args.console_host, {CONSOLE_TOKEN_ENV: given})
    run_dir = args.run_dir or f"runs/session-{args.task.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
    values = {"task": args.task, "policy": args.policy, "obs": args.obs, "devices": f"[{','.join(args.devices)}]",
              "mode": args.mode, "simulated_human": args.simulated_human, "human_noise": args.human_noise,
              "console_host": args.console_host, "console_port": args.console_port, "run_dir": run_dir,
              "demo_store": args.demos or "", "env_steps": args.steps, "episodes": args.episodes, "seed": args.seed}
    host = f"[{args.console_host}]" if ":" in args.console_host else args.console_host
    print(f"session: recording to {run_dir}/session.zarr; console on "  # the operator's terminal only
          f"http://{host}:{args.console_port}/?token={token}", flush=True)
    return launch("session", [f"{k}:={v}" for k, v in values.items()], env={**os.environ, CONSOLE_TOKEN_ENV: token})


def _cmd_eval(args) -> int:
    import dataclasses

    from robot_rl.commands.evaluate import evaluate_checkpoint
    from robot_rl.config import EvalConfig
    from robot_rl.config_cli import config_overrides

    def progress(line: str) -> None:  # on stderr: stdout is the JSON result alone
        print(line, file=sys.stderr, flush=True)

    cfg = EvalConfig(**config_overrides(args, EvalConfig))
    print(json.dumps(evaluate_checkpoint(args.checkpoint, log=progress, **dataclasses.asdict(cfg))))
    return 0


def add_device(parser: argparse.ArgumentParser, what: str) -> None:
    """``--device``: auto (CUDA when present, else MPS, else the CPU), cpu, cuda, cuda:N or mps."""
    parser.add_argument("--device", default="auto", metavar="DEVICE",
                        help=f"{what}: auto (CUDA when present, else MPS, else the CPU), cpu, cuda, cuda:N or mps "
                             "(default auto)")


def add_sim(sub) -> None:
    sim = sub.add_parser("sim", help="the simulated twin").add_subparsers(dest="sim_command", required=True)
    tasks = sim.add_parser("tasks", help="list tasks and backends")
    tasks.set_defaults(func=_cmd_sim_tasks)
    run = sim.add_parser("run", help="the scripted expert solves tasks; writes a success table and GIFs to a run folder")
    run.add_argument("--task", nargs="+", default=["PickCube", "PegInsert"])
    run.add_argument("--backend", nargs="+", default=["mujoco"])
    run.add_argument("--episodes", type=int, default=20)
    run.add_argument("--noise", type=float, default=0.0, help="expert action noise (0 clean, ~0.3 diverse, >=1 failing)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--image-size", type=int, default=128)
    run.add_argument("--no-gif", action="store_true")
    run.add_argument("--out", default="runs", help="parent folder of the run folder")
    run.set_defaults(func=_cmd_sim_run)


def add_train(sub) -> None:
    tr = sub.add_parser("train", help="train a policy on the sim twin (SAC/RLPD, learner in its own process)",
                        description="Every option is a TrainConfig field (robot_rl/config.py). --config FILE.yaml "
                                    "sets fields (KEY: VALUE, field names), the options override it. With --resume "
                                    "the run goes on with its own config: only the options given change it (each is "
                                    "printed; <run>/config_history.jsonl keeps every change).")
    tr.add_argument("--config", metavar="FILE.yaml", help="TrainConfig fields to start from (options override them)")
    tr.add_argument("--resume", metavar="RUN",
                    help="run folder (its newest checkpoint that verifies) or checkpoint to resume from")
    add_config_options(tr, TrainConfig)
    tr.set_defaults(func=_cmd_train)


def add_record(sub) -> None:
    from robot_rl.config import RecordConfig

    rec = sub.add_parser("record", help="record scripted-expert episodes from the sim twin into an episode store",
                         description="Every option but --out is a RecordConfig field (robot_rl/config.py).")
    rec.add_argument("--out", required=True, help="new store path (e.g. demos.zarr)")
    add_config_options(rec, RecordConfig)
    keep = rec.add_mutually_exclusive_group()  # the spellings of --keep successes / failures
    keep.add_argument("--successful-only", dest="keep", action="store_const", const="successes",
                      help="keep only successful takes (--keep successes)")
    keep.add_argument("--failed-only", dest="keep", action="store_const", const="failures",
                      help="keep only failed takes, negatives for the success classifier (--keep failures)")
    rec.set_defaults(func=_cmd_record)


def add_classifier(sub) -> None:
    from robot_rl.reward.settings import CLASSIFIER_TRAINING

    clf = sub.add_parser("classifier", help="the learned success classifier (the reward)").add_subparsers(
        dest="classifier_command", required=True)
    c_train = clf.add_parser("train", help="train on labelled frames of episode stores; calibrate; save")
    c_train.add_argument("--data", action="append", required=True, help="an episode store with images (repeatable)")
    c_train.add_argument("--out", required=True, help="folder for classifier.safetensors, report.json, confusion.png")
    c_train.add_argument("--cameras", nargs="+", help="default: every camera of the store")
    d = CLASSIFIER_TRAINING  # the library's defaults, written once
    c_train.add_argument("--steps", type=int, default=d.steps)
    c_train.add_argument("--batch-size", type=int, default=d.batch_size)
    c_train.add_argument("--target-fpr", type=float, default=d.target_fpr,
                         help="false-positive rate the threshold is set for")
    c_train.add_argument("--min-threshold", type=float, default=d.min_threshold,
                         help="floor under the calibrated threshold (the classifier's own decision boundary)")
    c_train.add_argument("--consecutive", type=int, default=d.consecutive, help="positive frames in a row to call success")
    c_train.add_argument("--val-fraction", type=float, default=d.val_fraction, help="share of episodes held out")
    c_train.add_argument("--encoder", default=d.encoder, choices=["drq", "resnet18"])
    c_train.add_argument("--pretrained", help="local ResNet-18 weights (torchvision names)")
    c_train.add_argument("--freeze-backbone", action="store_true")
    c_train.add_argument("--seed", type=int, default=d.seed)
    add_device(c_train, "the torch device it trains on")
    c_train.set_defaults(func=_cmd_classifier)
    c_eval = clf.add_parser("eval", help="a classifier at its threshold on other stores (e.g. another policy's rollouts)")
    c_eval.add_argument("--classifier", required=True, help="folder written by classifier train")
    c_eval.add_argument("--data", action="append", required=True, help="an episode store with images (repeatable)")
    add_device(c_eval, "the torch device the frames are scored on")
    c_eval.set_defaults(func=_cmd_classifier)
    c_hard = clf.add_parser("hard-negatives", help="keep rollout episodes where the classifier fires on a failure "
                                                   "frame (labelled by ground truth or the operator); retrain with them")
    c_hard.add_argument("--classifier", required=True, help="folder written by classifier train")
    c_hard.add_argument("--rollouts", action="append", required=True,
                        help="episode store of rollouts, e.g. robot-rl record --policy RUN (repeatable)")
    c_hard.add_argument("--out", required=True, help="new store for the mined episodes")
    c_hard.add_argument("--retrain", metavar="DIR", help="retrain on the classifier's data + the mined episodes into DIR")
    c_hard.add_argument("--retrain-steps", type=int, metavar="N",
                        help="training steps of the retraining (default: the classifier's own, or a quarter of them "
                             "with --fine-tune)")
    c_hard.add_argument("--fine-tune", action="store_true",
                        help="start from the classifier's weights instead of a new classifier (faster; more false "
                             "positives on the policy's frames in our measurement, docs/CALIBRATION.md)")
    add_device(c_hard, "the torch device the frames are scored on (and --retrain trains on)")
    c_hard.set_defaults(func=_cmd_classifier)


def add_main(sub) -> None:
    from robot_rl.config import MainJobConfig

    job = sub.add_parser("main", help="the main job on the sim twin: demonstrations, the success classifier, the "
                                      "image encoder, two rounds of training with a simulated human, the report",
                         description="Every stage of a lab's pipeline on the sim twin (robot_rl/commands/main_job.py; "
                                     "docs/training.md). Every option but --resume is a MainJobConfig field "
                                     "(robot_rl/config.py); options for robot-rl train go after --.")
    job.add_argument("--resume", metavar="RUN", help="go on with the main job of RUN: its finished stages verified, "
                                                     "from the first stage not finished")
    job.add_argument("--plan", action="store_true", help="print the stages and their expected times, then exit "
                                                         "(nothing is written; with --resume, what it would go on from)")
    add_config_options(job, MainJobConfig)
    job.set_defaults(func=_cmd_main)


def add_report(sub) -> None:
    rep = sub.add_parser("report", help="write <run>/report.md: curves, success, classifier metrics")
    rep.add_argument("run", help="a training run folder")
    rep.add_argument("--job-wall-s", type=float, metavar="SECONDS",
                     help="also record the wall time of the whole job that made the run (set-up and every stage, as "
                          "scripts/main.sh measures it) in summary.json as job_wall_s")
    rep.set_defaults(func=_cmd_report)


def add_eval(sub) -> None:
    from robot_rl.config import EvalConfig

    ev = sub.add_parser("eval", help="evaluate a checkpoint on the sim twin (deterministic policy; with "
                                     "--simulated-human, how often the operator would still step in)",
                        description="Every option but --checkpoint is an EvalConfig field (robot_rl/config.py).")
    ev.add_argument("--checkpoint", required=True,
                    help="checkpoint folder, or run folder (its newest checkpoint that verifies)")
    add_config_options(ev, EvalConfig)
    ev.set_defaults(func=_cmd_eval)


def add_launch(sub) -> None:
    lau = sub.add_parser("launch", help="start a ROS 2 stack of launch/stacks.yaml as supervised processes "
                                        "(what `ros2 launch robot_rl NAME.launch.py` starts)")
    lau.add_argument("stack", nargs="?", help="sim_train, train, record_demos or session")
    lau.add_argument("args", nargs="*", help="stack arguments, name:=value")
    lau.add_argument("--list", action="store_true", help="list the stacks and their arguments")
    lau.set_defaults(func=_cmd_launch)


def add_session(sub) -> None:
    from robot_rl.teleop.simulated_human import SimulatedHumanConfig  # its default, written once

    ses = sub.add_parser("session", help="a teleoperation session on the sim twin: demonstrate and correct through "
                                         "the operator console and your devices while the policy learns; all recorded")
    ses.add_argument("--task", default="PickCube")
    ses.add_argument("--policy", default="learner", choices=["learner", "teleop"],
                     help="learner: the human corrects a learning policy; teleop: the human drives (demonstrations)")
    ses.add_argument("--obs", default="state", choices=["state", "pixels"])
    ses.add_argument("--devices", nargs="*", default=["spacemouse"], help="spacemouse, gamepad (none: console only)")
    ses.add_argument("--mode", default="hold", choices=["hold", "toggle"], help="how a device's input intervenes")
    ses.add_argument("--simulated-human", type=float, default=0.0, metavar="EAGERNESS",
                     help="add a simulated human (scripted expert) that takes over when the policy stalls")
    ses.add_argument("--human-noise", type=float, default=SimulatedHumanConfig.noise, metavar="STD",
                     help="the simulated human's imprecision: noise on its motions, and this times 0.2 the chance "
                          "per step of a wrong gripper command (0: a precise human)")
    ses.add_argument("--console-host", default="127.0.0.1", help="another address than loopback needs --console-token")
    ses.add_argument("--console-port", type=int, default=8080)
    ses.add_argument("--console-token", help="the console's token (at least 16 characters; default: "
                                             "ROBOT_RL_CONSOLE_TOKEN, else a new one on loopback)")
    ses.add_argument("--demos", metavar="STORE", help="demonstrations to start from (an episode store)")
    ses.add_argument("--steps", type=int, default=0, help="stop after this many env steps (0: until Ctrl-C)")
    ses.add_argument("--episodes", type=int, default=0,
                     help="stop after this many recorded episodes, all of them in the store (0: until Ctrl-C)")
    ses.add_argument("--seed", type=int, default=0)
    ses.add_argument("--run-dir")
    ses.set_defaults(func=_cmd_session)


def _cmd_encoder(args) -> int:
    import dataclasses

    from robot_rl.commands.encoder import pretrain_encoder
    from robot_rl.config import EncoderPretrainConfig
    from robot_rl.config_cli import config_overrides

    cfg = EncoderPretrainConfig(**config_overrides(args, EncoderPretrainConfig))
    cfg.validate()
    print(json.dumps(pretrain_encoder(args.data, args.out, **dataclasses.asdict(cfg))))
    return 0


def add_encoder(sub) -> None:
    from robot_rl.config import EncoderPretrainConfig

    enc = sub.add_parser("encoder", help="a frozen image backbone for fast pixel training").add_subparsers(
        dest="encoder_command", required=True)
    pre = enc.add_parser("pretrain", help="train candidate backbones on episode stores (behaviour cloning, a spatial "
                                          "autoencoder; or take the success classifier's, or your ResNet-18), "
                                          "measure each frozen, write the best")
    pre.add_argument("--data", action="append", required=True, metavar="STORE",
                     help="an episode store recorded with images (repeatable); successful episodes are the measure")
    pre.add_argument("--out", required=True, metavar="DIR", help="the encoder folder (train --frozen-encoder DIR)")
    add_config_options(pre, EncoderPretrainConfig)
    pre.set_defaults(func=_cmd_encoder)


def add_bench(sub) -> None:
    from robot_rl.bench import listing

    bench = sub.add_parser("bench", help="run a benchmark; with --json the last line is a JSON object of figures",
                           description="Run a benchmark; with --json the last line is a JSON object of figures.",
                           epilog=f"benchmarks:\n{listing()}", formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("name", metavar="NAME", help="the benchmark to run (listed below)")
    bench.add_argument("--quick", action="store_true", help="fewer samples, same figures (a minute or two)")
    bench.add_argument("--json", action="store_true", help="the figures as one JSON object on the last line "
                                                           "(progress goes to stderr)")
    bench.add_argument("--device", metavar="DEVICE",
                       help="the torch device of the benchmarks that take one (learner, learning, classifier): auto "
                            "(CUDA when present), cpu, cuda, cuda:N or mps (default: the benchmark's own)")
    bench.set_defaults(func=_cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="robot-rl", description="Human-in-the-loop RL for robot arms, with a sim twin.")
    sub = parser.add_subparsers(dest="command", required=True)
    from robot_rl.commands.arm import add_arm
    from robot_rl.commands.data import add_data
    from robot_rl.commands.task import add_task

    for add in (add_sim, add_main, add_train, add_record, add_data, add_classifier, add_encoder, add_report, add_eval,
                add_launch, add_session, add_task, add_arm, add_bench):
        add(sub)
    return parser




def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UserFacingError, FileNotFoundError) as exc:
        # the project's own errors (InputError for a value that cannot be used, ...) and a path the
        # user named that is not there: one line, exit 2. Any other exception is a bug: its traceback.
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)  # a KeyError's str quotes it
        print(f"robot-rl: error: {message}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk anywhere else: one line (record, data, train say more)
        if not is_disk_full(exc):
            raise
        print(f"robot-rl: error: disk full writing {exc.filename or 'a file'} ({exc.strerror})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

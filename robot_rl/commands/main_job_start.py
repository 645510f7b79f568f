"""Starting a main job (``robot-rl main``) and going on with one (``--resume RUN``): its record
written, or read and checked with its finished stages' outputs verified, before any stage runs;
``--plan``. The stages themselves, in order: main_job.py; how they run: main_job_runner.py."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from pathlib import Path
from typing import Callable

import robot_rl
from robot_rl.commands.main_job import MainJob
from robot_rl.commands.main_job_runner import JOB_FILE, JOB_FORMAT, MainJobError, clock
from robot_rl.config import MainJobConfig
from robot_rl.config_values import ConfigError, check_values
from robot_rl.errors import InputError
from robot_rl.runtime.device import machine


def new_job(cfg: MainJobConfig, log: Callable[[str], None] = print) -> MainJob:
    """A new main job, its config checked; nothing written yet."""
    cfg.validate()
    run = Path(cfg.run_dir or f"runs/main-{cfg.task_name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}")
    if run.exists() and any(run.iterdir()):
        raise MainJobError(f"--run-dir {run} exists and is not empty: go on with robot-rl main --resume {run}, or "
                           "choose another folder")
    record = {"format": JOB_FORMAT, "robot_rl": robot_rl.__version__, "machine": machine(),
              "config": json.loads(json.dumps(dataclasses.asdict(cfg))), "stages": {}}
    return MainJob(cfg, run, record, log)  # checks the task


def start(cfg: MainJobConfig, log: Callable[[str], None] = print) -> MainJob:
    """A new main job: its config checked and saved in a new run folder."""
    job = new_job(cfg, log)
    run = job.run
    run.mkdir(parents=True, exist_ok=True)
    job.save_record()
    log(f"run folder: {run}")
    return job


def resume(run: Path, log: Callable[[str], None] = print) -> MainJob:
    """The main job of ``run``: its record read and checked, its finished stages' outputs
    verified. Anything wrong is one MainJobError line and nothing is changed."""
    file = run / JOB_FILE
    if not run.is_dir():
        raise MainJobError(f"--resume {run}: no such folder")
    if not file.is_file():
        raise MainJobError(f"--resume {run}: not a main job's run folder (no {JOB_FILE}; robot-rl main makes it)")
    try:
        record = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MainJobError(f"{file} is damaged ({err}); nothing was changed") from None
    if not isinstance(record, dict) or not isinstance(record.get("stages"), dict):
        raise MainJobError(f"{file} is damaged (not a main job's record: no stages); nothing was changed")
    if record.get("format") != JOB_FORMAT or record.get("robot_rl") != robot_rl.__version__:
        raise MainJobError(f"{file}: made by robot_rl {record.get('robot_rl')} (record format {record.get('format')}); "
                           f"this is robot_rl {robot_rl.__version__} (format {JOB_FORMAT}): go on with that version, or "
                           "start a new main job; nothing was changed")
    try:
        cfg = MainJobConfig(**check_values(MainJobConfig, record.get("config"), str(file)))
        cfg.validate()
    except (ConfigError, InputError, TypeError) as err:
        raise MainJobError(f"{file}: its config does not check ({err}); nothing was changed") from None
    job = MainJob(cfg, run, record, log)
    names = [stage.name for stage in job.stages]
    unknown = [name for name in record["stages"] if name not in names]
    if unknown:
        raise MainJobError(f"{file} names stages this job does not have ({', '.join(unknown)}); nothing was changed")
    groups = [[stage.name in record["stages"] for _, stage in group] for group in job.groups()]
    whole = next((g for g, done in enumerate(groups) if not all(done)), len(groups))  # groups finished first
    if any(any(done) for done in groups[whole + 1:]):  # (side-by-side stages finish in either order)
        raise MainJobError(f"{file}: a stage is recorded finished after one that is not; nothing was changed")
    finished = [k for k, stage in enumerate(job.stages, start=1) if stage.name in record["stages"]]
    for stage in job.stages:
        if stage.name in record["stages"]:
            stage.verify(job)
    if len(finished) == len(job.stages):
        log(f"{run}: every stage of the main job is finished and verifies; nothing to do")
    else:
        first = next(k for k in range(1, len(job.stages) + 1) if k not in finished)
        listed = f"1-{finished[-1]}" if finished == list(range(1, len(finished) + 1)) else ", ".join(map(str, finished))
        log(f"resuming {run}: stages {listed} finished and verified; going on from stage {first} of "
            f"{len(job.stages)}" if finished else
            f"resuming {run}: no stage was finished; starting from stage 1 of {len(job.stages)}")
    return job


def print_plan(cfg: MainJobConfig | None = None, resume_run: str | None = None,
               log: Callable[[str], None] = print) -> None:
    """``robot-rl main --plan``: the stages and their expected times; nothing is written."""
    job = resume(Path(resume_run), log) if resume_run else new_job(cfg or MainJobConfig(), log)
    beside = {stage.name: [k for k, _ in group] for group in job.groups() for _, stage in group if len(group) > 1}
    for k, stage in enumerate(job.stages, start=1):
        state = "finished" if stage.name in job.record["stages"] else f"expected {stage.expected(job)}"
        if stage.name in beside:
            state += f"; side by side: stages {' and '.join(map(str, beside[stage.name]))}"
        log(f"stage {k} of {len(job.stages)}: {stage.title(job)} ({state})")


def run_main_job(cfg: MainJobConfig | None = None, resume_run: str | None = None,
                 log: Callable[[str], None] = print) -> MainJob:
    """``robot-rl main`` (a new job from ``cfg``) or ``robot-rl main --resume RUN``. SIGINT and
    SIGTERM stop the running command (a training checkpoints) and raise JobStopped."""
    job = resume(Path(resume_run), log) if resume_run else start(cfg or MainJobConfig(), log)
    previous = {sig: signal.signal(sig, job.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        job.run_stages()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log(f"done in {clock(time.monotonic() - job.started)}. Run folder: {job.run} (report.md, classifier/, "
        "encoder/, demos.zarr, checkpoints/, and summary.json + learning_curve.png + tensorboard/ or, with --stack "
        "ros, actor_summary.json + eval.json + online.zarr)")
    return job

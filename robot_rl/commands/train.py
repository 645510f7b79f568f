"""``robot-rl train``: the actor loop on the sim twin, with the learner in its own process.

The actor steps the environment at the control rate, sends every transition to the
learner, and swaps in new policy weights between control steps. In sim (``sync=True``)
the actor waits for the learner when it is more than ``max_lead`` steps ahead of the
update-to-data ratio, so sample-efficiency figures mean what they say; on a real robot
(``sync=False``) nothing ever waits for the learner.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.agent_setup import agent_config_for, check_train_config
from robot_rl.base_policy import with_base_policy
from robot_rl.config import TrainConfig, kept_on_resume, task_name
from robot_rl.config_values import demo_source
from robot_rl.contract import Transition
from robot_rl.actor import ActorLoop, LearnerClient
from robot_rl.envs import FlatObservation, make_cell_env, obs_spec, twin_contact
from robot_rl.errors import InputError, TrainingError
from robot_rl.foreign.client import StopWaiting
from robot_rl.rollout import collect_demos, evaluate, steps_to_success
from robot_rl.runtime.checkpoint import (CheckpointError, check_compatible, check_same_network, clean_leftovers,
                                         list_checkpoints, read_agent_config, read_state, resolve_checkpoint)
from robot_rl.runtime import progress
from robot_rl.runtime.learner import LearnerSetup, NonFiniteLoss
from robot_rl.runtime.run_state import RunState
from robot_rl.runtime.wire import transition_arrays
from robot_rl.commands.learning_aids import hindsight_goals, make_human
from robot_rl.commands.train_summary import make_summary


class TrainingInterrupted(TrainingError):
    """SIGTERM / SIGINT: a checkpoint was written, then training stopped."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class LearnerFailed(TrainingError):
    """The learner reported an error or did not answer: nothing more is asked of it."""


# fields a resumed run keeps (marked in config.py): they shape the networks, the replay or the data it
# was trained on (not frozen_encoder, a folder that may move: the learner checks that it holds the run's
# encoder by its sha)
FIXED_ON_RESUME = kept_on_resume(TrainConfig)


def refuse_changes_kept_on_resume(old: dict, new: dict, ckpt: Path) -> None:
    """Raise CheckpointError (one line) when config ``new`` changes a field the run keeps from
    ``old`` (both as JSON values: the checkpoint's record and the config asked for)."""
    for key in FIXED_ON_RESUME:
        if key in old and json.dumps(old[key]) != json.dumps(new[key]):
            raise CheckpointError(f"checkpoint {ckpt} was trained with {key}={old[key]!r}; a resumed run keeps it "
                                  f"(asked for {new[key]!r}): start a new run to change it")


def resumed_config(saved: dict, overrides: dict, ckpt: Path) -> tuple[TrainConfig, dict]:
    """The run's own config (``saved``, as its checkpoint recorded it) with ``overrides`` applied;
    also the fields that changed, ``{field: [old, new]}``."""
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    known = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in fields}
    base = TrainConfig(**{**known, "run_dir": None})  # by default the run continues where its checkpoint lies
    old = json.loads(json.dumps(dataclasses.asdict(base)))
    if "agent" in overrides:  # agent flags add to the run's agent config
        overrides = {**overrides, "agent": dataclasses.replace(base.agent, **overrides["agent"])}
    cfg = dataclasses.replace(base, **overrides)
    new = json.loads(json.dumps(dataclasses.asdict(cfg)))
    refuse_changes_kept_on_resume(old, new, ckpt)
    return cfg, {k: [old[k], new[k]] for k in overrides if old[k] != new[k]}


def acting_config(agent_cfg: SACConfig) -> SACConfig:
    """The actor's copy of the policy acts on the CPU whatever device the learner uses (one
    observation per step; the weights arrive as numpy arrays and load onto it)."""
    return dataclasses.replace(agent_cfg, device="cpu")


def wait_for(learner: LearnerClient, condition, what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise LearnerFailed(f"timed out after {timeout:.0f} s waiting for the learner to {what}")
        learner.poll(0.05)


def wait_for_learner(learner: LearnerClient, cfg: TrainConfig, online_sent: int) -> None:
    """Sim pacing (``sync``): the policy acting after ``online_sent`` env steps is the learner's
    after exactly ``utd * (online_sent - max_lead)`` online updates (the first weights until then).
    The actor waits for those updates and swaps in no newer weights, so the learner may work up to
    ``max_lead`` steps behind the actor (the two overlap in time) while what is learned, and so
    the run, is the same for one seed on any machine at any load."""
    if not cfg.sync:
        return
    starts = cfg.first_update_at(cfg.has_demos)
    learner.due_updates = int(cfg.utd * max(0, online_sent - cfg.max_lead)) if online_sent >= starts else 0
    if online_sent < max(starts, 1):
        return
    wait_for(learner, lambda: learner.status.get("online_updates", 0) >= learner.due_updates, "catch up")


def learner_error(message: str) -> None:
    raise LearnerFailed(message)


def new_run_dir(cfg: TrainConfig) -> Path:
    if cfg.run_dir:
        return Path(cfg.run_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in task_name(cfg).split(":")[-1]).lower()
    return Path("runs") / f"train-{name}-{cfg.obs}-{stamp}"


def _print(message: str) -> None:
    print(message, flush=True)  # flushed: a supervisor may wait on these lines through a pipe


class StopSignals:
    """While active, SIGTERM / SIGINT only set ``signum``: the actor loop finishes its step,
    writes a checkpoint and stops. A second signal acts as usual (the handlers are restored)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()


def record_config(run_dir: Path, cfg: TrainConfig, resumed_from: str | None) -> None:
    """``config.json`` is the config the run goes on with; ``config_history.jsonl`` gets one line
    per start or resume: when, from which checkpoint, what changed, the whole config."""
    current = json.loads(json.dumps(dataclasses.asdict(cfg)))
    current = {"demo_source": demo_source(cfg), **current}
    path = run_dir / "config.json"
    try:
        previous = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        previous = None
    changed = ({k: [previous.get(k), v] for k, v in current.items() if previous.get(k) != v}
               if isinstance(previous, dict) else {})
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "resumed_from": resumed_from, "changed": changed,
             "config": current}
    with open(run_dir / "config_history.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")
    tmp = run_dir / "config.json.tmp"
    tmp.write_text(json.dumps(current, indent=1))
    tmp.replace(path)


def train(cfg: TrainConfig | None = None, resume: str | None = None, log=_print,
          overrides: dict | None = None) -> dict:
    """Train on the sim twin; returns the summary (also written to <run>/summary.json).

    ``resume`` (a run folder or a checkpoint) continues a run from its newest checkpoint that
    verifies. With ``cfg=None`` it goes on with the run's own config, changed only by
    ``overrides`` (each change is logged and kept in ``config_history.jsonl``); a full ``cfg``
    is used as given. A resume to fewer env steps than the run has done is refused. A run that
    stops after its first update writes a checkpoint first where it can (on SIGTERM / SIGINT, an
    env that hangs or fails); one that fails before its first checkpoint removes its run folder."""
    resume_from = None
    if resume:
        ckpt = resolve_checkpoint(Path(resume))
        saved = read_state(ckpt)
        saved_cfg = saved.get("train_config", {})
        if cfg is None:
            cfg, changed = resumed_config(saved_cfg, overrides or {}, ckpt)
            for key, (old, new) in changed.items():
                log(f"resume: {key} = {new!r} as given (the run's own: {old!r})")
        else:
            refuse_changes_kept_on_resume(saved_cfg, json.loads(json.dumps(dataclasses.asdict(cfg))), ckpt)
        run = RunState.from_json(saved, ckpt / "state.json")
        if cfg.env_steps < run.env_steps:
            raise InputError(f"--steps {cfg.env_steps}: checkpoint {ckpt} is at env step {run.env_steps} "
                             f"already, so there is nothing to do; give --steps above {run.env_steps} to train on")
        resume_from = str(ckpt)
        run_dir = Path(cfg.run_dir) if cfg.run_dir else ckpt.parent.parent
        log(f"resuming {run_dir} from {ckpt.name} at env step {run.env_steps}")
    else:
        cfg = dataclasses.replace(cfg or TrainConfig(), **(overrides or {}))
        run_dir = new_run_dir(cfg)
        run = RunState(demo_episodes=cfg.demos)
    check_train_config(cfg)
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        if resume_from:
            clean_leftovers(run_dir)  # this process now writes the run's checkpoints
        record_config(run_dir, cfg, resume_from)
        run.start_round(resume_from, cfg.human_eagerness, cfg.reward_classifier)
        with StopSignals() as stop:
            return _train(cfg, run_dir, resume_from, run, stop, log)
    except BaseException:
        if created and not list_checkpoints(run_dir):  # nothing worth keeping was written
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _train(cfg: TrainConfig, run_dir: Path, resume_from: str | None, run: RunState, stop: StopSignals,
           log) -> dict:
    from robot_rl.runtime.logging import RunLogger

    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.set_num_threads(1)
    cell, eval_env = make_run_envs(cfg)
    human = make_human(cfg, cell)  # before any work: a human that cannot judge is one line now
    goal, relabel = hindsight_goals(cfg, cell)  # likewise a map without a goal under --goal-relabel
    env = FlatObservation(cell, cfg.obs, cfg.cameras)  # what the policy sees; the (simulated) human sees the cell
    spec = obs_spec(env.observation_space)
    agent_cfg = agent_config_for(cfg, env)  # the learner's, on cfg.device
    if resume_from:
        saved = read_agent_config(Path(resume_from))
        check_compatible(saved, env, Path(resume_from))
        check_same_network(saved, agent_cfg, Path(resume_from), f"the run's config ({run_dir / 'config.json'})")
    policy = SACAgent(acting_config(agent_cfg))
    policy.seed_acting(cfg.seed)
    logger = RunLogger(run_dir, cfg.env_steps, enabled=cfg.progress)
    learner = LearnerClient.start(LearnerSetup(cfg, agent_cfg, spec, str(run_dir), resume_from, goal, relabel),
                                  policy,
                                  on_error=learner_error)

    def checkpoint(step: int) -> None:
        name = f"step_{step:09d}"
        previous = learner.last_checkpoint
        learner.send("checkpoint", meta={"name": name, "actor_state": run.to_json()})
        wait_for(learner, lambda: learner.last_checkpoint != previous, "write a checkpoint")
        log(f"checkpoint {name} saved (env step {step})")

    def evaluation(step: int, episodes: int) -> None:
        result = evaluate(lambda o: policy.act(o, True), eval_env, episodes, seed=2_000_000,
                          log=log if cfg.progress else None)
        result["policy_updates"] = learner.weights_updates  # which policy it graded: after so many updates
        source = getattr(eval_env.unwrapped, "success_source", None)
        if source and run.success_source != source:  # a Gymnasium env: what said success
            run.success_source = source
            log(f"evaluation: success is the env's {source}")
        run.record_eval(result, step)
        log_eval(result, step, logger, log)

    waiting = progress.WaitLines("train", log=log, every_s=progress.EVERY_S, last_line=lambda: logger.last_line_at)

    def env_waits(what: str, waited_s: float) -> None:
        """While a foreign env's reset or step waits: a stop abandons it; lines keep coming meanwhile."""
        if stop.signum is not None:
            raise StopWaiting
        waiting.tick(f"env {cfg.env}'s {what} at env step {run.env_steps}", waited_s,
                     cfg.env_timeout_s or None)

    for each in (cell, eval_env):
        if hasattr(each.unwrapped, "watch"):
            each.unwrapped.watch(env_waits)

    step = run.env_steps
    checkpointed_at = step if resume_from else None  # a resumed run's state at this step is saved already

    def stopped() -> TrainingInterrupted:
        """SIGTERM / SIGINT: a checkpoint at this step (once pre-training is over), and the line to stop with."""
        name = signal.Signals(stop.signum).name
        if learner.weights_version < 1:
            return TrainingInterrupted(f"stopped by {name} before training began; nothing "
                                       f"{'new ' if resume_from else ''}was saved", stop.signum)
        if checkpointed_at != step:
            checkpoint(step)
        return TrainingInterrupted(f"stopped by {name} at env step {step}; checkpoint step_{step:09d} saved: continue "
                                   f"with robot-rl train --resume {run_dir}", stop.signum)

    def learner_sound(exc: Exception) -> bool:
        return (not isinstance(exc, (LearnerFailed, NonFiniteLoss))
                and (learner.process is None or learner.process.is_alive()))

    try:
        if not resume_from:
            send_demos(cfg, cell, env, learner, run, log)
        learner.send("begin")
        wait_for(learner, lambda: learner.weights_version >= 1, "pre-train", timeout=3600)
        if not resume_from:
            evaluation(step, cfg.eval_episodes)
        random_until = cfg.random_action_steps(cfg.has_demos or bool(cfg.base_policy))  # a base acts from step 0
        act_ms: list[float] = []  # the policy's time to act, each control step it acted

        def act(raw: dict, obs: dict) -> np.ndarray:
            if run.env_steps < random_until:
                return env.action_space.sample()
            start = time.perf_counter()
            action = policy.act(obs)
            act_ms.append((time.perf_counter() - start) * 1e3)
            return action

        loop = ActorLoop(cell, env.observation, act, human=human, learner=learner,
                         recorder=training_recorder(cfg, cell, run_dir), stats=run.round.counts,
                         reflex_reward=-cfg.reflex_penalty, log=log)
        loop.start(seed=cfg.seed + step)
        last_checkpoint_t = time.monotonic()
        while step < cfg.env_steps:
            if stop.signum is not None:
                raise stopped()
            wait_for_learner(learner, cfg, step)
            result = loop.step()  # counts the step, and the episode when it ends, into run.round.counts
            step = run.env_steps
            run.count_step(result.by_human, result.episode_step)
            if result.episode is not None:
                run.count_episode(result.episode)
                log_episode(run, result.episode, logger, step)
            if step == cfg.env_steps:  # the final figure grades the weights the final checkpoint holds
                wait_for(learner, learner.ask_for_current_weights(), "send its current weights")
                evaluation(step, cfg.final_eval_episodes)
            elif step % cfg.eval_every == 0:
                evaluation(step, cfg.eval_episodes)
            reached = (cfg.stop_at_success is not None and step % cfg.eval_every == 0
                       and run.evals[-1]["success_rate"] >= cfg.stop_at_success)
            if (step % cfg.checkpoint_every == 0 or step == cfg.env_steps or reached
                    or time.monotonic() - last_checkpoint_t >= cfg.checkpoint_every_s):
                checkpoint(step)
                last_checkpoint_t, checkpointed_at = time.monotonic(), step
            logger.progress(step, run, learner.status)
            if reached:
                log(f"step {step}: success {run.evals[-1]['success_rate']:.2f} >= {cfg.stop_at_success}, stopping")
                break
        if resume_from and run.round.first_step == step and (run_dir / "summary.json").is_file():
            log(f"nothing to do: {run_dir} is at env step {step} of {cfg.env_steps}; its summary.json stays as it was")
            return json.loads((run_dir / "summary.json").read_text())
        summary = make_summary(cfg, run, learner, run_dir, resume_from, cell, act_ms, relabel)
        if summary["base_policy"]:
            b = summary["base_policy"]
            log(f"base policy: query p50 {b['base_query_ms_p50']} / p99 {b['base_query_ms_p99']} ms, per control step "
                f"p50 {b['base_step_ms_p50']} / p99 {b['base_step_ms_p99']} ms; the residual policy p50 "
                f"{b['residual_act_ms_p50']} / p99 {b['residual_act_ms_p99']} ms")
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        logger.plot_curve(run.evals, cfg, summary["per_1000_steps"])
        return summary
    except StopWaiting:  # a stop came while the env hung: the call is abandoned, the step it was in is not counted
        raise stopped() from None
    except TrainingInterrupted:
        raise
    except Exception as exc:  # after the first update, what was learned is kept where the learner can save it
        if checkpointed_at != step and learner.status.get("updates", 0) > 0 and learner_sound(exc):
            try:
                checkpoint(step)
                log(f"the run stopped at env step {step}: continue it with robot-rl train --resume {run_dir}")
            except Exception as again:  # noqa: BLE001 - the first error is the one to report
                log(f"no checkpoint could be saved at env step {step}: {type(again).__name__}: {again}")
        raise
    finally:
        logger.close()
        learner.close()
        env.close()
        eval_env.close()


def make_run_envs(cfg: TrainConfig):
    """The run's cell (what the actor steps: the twin's task, or the Gymnasium env ``cfg.env``
    through its map) and the evaluation env (by the task's own success, never the classifier's).
    With a base policy each has its own (``base_policy.BaseActionEnv``), checked before any work."""
    def make_cell(reward_classifier):
        if cfg.env:
            from robot_rl.foreign.env import make_foreign_env

            cameras = tuple(cfg.cameras) if cfg.obs == "pixels" else ()
            cell = make_foreign_env(cfg, cameras, cfg.image_size, reward_classifier)
        else:
            cell = make_cell_env(cfg.task, cfg.backend, cfg.obs, cfg.image_size, cfg.cameras, reward_classifier,
                                 **twin_contact(vars(cfg)))
        return with_base_policy(cfg, cell)

    cell = make_cell(cfg.reward_classifier)
    try:
        return cell, FlatObservation(make_cell(None), cfg.obs, cfg.cameras)
    except BaseException:
        cell.close()
        raise


def training_recorder(cfg: TrainConfig, cell, run_dir: Path):
    """With ``record_episodes``: every training episode into ``<run>/online.zarr`` (a resumed run
    appends to it), stamped in control periods."""
    if not cfg.record_episodes:
        return None
    from robot_rl.data.recorder import EpisodeRecorder, store_fields
    from robot_rl.data.store import EpisodeStore

    path = run_dir / "online.zarr"
    if path.exists():
        store = EpisodeStore.open(path, mode="a")
    else:
        fields, cams = store_fields(cell.observation_space, cell.action_space.shape[0])
        store = EpisodeStore.create(path, fields, task=task_name(cfg), robot="panda" if not cfg.env else cfg.env,
                                    control_hz=cell.unwrapped.limits.control_hz,
                                    cameras=cams, backend=cfg.backend, source="training",
                                    human_eagerness=cfg.human_eagerness, seed=cfg.seed)
    ticks = itertools.count()
    return EpisodeRecorder(store, clock=lambda: next(ticks) / cell.unwrapped.limits.control_hz)


def send_demos(cfg: TrainConfig, cell, env: FlatObservation, learner: LearnerClient, run: RunState,
               log) -> None:
    """The demonstrations to the learner's demo buffer: from a store, or recorded now by the scripted expert."""
    def send_demo(transition: Transition) -> None:
        learner.send("demo", transition_arrays(transition))

    if cfg.demo_store:
        from robot_rl.data.demos import load_demos

        info = load_demos(cfg.demo_store, env, task_name(cfg), send_demo, cfg.demo_map,
                          label=getattr(cell, "label", None))  # a base policy's actions at their observations
        episodes = info["episodes"]
        log(f"loaded {info['episodes']} demonstrations ({info['steps']} steps) from {cfg.demo_store}")
    elif cfg.demos:
        expert = None
        if cfg.env:
            from robot_rl.foreign.env import ScriptedExpert

            expert = ScriptedExpert(cell)
        info = collect_demos(cell, env.observation, cfg.task, cfg.demos, send_demo, seed=10_000 + 1000 * cfg.seed,
                             noise=cfg.demo_noise, expert=expert)
        episodes = None  # as asked: cfg.demos
        log(f"collected {info['episodes']} scripted demonstrations ({info['steps']} steps)")
    else:
        return  # no demonstrations: no steps to success of theirs
    run.record_demos(info["steps"], steps_to_success(info["episode_steps"], info["episode_success"]), episodes)


def log_episode(run: RunState, episode: dict, logger, step: int) -> None:
    """A finished training episode's scalars: the classifier's false positives so far (with a
    classifier's reward, which a policy learns to exploit) and, with a human, its takeovers and share."""
    if run.round.classifier_episodes is not None:
        logger.scalar("train/classifier_false_positive_episodes", run.classifier_total()["false_positive"], step)
    if run.round.human_eagerness > 0:
        logger.scalar("train/interventions_per_episode", episode["interventions"], step)
        logger.scalar("train/intervention_rate", episode["intervention_steps"] / max(episode["episode_steps"], 1), step)


def log_eval(result: dict, step: int, logger, log) -> None:
    logger.scalar("eval/success_rate", result["success_rate"], step)
    logger.scalar("eval/episode_length", result["episode_length"], step)
    if result.get("steps_to_success") is not None:
        logger.scalar("eval/steps_to_success", result["steps_to_success"], step)
    stops = result.get("reflex_stops", 0)
    logger.scalar("eval/reflex_stops", stops, step)
    stopped = f" ({stops} stopped by the collision reflex)" if stops else ""
    log(f"step {step}: eval success {result['success_rate']:.2f} over {result['episodes']} episodes{stopped}")

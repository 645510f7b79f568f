"""The actor loop: one control step at a time, the same code in ``robot-rl train`` (the sim twin
in-process) and in ``actor_node`` (a robot, or the twin, behind ROS 2 topics). ROS-free.

Per step: observe -> the human's action if the human holds the controls, else the policy's ->
execute -> a transition for the learner (flagged when the human drove) -> the episode's
recording and tally -> at the episode's end its record, then a reset. Between steps the newest
policy weights are swapped in. An observation holding NaN or an infinity stops the loop where it
comes from the env (``envs.NonFiniteObservation``, naming its key and the step). What the loop is driven by comes from its caller:

    env       a gym env of the robot contract (raw observations): ``PandaCellEnv`` or ``RosArmEnv``,
              perhaps behind a ``ClassifierReward``; wrapped here with ``OperatorOutcome``
    observe   raw observation -> the policy's flat observation (``FlatObservation.observation``)
    act       (raw, obs) -> action: the learner's policy, random actions, a scripted expert, ...
    human     raw -> action or None: a simulated human or the teleop devices (``None``: no human)
    learner   a ``LearnerClient`` (weights in, transitions out), or None
    recorder  an ``EpisodeRecorder`` (every finished episode, or only successes), or None

Operator events (``contract.OPERATOR_EVENTS``) go to ``handle``: success / failure end the
episode at the next step with that outcome, reset ends it now, rerecord ends it and drops its
recording, pause / resume stop and restart acting. When the arm holds (``arm_holds()`` names
why, e.g. e-stop, or its operator is gone) what was sent is not what happened: the episode is dropped, never
learned from or recorded, and the next one starts when the arm takes commands again. A collision
reflex (``arm_holds()`` says ``contract.ARM_STOPPED_BY_REFLEX``) is not dropped: the episode ends
there as a failure, learned from and recorded, as the twin's reflex ends one (``info["reflex"]``).
"""

from __future__ import annotations

import collections
import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from robot_rl.contract import ARM_STOPPED_BY_REFLEX, OPERATOR_EVENTS, Transition
from robot_rl.envs import check_observation
from robot_rl.reward.wrapper import OperatorOutcome
from robot_rl.errors import InputError, TrainingError
from robot_rl.runtime.learner import LearnerSetup, latest_only_kinds, learner_death, learner_main
from robot_rl.runtime.run_state import ActorCounts
from robot_rl.runtime.transport import PipeEndpoint, inprocess_pair, pipe_pair
from robot_rl.runtime.wire import transition_arrays


def _features(sha: str | None) -> str:
    return f"features of frozen encoder {sha[:12]}" if sha else "camera images (no frozen encoder)"


class LearnerClient:
    """The actor's side of the learner link: transitions out; weights, status, checkpoint notices
    and errors in. ``on_error(message)`` decides what a learner's error does. Over any
    ``Endpoint`` (the actor node's is a ROS one), or ``LearnerClient.start``: a learner of its own,
    in a child process or driven inline in this one.

    Weights are swapped in as they come, unless the actor keeps a schedule (the sim trainer with
    ``sync``): then each weights message waits until ``due_updates`` reaches the learner's update
    count it was made at, so the policy acting at an env step is the same on any machine (the
    first weights, after pre-training or a resume, always go in)."""

    def __init__(self, endpoint, policy, on_error: Callable[[str], None]):
        self.endpoint, self.policy, self.on_error = endpoint, policy, on_error
        self.process = None  # a learner process of its own (``start``)
        self.inline = None  # ... or a learner driven in this process: pumped on each send and poll
        self.run_dir: Path | None = None
        self.weights_version = 0
        self.status: dict = {"online_updates": 0, "updates": 0, "metrics": {}}
        self.last_checkpoint: str | None = None
        self.due_updates = math.inf  # a schedule sets it: swap in weights made up to this many online updates
        self._waiting: collections.deque = collections.deque()  # weights messages not yet due
        # how stale each policy swapped in was: the transitions this actor had sent that the learner
        # had not yet taken when it made those weights (counted from the first weights' "online")
        self.transitions_sent = 0
        self.lags: list[int] = []
        self._online_at_start: int | None = None
        self.weights_taken_in = 0  # the transitions this actor sent that the policy swapped in was made with
        self.weights_updates: int | None = None  # and the learner's updates it was made after

    @classmethod
    def start(cls, setup: LearnerSetup, policy, on_error: Callable[[str], None]) -> "LearnerClient":
        """A learner of its own, as ``setup.config.learner`` says: "process" (spawned, its own
        interpreter and torch threads) or "inline" (driven in this process; the same learner)."""
        cfg = setup.config
        latest_only = latest_only_kinds(cfg.sync)
        if cfg.learner == "inline":
            actor_end, learner_end = inprocess_pair(maxsize=1 << 20, latest_only=latest_only)
            torch.manual_seed(cfg.seed)  # as learner_main seeds its process: the same learner either way
            client = cls(actor_end, policy, on_error)
            client.inline = setup.build(learner_end)
        else:
            ctx = multiprocessing.get_context("spawn")
            learner_conn, actor_conn = pipe_pair(ctx)
            process = ctx.Process(target=learner_main, args=(learner_conn, setup.to_json()), daemon=True,
                                  name="robot-rl-learner")
            process.start()
            learner_conn.close()
            client = cls(PipeEndpoint(actor_conn, maxsize=4096, latest_only=latest_only, name="actor"), policy, on_error)
            client.process = process
        client.run_dir = Path(setup.run_dir)
        return client

    def _receive(self, timeout: float) -> list:
        if self.inline is not None:
            self.inline.pump()
            timeout = 0.0
        msgs = self.endpoint.receive(timeout)
        if not msgs and self.process is not None and not self.process.is_alive() and timeout > 0:
            raise TrainingError(learner_death(self.process.exitcode, self.process.pid, self.run_dir))
        return msgs

    def poll(self, timeout: float = 0.0) -> None:
        for msg in self._receive(timeout):
            if msg.kind == "weights" and msg.meta.get("version", 0) != self.weights_version:
                theirs, ours = msg.meta.get("frozen_encoder"), getattr(self.policy, "frozen_sha", None)
                if theirs != ours:  # same shapes, other features: the policy would act on noise
                    self.on_error(f"the learner's policy reads {_features(theirs)}, this actor's {_features(ours)}: "
                                  "give the actor and the learner the same frozen_encoder")
                    continue
                self._waiting.append(msg)
            elif msg.kind == "status":
                self.status = msg.meta
            elif msg.kind == "checkpoint_saved":
                self.last_checkpoint = msg.meta["path"]
            elif msg.kind == "error":
                self.on_error(str(msg.meta.get("message")))
        self._swap_due()

    def _swap_due(self) -> None:
        newest = self._waiting.popleft() if self.weights_version == 0 and self._waiting else None  # the first goes in
        while self._waiting and self._waiting[0].meta.get("online_updates", 0) <= self.due_updates:
            newest = self._waiting.popleft()
        if newest is not None:
            self.policy.load_policy_state_dict({k: torch.from_numpy(v) for k, v in newest.arrays.items()})
            self.weights_version = newest.meta.get("version", 0)
            self.weights_updates = newest.meta.get("updates")
            if "online" in newest.meta:
                if self._online_at_start is None:
                    self._online_at_start = int(newest.meta["online"]) - self.transitions_sent
                self.weights_taken_in = int(newest.meta["online"]) - self._online_at_start
                self.lags.append(self.transitions_sent - self.weights_taken_in)

    def ask_for_current_weights(self) -> Callable[[], bool]:
        """Ask the learner for its weights as they are now, every transition sent taken in and every
        update it made owed done (what its next checkpoint holds), to be swapped in as they come.
        Returns the condition to poll on: those weights are the policy's."""
        self.due_updates = math.inf
        sent = self.transitions_sent
        self.send("publish")
        return lambda: self.weights_taken_in >= sent

    def lag_figures(self) -> dict:
        """How many steps behind the actor the policies it swapped in were: p50, p99 and max over the
        swaps (None before any)."""
        lags = self.lags
        return {f"learner_lag_steps_{name}": (float(np.percentile(lags, q)) if lags else None)
                for name, q in (("p50", 50), ("p99", 99), ("max", 100))}

    def wait_for_first_weights(self, keep_waiting: Callable[[], bool], log: Callable[[str], None],
                               remind_every_s: float = 10.0) -> None:
        """Poll until the learner's first weights arrive, or ``keep_waiting()`` turns false."""
        reminded = time.monotonic()
        while self.weights_version == 0 and keep_waiting():
            self.poll(0.5)
            if self.weights_version == 0 and time.monotonic() - reminded >= remind_every_s:
                log("waiting for the learner's first weights (is the learner running?)")
                reminded = time.monotonic()

    def send(self, kind: str, arrays=None, meta=None) -> bool:
        ok = self.endpoint.send(kind, arrays, meta)
        self.transitions_sent += kind == "transition" and ok
        if self.inline is not None:
            self.inline.pump()
        return ok

    def close(self) -> None:
        """Stop a learner of its own (waiting for it to finish), then close the link."""
        self.endpoint.send("stop")
        if self.process is not None:
            self.process.join(timeout=30)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(timeout=5)
        self.endpoint.close()

    @property
    def dropped(self) -> int:
        return self.endpoint.dropped


class EpisodeTally:
    """One episode's return, length and interventions (a takeover = a run of human steps)."""

    def __init__(self):
        self.ret, self.steps, self.interventions, self.intervention_steps = 0.0, 0, 0, 0
        self._was_human = False

    def add(self, reward: float, human: bool) -> None:
        self.ret += float(reward)
        self.steps += 1
        self.intervention_steps += human
        self.interventions += human and not self._was_human
        self._was_human = human

    def summary(self) -> dict:
        return {"episode_steps": self.steps, "return": self.ret, "interventions": self.interventions,
                "intervention_steps": self.intervention_steps,
                "intervention_rate": self.intervention_steps / max(self.steps, 1)}


@dataclass
class StepResult:
    """What one control step did. ``episode``: the finished episode's record, if it ended."""

    reward: float
    by_human: bool
    success: bool
    info: dict
    episode_step: int
    episode_return: float
    episode: dict | None = None
    dropped: bool = False  # the arm held: the episode was dropped
    extra: dict = field(default_factory=dict)


class ActorLoop:
    def __init__(self, env, observe: Callable[[dict], dict], act: Callable[[dict, dict], np.ndarray], *,
                 human: Callable[[dict], np.ndarray | None] | None = None, learner: LearnerClient | None = None,
                 recorder=None, keep: str = "all", arm_holds: Callable[[], str] | None = None,
                 observe_now: Callable[[], dict] | None = None, ground_truth: bool = True,
                 stats: ActorCounts | None = None, reflex_reward: float = 0.0, log: Callable[[str], None] = print):
        """``observe_now``: a fresh raw observation without acting (after a pause; default: the
        last one stands, as in a simulator that does not move meanwhile). ``ground_truth``: the
        env reports the task's true success (a simulator), so each episode records whether it
        was solved, whatever the reward said. ``stats``: the counts this loop counts into,
        ``self.stats`` (default: new ones; ``robot-rl train`` gives its round's, ``RunState.start_round``).
        ``reflex_reward``: the reward of the step a collision reflex ended (a failure; 0 as any
        other, or below 0: ``robot-rl train --reflex-penalty``), the operator's outcome key aside."""
        if keep not in ("all", "successes"):
            raise InputError(f"keep must be 'all' or 'successes', got {keep!r}")
        self.env = OperatorOutcome(env)
        self.observe, self.act, self.human = observe, act, human
        self.learner, self.recorder, self.keep = learner, recorder, keep
        self.arm_holds, self.observe_now, self.ground_truth, self.log = arm_holds, observe_now, ground_truth, log
        self.reflex_reward = float(reflex_reward)
        self.stats = stats if stats is not None else ActorCounts()  # counted here, nowhere else
        self.episodes: list[dict] = []  # one record per finished episode
        self.paused = False
        self.raw: dict | None = None
        self._obs: dict | None = None
        self._end_request: str | None = None  # "reset" / "rerecord": the operator ends the episode
        self._solved = False  # the task was solved at some step, by the sim's ground truth
        self._tally = EpisodeTally()
        self._reset_due = False  # an episode ended: the next step() starts the next one

    # ---- episodes ----------------------------------------------------------------------
    def start(self, seed: int | None = None) -> None:
        """The first episode (``seed`` seeds its reset); later ones start by themselves."""
        self._new_episode(seed)

    def _new_episode(self, seed: int | None = None) -> None:
        self._reset_due = False
        self.raw, _ = self.env.reset(seed=seed)
        check_observation(self.raw, f"the env at reset (actor step {self.stats.steps})")
        self._obs = self.observe(self.raw)
        for part in (self.act, self.human):
            reset = getattr(part, "reset", None)
            if reset is not None:
                reset()
        self._tally, self._end_request, self._solved = EpisodeTally(), None, False
        if self.recorder is not None:
            self.recorder.start(self.raw)

    def _finish_episode(self, info: dict) -> dict:
        success = bool(info["success"])
        tally = self._tally.summary()
        self.stats.count_episode(success, tally["interventions"], tally["intervention_steps"])
        reflex = bool(info.get("reflex", False))
        self.stats.reflex_stops += reflex
        record = {"steps": self.stats.steps, "success": success, "reflex": reflex,
                  "ground_truth_solved": self._solved if self.ground_truth else None,
                  "reward_source": info.get("reward_source", "ground_truth"), "ended_by": self._end_request, **tally}
        if self.recorder is not None:
            if self._end_request == "rerecord":
                self.recorder.discard()
            elif self.keep == "all" or success:
                self.recorder.finish()
                self.stats.recorded += 1
            else:
                self.recorder.discard()
        if self._end_request == "rerecord":
            self.stats.rerecorded += 1
        self.episodes.append(record)
        return record

    # ---- operator ----------------------------------------------------------------------
    def handle(self, event: str) -> None:
        if event not in OPERATOR_EVENTS:
            raise InputError(f"unknown operator event {event!r}; known: {', '.join(OPERATOR_EVENTS)}")
        if event in ("success", "failure", "reset", "rerecord") and self._reset_due:
            self._new_episode()  # it is about the episode that starts now
        if event in ("success", "failure"):
            self.env.override(event == "success")
        elif event in ("reset", "rerecord"):
            self._end_request = event
        elif event == "pause" and not self.paused:
            self.paused = True
            self.log("paused by the operator: holding still until 'resume'")
        elif event == "resume" and self.paused:
            self.paused = False
            if self.observe_now is not None:  # the scene as it is now, not as it was at the pause
                self.raw = self.observe_now()
                self._obs = self.observe(self.raw)

    # ---- one control step --------------------------------------------------------------
    def step(self) -> StepResult | None:
        """One control step; None while paused (nothing is commanded)."""
        if self.paused:
            return None
        if self._reset_due:  # after the caller has seen the last episode's end (a robot's reset may wait)
            self._new_episode()
        if self.learner is not None:
            self.learner.poll()  # the newest weights, between control steps
        raw, obs = self.raw, self._obs
        human_action = self.human(raw) if self.human is not None else None
        action = human_action if human_action is not None else self.act(raw, obs)
        next_raw, reward, terminated, truncated, info = self.env.step(action)
        check_observation(next_raw, f"the env after step {self._tally.steps + 1} of its episode (actor step "
                                    f"{self.stats.steps + 1})")
        held = self.arm_holds() if self.arm_holds is not None else ""
        if held == ARM_STOPPED_BY_REFLEX:
            self.log(f"the arm stopped on its collision reflex: episode step {self._tally.steps + 1} ends the episode "
                     "as a failure")
            reward, terminated, info = 0.0, True, {**info, "success": False, "reflex": True}
        elif held:
            return self._drop_episode(held, reward, info)
        if info.get("reflex") and info.get("reward_source") != "operator":
            reward = self.reflex_reward
        by_human = human_action is not None
        if info.get("applied_by_operator"):  # the arm ran the operator's input: that is what is learned
            action, by_human = info["applied_action"], True
        if self._end_request and not terminated:
            truncated = True
        next_obs = self.observe(next_raw)
        if self.learner is not None:
            self.learner.send("transition", transition_arrays(Transition(obs, action, reward, next_obs, terminated,
                                                                         truncated, by_human)))
        if self.recorder is not None:
            self.recorder.step(action, next_raw, reward, terminated, truncated, success=bool(info["success"]),
                               is_intervention=by_human)
        self.stats.count_step()
        self._tally.add(reward, by_human)
        self._solved = self._solved or bool(info.get("ground_truth_success", info["success"]))
        result = StepResult(reward=float(reward), by_human=by_human, success=bool(info["success"]), info=info,
                            episode_step=self._tally.steps, episode_return=self._tally.ret)
        self.raw, self._obs = next_raw, next_obs
        if terminated or truncated:
            result.episode = self._finish_episode(info)
            self._reset_due = True
        return result

    def _drop_episode(self, why: str, reward: float, info: dict) -> StepResult:
        self.log(f"the arm holds ({why}): dropping this episode ({self._tally.steps} steps); the next starts when the arm "
                 f"takes commands")
        self.stats.dropped_arm_held += 1
        if self.recorder is not None:
            self.recorder.discard()
        steps = self._tally.steps
        self._reset_due = True  # a robot refuses (and waits out) the reset until its operator is back
        return StepResult(reward=float(reward), by_human=False, success=False, info=info, episode_step=steps,
                          episode_return=0.0, dropped=True)


class ScriptedPolicy:
    """The sim's scripted expert as the actor's policy (it reads the raw observation)."""

    def __init__(self, task: str, seed: int):
        from robot_rl.sim.experts import make_expert

        self.expert = make_expert(task, noise=0.1, seed=seed)

    def __call__(self, raw: dict, obs: dict) -> np.ndarray:
        return self.expert(raw)

    def reset(self) -> None:
        self.expert.reset()


class ScriptedMotions:
    """policy 'motions': a pattern that needs no scene, for checking a cell's arm path: a square in
    the horizontal plane at half the speed limit, ``side_steps`` steps a side, the gripper
    closing on the second side and opening on the fourth."""

    SIDES = ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))

    def __init__(self, side_steps: int = 4):
        self.side_steps, self.t = side_steps, 0

    def __call__(self, raw: dict, obs: dict) -> np.ndarray:
        side = (self.t // self.side_steps) % 4
        self.t += 1
        action = np.zeros(7, np.float32)
        action[:2] = 0.5 * np.asarray(self.SIDES[side])
        action[6] = {1: 1.0, 3: -1.0}.get(side, 0.0)
        return action

    def reset(self) -> None:
        self.t = 0


def hold_still(raw: dict, obs: dict) -> np.ndarray:
    """policy 'teleop': without a human action the arm holds still."""
    return np.zeros(7, np.float32)

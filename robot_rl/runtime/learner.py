"""The learner: owns the agent and the replay, turns transitions into gradient updates.

It talks to actors only through an ``Endpoint`` (see ``transport.py``):

    actor -> learner   "demo" / "transition"  arrays obs/<key>, next_obs/<key>, action, reward,
                                              terminated, truncated, is_intervention
                       "begin"               demos are in: pre-train, then start RL
                       "checkpoint"          meta {name, actor_state}: write a checkpoint
                       "stop"
    learner -> actor   "weights"             the policy's tensors, meta {version, updates, online}
                       "status"              meta {updates, online, metrics}
                       "checkpoint_saved"    meta {path}
                       "error"               meta {message}: the learner stopped

Losses stay on the device: the agent's updates return 0-d tensors, the learner keeps them and
reads them all at once (one device synchronisation) before it sends a status, weights or a
checkpoint, and at the latest every ``METRICS_EVERY`` updates; a non-finite loss among them stops
training before anything built on it leaves the learner.

Updates are paced by the update-to-data ratio: ``utd`` updates per online transition received,
done right after that transition is taken in and before the next one is (``take``), so every
update samples from exactly the transitions before it: what the learner learns is a function of
the transition stream alone, never of when the messages arrived or how loaded the machine is.
The actor is updated on every ``critic_actor_ratio``-th of them (the agent's setting).
The learner takes a typed config (any ``LearningConfig``: the trainer's ``TrainConfig``, the
learner node's ``LearnerNodeConfig``). ``learner_main`` runs the loop in its own process (its
``LearnerSetup`` travels as JSON); ``Learner.pump`` lets a single-process run drive the same
object between control steps.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import math
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robot_rl.agents.sac import BASE_ACTION, SACAgent, SACConfig, metrics_to_floats
from robot_rl.config import LearningConfig, TrainConfig
from robot_rl.config_values import config_from_dict
from robot_rl.errors import UserFacingError
from robot_rl.replay import BatchStaging, MixedReplay, ReplayBuffer, spec_from_json, spec_to_json
from robot_rl.replay.relabel import GoalLayout
from robot_rl.runtime.checkpoint import (check_same_encoder, load_agent, load_replay, read_agent_config,
                                         write_checkpoint)
from robot_rl.runtime.device import out_of_memory_says
from robot_rl.runtime.progress import ProgressLines
from robot_rl.runtime.transport import Endpoint, Message, PipeEndpoint
from robot_rl.runtime.wire import split_transition

LATEST_ONLY = ("weights", "status")
SCHEDULED = ("status",)  # weights in order, none dropped: a scheduled actor swaps each in at its env step


def latest_only_kinds(scheduled: bool) -> tuple[str, ...]:
    """The kinds an endpoint keeps only the newest of: an actor on a weights schedule (the sim
    trainer with ``sync``) needs every weights message, in order."""
    return SCHEDULED if scheduled else LATEST_ONLY
METRICS_EVERY = 100  # read the device-held losses at least this often (updates)


class NonFiniteLoss(UserFacingError):
    """A loss became NaN/inf: training stops; nothing broken is checkpointed."""


def _say(line: str) -> None:
    print(line, flush=True)  # the learner's process shares the actor's output


class Learner:
    def __init__(self, config: LearningConfig, agent: SACAgent, replay: MixedReplay, endpoint: Endpoint,
                 run_dir: Path):
        self.config = config  # checkpoints keep it whole (``train_config``)
        self.agent, self.replay, self.endpoint = agent, replay, endpoint
        self.run_dir = Path(run_dir)
        self.online_received = len(replay.online)
        self.started = agent.num_updates > 0  # resumed runs are past pre-training
        self.online_updates = 0 if not self.started else int(config.utd * self.online_received)
        self.weights_version = 0
        self.metrics: dict[str, float] = {}
        self._unread: list[tuple[int, dict]] = []  # (update number, metrics still on the device)
        self._staging: BatchStaging | None = None  # reusable (pinned on CUDA) host batch
        self.stopped = False
        self.last_checkpoint: str | None = None
        self.normalizer_fitted = self.started or len(replay.demo) > 0
        # optionally the human's corrections also teach the cloned base policy (DAgger-style):
        # intervention_bc_steps behaviour-cloning steps on the demo buffer per human step received
        self.human_steps_received = 0
        self.human_bc_steps = 0
        # a cloned base nothing trains after cloning: the replay keeps its action with each observation
        self.keeps_base_actions = BASE_ACTION in replay.online.obs_spec

    def resume_from(self, agent: SACAgent) -> None:
        """Go on from a trained agent (a checkpoint's): it is past pre-training and its state
        normaliser is fitted; the updates owed for the online transitions received so far count
        as done. What enters the replay from now on is encoded by it (its base's actions, where
        kept, recomputed at what is stored already)."""
        self.agent = agent
        self.started = self.normalizer_fitted = True
        self.online_updates = int(self.config.utd * self.online_received)
        if self.replay.encode is not None:
            self.replay.encode = replay_encoding(agent, self.keeps_base_actions)
        self.store_base_actions()

    def reloaded_online(self, transitions: int) -> None:
        """``transitions`` online transitions were put into the replay directly (reloaded from a
        store): they count as received; a resumed learner owes no updates for them."""
        self.online_received = transitions
        self.online_updates = int(self.config.utd * transitions) if self.started else 0

    # ---- messages ----------------------------------------------------------------------
    def handle(self, msg: Message) -> None:
        if msg.kind == "transition":
            transition = split_transition(msg.arrays)
            self.replay.add(transition)
            self.online_received += 1
            self.human_steps_received += transition.is_intervention
        elif msg.kind == "demo":
            self.replay.add_demo(split_transition(msg.arrays))
        elif msg.kind == "begin":
            self.begin()
        elif msg.kind == "checkpoint":
            self.read_metrics()  # never checkpoint weights a non-finite loss has touched
            state = {**msg.meta.get("actor_state", {}), "updates": self.agent.num_updates,
                     "online_updates": self.online_updates, "train_config": dataclasses.asdict(self.config)}
            path = write_checkpoint(self.run_dir, msg.meta["name"], self.agent, self.replay, state)
            self.last_checkpoint = str(path)
            self.endpoint.send("checkpoint_saved", meta={"path": str(path)})
        elif msg.kind == "publish":  # the actor asks for the weights as they are now (its final evaluation)
            self.publish_weights()
        elif msg.kind == "stop":
            self.stopped = True

    def out_of_memory(self):
        """Out of GPU memory in an update: one line naming the sizes that fill it and the flags that shrink them."""
        c, a = self.config, self.agent.config
        images = f", images {a.image_size[0]}x{a.image_size[1]} from {len(a.cameras)} cameras" if a.cameras else ""
        return out_of_memory_says(
            f"the learner on {a.device} (update {self.agent.num_updates})",
            f"batch size {c.batch_size}, replay capacity {c.replay_capacity}, demo capacity {c.demo_capacity}{images}",
            "--batch-size, --replay-capacity, --demo-capacity, --image-size")

    def begin(self) -> None:
        """Demos are in: fit the state normaliser, clone the demos, warm up the critics.
        A resumed learner skips this and just publishes its weights."""
        with self.out_of_memory():
            self._begin()

    def _begin(self) -> None:
        c = self.config
        if not self.started and len(self.replay.demo):
            self.normalizer_fitted = True
            self.agent.fit_normalizer(self.replay.demo.sample(min(5000, 20 * len(self.replay.demo)))["obs"]["state"])
            cloning = 0 if self.agent.config.base_action_dim else c.pretrain_steps  # an external base: none
            progress = ProgressLines("learner: behaviour cloning on the demos", cloning, log=_say)
            for step in range(1, cloning + 1):
                self._record({"bc": self.agent.pretrain_actor(self.replay.demo.sample(c.batch_size))})
                progress.update(step)
            self.store_base_actions()  # the base is final: its actions at the demos
            progress = ProgressLines("learner: critic warm-up on the demos", c.critic_warmup_steps, log=_say)
            for step in range(1, c.critic_warmup_steps + 1):
                self._record(self.agent.update(self._sample(), update_actor=False))
                progress.update(step)
        self.started = True
        self.publish_weights()

    def store_base_actions(self) -> None:
        """The cloned base has changed for the last time (cloning is over, its normaliser fitted):
        its action at every stored observation, kept with it, so no update computes it again."""
        if self.keeps_base_actions:
            self.replay.keep_derived(BASE_ACTION, self.agent.base_action_spec()[BASE_ACTION],
                                     self.agent.stored_base_actions)

    def take(self, msg: Message) -> int:
        """Handle one message; after an online transition, do every update it makes owed at once.
        Returns the number of updates done."""
        self.handle(msg)
        done = 0
        if msg.kind == "transition":
            while self.updates_owed() > 0 and not self.stopped:
                self.update_once()
                done += 1
        return done

    # ---- updates -----------------------------------------------------------------------
    def _sample(self) -> dict:
        if self._staging is None:
            self._staging = BatchStaging(self.replay.online.obs_spec, self.replay.online.action_dim,
                                         self.config.batch_size, self.agent.device, end_pose=self.replay.end_pose)
        return self.replay.sample(self.config.batch_size, self.config.n_step, self.agent.config.discount,
                                  staging=self._staging)

    def _record(self, metrics: dict) -> None:
        """Keep an update's metrics (device tensors) unread; read them every METRICS_EVERY."""
        self._unread.append((self.agent.num_updates, metrics))
        if len(self._unread) >= METRICS_EVERY:
            self.read_metrics()

    def read_metrics(self) -> None:
        """Read every unread metric in one go; stop on the first non-finite one. The latest
        update's (non-bc) metrics become ``self.metrics``, which the status carries."""
        unread, self._unread = self._unread, []
        if not unread:
            return
        flat = {(i, name): value for i, (_, metrics) in enumerate(unread) for name, value in metrics.items()}
        values = metrics_to_floats(flat)
        for (i, name), value in values.items():
            if not math.isfinite(value):
                raise NonFiniteLoss(
                    f"non-finite {name} loss at update {unread[i][0]}; training stopped. "
                    f"Last good checkpoint: {self.last_checkpoint or 'none yet'}. Lower the learning rates or check rewards/observations."
                )
        for i in reversed(range(len(unread))):
            if "bc" not in unread[i][1]:
                self.metrics = {name: values[(i, name)] for name in unread[i][1]}
                break

    def updates_owed(self) -> int:
        starts = self.config.first_update_at(has_demos=len(self.replay.demo) > 0)
        if not self.started or self.online_received < starts:
            return 0
        return int(self.config.utd * self.online_received) - self.online_updates

    def update_once(self) -> None:
        with self.out_of_memory():
            self._update_once()

    def _update_once(self) -> None:
        if not self.normalizer_fitted:  # no demos: fit on the first online data, once
            self.agent.fit_normalizer(self.replay.online.sample(min(5000, len(self.replay.online)))["obs"]["state"])
            self.normalizer_fitted = True
            self.store_base_actions()
        step = self.online_updates
        actor_turn = (step % self.agent.config.critic_actor_ratio == 0
                      and self.online_received >= self.config.actor_delay)
        self._record(self.agent.update(self._sample(), update_actor=actor_turn))
        self.online_updates += 1
        owed_bc = int(self.config.intervention_bc_steps * self.human_steps_received) - self.human_bc_steps
        for _ in range(max(0, min(owed_bc, 10))):  # spread over updates: the actor is never kept waiting long
            self._record({"bc": self.agent.pretrain_actor(self.replay.demo.sample(self.config.batch_size))})
            self.human_bc_steps += 1
        if self.online_updates % self.config.weights_every == 0:
            self.publish_weights()

    def publish_weights(self) -> None:
        self.read_metrics()  # weights a non-finite loss has touched never reach the actor
        self.weights_version += 1
        self.endpoint.send("weights", self.agent.policy_state_dict(),
                           {"version": self.weights_version, "updates": self.agent.num_updates,
                            "online_updates": self.online_updates, "online": self.online_received,
                            "frozen_encoder": self.agent.frozen_sha})
        self.send_status()

    def send_status(self) -> None:
        self.read_metrics()
        self.endpoint.send("status", meta={"updates": self.agent.num_updates, "online_updates": self.online_updates,
                                           "online": self.online_received, "metrics": self.metrics})

    def pump(self, timeout: float = 0.0) -> None:
        """Take every waiting message, each with the updates it makes owed (single-process driving)."""
        done = sum(self.take(msg) for msg in self.endpoint.receive(timeout))
        if done:
            self.send_status()

    def run(self, keep_running: Callable[[], bool] = lambda: True, every_pass: Callable[[], None] | None = None,
            kinds: tuple[str, ...] | None = None) -> None:
        """The learner's main loop, in its own process (``learner_main``) and in the ROS learner
        node alike: messages in the order they came, each transition's updates right after it; a
        status after each batch of messages that brought updates. It ends on a stop message, when
        the peer is gone, or when ``keep_running()`` turns false; ``every_pass()`` runs after each
        message and each wait (the node's timed checkpoints); ``kinds``: the message kinds taken
        (others are ignored; None: all). Both are checked between messages, not once per batch:
        a learner behind its actor receives hundreds at once, minutes of updates, and its
        checkpoints and its stop (a stack stopping it with SIGTERM, SIGKILL 10 s on) must not wait
        for them all."""
        while not self.stopped and keep_running():
            done = 0
            for msg in self.endpoint.receive(0.05):
                if not keep_running():
                    return
                if kinds is None or msg.kind in kinds:
                    done += self.take(msg)
                if every_pass is not None:
                    every_pass()
            if self.endpoint.peer_closed and not self.stopped:
                break
            if done:
                self.send_status()
            if every_pass is not None:
                every_pass()


def build_learner(config: LearningConfig, agent_config: SACConfig, obs_spec: dict, endpoint: Endpoint,
                  run_dir: Path, resume_from: str | None = None, goal: GoalLayout | None = None,
                  goal_relabel: float = 0.0) -> Learner:
    """A learner with a new agent and empty buffers (``obs_spec``: ``{key: (shape, dtype)}``), or
    the agent and replay of the checkpoint ``resume_from``. ``goal``: where a goal-conditioned
    env's goal lies in the state; ``goal_relabel``: the share of each batch given hindsight goals."""
    if resume_from:
        # the run's agent config, the one the actor's policy is built from: one source for both
        saved = read_agent_config(Path(resume_from))
        check_same_encoder(saved, agent_config, Path(resume_from))
        agent = load_agent(Path(resume_from) / "agent.safetensors", device=agent_config.device, config=agent_config)
    else:
        agent = SACAgent(agent_config)
    # a goal relabelled in a batch's states would need the base's action at the new goal: not kept then
    keep_base = agent.base_is_fixed_per_observation and config.intervention_bc_steps == 0 and not goal_relabel
    base_spec = agent.base_action_spec() if keep_base else {}
    encode = replay_encoding(agent, keep_base)
    if resume_from:
        replay = load_replay(Path(resume_from), agent.frozen_sha, encode)
        replay.close_episodes()  # the env starts a new episode: never join it on to the saved one
        # the checkpoint's base is final: its actions recomputed (or no longer kept, if it trains on)
        replay.keep_derived(BASE_ACTION, base_spec.get(BASE_ACTION), agent.stored_base_actions)
    else:
        act, spec, features = agent.config.action_dim, {**agent.replay_spec(obs_spec), **base_spec}, agent.frozen_sha
        replay = MixedReplay(ReplayBuffer(config.replay_capacity, spec, act, seed=config.seed, features=features),
                             ReplayBuffer(config.demo_capacity, spec, act, seed=config.seed + 1, features=features),
                             config.demo_fraction, encode=encode)
    replay.takeover_penalty = config.takeover_penalty  # a resumed run takes the current one
    replay.set_goal_relabel(goal, goal_relabel)
    replay.end_pose = agent.end_pose_head is not None  # batches carry what the end-pose head learns from
    return Learner(config, agent, replay, endpoint, run_dir)


def replay_encoding(agent: SACAgent, keep_base: bool):
    """What an observation becomes as it enters the replay (None: itself): with a frozen backbone
    its frames become the backbone's features; with ``keep_base`` it carries the cloned base's
    motion action (``BASE_ACTION``: a base nothing trains after cloning acts the same there every
    time, so an update reads it instead of running the base again)."""
    if agent.frozen is None and not keep_base:
        return None

    def encode(obs: dict) -> dict:
        stored = agent.cache_features(obs)
        if not keep_base:
            return stored
        base = agent.stored_base_actions({k: np.asarray(v)[None] for k, v in stored.items()})[0]
        return {**stored, BASE_ACTION: base}

    return encode


@dataclass
class LearnerSetup:
    """What the learner process starts from; it travels as JSON (``to_json`` / ``from_json``), never pickle."""

    config: TrainConfig
    agent: SACConfig
    obs_spec: dict  # {key: (shape, dtype)}
    run_dir: str
    resume_from: str | None = None
    goal: GoalLayout | None = None  # a goal-conditioned env's goal in the state (hindsight relabelling)
    goal_relabel: float = 0.0  # the share of each batch relabelled (``commands.learning_aids.hindsight_goals``)

    def to_json(self) -> str:
        return json.dumps({"config": dataclasses.asdict(self.config), "agent": dataclasses.asdict(self.agent),
                           "obs_spec": spec_to_json(self.obs_spec), "run_dir": self.run_dir,
                           "resume_from": self.resume_from,
                           "goal": None if self.goal is None else self.goal.to_json(),
                           "goal_relabel": self.goal_relabel})

    @classmethod
    def from_json(cls, text: str) -> "LearnerSetup":
        data = json.loads(text)
        return cls(config_from_dict(TrainConfig, data["config"], "the learner's setup"),
                   SACConfig.from_dict(data["agent"]), spec_from_json(data["obs_spec"]), data["run_dir"],
                   data["resume_from"], None if data.get("goal") is None else GoalLayout.from_json(data["goal"]),
                   float(data.get("goal_relabel", 0.0)))

    def build(self, endpoint: Endpoint) -> Learner:
        return build_learner(self.config, self.agent, self.obs_spec, endpoint, Path(self.run_dir), self.resume_from,
                             self.goal, self.goal_relabel)


LEARNER_FAULT_LOG = "learner_faults.log"  # in the run folder: the learner process's native-crash tracebacks


def learner_death(exitcode: int | None, pid: int | None, run_dir: Path) -> str:
    """One line on a learner process that ended without a message: how (signal or exit code), and
    where what it left is (its fault log, else this command's stderr)."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "an unknown signal"
        how = f"was killed by {name} (signal {-exitcode})"
        if -exitcode == signal.SIGKILL:
            how += ", as the kernel's out-of-memory killer does (`dmesg` names it then) or `kill -9`"
    else:
        how = f"exited with code {exitcode}"
    faults = run_dir / LEARNER_FAULT_LOG
    if faults.is_file() and faults.stat().st_size:
        where = f"its fault log: {faults}"
    else:
        where = "it left no fault log (anything it printed is above, on this command's stderr)"
    return (f"the learner process (pid {pid}) {how} without a message; {where}; the run's checkpoints are "
            f"in {run_dir / 'checkpoints'} (robot-rl train --resume {run_dir})")


def learner_main(conn, setup_json: str) -> None:
    """Entry point of the learner process (spawned); ``setup_json``: ``LearnerSetup.to_json()``."""
    setup = LearnerSetup.from_json(setup_json)
    # a crash in native code (SIGSEGV, SIGABRT, SIGBUS, ...) leaves its Python traceback here for the
    # actor's one-line report (SIGKILL leaves nothing: the report says so)
    Path(setup.run_dir).mkdir(parents=True, exist_ok=True)
    faults = open(Path(setup.run_dir) / LEARNER_FAULT_LOG, "w")
    faulthandler.enable(file=faults)
    # Ctrl-C reaches the whole process group: the actor handles it (a checkpoint, then stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    torch.manual_seed(setup.config.seed)
    endpoint = PipeEndpoint(conn, maxsize=4096, latest_only=latest_only_kinds(setup.config.sync), name="learner")
    try:
        learner = setup.build(endpoint)
        learner.run()
    except Exception as err:  # report to the actor, which shows it to the user
        message = str(err) if isinstance(err, UserFacingError) else f"learner failed: {err!r}\n{traceback.format_exc()}"
        endpoint.send("error", meta={"message": message})
        time.sleep(0.5)
    finally:
        endpoint.close()
        faulthandler.disable()
        faults.close()
        if not Path(faults.name).stat().st_size:  # an ordinary end leaves no empty log behind
            Path(faults.name).unlink()

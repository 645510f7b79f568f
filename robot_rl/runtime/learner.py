"""The learner: owns the agent and the replay, turns transitions into gradient updates.

It talks to actors only through an ``Endpoint`` (see ``transport.py``):

    actor -> learner   "demo" / "transition"  arrays obs/<key>, next_obs/<key>, action, reward,
                                              terminated, truncated, is_intervention
                       "begin"               demos are in: pre-train, then start RL
                       "checkpoint"          meta {name, actor_state}: write a checkpoint
                       "stop"
    learner -> actor   "weights"             the policy's tensors, meta {version, updates}
                       "status"              meta {updates, online, metrics}
                       "checkpoint_saved"    meta {path}
                       "error"               meta {message}: the learner stopped

Updates are paced by the update-to-data ratio: at most ``utd`` updates per online transition
received. ``learner_main`` runs the loop in its own process; ``Learner.pump`` lets a
single-process run drive the same object between control steps.
"""

from __future__ import annotations

import json
import math
import signal
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.errors import UserFacingError
from robot_rl.replay import MixedReplay, ReplayBuffer
from robot_rl.runtime.checkpoint import load_agent, load_replay, write_checkpoint
from robot_rl.runtime.transport import Endpoint, Message, PipeEndpoint

LATEST_ONLY = ("weights", "status")


def split_transition(arrays: dict[str, np.ndarray]) -> tuple:
    obs = {k[4:]: v for k, v in arrays.items() if k.startswith("obs/")}
    next_obs = {k[9:]: v for k, v in arrays.items() if k.startswith("next_obs/")}
    return (obs, arrays["action"], float(arrays["reward"]), next_obs, bool(arrays["terminated"]),
            bool(arrays["truncated"]), bool(arrays.get("is_intervention", False)))


def transition_arrays(obs, action, reward, next_obs, terminated, truncated, is_intervention=False) -> dict:
    arrays = {f"obs/{k}": v for k, v in obs.items()}
    arrays.update({f"next_obs/{k}": v for k, v in next_obs.items()})
    arrays.update(action=np.asarray(action, np.float32), reward=np.float32(reward),
                  terminated=np.bool_(terminated), truncated=np.bool_(truncated),
                  is_intervention=np.bool_(is_intervention))
    return arrays


class NonFiniteLoss(UserFacingError):
    """A loss became NaN/inf: training stops; nothing broken is checkpointed."""


class Learner:
    def __init__(self, train: dict, agent: SACAgent, replay: MixedReplay, endpoint: Endpoint, run_dir: Path):
        self.train = train  # the TrainConfig as a dict (the learner needs only a few fields)
        self.agent, self.replay, self.endpoint = agent, replay, endpoint
        self.run_dir = Path(run_dir)
        self.online_received = len(replay.online)
        self.started = agent.num_updates > 0  # resumed runs are past pre-training
        self.online_updates = 0 if not self.started else int(train["utd"] * self.online_received)
        self.weights_version = 0
        self.metrics: dict[str, float] = {}
        self.stopped = False
        self.last_checkpoint: str | None = None
        self.normalizer_fitted = self.started or len(replay.demo) > 0
        # optionally the human's corrections also teach the cloned base policy (DAgger-style):
        # intervention_bc_steps behaviour-cloning steps on the demo buffer per human step received
        self.human_steps_received = 0
        self.human_bc_steps = 0

    # ---- messages ----------------------------------------------------------------------
    def handle(self, msg: Message) -> None:
        if msg.kind == "transition":
            transition = split_transition(msg.arrays)
            self.replay.add(*transition)
            self.online_received += 1
            self.human_steps_received += bool(transition[-1])
        elif msg.kind == "demo":
            self.replay.add_demo(*split_transition(msg.arrays)[:6])
        elif msg.kind == "begin":
            self.begin()
        elif msg.kind == "checkpoint":
            state = {**msg.meta.get("actor_state", {}), "updates": self.agent.num_updates,
                     "online_updates": self.online_updates, "train_config": self.train}
            path = write_checkpoint(self.run_dir, msg.meta["name"], self.agent, self.replay, state)
            self.last_checkpoint = str(path)
            self.endpoint.send("checkpoint_saved", meta={"path": str(path)})
        elif msg.kind == "stop":
            self.stopped = True

    def begin(self) -> None:
        """Demos are in: fit the state normaliser, clone the demos, warm up the critics.
        A resumed learner skips this and just publishes its weights."""
        t = self.train
        if not self.started and len(self.replay.demo):
            self.normalizer_fitted = True
            self.agent.fit_normalizer(self.replay.demo.sample(min(5000, 20 * len(self.replay.demo)))["obs"]["state"])
            for _ in range(t["pretrain_steps"]):
                self._check(self.agent.pretrain_actor(self.replay.demo.sample(t["batch_size"])), "bc")
            for _ in range(t["critic_warmup_steps"]):
                self._check_all(self.agent.update(self._sample(), update_actor=False))
        self.started = True
        self.publish_weights()

    # ---- updates -----------------------------------------------------------------------
    def _sample(self) -> dict:
        return self.replay.sample(self.train["batch_size"], self.train["n_step"], self.agent.config.discount)

    def _check(self, value: float, name: str) -> None:
        if not math.isfinite(value):
            raise NonFiniteLoss(
                f"non-finite {name} loss at update {self.agent.num_updates}; training stopped. "
                f"Last good checkpoint: {self.last_checkpoint or 'none yet'}. Lower the learning rates or check rewards/observations."
            )

    def _check_all(self, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self._check(value, name)
        self.metrics = metrics

    def updates_owed(self) -> int:
        t = self.train
        # without demos, learning waits for the random-action phase (the normaliser is fitted on it)
        starts = t["learning_starts"] or (t["random_steps"] if not len(self.replay.demo) else 0)
        if not self.started or self.online_received < starts:
            return 0
        return int(t["utd"] * self.online_received) - self.online_updates

    def update_once(self) -> None:
        if not self.normalizer_fitted:  # no demos: fit on the first online data, once
            self.agent.fit_normalizer(self.replay.online.sample(min(5000, len(self.replay.online)))["obs"]["state"])
            self.normalizer_fitted = True
        step = self.online_updates
        actor_turn = step % self.train["critic_actor_ratio"] == 0 and self.online_received >= self.train.get("actor_delay", 0)
        self._check_all(self.agent.update(self._sample(), update_actor=actor_turn))
        self.online_updates += 1
        owed_bc = int(self.train.get("intervention_bc_steps", 0) * self.human_steps_received) - self.human_bc_steps
        for _ in range(max(0, min(owed_bc, 10))):  # spread over updates: the actor is never kept waiting long
            self._check(self.agent.pretrain_actor(self.replay.demo.sample(self.train["batch_size"])), "bc")
            self.human_bc_steps += 1
        if self.online_updates % self.train["weights_every"] == 0:
            self.publish_weights()

    def publish_weights(self) -> None:
        self.weights_version += 1
        self.endpoint.send("weights", self.agent.policy_state_dict(),
                           {"version": self.weights_version, "updates": self.agent.num_updates})
        self.send_status()

    def send_status(self) -> None:
        self.endpoint.send("status", meta={"updates": self.agent.num_updates, "online_updates": self.online_updates,
                                           "online": self.online_received, "metrics": self.metrics})

    def pump(self, timeout: float = 0.0, max_updates: int | None = None) -> None:
        """Handle every waiting message, then do the updates owed (single-process driving)."""
        for msg in self.endpoint.receive(timeout):
            self.handle(msg)
        done = 0
        while self.updates_owed() > 0 and not self.stopped and (max_updates is None or done < max_updates):
            self.update_once()
            done += 1
        if done:
            self.send_status()

    def run(self) -> None:
        """Process main loop: updates as fast as data allows; messages between updates."""
        while not self.stopped:
            owed = self.updates_owed()
            for msg in self.endpoint.receive(0.0 if owed > 0 else 0.05):
                self.handle(msg)
            if self.endpoint.peer_closed and not self.stopped:
                break
            if owed > 0:
                for _ in range(min(owed, 10)):
                    self.update_once()
                self.send_status()


def build_learner(train: dict, agent_config: dict, obs_spec: dict, endpoint: Endpoint, run_dir: Path,
                  resume_from: str | None = None) -> Learner:
    if resume_from:
        agent = load_agent(Path(resume_from) / "agent.safetensors")
        replay = load_replay(Path(resume_from))
        replay.close_episodes()  # the env starts a new episode: never join it on to the saved one
    else:
        agent = SACAgent(SACConfig.from_dict(agent_config))
        spec = {k: (tuple(shape), np.dtype(dtype)) for k, (shape, dtype) in obs_spec.items()}
        act = agent.config.action_dim
        replay = MixedReplay(ReplayBuffer(train["replay_capacity"], spec, act, seed=train["seed"]),
                             ReplayBuffer(train["demo_capacity"], spec, act, seed=train["seed"] + 1),
                             train["demo_fraction"])
    return Learner(train, agent, replay, endpoint, run_dir)


def learner_main(conn, setup_json: str) -> None:
    """Entry point of the learner process (spawned). ``setup_json``: train config, agent
    config, observation spec, run folder and the checkpoint to resume from."""
    setup = json.loads(setup_json)
    # Ctrl-C reaches the whole process group: the actor handles it (a checkpoint, then stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(setup.get("torch_threads", 1))
    torch.manual_seed(setup["train"]["seed"])
    endpoint = PipeEndpoint(conn, maxsize=4096, latest_only=LATEST_ONLY, name="learner")
    try:
        learner = build_learner(setup["train"], setup["agent"], setup["obs_spec"], endpoint, Path(setup["run_dir"]),
                                setup.get("resume_from"))
        learner.run()
    except Exception as err:  # report to the actor, which shows it to the user
        message = str(err) if isinstance(err, UserFacingError) else f"learner failed: {err!r}\n{traceback.format_exc()}"
        endpoint.send("error", meta={"message": message})
        time.sleep(0.5)
    finally:
        endpoint.close()

"""A foreign Gymnasium env as the learner's cell: ``MappedEnv`` applies an ``EnvMap`` to an env in
this process or in a worker (``client.open_env``) and gives the contract's observation dict
(``{"state": float32[S], "images": {camera: uint8[H, W, 3]}}``) and takes the policy's action
(float32 in [-1, 1]: the motion dimensions, then the gripper's when the map has one), so the
actor loop, the learner, the recorder and the evaluation run on it as on the twin.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

from robot_rl.contract import ControlLimits, resize_frame
from robot_rl.envs import non_finite_error
from robot_rl.errors import InputError
from robot_rl.foreign.client import open_env
from robot_rl.foreign.mapping import EnvMap, parse_env_kwargs, parse_ref, read_env_map, select


@dataclasses.dataclass(frozen=True)
class ForeignTask:
    """What a run reads of its task (``agent_config_for``, summaries): the twin's tasks say the same."""

    name: str
    uses_gripper: bool
    gripper_open_index: int | None  # where the mapped state says the gripper is open (1) or not (0)
    max_episode_steps: int | None
    foreign: bool = True


class MappedEnv(gym.Env):
    """See the module's doc. ``info`` gains ``success`` (by the map's rule; ``success_source`` says
    which) as the twin's does. With the map's ``end_on_success`` the step that says success ends
    the episode (terminated), for an env that would run on to its time limit. ``succeeded``: this
    episode has had a successful step (what an operator watching the scene stands by on). An
    observation whose numbers the map reads holding NaN or an infinity is a ``NonFiniteObservation``
    naming the env's key and the step."""

    full_state = True  # the mapped state is the policy's whole state observation (no privileged poses)

    def __init__(self, inner, env_map: EnvMap, env_id: str, cameras: tuple[str, ...] = (),
                 image_size: tuple[int, int] = (64, 64)):
        self.inner, self.env_id = inner, env_id
        self.map = env_map.resolve(inner.observation_space, inner.action_space, env_id)
        missing = [cam for cam in cameras if cam not in self.map.cameras]
        if missing:
            raise InputError(f"--env {env_id}: camera {missing[0]!r} is not in the env map ({self.map.source}); "
                             f"its cameras: {', '.join(self.map.cameras) or 'none'}")
        self.cameras, self.image_size = tuple(cameras), tuple(int(n) for n in image_size)
        spaces = {"state": gym.spaces.Box(-np.inf, np.inf, (self.map.state_dim,), np.float32)}
        if self.cameras:
            spaces["images"] = gym.spaces.Dict({cam: gym.spaces.Box(0, 255, (*self.image_size, 3), np.uint8)
                                                for cam in self.cameras})
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.map.action_dim,), np.float32)
        gripper = self.map.gripper
        open_index = self.map.state_dim - 1 if gripper is not None and gripper.open_state is not None else None
        self.max_episode_steps = inner.max_episode_steps
        self.task = ForeignTask(env_id, gripper is not None, open_index, inner.max_episode_steps)
        self.limits = ControlLimits(control_hz=float(getattr(inner, "control_hz", None) or 10.0))
        self.success_source: str | None = None  # what said success at the last step
        self.succeeded = False  # success at some step of this episode
        self.episode_step = 0
        self._episode_seeds: np.random.Generator | None = None  # seeds the unseeded resets after a seeded one
        gripper_key = [gripper.open_state["key"]] if gripper is not None and gripper.open_state is not None else []
        self._read = list(dict.fromkeys(list(self.map.state) + [r for pair in self.map.differences for r in pair]
                                        + gripper_key))  # the numbers the state is made of

    def watch(self, on_wait) -> None:
        """``on_wait(what, waited_s)`` while a reset or step waits (``client.Watched``)."""
        self.inner.on_wait = on_wait

    def _check(self, flat: dict) -> None:
        for ref in self._read:
            values = select(flat, ref)
            if not np.isfinite(values).all():
                key, part = parse_ref(ref)
                when = "at reset" if self.episode_step == 0 else f"after step {self.episode_step} of the episode"
                raise non_finite_error(f"env {self.env_id} {when}", key, values,
                                       np.arange(np.asarray(flat[key]).size)[part])

    def _observation(self, flat: dict) -> dict:
        self._check(flat)
        obs = {"state": self.map.state_of(flat)}
        if self.cameras:
            obs["images"] = {cam: resize_frame(flat[self.map.cameras[cam]], self.image_size) for cam in self.cameras}
        return obs

    def reset(self, *, seed: int | None = None, options=None):
        """A seeded reset seeds this and every later episode: an unseeded reset after it gets the
        next seed of a generator seeded by it. Gymnasium's convention is that an env seeded once
        goes on from its own generator, but not every env keeps it (panda-gym 3 draws fresh OS
        entropy at each unseeded reset): so one seed gives one run whatever the env does."""
        if seed is not None:
            self._episode_seeds = np.random.default_rng(seed)
        elif self._episode_seeds is not None:
            seed = int(self._episode_seeds.integers(2**31 - 1))
        flat, info = self.inner.reset(seed=seed)
        self.succeeded, self.episode_step = False, 0
        return self._observation(flat), info

    def step(self, action):
        action = np.asarray(action, np.float64).ravel()
        if action.shape != self.action_space.shape or not np.all(np.isfinite(action)):
            raise InputError(f"env {self.env_id}: the policy's action must be {self.action_space.shape[0]} finite "
                             f"numbers, got {action.tolist()}")
        flat, reward, terminated, truncated, info = self.inner.step(self.map.to_env_action(np.clip(action, -1, 1)))
        self.episode_step += 1
        success, self.success_source = self.map.success_of(info, reward)
        self.succeeded = self.succeeded or success
        if success and self.map.end_on_success:
            terminated, truncated = True, False  # the task is done: a terminal step, not a cut-off one
        return self._observation(flat), reward, terminated, truncated, {**info, "success": success}

    def expert_action(self) -> np.ndarray:
        """The scripted policy's (``--env-expert``) action for the last observation, as the policy's."""
        return self.map.to_policy_action(self.inner.expert_action())

    @property
    def has_expert_progress(self) -> bool:
        """The scripted policy also says how far the task has come (``policy.progress(obs)``)."""
        return bool(getattr(self.inner, "has_progress", False))

    def expert_progress(self) -> float:
        """The scripted policy's progress on the last observation, in [0, 1]."""
        return float(np.clip(self.inner.expert_progress(), 0.0, 1.0))

    def close(self) -> None:
        self.inner.close()


class ScriptedExpert:
    """The env's scripted policy as the demonstrator ``rollout.collect_demos`` runs, and as the
    expert of the simulated human that judges its progress (``progress``, ``resume``)."""

    def __init__(self, env: gym.Env):
        self.env = env.unwrapped

    def reset(self) -> None:
        pass  # the worker resets the policy with the env

    def resume(self, raw: dict) -> None:
        pass  # the scripted policy reads the scene each step: a takeover starts from what it sees

    def progress(self, raw: dict) -> float:
        return self.env.expert_progress()

    def __call__(self, raw: dict) -> np.ndarray:
        return self.env.expert_action()


def make_foreign_env(cfg, cameras: tuple[str, ...] = (), image_size=(64, 64), reward_classifier: str | None = None):
    """``cfg.env`` (with ``env_kwargs``, ``env_map``, ``env_python``, ``env_expert`` and a training
    run's ``env_timeout_s``, 0: no limit) as the run's cell, rendering ``cameras``; with
    ``reward_classifier`` the reward and the episode end come from the success classifier (whose
    cameras it renders too, at its size without pixels), as on the twin: the map's
    ``end_on_success`` is then left to the classifier's success (``ClassifierReward`` ends the
    episode there), never the env's own, which the run does not reward."""
    env_map = read_env_map(cfg.env_map)
    classifier = None
    if reward_classifier is not None:
        env_map = dataclasses.replace(env_map, end_on_success=False)
        from robot_rl.reward.classifier import load_classifier

        classifier, calibration = load_classifier(reward_classifier)
        if not cameras:
            image_size = classifier.config.image_size
        cameras = tuple(cameras) + tuple(c for c in classifier.config.cameras if c not in cameras)
    timeout_s = getattr(cfg, "env_timeout_s", None) or None
    inner = open_env(cfg.env, {**env_map.kwargs, **parse_env_kwargs(cfg.env_kwargs)}, cfg.env_python, cfg.env_expert,
                     env_map.setup, timeout_s)
    try:
        env = MappedEnv(inner, env_map, cfg.env, tuple(cameras), tuple(image_size))
    except BaseException:
        inner.close()
        raise
    if classifier is not None:
        from robot_rl.reward.wrapper import ClassifierReward

        env = ClassifierReward(env, classifier, calibration)
    return env

"""Environment wrappers between the robot contract and the learner.

The learner sees flat observation dicts: ``{"state": float32[S], "<camera>": uint8[H,W,3], ...}``.
``obs="state"`` concatenates the robot state with the sim-only privileged object poses and
each object's position relative to the TCP (as ManiSkill's state observations do: the
difference is what a policy needs, and learning it from absolute positions costs data);
``obs="pixels"`` is what a real cell offers: robot state (proprioception) plus cameras.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl.contract import STATE_SLICES, Transition
from robot_rl.errors import InputError, TrainingError

OBS_MODES = ("state", "pixels")


class NonFiniteObservation(TrainingError):
    """The env gave an observation holding NaN or an infinity: the env is the cause, not the policy
    or the learner (whose errors such an observation would otherwise become)."""


def non_finite_error(where: str, key: str, values, indices=None) -> NonFiniteObservation:
    """One line: ``where`` (the env and the step), the observation's key, which of its numbers."""
    values = np.asarray(values, np.float64).ravel()
    bad = np.flatnonzero(~np.isfinite(values))
    at = (np.arange(values.size) if indices is None else np.asarray(indices))[bad].tolist()
    kinds = " and ".join(sorted({"NaN" if np.isnan(v) else "inf" for v in values[bad]}))
    shown = f"{at[:8]}{' ...' if len(at) > 8 else ''}"
    return NonFiniteObservation(f"{where}: the env's observation {key!r} holds {kinds} at index {shown}; the env "
                                "gave it (the policy never saw it): fix the env, or leave the key out of its map")


def check_observation(obs: dict, where: str, prefix: str = "") -> None:
    """Raise ``NonFiniteObservation`` naming the first float array of ``obs`` (nested dicts as
    ``a/b``) that holds NaN or an infinity; ``where`` names the env and the step."""
    for key, value in obs.items():
        if isinstance(value, dict):
            check_observation(value, where, f"{prefix}{key}/")
            continue
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise non_finite_error(where, f"{prefix}{key}", arr)


class FlatObservation(gym.ObservationWrapper):
    """Dict observation from the contract -> the learner's flat dict."""

    def __init__(self, env: gym.Env, mode: str, cameras: tuple[str, ...] | None = None):
        """``cameras``: the ones a pixel policy reads (default: every camera the env renders;
        ignored with ``mode`` state)."""
        super().__init__(env)
        if mode not in OBS_MODES:
            raise InputError(f"obs mode must be one of {OBS_MODES}, got {mode!r}")
        self.mode = mode
        spaces = env.observation_space.spaces
        state_dim = spaces["state"].shape[0]
        self.privileged_keys = sorted(spaces["privileged"].spaces) if mode == "state" and "privileged" in spaces else []
        if mode == "state" and not getattr(env.unwrapped, "full_state", False):  # a mapped env's state is whole
            if not self.privileged_keys:
                raise InputError("obs='state' needs the sim's privileged object poses")
            state_dim += sum(spaces["privileged"][k].shape[0] + 3 for k in self.privileged_keys)
        rendered = tuple(spaces["images"].spaces) if "images" in spaces else ()
        self.cameras = (tuple(cameras) if cameras is not None else rendered) if mode == "pixels" else ()
        if mode == "pixels" and not self.cameras:
            raise InputError("obs='pixels' needs an env with images")
        missing = [cam for cam in self.cameras if cam not in rendered]
        if missing:
            raise InputError(f"the policy reads cameras {list(self.cameras)}; this env renders {list(rendered)}")
        # a base policy's action (``base_policy.BaseActionEnv``) ends the state: the residual policy reads it
        self.base_action_dim = spaces["base_action"].shape[0] if "base_action" in spaces else 0
        state_dim += self.base_action_dim
        flat = {"state": gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)}
        for cam in self.cameras:
            flat[cam] = spaces["images"][cam]
        self.observation_space = gym.spaces.Dict(flat)

    def observation(self, obs: dict) -> dict:
        state = obs["state"]
        if self.privileged_keys:
            tcp = state[STATE_SLICES["tcp_pos"]]
            poses = [obs["privileged"][k] for k in self.privileged_keys]
            state = np.concatenate([state] + poses + [pose[:3] - tcp for pose in poses])
        if self.base_action_dim:
            if "base_action" not in obs:
                raise TrainingError("this observation lacks the base policy's action (base_action): it did not "
                                    "come through the base policy's env (BaseActionEnv)")
            state = np.concatenate([state, obs["base_action"]])
        out = {"state": state.astype(np.float32)}
        for cam in self.cameras:
            out[cam] = obs["images"][cam]
        return out

    def transition(self, transition: Transition) -> Transition:
        """A transition of contract observations (a store's) with both made flat."""
        return transition._replace(obs=self.observation(transition.obs), next_obs=self.observation(transition.next_obs))


def obs_spec(space: gym.spaces.Dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Replay-buffer spec (shape, dtype) per key of a flat observation space."""
    return {k: (tuple(s.shape), np.dtype(s.dtype)) for k, s in space.spaces.items()}


def make_env(task: str, backend: str = "mujoco", obs: str = "state", image_size=(64, 64),
             cameras: tuple[str, ...] = ("front", "wrist"), reward_classifier: str | None = None) -> FlatObservation:
    """The sim twin wrapped for learning: ``make_cell_env`` behind a ``FlatObservation``."""
    return FlatObservation(make_cell_env(task, backend, obs, image_size, cameras, reward_classifier), obs, cameras)


def twin_contact(run: dict) -> dict:
    """How the twin meets contact in a run, from its settings (``TrainConfig``'s fields, or a
    checkpoint's ``train_config``): its collision reflex and its arm's force bound, as
    ``make_cell_env`` and ``robot_rl.sim.make`` take them, so that training, evaluations and the
    policy's recorded rollouts meet the same twin; {} for neither (the SO-101's twin has no such
    setting; runs from before them)."""
    from robot_rl.config import ARM_MAX_FORCE

    force = float(run.get("arm_max_force", ARM_MAX_FORCE))
    return {**({"collision_reflex": True} if run.get("collision_reflex") else {}),
            **({"max_force": force} if force != ARM_MAX_FORCE else {})}


def check_twin_contact(task: str, contact: dict) -> None:
    """One line where ``contact`` (``twin_contact``'s) asks a twin for what only the Panda's has."""
    from robot_rl.sim.tasks import get_task

    if contact and (robot := get_task(task).robot) != "panda":  # the SO-101's twin has neither
        what = "the collision reflex" if contact.get("collision_reflex") else "the arm's force bound"
        raise InputError(f"{what} is the Panda twin's (a Franka's); task {task} is the {robot}'s")


def make_cell_env(task: str, backend: str = "mujoco", obs: str = "state", image_size=(64, 64),
                  cameras: tuple[str, ...] = ("front", "wrist"), reward_classifier: str | None = None,
                  collision_reflex: bool = False, max_force: float | None = None) -> gym.Env:
    """The sim twin with contract (raw) observations, rendering what ``obs`` needs. Pixel mode
    keeps the privileged poses in the raw observation (the scripted demonstrator reads them);
    ``FlatObservation`` never shows them to the agent.

    With ``reward_classifier`` (a ``robot-rl classifier train`` folder) the reward and the
    episode end come from the success classifier, as on a real robot; the env's own success
    stays in ``info["ground_truth_success"]``. A state-observation env then renders the
    classifier's cameras for the classifier alone; a pixel env renders the policy's cameras and
    the classifier's (at one image size), ``FlatObservation(..., cameras)`` picks the policy's.
    An SO-101 task is its own twin (``robot_rl.sim.make``: sim/so101_env.py). ``collision_reflex``:
    the Panda twin stops as a Franka's collision reflex does; ``max_force``: its impedance
    controller's force bound, N per axis (None: the controller's own; sim/env.py)."""
    from robot_rl.sim import make

    if obs not in OBS_MODES:
        raise InputError(f"obs mode must be one of {OBS_MODES}, got {obs!r}")
    contact = {**({"collision_reflex": True} if collision_reflex else {}),
               **({"max_force": max_force} if max_force is not None else {})}
    check_twin_contact(task, contact)
    render = obs == "pixels"
    classifier = None
    if reward_classifier is not None:
        from robot_rl.reward.classifier import load_classifier

        classifier, calibration = load_classifier(reward_classifier)
        if obs == "state":
            render, cameras, image_size = True, classifier.config.cameras, classifier.config.image_size
        else:
            cameras = tuple(cameras) + tuple(c for c in classifier.config.cameras if c not in cameras)
    env = make(task, backend, images=render, image_size=tuple(image_size), cameras=tuple(cameras), **contact)
    if classifier is not None:
        from robot_rl.reward.wrapper import ClassifierReward

        env = ClassifierReward(env, classifier, calibration)
    return env


class SpecEnv(gym.Env):
    """A cell's observation and action spaces with no robot or simulator behind them: what a
    learner on another machine needs to shape its buffers and networks (and what store checks
    compare against)."""

    def __init__(self, task, cameras: tuple[str, ...] = (), image_size=(64, 64), privileged: bool = False,
                 base_action: bool = False):
        """``task``: a sim task's name, or a task object (a ``robot_rl.cell.CellTask``: a real
        cell's task file, which has object poses only when it names a sim task)."""
        from robot_rl import contract
        from robot_rl.sim.tasks import get_task

        self.task = get_task(task) if isinstance(task, str) else task
        self.cameras = tuple(cameras)
        self.observation_space = contract.observation_space(tuple(image_size) if self.cameras else None, self.cameras,
                                                            self.task.privileged_sizes() if privileged else None)
        self.action_space = contract.action_space()
        if base_action:  # a base policy's action beside each observation (base_policy.BaseActionEnv)
            self.observation_space = gym.spaces.Dict({**self.observation_space.spaces, "base_action": gym.spaces.Box(
                -1.0, 1.0, self.action_space.shape, np.float32)})

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("SpecEnv only describes spaces; it has no robot to reset")

    def step(self, action):
        raise RuntimeError("SpecEnv only describes spaces; it has no robot to step")


def spec_env(task, obs: str = "state", cameras: tuple[str, ...] = ("front", "wrist"), image_size=(64, 64),
             base_action: bool = False) -> FlatObservation:
    """The learner's view of a cell without the cell: state mode needs the sim's object poses,
    pixel mode the cameras; ``base_action``: the actors act on a base policy (its action ends the state)."""
    return FlatObservation(SpecEnv(task, cameras if obs == "pixels" else (), image_size, privileged=obs == "state",
                                   base_action=base_action), obs)

"""How a foreign Gymnasium env's observations and actions map onto the learner's (``EnvMap``).

A YAML file (``robot-rl train --env ID --env-map FILE.yaml``), every key optional::

    kwargs: {random_block_position: true}   # gym.make keywords (--env-kwargs KEY=VALUE adds to them)
    setup: cpu_render.py:no_shadows         # called once with the unwrapped env, in its interpreter
    state: [agent_pos, environment_state]   # observation keys, concatenated into the state vector
                                            # (a key may take a slice: "agent_pos[15:18]")
    differences: [[environment_state, "agent_pos[15:18]"]]   # also appended: the first minus the second
                                            # (an object relative to the hand, as the twin's state has it)
    cameras: {front: pixels/front, wrist: pixels/wrist}   # camera name: observation key (H x W x 3 uint8)
    action:
      motion: [0, 1, 2]      # the env's action dimensions the policy drives, in this order
      scale: 0.025           # env value = policy value (in [-1, 1]) x scale; one number or one per dimension
                             # (default: the Box's bounds, [-1, 1] onto [low, high])
      fixed: {3: 0.0}        # the other dimensions' value (default 0, clipped into the bounds)
    gripper:                 # an action dimension driven by the discrete grasp head
      index: 6
      close: 1.0             # the env's value for close, stay and open
      stay: 0.0
      open: -1.0
      open_state: {key: agent_pos, index: 14, below: 127.5}   # optional: when the gripper counts as open
    success: succeed         # the info key of success
    success_reward: 1.0      # or: a step's reward at or above this is success
                             # (neither: info's is_success, success or succeed, the first it has; else reward >= 1)
    end_on_success: true     # end the episode (terminated) at the step success is first seen, as HIL-SERL does,
                             # for an env that runs on to its time limit after success (default false: the
                             # env's own ends; under --reward-classifier the classifier's success ends it instead)
    goal:                    # a goal-conditioned env: hindsight relabelling (on by default; --goal-relabel)
      desired: desired_goal          # a state ref holding the goal
      achieved: "observation[7:10]"  # what must reach it, within the state (a state ref or part of one)
      within: 0.05                   # success: the two closer than this (Euclidean)
      reward: {success: 0.0, failure: -1.0}   # the env's reward at a success step and at any other

Nested Dict observations are named ``outer/inner``; a Box observation is ``obs``. Without a map,
the state is every non-image Box key, the cameras every H x W x 3 uint8 key, and every action
dimension is motion. ``check`` tests a map against the env's spaces: each mismatch is one line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robot_rl.errors import InputError, MissingFileError
from robot_rl.replay.relabel import GoalLayout

SUCCESS_KEYS = ("is_success", "success", "succeed")
MAP_KEYS = ("kwargs", "setup", "state", "differences", "cameras", "action", "gripper", "success", "success_reward",
            "end_on_success", "goal")
GOAL_KEYS = ("desired", "achieved", "within", "reward")


class EnvMapError(InputError):
    """A map that does not fit the env (or a file that is not a map)."""


@dataclass
class Gripper:
    index: int
    close: float = 1.0
    stay: float = 0.0
    open: float = -1.0
    open_state: dict | None = None  # {key, index, below | above}


@dataclass
class EnvMap:
    source: str = "the default map"  # where it came from, for error messages
    kwargs: dict = field(default_factory=dict)
    setup: str | None = None
    state: list[str] | None = None
    differences: list[tuple[str, str]] = field(default_factory=list)
    cameras: dict[str, str] | None = None
    motion: list[int] | None = None
    scale: list[float] | float | None = None
    fixed: dict[int, float] = field(default_factory=dict)
    gripper: Gripper | None = None
    success: str | None = None
    success_reward: float | None = None
    end_on_success: bool = False
    goal: dict | None = None  # {desired, achieved, within, reward: {success, failure}}

    def resolve(self, obs_space: dict, action_space: dict, env_id: str) -> "ResolvedMap":
        """Checked against the env's spaces (``worker.describe_space`` descriptions)."""
        where = f"env map ({self.source}) for {env_id}"
        if action_space["type"] in ("Discrete", "MultiDiscrete", "MultiBinary"):
            raise EnvMapError(f"{env_id} has a {action_space['type']} action space; robot-rl's SAC drives continuous "
                              "(Box) actions")
        if action_space["type"] != "Box" or len(action_space["shape"]) != 1:
            raise EnvMapError(f"{env_id}'s action space is {action_space.get('repr', action_space['type'])} with shape "
                              f"{action_space.get('shape')}; robot-rl needs a one-dimensional Box")
        leaves = flat_leaves(obs_space)
        bad = {k: v for k, v in leaves.items() if v["type"] != "Box"}
        images = {k for k, v in leaves.items() if is_image(v)}
        state = self.state if self.state is not None else [k for k in leaves if k not in images and k not in bad]
        if not state:
            raise EnvMapError(f"{where}: no state keys (its observation keys: {', '.join(leaves)})")
        sizes = {}
        for ref in list(state) + [ref for pair in self.differences for ref in pair]:
            key, part = parse_ref(ref, where)
            _known(key, leaves, where, "state")
            if key in bad or leaves[key]["dtype"][1] not in "biuf":
                raise EnvMapError(f"{where}: state key {key!r} is a {leaves[key]['type']}, not a numeric Box")
            sizes[ref] = len(range(_size(leaves[key]))[part])
            if sizes[ref] == 0:
                raise EnvMapError(f"{where}: {ref!r} selects nothing of {key!r} ({_size(leaves[key])} numbers)")
        for first, second in self.differences:
            if sizes[first] != sizes[second]:
                raise EnvMapError(f"{where}: differences: {first!r} has {sizes[first]} numbers, {second!r} "
                                  f"{sizes[second]}")
        cameras = self.cameras if self.cameras is not None else {k.split("/")[-1]: k for k in sorted(images)}
        for name, key in cameras.items():
            _known(key, leaves, where, f"camera {name!r}")
            if not is_image(leaves[key]):
                raise EnvMapError(f"{where}: camera {name!r} reads {key!r}, which is {leaves[key].get('dtype')} "
                                  f"{tuple(leaves[key].get('shape', ()))}, not H x W x 3 uint8")
        dims = action_space["shape"][0]
        low, high = _bounds(action_space, "low", dims), _bounds(action_space, "high", dims)
        gripper = self.gripper
        if gripper is not None:
            if not -dims <= gripper.index < dims:
                raise EnvMapError(f"{where}: gripper index {gripper.index} is out of range: the action has {dims} "
                                  f"dimensions (0..{dims - 1})")
            gripper = dataclasses.replace(gripper, index=gripper.index % dims)
            if gripper.open_state is not None:
                _check_open_state(gripper.open_state, leaves, where)
        motion = self.motion if self.motion is not None else [i for i in range(dims) if gripper is None or i != gripper.index]
        for i in list(motion) + list(self.fixed):
            if not -dims <= int(i) < dims:
                raise EnvMapError(f"{where}: action dimension {i} is out of range: the action has {dims} dimensions")
        motion = [int(i) % dims for i in motion]
        if gripper is not None and gripper.index in motion:
            raise EnvMapError(f"{where}: action dimension {gripper.index} is both motion and the gripper")
        if len(set(motion)) != len(motion):
            raise EnvMapError(f"{where}: action.motion repeats a dimension: {motion}")
        if self.scale is None:
            if not (np.all(np.isfinite(low[motion])) and np.all(np.isfinite(high[motion]))):
                raise EnvMapError(f"{where}: the action's bounds are infinite; give action.scale")
            scale, offset = (high[motion] - low[motion]) / 2.0, (high[motion] + low[motion]) / 2.0
        else:
            scale = np.broadcast_to(np.asarray(self.scale, np.float64), (len(motion),)).copy() if np.ndim(self.scale) == 0 \
                else np.asarray(self.scale, np.float64)
            if scale.shape != (len(motion),):
                raise EnvMapError(f"{where}: action.scale has {scale.size} numbers for {len(motion)} motion dimensions")
            offset = np.zeros(len(motion))
        base = np.clip(np.zeros(dims), low, high)
        for i, value in self.fixed.items():
            base[int(i) % dims] = float(value)
        return ResolvedMap(source=self.source, state=list(state), differences=[tuple(p) for p in self.differences],
                           cameras=dict(cameras), motion=motion,
                           scale=scale.astype(np.float64), offset=offset.astype(np.float64), base=base,
                           low=low, high=high, gripper=gripper, success=self.success,
                           success_reward=self.success_reward, end_on_success=self.end_on_success,
                           state_sizes=[sizes[k] for k in state] + [sizes[a] for a, _ in self.differences],
                           camera_shapes={n: tuple(leaves[k]["shape"]) for n, k in cameras.items()},
                           goal=None if self.goal is None else _goal_layout(self.goal, list(state), self.differences,
                                                                            sizes, where))


@dataclass
class ResolvedMap:
    """A map checked against one env: what ``MappedEnv`` applies at each step."""

    source: str
    state: list[str]
    differences: list[tuple[str, str]]
    cameras: dict[str, str]
    motion: list[int]
    scale: np.ndarray
    offset: np.ndarray
    base: np.ndarray
    low: np.ndarray
    high: np.ndarray
    gripper: Gripper | None
    success: str | None
    success_reward: float | None
    state_sizes: list[int]
    camera_shapes: dict[str, tuple]
    end_on_success: bool = False  # the episode ends (terminated) at the step ``success_of`` says success
    goal: GoalLayout | None = None  # where the goal lies in the state (hindsight relabelling), if declared

    @property
    def action_dim(self) -> int:
        return len(self.motion) + (self.gripper is not None)

    @property
    def state_dim(self) -> int:
        return sum(self.state_sizes) + (self.gripper is not None and self.gripper.open_state is not None)

    def to_env_action(self, action: np.ndarray) -> np.ndarray:
        """The policy's action (float32[action_dim] in [-1, 1]; the gripper last) -> the env's."""
        out = self.base.copy()
        out[self.motion] = action[: len(self.motion)] * self.scale + self.offset
        if self.gripper is not None:
            g = self.gripper
            out[g.index] = g.close if action[-1] > 0.5 else g.open if action[-1] < -0.5 else g.stay
        return np.clip(out, self.low, self.high)

    def to_policy_action(self, env_action: np.ndarray) -> np.ndarray:
        """The env's action (a scripted policy's) -> the policy's: motion divided back, clipped to
        [-1, 1]; the gripper's value to the nearest of close, stay and open."""
        env_action = np.asarray(env_action, np.float64).ravel()
        out = np.zeros(self.action_dim, np.float32)
        out[: len(self.motion)] = np.clip((env_action[self.motion] - self.offset) / self.scale, -1, 1)
        if self.gripper is not None:
            g = self.gripper
            values = np.array([g.close, g.stay, g.open])
            out[-1] = (1.0, 0.0, -1.0)[int(np.argmin(np.abs(values - env_action[g.index])))]
        return out

    def gripper_open(self, obs: dict) -> float:
        spec = self.gripper.open_state
        value = float(np.asarray(obs[spec["key"]]).ravel()[int(spec.get("index", 0))])
        return float(value < spec["below"]) if "below" in spec else float(value > spec["above"])

    def state_of(self, obs: dict) -> np.ndarray:
        parts = [select(obs, k) for k in self.state] + [select(obs, a) - select(obs, b) for a, b in self.differences]
        if self.gripper is not None and self.gripper.open_state is not None:
            parts.append(np.array([self.gripper_open(obs)], np.float32))
        return np.concatenate(parts)

    def success_of(self, info: dict, reward: float) -> tuple[bool, str]:
        """(success, what said so): the map's info key (``success``), else its reward rule
        (``success_reward``), else the first of ``SUCCESS_KEYS`` the info has, else reward >= 1."""
        if self.success:
            if self.success not in info:
                raise EnvMapError(f"env map ({self.source}): success key {self.success!r} is not in the env's info "
                                  f"(its keys: {', '.join(sorted(info)) or 'none'})")
            return bool(info[self.success]), f"info[{self.success!r}]"
        if self.success_reward is None:
            key = next((k for k in SUCCESS_KEYS if k in info), None)
            if key is not None:
                return bool(info[key]), f"info[{key!r}]"
        threshold = 1.0 if self.success_reward is None else self.success_reward
        return bool(reward >= threshold), f"reward >= {threshold:g}"


def parse_ref(ref: str, where: str = "env map") -> tuple[str, slice]:
    """``"key"`` or ``"key[a:b]"`` / ``"key[i]"`` -> (key, the slice of its flattened numbers)."""
    ref = str(ref)
    if not ref.endswith("]") or "[" not in ref:
        return ref, slice(None)
    key, _, inside = ref[:-1].partition("[")
    try:
        if ":" in inside:
            start, _, stop = inside.partition(":")
            return key, slice(int(start) if start else None, int(stop) if stop else None)
        return key, slice(int(inside), int(inside) + 1 or None)
    except ValueError:
        raise EnvMapError(f"{where}: {ref!r} is not key[i] or key[a:b]") from None


def select(obs: dict, ref: str) -> np.ndarray:
    key, part = parse_ref(ref)
    return np.asarray(obs[key], np.float32).ravel()[part]


def flat_leaves(space: dict, prefix: str = "") -> dict[str, dict]:
    """A described observation space as ``{"a/b": leaf description}``; a lone Box is ``obs``."""
    if space["type"] == "Dict":
        out = {}
        for key, sub in space["spaces"].items():
            out.update(flat_leaves(sub, f"{prefix}{key}/"))
        return out
    return {prefix[:-1] if prefix else "obs": space}


def is_image(leaf: dict) -> bool:
    return (leaf["type"] == "Box" and len(leaf["shape"]) == 3 and leaf["shape"][2] == 3
            and leaf["dtype"].endswith("u1"))


def _size(leaf: dict) -> int:
    return int(np.prod(leaf["shape"])) if leaf["shape"] else 1


def _bounds(space: dict, which: str, dims: int) -> np.ndarray:
    value = space[which]
    return np.broadcast_to(np.asarray(value, np.float64), (dims,)).copy()


def _known(key: str, leaves: dict, where: str, what: str) -> None:
    if key not in leaves:
        raise EnvMapError(f"{where}: {what} key {key!r} is not in the observation (its keys: {', '.join(leaves)})")


def _goal_layout(goal: dict, state: list[str], differences, sizes: dict, where: str) -> GoalLayout:
    """The map's ``goal`` as state indices: ``desired`` one of the state refs, ``achieved`` a state
    ref or a part of one, each difference with the goal on one side recomputed from the goal."""
    offsets, at = {}, 0
    for ref in state:
        offsets[ref], at = at, at + sizes[ref]
    diff_offsets = []
    for first, _ in differences:
        diff_offsets.append(at)
        at += sizes[first]

    def indices(ref: str, what: str) -> tuple[int, ...]:
        if ref in offsets:
            return tuple(range(offsets[ref], offsets[ref] + sizes[ref]))
        key, part = parse_ref(ref, where)
        if key in offsets and key in sizes:
            return tuple(offsets[key] + i for i in range(sizes[key])[part])
        raise EnvMapError(f"{where}: goal.{what} {ref!r} is not in the state (its refs: {', '.join(state)})")

    desired_ref, achieved_ref = str(goal["desired"]), str(goal["achieved"])
    if desired_ref not in offsets:
        raise EnvMapError(f"{where}: goal.desired {desired_ref!r} must be one of the state refs ({', '.join(state)})")
    desired, achieved = indices(desired_ref, "desired"), indices(achieved_ref, "achieved")
    if len(desired) != len(achieved):
        raise EnvMapError(f"{where}: goal.desired {desired_ref!r} has {len(desired)} numbers, goal.achieved "
                          f"{achieved_ref!r} {len(achieved)}")
    relative = []
    for (first, second), start in zip(differences, diff_offsets):
        if desired_ref in (first, second):
            other = second if first == desired_ref else first
            relative.append((tuple(range(start, start + sizes[first])), indices(other, "difference"),
                             1 if first == desired_ref else -1))
    return GoalLayout(desired=desired, achieved=achieved, relative=tuple(relative), within=float(goal["within"]),
                      reward_success=float(goal["reward"]["success"]), reward_failure=float(goal["reward"]["failure"]))


def _read_goal(goal, path) -> dict | None:
    if goal is None:
        return None
    reward = goal.get("reward") if isinstance(goal, dict) else None
    if (not isinstance(goal, dict) or set(goal) != set(GOAL_KEYS) or not isinstance(reward, dict)
            or set(reward) != {"success", "failure"}):
        raise EnvMapError(f"env map {path}: goal is {{desired, achieved, within, reward: {{success, failure}}}}, "
                          f"got {goal!r}")
    within = float(goal["within"])
    if not (np.isfinite(within) and within > 0):
        raise EnvMapError(f"env map {path}: goal.within is a distance > 0, got {goal['within']!r}")
    return {"desired": str(goal["desired"]), "achieved": str(goal["achieved"]), "within": within,
            "reward": {"success": float(reward["success"]), "failure": float(reward["failure"])}}


def _check_open_state(spec, leaves: dict, where: str) -> None:
    if not isinstance(spec, dict) or "key" not in spec or ("below" in spec) == ("above" in spec):
        raise EnvMapError(f"{where}: gripper.open_state is {{key, index, below or above}}, got {spec!r}")
    _known(spec["key"], leaves, where, "gripper.open_state")
    if not 0 <= int(spec.get("index", 0)) < _size(leaves[spec["key"]]):
        raise EnvMapError(f"{where}: gripper.open_state index {spec.get('index')} is out of range for "
                          f"{spec['key']!r} ({_size(leaves[spec['key']])} numbers)")


def read_yaml_map(path: Path, what: str, keys, error, missing=MissingFileError) -> dict:
    """A YAML map file (``what``: how errors name it) as a dict of ``keys`` alone: a missing file
    (``missing``), bad YAML, a non-mapping or an unknown key is one ``error`` line naming the file."""
    import yaml

    if not path.is_file():
        raise missing(f"{what} {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise error(f"{what} {path}: not valid YAML ({(str(exc).splitlines() or [''])[0]})") from None
    if not isinstance(data, dict):
        raise error(f"{what} {path}: a mapping of {', '.join(keys)} expected")
    unknown = [key for key in data if key not in keys]
    if unknown:
        raise error(f"{what} {path}: unknown key {unknown[0]!r} (known: {', '.join(keys)})")
    return data


def read_env_map(path: str | Path | None) -> EnvMap:
    """An ``EnvMap`` from a YAML file (None: the default map); a bad file is one line naming it."""
    if path is None:
        return EnvMap()
    path = Path(path)
    data = read_yaml_map(path, "env map", MAP_KEYS, EnvMapError)
    try:
        action = data.get("action") or {}
        gripper = data.get("gripper")
        if gripper is not None:
            if not isinstance(gripper, dict) or "index" not in gripper:
                raise EnvMapError(f"env map {path}: gripper needs an index (and its close, stay and open values)")
            gripper = Gripper(**{k: (int(v) if k == "index" else v if k == "open_state" else float(v))
                                 for k, v in gripper.items()})
        state = data.get("state")
        differences = data.get("differences") or []
        if not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in differences):
            raise EnvMapError(f"env map {path}: differences is a list of [key, key] pairs")
        end_on_success = data.get("end_on_success")
        end_on_success = False if end_on_success is None else end_on_success  # as other keys, empty is the default
        if not isinstance(end_on_success, bool):
            raise EnvMapError(f"env map {path}: end_on_success is true or false, got {end_on_success!r}")
        return EnvMap(differences=[(str(a), str(b)) for a, b in differences],source=str(path), kwargs=dict(data.get("kwargs") or {}), setup=data.get("setup"),
                      state=[str(k) for k in ([state] if isinstance(state, str) else state)] if state is not None else None,
                      cameras={str(k): str(v) for k, v in data["cameras"].items()} if data.get("cameras") is not None else None,
                      motion=[int(i) for i in action["motion"]] if "motion" in action else None,
                      scale=action.get("scale"), fixed={int(k): float(v) for k, v in (action.get("fixed") or {}).items()},
                      gripper=gripper, success=data.get("success"),
                      success_reward=None if data.get("success_reward") is None else float(data["success_reward"]),
                      end_on_success=end_on_success, goal=_read_goal(data.get("goal"), path))
    except EnvMapError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise EnvMapError(f"env map {path}: {exc}") from None


def parse_env_kwargs(items) -> dict:
    """``KEY=VALUE`` strings -> gym.make keywords (values read as YAML scalars: true, 0.5, text)."""
    import yaml

    out = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise InputError(f"--env-kwargs takes KEY=VALUE, got {item!r}")
        out[key] = yaml.safe_load(value) if value else ""
    return out

"""A LeRobot pretrained policy (a folder with ``config.json`` and ``model.safetensors``: ACT,
diffusion, SmolVLA, ... any type LeRobot loads) as a frozen base policy (robot_rl/base_policy.py).

Run in a worker of a LeRobot venv's interpreter (``--base-python``; LeRobot pins a torch ours
cannot share): ``foreign/worker.py --base robot_rl/foreign/lerobot_base.py:LeRobotBase FOLDER``.
Like worker.py it imports nothing of robot_rl, only LeRobot, torch and numpy.

The observation mapping is LeRobot's naming, as ``robot-rl data export --format lerobot`` writes
it: the flat observation's ``state`` is ``observation.state`` and each camera ``C`` (uint8
``[H, W, 3]``) is ``observation.images.C`` (float ``[1, 3, H, W]`` in [0, 1]); the policy's own
pre- and post-processors (saved beside it: its normalisation statistics) normalise the inputs
and map its actions back. A map (``--base-map``, ``robot_rl.base_policy.read_base_map``) says
otherwise for a policy trained elsewhere: ``cameras`` (the run's camera: the policy's image
key), ``resize`` (the run's images resized to the policy's size, antialiased, instead of
refused), ``state`` (which of the run's state numbers, in order, make the policy's state),
``action`` (for each of the run's action dimensions, the policy's action index it takes),
``action_scale`` and ``action_offset`` (the policy's value = the run's action x scale + offset:
a policy trained in metres or radians answers the contract's [-1, 1]) and ``task`` (the language
instruction a VLA reads, in LeRobot's batch ``task``). Each
query answers the policy's whole chunk (``predict_action_chunk``: ``[K, A]``); ``ActionChunks``
plays it. The map is checked against the policy when it loads, and what the policy reads
against the first observation (its state's width, its cameras and their sizes): one line naming
what differs.

The worker's argument is the policy's folder, or JSON ``{"folder": ..., "map": {...}}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

STATE = "observation.state"
IMAGES = "observation.images."


class LeRobotBase:
    def __init__(self, argument: str):
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        # one thread: the base shares the cores with the sim and the learner, and OpenMP threads that
        # outnumber the free cores cost 50x (an ACT query on 2 busy cores: 21 ms on one thread, 1.1 s on two)
        torch.set_num_threads(1)
        given = json.loads(argument) if argument.lstrip().startswith("{") else {"folder": argument}
        folder, mapping = given["folder"], given.get("map") or {}
        path = Path(folder)
        if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"{folder} is not a LeRobot pretrained policy (config.json and "
                                    "model.safetensors)")
        self.torch = torch
        config = PreTrainedConfig.from_pretrained(str(path))
        config.device = "cpu"
        self.policy = get_policy_class(config.type).from_pretrained(str(path), config=config)
        self.policy.eval()
        self.pre, self.post = make_pre_post_processors(config, pretrained_path=str(path))
        self.state_width = config.robot_state_feature.shape[0] if config.robot_state_feature else None
        self.state_indices = mapping.get("state")
        self.action_indices = mapping.get("action")
        self.resize = bool(mapping.get("resize", False))
        self.task = str(mapping.get("task", ""))
        images = {key: tuple(feature.shape) for key, feature in config.image_features.items()}
        renamed = {key: cam for cam, key in (mapping.get("cameras") or {}).items()}  # the policy's key: our camera
        unknown = [key for key in renamed if key not in images]
        if unknown:
            raise ValueError(f"the base map's camera {renamed[unknown[0]]!r} is the policy's {unknown[0]!r}, which it "
                             f"does not read (it reads {sorted(images)})")
        self.cameras = {renamed.get(key, key[len(IMAGES):]): (key, shape) for key, shape in images.items()}
        width = config.action_feature.shape[0] if config.action_feature else None
        if self.action_indices is not None and width is not None and max(self.action_indices) >= width:
            raise ValueError(f"the base map's action takes the policy's action index {max(self.action_indices)}; its "
                             f"actions are {width} wide")
        run_width = len(self.action_indices) if self.action_indices is not None else width
        self.action_scale, self.action_offset = (self._per_action(mapping, key, run_width, default)
                                                 for key, default in (("action_scale", 1.0), ("action_offset", 0.0)))
        if self.state_indices is not None and self.state_width is not None and len(self.state_indices) != self.state_width:
            raise ValueError(f"the base map's state picks {len(self.state_indices)} numbers; the policy reads a state "
                             f"of {self.state_width}")
        self.checked = False

    @staticmethod
    def _per_action(mapping: dict, key: str, width: int | None, default: float) -> np.ndarray:
        value = np.asarray(mapping.get(key, default), np.float32)
        if value.ndim == 1 and width is not None and value.shape[0] != width:
            raise ValueError(f"the base map's {key} has {value.shape[0]} numbers for the run's {width} action "
                             "dimensions")
        return value

    def reset(self) -> None:
        self.policy.reset()

    def check(self, obs: dict) -> None:
        """The policy's inputs against the observation: one ValueError line naming what differs."""
        width = np.asarray(obs["state"]).shape[0]
        if self.state_indices is not None and max(self.state_indices) >= width:
            raise ValueError(f"the base map's state takes the run's state index {max(self.state_indices)}; the run's "
                             f"state is {width} wide")
        if self.state_indices is None and self.state_width is not None and width != self.state_width:
            raise ValueError(f"the LeRobot policy reads a state of {self.state_width} numbers, the run's is {width} "
                             "(a base map's state picks them)")
        missing = [cam for cam in self.cameras if cam not in obs]
        if missing:
            raise ValueError(f"the LeRobot policy reads cameras {sorted(self.cameras)}, the run's observation has "
                             f"{sorted(k for k in obs if k != 'state')} (train with --obs pixels --cameras "
                             f"{' '.join(sorted(self.cameras))}, or name them in a base map)")
        for cam, (_, (c, h, w)) in self.cameras.items():
            shape = np.asarray(obs[cam]).shape
            if shape != (h, w, c) and not (self.resize and len(shape) == 3 and shape[2] == c):
                raise ValueError(f"the LeRobot policy reads camera {cam!r} at {h}x{w}, the run renders "
                                 f"{np.asarray(obs[cam]).shape[0]}x{np.asarray(obs[cam]).shape[1]} (--image-size, or resize: true in a base map)")
        self.checked = True

    def __call__(self, obs: dict) -> np.ndarray:
        torch = self.torch
        if not self.checked:
            self.check(obs)
        state = np.asarray(obs["state"], np.float32)
        if self.state_indices is not None:
            state = state[self.state_indices]
        batch = {STATE: torch.from_numpy(np.ascontiguousarray(state))[None], "task": [self.task]}
        for cam, (key, (_, h, w)) in self.cameras.items():
            image = torch.from_numpy(np.ascontiguousarray(obs[cam])).permute(2, 0, 1)[None].float() / 255.0
            if image.shape[-2:] != (h, w):
                image = torch.nn.functional.interpolate(image, size=(h, w), mode="bilinear", antialias=True,
                                                        align_corners=False)
            batch[key] = image
        with torch.inference_mode():
            chunk = self.policy.predict_action_chunk(self.pre(batch))
            chunk = self.post(chunk)[0].float().numpy()
        if self.action_indices is not None:
            chunk = chunk[:, self.action_indices]
        return (chunk - self.action_offset) / self.action_scale

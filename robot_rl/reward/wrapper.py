"""The classifier as the reward of any env of our contract.

Reward 1 and the end of the episode when the classifier sees success (``consecutive`` frames
in a row at or above the calibrated threshold), 0 otherwise. The env's own success flag is
not used for reward or termination: it stays in ``info["ground_truth_success"]`` for
evaluation (sim) and is absent on hardware. A step where the twin's collision reflex stopped
the arm (``info["reflex"]``) ends the episode as a failure whatever the classifier sees. The operator's success/failure key is
``OperatorOutcome``'s, wrapped around this one: it wins over the classifier.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from robot_rl.reward.classifier import Calibration, ClassifierError, SuccessClassifier


def camera_images(obs: dict, cameras) -> dict[str, np.ndarray]:
    """Camera frames of a contract observation ({"images": {...}}) or a flat one ({cam: ...})."""
    source = obs["images"] if "images" in obs else obs
    missing = [c for c in cameras if c not in source]
    if missing:
        raise ClassifierError(f"the observation has no camera {missing[0]!r}; the classifier reads {list(cameras)}")
    return {c: source[c] for c in cameras}


class ClassifierReward(gym.Wrapper):
    def __init__(self, env: gym.Env, classifier: SuccessClassifier, calibration: Calibration):
        super().__init__(env)
        self.classifier, self.calibration = classifier.eval(), calibration
        self.cameras = tuple(classifier.config.cameras)
        spaces = env.observation_space.spaces
        images = spaces["images"].spaces if "images" in spaces else spaces
        for cam in self.cameras:
            if cam not in images:
                raise ClassifierError(f"the env has no camera {cam!r}; the classifier was trained on {list(self.cameras)}")
            size = tuple(images[cam].shape[:2])
            if size != tuple(classifier.config.image_size):
                raise ClassifierError(f"camera {cam!r} gives {size[0]}x{size[1]} frames; the classifier was trained "
                                      f"on {classifier.config.image_size[0]}x{classifier.config.image_size[1]}")
        self._streak = 0
        self._steps = 0
        # the env truncates only episodes that are not solved by its own measure; here the
        # classifier decides, so the time limit is applied to every episode
        self.max_episode_steps = getattr(env.unwrapped, "max_episode_steps", None)

    @torch.no_grad()
    def probability(self, obs: dict) -> float:
        images = {c: torch.as_tensor(np.asarray(v))[None] for c, v in camera_images(obs, self.cameras).items()}
        return float(torch.sigmoid(self.classifier(images))[0])

    def reset(self, **kwargs):
        self._streak = 0
        self._steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, _, _, truncated, info = self.env.step(action)
        self._steps += 1
        if self.max_episode_steps is not None and self._steps >= self.max_episode_steps:
            truncated = True
        p = self.probability(obs)
        self._streak = self._streak + 1 if p >= self.calibration.threshold else 0
        detected = self._streak >= self.calibration.consecutive
        info = dict(info)
        info["ground_truth_success"] = info.pop("success", None)
        info.update(classifier_p=p, classifier_success=detected, success=detected, reward_source="classifier")
        if info.get("reflex"):  # the arm stopped on a collision reflex: the episode ends there, failed
            info.update(classifier_success=False, success=False)
            return obs, 0.0, True, False, info
        return obs, float(detected), detected, truncated and not detected, info


class OperatorOutcome(gym.Wrapper):
    """The operator's success/failure key on any env of our contract: ``override(True|False)``
    and the next step ends the episode with that outcome (reward 1 or 0), whatever the env's
    own reward says (its success stays in ``info["ground_truth_success"]``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._override: bool | None = None

    def override(self, success: bool) -> None:
        self._override = bool(success)

    def reset(self, **kwargs):
        self._override = None
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._override is None:
            return obs, reward, terminated, truncated, info
        info = dict(info)
        info.setdefault("ground_truth_success", info.get("success"))
        success, self._override = self._override, None
        info.update(success=success, reward_source="operator")
        return obs, float(success), True, False, info

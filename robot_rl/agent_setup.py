"""From a configuration to what it builds: the agent's settings on an env (``agent_config_for``),
and the checks that read files, the simulator's experts or the hardware before any work starts
(``check_train_config``: a frozen encoder's folder, a reward classifier's, the device). Kept out
of ``robot_rl.config``, which every module reads and which builds nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from robot_rl.agents.frozen import FrozenEncoderError, check_encoder_fits, read_encoder_meta
from robot_rl.agents.settings import AgentSettings, SACConfig
from robot_rl.config import TrainConfig, task_name
from robot_rl.node_config import ActorNodeConfig, LearnerNodeConfig
from robot_rl.config_values import ConfigError
from robot_rl.contract import SIM_CAMERAS
from robot_rl.envs import obs_spec
from robot_rl.reward.classifier import ClassifierError, read_classifier_config
from robot_rl.runtime.device import resolve_device
from robot_rl.sim.experts import check_expert, check_guard


def check_train_config(cfg: TrainConfig) -> None:
    """Everything ``robot-rl train`` checks before any work: the config's own values
    (``TrainConfig.validate``), a simulated human's scripted expert, the frozen encoder and the
    reward classifier against what the run renders, and the device."""
    cfg.validate()
    if cfg.demo_store:
        from robot_rl.data.lerobot import is_lerobot_dataset, read_info, read_map

        if is_lerobot_dataset(cfg.demo_store):  # its version and map, before any work
            read_info(Path(cfg.demo_store))
            if cfg.demo_map:
                read_map(cfg.demo_map)
    if cfg.human_eagerness > 0 and not cfg.env:  # on an env of your own, its scripted policy drives
        check_expert(cfg.task, "the simulated human (--simulated-human)")
        if cfg.human_guards:
            check_guard(cfg.task)
    check_frozen_encoder(cfg)
    check_reward_classifier(cfg)
    resolve_device(cfg.device)  # a device that is not there ends the run before any work


# agent settings that choose the camera encoder, which --frozen-encoder chooses by itself
CAMERA_ENCODER_SETTINGS = {"image_encoder": "--image-encoder", "pretrained_path": "--pretrained",
                           "freeze_backbone": "--freeze-backbone"}


def check_frozen_encoder(cfg) -> dict | None:
    """The description of ``cfg.frozen_encoder`` (a folder), checked against the config's
    observation: pixels, from cameras it has backbones for, at the image size it was trained on,
    and no other camera encoder asked for beside it. None without a frozen encoder."""
    if not cfg.frozen_encoder:
        if cfg.agent.image_encoder == "frozen":
            raise ConfigError("image_encoder 'frozen' reads a frozen backbone's cached features: give its folder "
                              "with --frozen-encoder DIR (robot-rl encoder pretrain makes one)")
        return None
    if cfg.obs != "pixels":
        raise FrozenEncoderError(f"--frozen-encoder {cfg.frozen_encoder} reads camera frames: it needs --obs pixels")
    defaults = AgentSettings()
    clash = [flag for key, flag in CAMERA_ENCODER_SETTINGS.items()
             if getattr(cfg.agent, key) not in (getattr(defaults, key), "frozen")]
    if clash:
        raise ConfigError(f"--frozen-encoder {cfg.frozen_encoder} is the camera encoder, and {', '.join(clash)} "
                          "asks for another: give one (your ResNet-18 becomes a frozen encoder with robot-rl encoder "
                          "pretrain --pretrained FILE)")
    meta = read_encoder_meta(cfg.frozen_encoder)
    check_encoder_fits(meta, cfg.cameras, cfg.image_size, cfg.frozen_encoder)
    return meta


def check_reward_classifier(cfg: TrainConfig) -> None:
    """The reward classifier (a folder), checked by its recorded config alone (no weights) against
    what the run renders: cameras the twin has and, with pixels, the run's image size (the twin
    renders the policy's cameras and the classifier's at one size; a state run renders the
    classifier's cameras at its own size)."""
    if cfg.reward_classifier is None:
        return

    config = read_classifier_config(cfg.reward_classifier)
    run_task = task_name(cfg)
    if config.task is not None and config.task != run_task:
        raise ClassifierError(f"reward classifier {cfg.reward_classifier} was trained on task {config.task}'s takes "
                              f"(cameras {', '.join(config.cameras)}), and this run trains {run_task}: train one on "
                              f"{run_task}'s takes (robot-rl record --task {run_task} ... then classifier train)")
    unknown = [cam for cam in config.cameras if cam not in SIM_CAMERAS]
    if unknown and not getattr(cfg, "env", None):  # an env of your own: its map's cameras (MappedEnv checks)
        raise ClassifierError(f"reward classifier {cfg.reward_classifier} reads camera {unknown[0]!r}, which the "
                              f"twin does not render (its cameras: {', '.join(SIM_CAMERAS)})")
    (h, w), (run_h, run_w) = config.image_size, cfg.image_size
    if cfg.obs == "pixels" and (int(h), int(w)) != (int(run_h), int(run_w)):
        raise ClassifierError(f"reward classifier {cfg.reward_classifier} was trained on {h}x{w} frames, the run "
                              f"renders {run_h}x{run_w}: use --image-size {h} {w} or a classifier trained at that size")


def success_reward(cfg, task) -> bool:
    """Whether the run's reward is our contract's: 1 on the success that ends the episode, 0
    before (the twin's tasks, the success classifier, the operator's key), so that no episode
    returns more than 1. A mapped env's own reward (``--env`` without a classifier) may be
    anything."""
    return not getattr(task, "foreign", False) or getattr(cfg, "reward_classifier", None) is not None


def agent_config_for(cfg: TrainConfig | ActorNodeConfig | LearnerNodeConfig, env) -> SACConfig:
    """The agent of a config (its cell, policy and agent settings) on ``env``'s observations, on
    the config's ``device`` (resolved: ``auto`` becomes the device this machine has)."""

    spec = obs_spec(env.observation_space)
    external_base = getattr(env, "base_action_dim", 0)  # a base policy's action ends the state (base_policy.py)
    residual = (cfg.residual and cfg.has_demos) or bool(external_base)
    task = env.unwrapped.task
    base = dict(state_dim=spec["state"][0][0], cameras=tuple(env.cameras), image_size=tuple(cfg.image_size),
                action_dim=env.action_space.shape[0], grasp_critic=task.uses_gripper and not external_base,
                residual_scale=cfg.residual_scale if residual else 0.0,
                residual_penalty=cfg.residual_penalty if residual else 0.0, base_action_dim=external_base,
                device=resolve_device(cfg.device))
    if cfg.agent.max_return is not None and not success_reward(cfg, task):
        raise ConfigError(f"agent: max_return={cfg.agent.max_return:g} bounds the returns of the success reward that "
                          "ends an episode; this mapped env rewards with its own reward (add --reward-classifier "
                          "or leave max_return out)")
    if getattr(task, "foreign", False):  # a mapped env: where its state says the gripper is open, if it says so
        if task.gripper_open_index is None:
            base.update(grasp_penalty=0.0)
        else:
            base.update(gripper_width_index=task.gripper_open_index, gripper_open_threshold=0.5)
    frozen = check_frozen_encoder(cfg)
    if frozen is not None:  # a head over the frozen backbone's cached features
        base.update(image_encoder="frozen", frozen_encoder=frozen, frozen_encoder_path=str(cfg.frozen_encoder))
    return SACConfig(**{**dataclasses.asdict(cfg.agent), **base})

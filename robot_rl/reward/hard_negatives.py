"""``robot-rl classifier hard-negatives``: the classifier's false positives, mined from rollouts.

A policy trained on a classifier's reward finds the frames the classifier wrongly calls
success. HIL-SERL's remedy, which this automates: run rollouts (a policy's, recorded with
``robot-rl record --policy``, or a teleop session's), let ground truth (sim) or the operator's
success key (hardware) label every frame, keep the episodes in which the classifier fires on a
frame labelled failure, and retrain with them added to the data.

An episode is kept up to its last false-positive frame, so a kept episode that never reached
success adds only negatives (as a failed take does); labels are copied as recorded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data.store import EpisodeStore
from robot_rl.data.output import written_whole
from robot_rl.data.tools import new_output, create_like
from robot_rl.reward.classifier import ClassifierError, load_classifier
from robot_rl.runtime.device import resolve_device
from robot_rl.reward.training import check_store_fits, train_classifier, training_settings


def cut_episode(episode: dict[str, np.ndarray], last: int) -> dict[str, np.ndarray]:
    """Frames 0..last of an episode, ending as a time limit would (no action after the last frame)."""
    out = {k: v[: last + 1].copy() for k, v in episode.items()}
    out["has_action"][last] = False
    out["action"][last] = 0
    out["reward"][last] = 0
    out["terminated"][last] = False
    out["truncated"][last] = False
    if last > 0 and not (out["terminated"][last - 1] or out["truncated"][last - 1]):
        out["truncated"][last - 1] = True
    return out


def mine_hard_negatives(classifier: str | Path, rollouts: list[str | Path], out: str | Path,
                        device: str = "auto") -> dict:
    """Episodes of ``rollouts`` in which the classifier fires on a frame labelled failure, each
    cut after its last such frame, into a new store at ``out``; returns a summary. The frames
    are scored on ``device`` (auto, cpu, cuda, cuda:N, mps)."""
    if not rollouts:
        raise ClassifierError("hard-negative mining needs at least one rollout store (--rollouts)")
    model, calibration = load_classifier(classifier, resolve_device(device))
    cameras = list(model.config.cameras)
    target = None
    out = new_output(out)
    summary = {"rollout_episodes": 0, "rollout_frames": 0, "false_positive_frames": 0, "kept_episodes": 0,
               "kept_frames": 0, "kept_positive_frames": 0, "threshold": calibration.threshold}
    with written_whole(out) as tmp:  # the output appears whole or not at all
        for path in rollouts:
            store = EpisodeStore.open(path)
            check_store_fits(store, model.config)
            if target is None:
                target = create_like(store, tmp)
            elif store.fields != target.fields:
                raise ClassifierError(f"{path} has different fields than the other rollout stores")
            for i in range(len(store)):
                episode = store.get_episode(i)
                scores = model.probability({c: episode[c] for c in cameras})
                false_positive = (scores >= calibration.threshold) & ~episode["success"].astype(bool)
                summary["rollout_episodes"] += 1
                summary["rollout_frames"] += len(scores)
                summary["false_positive_frames"] += int(false_positive.sum())
                if false_positive.any():
                    kept = cut_episode(episode, int(np.flatnonzero(false_positive)[-1]))
                    target.add_episode(kept)
                    summary["kept_episodes"] += 1
                    summary["kept_frames"] += len(kept["success"])
                    summary["kept_positive_frames"] += int(kept["success"].sum())
    summary["path"] = str(out)
    return summary


def retrain_with(classifier: str | Path, hard_negatives: str | Path, out: str | Path, steps: int | None = None,
                 fine_tune: bool = False, **overrides) -> dict:
    """Retrain on the classifier's own training data plus the mined store (same settings;
    ``overrides`` change them, e.g. ``device``): a new classifier for as many steps as the first,
    or with ``fine_tune`` the classifier's own weights trained on for a quarter of them (``steps``
    to choose). Fine-tuning is faster, but on one main job's policy its false positives were 1.4-1.6 %
    of frames against 0.26 % retrained from scratch (docs/CALIBRATION.md), so it is not the default."""
    settings = training_settings(classifier)
    settings.update(overrides)
    if steps is not None and steps < 1:
        raise ClassifierError(f"retraining takes at least 1 step, got {steps}")
    if fine_tune:
        settings.update(steps=steps or max(1, settings["steps"] // 4), init_from=classifier)
    else:
        settings.update(steps=steps or settings["steps"], init_from=None)
    data = list(settings.pop("data")) + [str(hard_negatives)]
    return train_classifier(data, out, **settings)


"""``robot-rl classifier train``: fit the success classifier on labelled frames of episode stores.

Frames come from one or more stores, labelled by their per-frame ``success`` flag (sim: ground
truth at recording time; hardware: the operator's success key). Validation holds out whole
episodes, never frames of an episode that is also trained on (neighbouring frames are nearly
identical, so a frame split would grade memory, not generalisation).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from robot_rl.data.store import EpisodeStore
from robot_rl.runtime.device import out_of_memory_says, resolve_device
from robot_rl.runtime.progress import ProgressLines
from robot_rl.reward.settings import CLASSIFIER_TRAINING
from robot_rl.reward.classifier import (Calibration, ClassifierConfig, ClassifierError, SuccessClassifier,
                                        binary_metrics, load_classifier, save_classifier, threshold_for_fpr)
from robot_rl.errors import InputError


def load_frames(paths: list[str | Path], cameras: tuple[str, ...] | None = None, require_both: bool = True) -> dict:
    """Every frame of every episode: images per camera, success labels, a global episode id.
    Training needs both outcomes (``require_both``); evaluation may see only one."""
    if not paths:
        raise ClassifierError("classifier training needs at least one store (--data)")
    images: dict[str, list[np.ndarray]] = {}
    labels, episodes = [], []
    size = None
    next_episode = 0
    tasks = set()
    for path in paths:
        store = EpisodeStore.open(path)
        tasks.add(store.attrs.get("task"))
        cams = tuple(cameras) if cameras else tuple(store.cameras)
        if not cams:
            raise ClassifierError(f"{path} has no cameras; record with images (robot-rl record --images)")
        missing = [c for c in cams if c not in store.cameras]
        if missing:
            raise ClassifierError(f"{path} has no camera {missing[0]!r}; it has {sorted(store.cameras)}")
        sizes = {tuple(store.cameras[c]) for c in cams}
        if size is None:
            size = sizes.pop() if len(sizes) == 1 else None
            if size is None:
                raise ClassifierError(f"cameras {cams} of {path} have different sizes; choose cameras of one size")
        if any(tuple(store.cameras[c]) != size for c in cams):
            raise ClassifierError(f"{path} stores {cams} at {store.cameras[cams[0]]}, other stores at {list(size)}")
        cameras = cams
        for i in range(len(store)):
            ep = store.get_episode(i, list(cams) + ["success"])
            for c in cams:
                images.setdefault(c, []).append(ep[c])
            labels.append(ep["success"])
            episodes.append(np.full(len(ep["success"]), next_episode))
            next_episode += 1
    if not labels:
        raise ClassifierError("the stores hold no complete episode")
    if len(tasks) > 1:
        raise ClassifierError(f"the stores record different tasks ({', '.join(sorted(map(str, tasks)))}): a "
                              "classifier learns one task's success")
    frames = {"images": {c: np.concatenate(v) for c, v in images.items()}, "labels": np.concatenate(labels),
              "episodes": np.concatenate(episodes), "cameras": tuple(cameras), "image_size": tuple(size),
              "task": tasks.pop()}
    positives = int(frames["labels"].sum())
    if not require_both:
        return frames
    if positives == 0:
        raise ClassifierError("no positive (success) frames in the data: record successful episodes too")
    if positives == len(frames["labels"]):
        raise ClassifierError("no negative (failure) frames in the data: record failed takes too (e.g. more --noise)")
    return frames


def split_by_episode(episodes: np.ndarray, labels: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks (train, val) over frames, holding out whole episodes; the held-out set
    gets episodes with and without success whenever the data has both."""
    if not 0 < val_fraction < 1:
        raise InputError(f"val_fraction must be in (0, 1), got {val_fraction}")
    rng = np.random.default_rng(seed)
    ids = np.unique(episodes)
    if len(ids) < 2:
        raise ClassifierError("validation holds out whole episodes: record at least 2 episodes")
    successful = np.array([labels[episodes == e].any() for e in ids])
    held = []
    for group in (ids[successful], ids[~successful]):
        if len(group):
            k = max(1, int(round(val_fraction * len(group)))) if len(group) > 1 else 0
            held.extend(rng.choice(group, size=k, replace=False).tolist())
    if not held:
        held = [rng.choice(ids)]
    val = np.isin(episodes, held)
    return ~val, val


_D = CLASSIFIER_TRAINING  # the defaults, written once (reward/settings.py)


def train_classifier(paths: list[str | Path], out: str | Path, cameras: tuple[str, ...] | None = None,
                     steps: int = _D.steps, batch_size: int = _D.batch_size, lr: float = _D.lr,
                     target_fpr: float = _D.target_fpr, min_threshold: float = _D.min_threshold,
                     consecutive: int = _D.consecutive, val_fraction: float = _D.val_fraction, seed: int = _D.seed,
                     encoder: str = _D.encoder,
                     pretrained_path: str | None = None, freeze_backbone: bool = False, log=print,
                     device: str = "auto", init_from: str | Path | None = None) -> dict:
    """Train on ``device`` (auto, cpu, cuda, cuda:N, mps), calibrate on held-out episodes, save
    model + threshold + report to ``out``. ``init_from``: a saved classifier whose weights the
    training starts from (fine-tuning; its cameras, image size and encoder must be these)."""
    if not 0 <= min_threshold < 1:
        raise InputError(f"min_threshold must be in [0, 1), got {min_threshold}")
    device = resolve_device(device)
    torch.manual_seed(seed)
    frames = load_frames(paths, cameras)
    labels, images = frames["labels"], frames["images"]
    train_mask, val_mask = split_by_episode(frames["episodes"], labels, val_fraction, seed)
    if not labels[val_mask].any() or labels[val_mask].all():
        raise ClassifierError("the held-out episodes need both success and failure frames: record more episodes")
    config = ClassifierConfig(cameras=frames["cameras"], image_size=frames["image_size"], encoder=encoder,
                              pretrained_path=pretrained_path, freeze_backbone=freeze_backbone, task=frames["task"])
    model = SuccessClassifier(config)
    if init_from is not None:
        start, _ = load_classifier(init_from)
        if json.dumps(asdict(start.config)) != json.dumps(asdict(config)):  # tuples and lists alike
            raise ClassifierError(f"{init_from} reads {start.config.cameras} at {start.config.image_size} with the "
                                  f"{start.config.encoder} encoder; these stores give {config.cameras} at "
                                  f"{config.image_size} with {config.encoder}: it cannot be the starting point")
        model.load_state_dict(start.state_dict())
    model = model.to(device)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = np.random.default_rng(seed)
    pos = np.flatnonzero(train_mask & labels)
    neg = np.flatnonzero(train_mask & ~labels)
    if not len(pos) or not len(neg):
        raise ClassifierError("the training episodes need both success and failure frames: record more episodes")
    log(f"{len(labels)} frames from {len(np.unique(frames['episodes']))} episodes; train {train_mask.sum()} "
        f"({len(pos)} positive), held-out {val_mask.sum()} frames of {len(np.unique(frames['episodes'][val_mask]))} episodes")
    t0 = time.time()
    model.train()
    loss_fn = torch.nn.BCEWithLogitsLoss()
    with out_of_memory_says(f"classifier training on {device}",
                            f"batch size {batch_size}, {len(config.cameras)} cameras at "
                            f"{config.image_size[0]}x{config.image_size[1]}",
                            "--batch-size, --cameras, or a store recorded with a smaller --image-size"):
        progress = ProgressLines("classifier training", steps, log=log)
        for step in range(1, steps + 1):
            half = batch_size // 2  # class-balanced batches
            idx = np.concatenate([rng.choice(pos, half), rng.choice(neg, batch_size - half)])
            batch = model.augment({c: torch.as_tensor(images[c][idx]).to(device) for c in config.cameras})
            target = torch.as_tensor(labels[idx], dtype=torch.float32).to(device)
            loss = loss_fn(model(batch), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if progress.due(step):
                progress.update(step, loss=round(loss.item(), 4))
        val_scores = model.probability({c: images[c][val_mask] for c in config.cameras})
    val_labels = labels[val_mask]
    # The threshold meets the target on the held-out episodes; it never goes below the
    # classifier's own decision boundary (0.5 under class-balanced training): held-out negatives
    # that are all easy would otherwise set it near 0, where any unfamiliar failure frame fires.
    for_target = threshold_for_fpr(val_scores[~val_labels], target_fpr)
    threshold = max(for_target, min_threshold)
    at_threshold = binary_metrics(val_scores, val_labels, threshold)
    at_half = binary_metrics(val_scores, val_labels, 0.5)
    calibration = Calibration(threshold=threshold, target_fpr=target_fpr, consecutive=consecutive,
                              validation=at_threshold)
    out = Path(out)
    settings = {"data": [str(Path(p).resolve()) for p in paths], "cameras": list(config.cameras), "steps": steps,
                "batch_size": batch_size, "lr": lr, "target_fpr": target_fpr, "min_threshold": min_threshold,
                "consecutive": consecutive, "val_fraction": val_fraction, "seed": seed, "encoder": encoder, "pretrained_path": pretrained_path,
                "freeze_backbone": freeze_backbone,
                "init_from": str(Path(init_from).resolve()) if init_from is not None else None}
    save_classifier(out, model, calibration, {"training": settings})
    report = {"validation": at_threshold, "validation_at_0.5": at_half, "threshold_for_target_fpr": for_target,
              "train_frames": int(train_mask.sum()), "val_frames": int(val_mask.sum()), "config": asdict(config),
              "device": device, "wall_s": round(time.time() - t0, 1)}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=list))
    confusion_plot(out / "confusion.png", at_threshold, val_scores, val_labels)
    log(f"held-out: threshold {threshold:.4f} (target FPR {target_fpr:.2%}): precision {at_threshold['precision']:.3f} "
        f"recall {at_threshold['recall']:.3f} FPR {at_threshold['fpr']:.4f} ROC-AUC {at_threshold['roc_auc']:.4f}")
    return report


def training_settings(classifier: str | Path) -> dict:
    """The ``train_classifier`` arguments a saved classifier was trained with (to retrain it)."""
    from safetensors import safe_open

    file = Path(classifier) / "classifier.safetensors" if Path(classifier).is_dir() else Path(classifier)
    load_classifier(file)  # a clear error for anything that is not a classifier
    with safe_open(str(file), "pt") as f:
        extra = json.loads((f.metadata() or {}).get("extra", "{}"))
    if "training" not in extra:
        raise ClassifierError(f"{file} does not record how it was trained; retrain it with robot-rl classifier train")
    settings = dict(extra["training"])
    settings["cameras"] = tuple(settings["cameras"])
    return settings


def check_store_fits(store: EpisodeStore, config) -> None:
    """The store records every camera the classifier reads, at its image size."""
    missing = [c for c in config.cameras if c not in store.cameras]
    if missing:
        raise ClassifierError(f"{store.path} has no camera {missing[0]!r}; the classifier reads {list(config.cameras)}")
    for cam in config.cameras:
        if tuple(store.cameras[cam]) != tuple(config.image_size):
            (h, w), (ch, cw) = store.cameras[cam], config.image_size
            raise ClassifierError(f"{store.path} stores {h}x{w} frames; the classifier reads {ch}x{cw}")


def episode_detections(scores: np.ndarray, episodes: np.ndarray, threshold: float, consecutive: int) -> dict[int, bool]:
    """Per episode: did ``consecutive`` frames in a row score at or above the threshold?"""
    out = {}
    for e in np.unique(episodes):
        above = scores[episodes == e] >= threshold
        run = best = 0
        for a in above:
            run = run + 1 if a else 0
            best = max(best, run)
        out[int(e)] = best >= consecutive
    return out


def evaluate_classifier(classifier: str | Path, paths: list[str | Path], device: str = "auto") -> dict:
    """A saved classifier at its calibrated threshold on the frames of other stores: frame
    metrics (precision, recall, FPR, ROC-AUC) and episode metrics (an episode is detected as a
    success when the reward wrapper would fire: ``consecutive`` frames in a row). The frames are
    scored on ``device`` (auto, cpu, cuda, cuda:N, mps)."""
    model, calibration = load_classifier(classifier, resolve_device(device))
    for path in paths:
        check_store_fits(EpisodeStore.open(path), model.config)
    frames = load_frames(paths, model.config.cameras, require_both=False)
    scores = model.probability(frames["images"])
    labels, episodes = frames["labels"], frames["episodes"]
    metrics = binary_metrics(scores, labels, calibration.threshold)
    detected = episode_detections(scores, episodes, calibration.threshold, calibration.consecutive)
    succeeded = {int(e): bool(labels[episodes == e].any()) for e in np.unique(episodes)}
    failed_eps = [e for e, s in succeeded.items() if not s]
    good_eps = [e for e, s in succeeded.items() if s]
    metrics.update(
        frames=int(len(labels)), episodes=len(succeeded), consecutive=calibration.consecutive,
        episode_false_positives=sum(detected[e] for e in failed_eps), failed_episodes=len(failed_eps),
        episode_detections=sum(detected[e] for e in good_eps), successful_episodes=len(good_eps))
    return {"metrics": metrics, "scores": scores, "labels": labels, "episodes": episodes}


def confusion_plot(path: Path, metrics: dict, scores: np.ndarray, labels: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.5))
    grid = np.array([[metrics["tn"], metrics["fp"]], [metrics["fn"], metrics["tp"]]])
    ax1.imshow(grid, cmap="Blues")
    for (i, j), v in np.ndenumerate(grid):
        ax1.text(j, i, str(v), ha="center", va="center")
    ax1.set_xticks([0, 1], ["pred fail", "pred success"])
    ax1.set_yticks([0, 1], ["fail", "success"])
    ax1.set_title(f"held-out, threshold {metrics['threshold']:.3f}")
    ax2.hist([scores[~labels], scores[labels]], bins=30, label=["fail", "success"], log=True)
    ax2.axvline(metrics["threshold"], color="k", linestyle="--")
    ax2.set_xlabel("P(success)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

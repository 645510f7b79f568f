"""``robot-rl encoder pretrain``: a frozen backbone from the cell's own recordings, chosen by measurement.

Nothing is downloaded: the candidates are trained here on the stores given (or read from
local files), then each is frozen and measured the same way, and the best one is written.

    bc           the backbone of a policy cloned from the successful episodes (images + robot
                 state -> the recorded action), random-shift augmented.
    bc_goal      bc, and from the same features where the take ended: its last TCP position and
                 yaw relative to the frame's (a real cell's recordings hold both). Where the goal
                 is small in the image and far from the hand (a hole anywhere in 10 x 10 cm),
                 actions alone teach the backbone little of where it is (docs/CALIBRATION.md).
    autoencoder  self-supervised: a deep spatial autoencoder (Finn et al. 2016) on every frame:
                 backbone -> spatial-softmax keypoints -> a linear decoder of the frame at 1/4
                 size in grey; the keypoints learn where things are.
    classifier   the success classifier's own conv trunks (``--classifier DIR``).
    pretrained   a ResNet-18 whose weights you have (``--pretrained FILE``, torchvision names).

The measurement (``probe``) is what the policy will do with the features: a fresh head over the
frozen features (spatial embeddings + robot state + MLP, as the agent's) is fitted to the
successful episodes' actions and scored on held-out episodes (motion MSE + gripper cross
entropy). Candidates train on the same training episodes; the lowest held-out loss wins.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.agents.encoders import FeatureHead, random_shift
from robot_rl.agents.frozen import DRQ_BACKBONE as DRQ
from robot_rl.agents.frozen import Backbone, FrozenEncoder, FrozenEncoderError, feature_shape
from robot_rl.agents.networks import StateNormalizer, mlp
from robot_rl.agents.sac import gripper_index
from robot_rl.config import EncoderPretrainConfig
from robot_rl.geometry import end_pose_offset
from robot_rl.runtime.progress import ProgressLines

OBJECTIVES = ("bc", "bc_goal", "autoencoder", "classifier", "pretrained")


# --------------------------------------------------------------------------- data
def load_frames(paths, cameras) -> dict:
    """Every acted frame of every episode in the stores: images per camera, robot state, action,
    episode id, and whether the frame is part of a successful episode's task (up to its end)."""
    from robot_rl.data.store import EpisodeStore

    if not paths:
        raise FrozenEncoderError("encoder pretrain needs at least one episode store (--data)")
    out: dict[str, list] = {"state": [], "action": [], "episode": [], "task": [], "end_state": []}
    images: dict[str, list] = {cam: [] for cam in cameras}
    size, next_episode = None, 0
    for path in paths:
        store = EpisodeStore.open(path)
        missing = [cam for cam in cameras if cam not in store.cameras]
        if missing:
            raise FrozenEncoderError(f"{path} has no camera {missing[0]!r}; it has {sorted(store.cameras)} (record "
                                     "with --images --cameras ...)")
        sizes = {tuple(store.cameras[cam]) for cam in cameras}
        if len(sizes) != 1 or (size is not None and sizes != {size}):
            raise FrozenEncoderError(f"{path} stores cameras {list(cameras)} at sizes {sorted(sizes)}; every store "
                                     f"and camera must have one size{f' ({size[0]}x{size[1]})' if size else ''}")
        size = sizes.pop()
        for i in range(len(store)):
            ep = store.get_episode(i, list(cameras) + ["state", "action", "has_action", "terminated", "truncated",
                                                       "success"])
            acted = np.flatnonzero(ep["has_action"])
            ends = np.flatnonzero((ep["terminated"] | ep["truncated"])[acted])
            in_task = np.zeros(len(acted), bool)
            in_task[: (ends[0] + 1 if ends.size else len(acted))] = bool(ep["success"].any())
            for cam in cameras:
                images[cam].append(ep[cam][acted])
            out["state"].append(ep["state"][acted].astype(np.float32))
            out["action"].append(ep["action"][acted].astype(np.float32))
            out["episode"].append(np.full(len(acted), next_episode))
            out["task"].append(in_task)
            last = (ends[0] if ends.size else len(acted) - 1)  # the take's last acted frame
            out["end_state"].append(np.repeat(ep["state"][acted][last:last + 1].astype(np.float32), len(acted), 0))
            next_episode += 1
    if next_episode == 0:
        raise FrozenEncoderError(f"{', '.join(map(str, paths))}: no complete episode")
    frames = {k: np.concatenate(v) for k, v in out.items()}
    frames["images"] = {cam: np.concatenate(v) for cam, v in images.items()}
    frames["image_size"] = size
    if frames["task"].sum() == 0:
        raise FrozenEncoderError("no successful episode in the stores: the encoder is measured on how well its "
                                 "features predict a successful take's actions (record demonstrations)")
    return frames


def split_episodes(frames: dict, held_out: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame masks (train, held-out): held-out are whole successful episodes (at least one)."""
    successful = np.unique(frames["episode"][frames["task"]])
    if len(successful) < 2:
        raise FrozenEncoderError("measuring encoders needs at least 2 successful episodes (one is held out)")
    rng = np.random.default_rng(seed)
    n_held = min(len(successful) - 1, max(1, round(held_out * len(successful))))
    held = rng.choice(successful, n_held, replace=False)
    is_held = np.isin(frames["episode"], held)
    return ~is_held, is_held & frames["task"]


# --------------------------------------------------------------------------- a policy head
class FeatureMLP(nn.Module):
    """Features per camera + robot state -> ``out_dim`` outputs: the agent's actor, in small."""

    def __init__(self, cameras, shape, state_dim: int, out_dim: int):
        super().__init__()
        self.cameras = tuple(cameras)
        self.heads = nn.ModuleDict({cam: FeatureHead(shape, 64) for cam in self.cameras})
        self.normalizer = StateNormalizer(state_dim)
        self.net = mlp(64 * len(self.cameras) + state_dim, (256, 256), out_dim)

    def forward(self, feats: dict, state: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([self.heads[cam](feats[cam]) for cam in self.cameras] + [self.normalizer(state)], -1))


class ActionHead(FeatureMLP):
    """-> (motion, gripper logits): what the probe and bc fit to the recorded actions."""

    def __init__(self, cameras, shape, state_dim: int, motion_dim: int = 6):
        super().__init__(cameras, shape, state_dim, motion_dim + 3)
        self.motion_dim = motion_dim

    def forward(self, feats: dict, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = super().forward(feats, state)
        return torch.tanh(out[:, : self.motion_dim]), out[:, self.motion_dim:]


def action_loss(head: ActionHead, feats: dict, state, action) -> torch.Tensor:
    motion, grip = head(feats, state)
    return ((motion - action[:, : head.motion_dim]) ** 2).sum(-1).mean() + F.cross_entropy(grip, gripper_index(action[:, -1]))


def fit(loss_of, params, lr: float, rows: np.ndarray, steps: int, seed: int, label: str, log, digits: int = 4) -> None:
    """The one training loop: Adam on ``loss_of(batch)`` over ``steps`` batches of up to 128 of
    ``rows`` drawn with replacement (seeded), with progress lines under ``label``."""
    opt = torch.optim.Adam(params, lr=lr)
    rng = np.random.default_rng(seed)
    progress = ProgressLines(label, steps, log=log)
    for step in range(steps):
        loss = loss_of(rows[rng.integers(0, len(rows), min(128, len(rows)))])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress.due(step + 1):
            progress.update(step + 1, loss=round(loss.item(), digits))


# --------------------------------------------------------------------------- candidates
def end_pose_targets(frames: dict) -> np.ndarray:
    """Per frame, where its take ended relative to it: the last TCP position minus this one's
    (decimetres, base frame) and the yaw still to turn (radians, wrapped): [N, 4]."""
    return end_pose_offset(frames["state"], frames["end_state"])


def train_bc(frames: dict, rows: np.ndarray, cameras, steps: int, seed: int, log, goal: bool = False) -> FrozenEncoder:
    """Backbones of a policy cloned from the training rows (images augmented by random shift);
    with ``goal`` (objective bc_goal) the same features also predict where the take ended."""
    torch.manual_seed(seed)
    objective = "bc_goal" if goal else "bc"
    meta = {**DRQ, "cameras": list(cameras), "image_size": list(frames["image_size"]), "objective": objective}
    encoder = FrozenEncoder(meta)
    backbones = nn.ModuleDict({cam: Backbone(meta) for cam in cameras})
    state_dim = frames["state"].shape[1]
    head = ActionHead(cameras, feature_shape(meta), state_dim, frames["action"].shape[1] - 1)
    head.normalizer.fit(torch.as_tensor(frames["state"][rows]))
    params = list(backbones.parameters()) + list(head.parameters())
    if goal:
        goal_head = FeatureMLP(cameras, feature_shape(meta), state_dim, 4)
        goal_head.normalizer = head.normalizer  # fitted once, on the same rows
        targets = torch.as_tensor(end_pose_targets(frames))
        params += list(goal_head.parameters())

    def loss_of(idx: np.ndarray) -> torch.Tensor:
        feats = {cam: backbones[cam](random_shift(torch.as_tensor(frames["images"][cam][idx]), 4)) for cam in cameras}
        state = torch.as_tensor(frames["state"][idx])
        loss = action_loss(head, feats, state, torch.as_tensor(frames["action"][idx]))
        if goal:  # summed over the 4 targets, as the motion's MSE is over its dimensions
            loss = loss + ((goal_head(feats, state) - targets[idx]) ** 2).sum(-1).mean()
        return loss

    fit(loss_of, params, 3e-4, rows, steps, seed, f"  {objective}", log)
    encoder.backbones.load_state_dict(backbones.state_dict())
    return encoder


class SpatialAutoencoder(nn.Module):
    """Backbone -> spatial softmax (x, y per channel) -> linear decoder of a grey 1/4-size frame."""

    def __init__(self, meta: dict):
        super().__init__()
        self.backbone = Backbone(meta)
        h, w, c = feature_shape(meta)
        self.register_buffer("grid_x", torch.linspace(-1, 1, w).repeat(h), persistent=False)
        self.register_buffer("grid_y", torch.linspace(-1, 1, h).repeat_interleave(w), persistent=False)
        self.target_size = (meta["image_size"][0] // 4, meta["image_size"][1] // 4)
        self.decoder = nn.Linear(2 * c, self.target_size[0] * self.target_size[1])

    def target(self, images: torch.Tensor) -> torch.Tensor:
        grey = images.float().mean(-1, keepdim=True).permute(0, 3, 1, 2) / 255.0
        return F.adaptive_avg_pool2d(grey, self.target_size).flatten(1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        fmap = self.backbone(images)  # [B, h, w, C]
        attention = torch.softmax(fmap.flatten(1, 2), dim=1)  # over positions, per channel
        keypoints = torch.cat([(attention * self.grid_x[:, None]).sum(1), (attention * self.grid_y[:, None]).sum(1)], -1)
        return self.decoder(keypoints)


def train_autoencoder(frames: dict, rows: np.ndarray, cameras, steps: int, seed: int, log) -> FrozenEncoder:
    """Self-supervised backbones: a spatial autoencoder per camera on the training rows' frames."""
    torch.manual_seed(seed)
    meta = {**DRQ, "cameras": list(cameras), "image_size": list(frames["image_size"]), "objective": "autoencoder"}
    encoder = FrozenEncoder(meta)
    models = nn.ModuleDict({cam: SpatialAutoencoder(meta) for cam in cameras})

    def loss_of(idx: np.ndarray) -> torch.Tensor:
        loss = 0.0
        for cam in cameras:
            images = torch.as_tensor(frames["images"][cam][idx])
            loss = loss + F.mse_loss(models[cam](images), models[cam].target(images))
        return loss

    fit(loss_of, models.parameters(), 1e-3, rows, steps, seed, "  autoencoder", log, digits=5)
    encoder.backbones.load_state_dict({f"{cam}.{k}": v for cam in cameras
                                       for k, v in models[cam].backbone.state_dict().items()})
    return encoder


def from_classifier(folder, cameras, image_size) -> FrozenEncoder:
    """The success classifier's conv trunks (its DrQ encoder per camera) as frozen backbones."""
    from robot_rl.reward.classifier import load_classifier

    classifier, _ = load_classifier(folder)
    c = classifier.config
    if c.encoder != "drq":
        raise FrozenEncoderError(f"classifier {folder} uses a {c.encoder} encoder; only its drq trunks are taken")
    missing = [cam for cam in cameras if cam not in c.cameras]
    if missing or tuple(c.image_size) != tuple(image_size):
        raise FrozenEncoderError(f"classifier {folder} reads {list(c.cameras)} at {c.image_size[0]}x{c.image_size[1]}; "
                                 f"the encoder needs {list(cameras)} at {image_size[0]}x{image_size[1]}")
    meta = {**DRQ, "cameras": list(cameras), "image_size": list(image_size), "objective": "classifier",
            "source": str(folder)}
    encoder = FrozenEncoder(meta)
    for cam in cameras:
        encoder.backbones[cam].net.load_state_dict(classifier.encoder.encoders[cam].convnet.state_dict())
    return encoder


# --------------------------------------------------------------------------- the measurement
def probe(encoder: FrozenEncoder, frames: dict, train_rows: np.ndarray, held_rows: np.ndarray, steps: int,
          seed: int, log=print) -> dict:
    """A fresh action head over the frozen features, fitted on the training rows of successful
    takes, scored on the held-out episodes: how well a policy can read what it needs from them."""
    torch.manual_seed(seed)
    cams = encoder.cameras
    feats = {}
    for cam in cams:  # computed once: the features are what the replay would cache
        chunks = [encoder.features({cam: torch.as_tensor(frames["images"][cam][i:i + 256])})[cam]
                  for i in range(0, len(frames["state"]), 256)]
        feats[cam] = torch.cat(chunks)
    head = ActionHead(cams, encoder.feature_shape, frames["state"].shape[1], frames["action"].shape[1] - 1)
    state, action = torch.as_tensor(frames["state"]), torch.as_tensor(frames["action"])
    rows = train_rows[frames["task"][train_rows]]
    head.normalizer.fit(state[rows])
    fit(lambda idx: action_loss(head, {cam: random_shift(feats[cam][idx], 1) for cam in cams}, state[idx], action[idx]),
        head.parameters(), 1e-3, rows, steps, seed, "  probe", log)
    with torch.no_grad():
        motion, grip = head({cam: feats[cam][held_rows] for cam in cams}, state[held_rows])
        target = action[held_rows]
        mse = float(((motion - target[:, : head.motion_dim]) ** 2).sum(-1).mean())
        ce = float(F.cross_entropy(grip, gripper_index(target[:, -1])))
        accuracy = float((grip.argmax(-1) == gripper_index(target[:, -1])).float().mean())
    return {"held_out_loss": round(mse + ce, 4), "held_out_motion_mse": round(mse, 4),
            "held_out_gripper_accuracy": round(accuracy, 3), "feature_bytes_per_frame":
            int(np.prod(encoder.feature_shape)) * 2 * len(cams)}


def pretrain_encoder(data, out, log=print, **settings) -> dict:
    """Train / read every candidate, measure each with ``probe``, write the best to ``out``
    (``encoder.safetensors`` + ``report.json``); returns the report. ``settings``: the fields of
    ``EncoderPretrainConfig`` (robot_rl/config.py, their defaults).

    The default is behaviour cloning alone: across reward x encoder x seed the probe's ranking did
    not predict the policy's success (it ranked the autoencoder first, which trained the worst
    policies), and bc was among the best (docs/CALIBRATION.md, "Reward x frozen encoder x seed")."""
    c = EncoderPretrainConfig(**settings)
    c.validate()
    cameras, objectives, classifier, pretrained, steps, seed = (c.cameras, c.objectives, c.classifier, c.pretrained,
                                                                c.steps, c.seed)
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown:
        raise FrozenEncoderError(f"unknown objective {unknown[0]!r}; choose from {list(OBJECTIVES)}")
    for name, source, flag in (("classifier", classifier, "--classifier DIR"), ("pretrained", pretrained,
                                                                                  "--pretrained FILE")):
        if name in objectives and not source:
            raise FrozenEncoderError(f"objective {name} takes its backbone from {flag}: give it, or leave {name} out")
    # the candidates read from files come first, so that a bad file is named before any training
    objectives = list(dict.fromkeys(["classifier"] * bool(classifier) + ["pretrained"] * bool(pretrained)
                                    + [o for o in objectives if o in ("bc", "bc_goal", "autoencoder")]))
    if not objectives:
        raise FrozenEncoderError("no candidate encoder: give --objective bc/bc_goal/autoencoder, --classifier DIR or "
                                 "--pretrained FILE")
    frames = load_frames([str(p) for p in data], tuple(cameras))
    train_mask, held_mask = split_episodes(frames, c.held_out, seed)
    train_rows, held_rows = np.flatnonzero(train_mask), np.flatnonzero(held_mask)
    log(f"encoder pretrain: {len(frames['state'])} frames of {len(np.unique(frames['episode']))} episodes, "
        f"{len(np.unique(frames['episode'][held_rows]))} successful episodes held out for the measurement")
    candidates, report = {}, {}
    for name in objectives:
        t0 = time.time()
        log(f"candidate {name} ...")
        if name in ("bc", "bc_goal"):
            encoder = train_bc(frames, train_rows[frames["task"][train_rows]], cameras, steps, seed, log,
                               goal=name == "bc_goal")
        elif name == "autoencoder":
            encoder = train_autoencoder(frames, train_rows, cameras, steps, seed, log)
        elif name == "classifier":
            encoder = from_classifier(classifier, cameras, frames["image_size"])
        else:
            encoder = FrozenEncoder.from_torchvision(pretrained, cameras, frames["image_size"])
        trained_s = time.time() - t0
        report[name] = {**probe(encoder, frames, train_rows, held_rows, c.probe_steps, seed, log),
                        "train_s": round(trained_s, 1), "probe_s": round(time.time() - t0 - trained_s, 1)}
        candidates[name] = encoder
        log(f"candidate {name}: held-out loss {report[name]['held_out_loss']:.4f} (motion MSE "
            f"{report[name]['held_out_motion_mse']:.4f}, gripper accuracy {report[name]['held_out_gripper_accuracy']:.2f})")
    chosen = min(report, key=lambda n: report[n]["held_out_loss"])
    path = candidates[chosen].save(out, chosen_from=sorted(report), data=[str(p) for p in data])
    summary = {"encoder": str(path), "chosen": chosen, "sha": candidates[chosen].sha,
               "feature_shape": list(candidates[chosen].feature_shape), "candidates": report,
               "frames": int(len(frames["state"])), "held_out_frames": int(len(held_rows))}
    (Path(out) / "report.json").write_text(json.dumps(summary, indent=1))
    log(f"chose {chosen} (lowest held-out loss); wrote {path}")
    return summary
